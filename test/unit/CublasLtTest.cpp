//===- CublasLtTest.cpp - cuBLASLt opened at run time, and on a GPU -------===//
//
// runtime/cuda/CublasLt.cpp opens libcublasLt.so.13 with dlopen. Here (the
// toolkit, no GPU) the library must open and bind every entry point, a
// missing AMPC_CUBLASLT_PATH must turn it off with one line saying what was
// tried, and creating a handle without a driver must fail with a status,
// not a crash. With a GPU, planned cuBLASLt calls (fp32, fp16, bf16;
// transposes, strided batches, bias and Relu epilogues) are compared with
// the host emulator's reference GEMM (fp32 accumulation).
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#ifdef AMPC_HAVE_CUDA
#include "ampc/rt/Backend.h"

#include "cuda/CublasLt.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <dlfcn.h>
#include <random>
#include <string>
#include <sys/stat.h>

namespace rcuda = ampc::rt::cuda;
namespace fused = ampc::rt::fused;

namespace {

bool exists(const char *path) {
  struct stat st;
  return ::stat(path, &st) == 0;
}

/// Whether the loader can find libcublasLt.so.13: through the dynamic
/// loader's own search (LD_LIBRARY_PATH, the ldconfig cache) or in the
/// toolkit's folders (cublasLtCandidates).
bool cublasLtFindable() {
  if (void *lib = dlopen("libcublasLt.so.13", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(lib);
    return true;
  }
  return exists("/usr/local/cuda/lib64/libcublasLt.so.13") ||
         exists("/usr/local/cuda/lib/libcublasLt.so.13") ||
         exists("/usr/local/cuda-13.0/lib64/libcublasLt.so.13");
}

/// Sets AMPC_CUBLASLT_PATH for one scope.
struct ScopedPath {
  explicit ScopedPath(const char *value) { ::setenv("AMPC_CUBLASLT_PATH", value, 1); }
  ~ScopedPath() { ::unsetenv("AMPC_CUBLASLT_PATH"); }
};

TEST(CublasLt, OpensTheToolkitsLibraryAndBindsEveryEntryPoint) {
  ::unsetenv("AMPC_CUBLASLT_PATH");
  std::vector<std::string> names = rcuda::cublasLtCandidates();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "libcublasLt.so.13");
  rcuda::CublasLtApi api;
  std::string why;
  bool opened = rcuda::openCublasLt(names, api, why);
  if (!cublasLtFindable()) {
    EXPECT_FALSE(opened);
    EXPECT_EQ(why.rfind("cuBLASLt not found (tried ", 0), 0u) << why;
    return;
  }
  ASSERT_TRUE(opened) << why;
  EXPECT_TRUE(why.empty());
  const void *fns[] = {reinterpret_cast<const void *>(api.create),
                       reinterpret_cast<const void *>(api.destroy),
                       reinterpret_cast<const void *>(api.descCreate),
                       reinterpret_cast<const void *>(api.descSet),
                       reinterpret_cast<const void *>(api.descDestroy),
                       reinterpret_cast<const void *>(api.layoutCreate),
                       reinterpret_cast<const void *>(api.layoutSet),
                       reinterpret_cast<const void *>(api.layoutDestroy),
                       reinterpret_cast<const void *>(api.prefCreate),
                       reinterpret_cast<const void *>(api.prefSet),
                       reinterpret_cast<const void *>(api.prefDestroy),
                       reinterpret_cast<const void *>(api.heuristic),
                       reinterpret_cast<const void *>(api.matmul)};
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; ++i)
    EXPECT_NE(fns[i], nullptr) << "entry point " << i;
}

/// AMPC_CUBLASLT_PATH at a missing file: only that file is tried, and the
/// backend's GEMMs stay on cuBLAS, with one line saying why.
TEST(CublasLt, AMissingPathTurnsItOffWithOneLine) {
  const char *missing = "/nonexistent/libcublasLt.so.13";
  ScopedPath path(missing);
  EXPECT_EQ(rcuda::cublasLtCandidates(), std::vector<std::string>{missing});
  rcuda::CublasLtApi api;
  std::string why;
  EXPECT_FALSE(rcuda::openCublasLt(rcuda::cublasLtCandidates(), api, why));
  EXPECT_EQ(why, std::string("cuBLASLt not found (tried ") + missing +
                     "; AMPC_CUBLASLT_PATH names libcublasLt.so.13 when set)");
  EXPECT_EQ(api.matmul, nullptr);
  rcuda::LtGemms lt;
  std::string initWhy;
  EXPECT_FALSE(lt.open(initWhy));
  EXPECT_EQ(initWhy, why);
  EXPECT_FALSE(lt.init(initWhy));
  EXPECT_EQ(initWhy, why);
  // Nothing is planned: every GEMM keeps cublasGemmStridedBatchedEx.
  float a[4] = {}, b[4] = {}, c[4] = {};
  rcuda::GemmCall g = rcuda::rowMajorGemm(2, 2, 2, a, 2, false, b, 2, false, c, 2);
  g.abType = g.cType = fused::F32;
  EXPECT_EQ(lt.plan(g), -1);
  EXPECT_EQ(lt.planned(), 0);
}

/// A library that is not cuBLASLt: opened, but a symbol is missing.
TEST(CublasLt, ALibraryWithoutTheEntryPointsSaysWhichIsMissing) {
  const char *other = exists("/usr/local/cuda/lib64/libcudart.so.13")
                          ? "/usr/local/cuda/lib64/libcudart.so.13"
                          : nullptr;
  if (!other)
    GTEST_SKIP() << "no libcudart.so.13 in /usr/local/cuda/lib64";
  rcuda::CublasLtApi api;
  std::string why;
  EXPECT_FALSE(rcuda::openCublasLt({other}, api, why));
  EXPECT_EQ(why, "libcublasLt has no cublasLtCreate");
  EXPECT_EQ(api.create, nullptr);
}

/// Without a GPU (and its driver) the handle cannot be created: a status,
/// reported in one line, and no plans.
TEST(CublasLt, HandleCreationWithoutAGpuFailsCleanly) {
  std::string noGpu;
  if (ampc::rt::cudaAvailable(noGpu))
    GTEST_SKIP() << "a GPU is present";
  if (!cublasLtFindable())
    GTEST_SKIP() << "cuBLASLt not found";
  ::unsetenv("AMPC_CUBLASLT_PATH");
  rcuda::LtGemms lt;
  std::string why;
  EXPECT_FALSE(lt.init(why));
  EXPECT_EQ(why.rfind("cublasLtCreate: CUBLAS_STATUS_", 0), 0u) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos);
  float a[4] = {}, b[4] = {}, c[4] = {};
  rcuda::GemmCall g = rcuda::rowMajorGemm(2, 2, 2, a, 2, false, b, 2, false, c, 2);
  g.abType = g.cType = fused::F32;
  EXPECT_EQ(lt.plan(g), -1);
}

struct Case {
  int64_t M, N, K, batch;
  bool ta, tb;
  rcuda::GemmEpilogue epilogue;
};
const Case kCases[] = {{64, 96, 80, 1, false, false, rcuda::GemmEpilogue::None},
                       {33, 17, 129, 1, true, false, rcuda::GemmEpilogue::Bias},
                       {40, 24, 56, 1, false, true, rcuda::GemmEpilogue::BiasRelu},
                       {16, 48, 32, 3, true, true, rcuda::GemmEpilogue::Relu},
                       {8, 8, 1024, 4, false, false, rcuda::GemmEpilogue::None}};

/// Case `c` of type `t` as a record on the given buffers.
rcuda::GemmCall caseCall(const Case &c, uint8_t t, const void *A, const void *B, const void *bias,
                         void *Y) {
  rcuda::GemmCall g = rcuda::rowMajorGemm(c.M, c.N, c.K, A, c.ta ? c.M : c.K, c.ta, B,
                                          c.tb ? c.K : c.N, c.tb, Y, c.N);
  g.batch = c.batch;
  g.strideA = c.K * c.N;
  g.strideB = c.M * c.K;
  g.strideC = c.M * c.N;
  g.abType = g.cType = t;
  g.epilogue = c.epilogue;
  g.bias = rcuda::hasBias(c.epilogue) ? bias : nullptr;
  return g;
}

/// Without a GPU cuBLASLt still makes descriptors, layouts and preferences,
/// and checks every attribute's size: what plan() hands the heuristic is
/// accepted, for every type, transposition, batch, epilogue and alignment.
TEST(CublasLt, DescriptorsOfEveryKindOfRecordAreAccepted) {
  if (!cublasLtFindable())
    GTEST_SKIP() << "cuBLASLt not found";
  ::unsetenv("AMPC_CUBLASLT_PATH");
  rcuda::LtGemms lt;
  std::string why;
  ASSERT_TRUE(lt.open(why)) << why;
  lt.setWorkspace(nullptr, rcuda::ltWorkspaceBytes(9));
  alignas(256) static uint16_t buf[4][8192];
  for (uint8_t t : {fused::F32, fused::F16, fused::BF16})
    for (const Case &c : kCases)
      for (int offset : {0, 1}) { // 256-byte and 2-byte aligned operands
        rcuda::GemmCall g = caseCall(c, t, buf[0] + offset, buf[1] + offset, buf[2] + offset,
                                     buf[3] + offset);
        EXPECT_TRUE(lt.describe(g, why))
            << why << " (" << c.M << "x" << c.N << "x" << c.K << " type " << int(t) << ")";
      }
  // fp16 operands with an fp32 result (convolutions).
  rcuda::GemmCall g = caseCall(kCases[0], fused::F16, buf[0], buf[1], nullptr, buf[3]);
  g.cType = fused::F32;
  EXPECT_TRUE(lt.describe(g, why)) << why;
  // A record that stays on cuBLAS says why.
  g.strideB = 0;
  g.batch = 2;
  EXPECT_FALSE(lt.describe(g, why));
  EXPECT_EQ(why, "a batch broadcast through a zero stride");
  // Nothing is planned without a handle.
  EXPECT_EQ(lt.plan(caseCall(kCases[0], fused::F32, buf[0], buf[1], nullptr, buf[3])), -1);
}

//===----------------------------------------------------------------------===//
// On a GPU: planned cuBLASLt calls against the reference GEMM
//===----------------------------------------------------------------------===//

size_t elemBytes(uint8_t t) { return t == fused::F32 ? 4 : 2; }

/// Host bytes of `n` random values of type `t`, in [-1, 1].
std::vector<uint8_t> randomValues(uint8_t t, int64_t n, std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<uint8_t> v(n * elemBytes(t));
  for (int64_t i = 0; i < n; ++i)
    fused::storeFromFloat(t, v.data(), i, u(rng));
  return v;
}

struct DeviceBuffer {
  void *p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

TEST(CublasLtDevice, PlannedCallsMatchTheReferenceGemm) {
  std::string why;
  if (!ampc::rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  ::unsetenv("AMPC_CUBLASLT_PATH");
  rcuda::LtGemms lt;
  ASSERT_TRUE(lt.init(why)) << why;
  int device = 0;
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, device), cudaSuccess);
  size_t wsBytes = rcuda::ltWorkspaceBytes(prop.major);
  DeviceBuffer ws(wsBytes);
  lt.setWorkspace(ws.p, wsBytes);
  std::mt19937 rng(11);
  for (uint8_t t : {fused::F32, fused::F16, fused::BF16})
    for (const Case &c : kCases) {
      SCOPED_TRACE(std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) +
                   " type " + std::to_string(t));
      int64_t nA = c.batch * c.M * c.K, nB = c.batch * c.K * c.N, nY = c.batch * c.M * c.N;
      std::vector<uint8_t> a = randomValues(t, nA, rng), b = randomValues(t, nB, rng),
                           bias = randomValues(t, c.N, rng), y(nY * elemBytes(t), 0);
      DeviceBuffer dA(a.size()), dB(b.size()), dBias(bias.size()), dY(y.size());
      ASSERT_EQ(cudaMemcpy(dA.p, a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dB.p, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dBias.p, bias.data(), bias.size(), cudaMemcpyHostToDevice),
                cudaSuccess);
      rcuda::GemmCall g = caseCall(c, t, dA.p, dB.p, dBias.p, dY.p);
      g.lt = lt.plan(g);
      ASSERT_GE(g.lt, 0) << "cuBLASLt found no algorithm";
      ASSERT_EQ(lt.run(g, nullptr), CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(y.data(), dY.p, y.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      std::vector<uint8_t> ref(y.size(), 0);
      rcuda::Launch l;
      l.kind = rcuda::Launch::Gemm;
      l.gemm = caseCall(c, t, a.data(), b.data(), bias.data(), ref.data());
      rcuda::emulateLaunch(l);
      // The reference's fp32 products before the epilogue, to say what a
      // mismatch is.
      std::vector<float> acc(nY);
      l.gemm = caseCall(c, t, a.data(), b.data(), nullptr, acc.data());
      l.gemm.cType = fused::F32;
      l.gemm.epilogue = rcuda::GemmEpilogue::None;
      rcuda::emulateLaunch(l);
      // fp32: sums in another order; fp16/bf16: one ulp of the result. The
      // plan's Gemm rounds once, after the bias (docs/cuda.md, "Numerics"),
      // so the tolerance is an ulp of the result, not of the product: an
      // epilogue that rounds the product to the result's type before adding
      // the bias is off by up to an ulp of the product where the bias cancels
      // it, many ulps of the result, and fails here on purpose.
      double ulp = t == fused::F16 ? std::ldexp(1.0, -10) : t == fused::BF16 ? std::ldexp(1.0, -7) : 0;
      int bad = 0, twice = 0;
      std::string first;
      for (int64_t i = 0; i < nY; ++i) {
        double got = fused::loadAsFloat(t, y.data(), i), want = fused::loadAsFloat(t, ref.data(), i);
        bool off = std::fabs(got - want) > ulp * std::fabs(want) + 1e-5 * std::sqrt(double(c.K));
        if (off && t != fused::F32 && rcuda::hasBias(c.epilogue)) {
          // What rounding the product first would give.
          float p = acc[i], r = 0;
          fused::storeFromFloat(t, &r, 0, p);
          p = fused::loadAsFloat(t, &r, 0) + fused::loadAsFloat(t, bias.data(), i % c.N);
          if (rcuda::hasRelu(c.epilogue))
            p = std::max(p, 0.0f);
          fused::storeFromFloat(t, &r, 0, p);
          twice += fused::loadAsFloat(t, &r, 0) == got;
          if (first.empty())
            first = "element " + std::to_string(i) + ": " + std::to_string(got) + ", reference " +
                    std::to_string(want) + " (product " + std::to_string(acc[i]) + ", bias " +
                    std::to_string(fused::loadAsFloat(t, bias.data(), i % c.N)) +
                    ", product rounded first then bias: " +
                    std::to_string(fused::loadAsFloat(t, &r, 0)) + ")";
        }
        bad += off;
        if (rcuda::hasRelu(c.epilogue) && got < 0)
          ++bad;
      }
      EXPECT_EQ(bad, 0) << first << "; " << twice << " of the " << bad
                        << " equal the product rounded to the result's type before the bias";
    }
}

} // namespace
#endif
