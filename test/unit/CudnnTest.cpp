//===- CudnnTest.cpp - cuDNN convolutions, checked without a GPU -----------===//
//
// The CUDA backend runs convolutions through cuDNN, opened at run time
// (runtime/cuda/CudnnLoader.cpp) with its own declarations of cuDNN 9's API
// (CudnnApi.h). What a machine without a GPU can check: the declarations
// against cuDNN's headers where they are installed, the library's search and
// its failure message, the binding of every entry point, that cudnnCreate
// fails cleanly without a device, and the host-side decisions around a call
// (which convolutions cuDNN can run, their descriptors, the choice among
// cuDNN's ranked algorithms) and the CPU reference the emulator runs in place
// of cuDNN. The lowering and the fixtures through the emulator are in
// CudaBackendTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "cuda/CudnnLoader.h"
#include "cuda/CudnnRunner.h"
#include "cuda/conv/CudnnConv.h"

#include "ampc/rt/Backend.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <sys/stat.h>

// cuDNN marks its legacy API deprecated (it stays in cuDNN 9, which is what
// amp-run targets): no warnings for using it here.
#if __has_include(<cudnn.h>)
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>
#define AMPC_TEST_CUDNN_HEADERS 1
#endif

namespace rcuda = ampc::rt::cuda;
namespace cudnn = ampc::rt::cuda::cudnn;
using rcuda::CudnnConvCall;
using rcuda::FusedElem;

namespace {

bool exists(const char *path) {
  struct stat st;
  return ::stat(path, &st) == 0;
}

/// Whether this machine has a cuDNN 9 the loader can find: through the
/// dynamic loader's own search (LD_LIBRARY_PATH, the ldconfig cache: a GPU
/// image's /lib/x86_64-linux-gnu/libcudnn.so.9, or a toolkit folder that
/// ldconfig lists) or in a toolkit folder it tries by path.
bool cudnnFindable() {
  if (void *lib = dlopen("libcudnn.so.9", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(lib);
    return true;
  }
  for (const char *path : {"/usr/local/cuda/lib64/libcudnn.so.9", "/usr/local/cuda/lib/libcudnn.so.9",
                           "/usr/local/cuda-13.0/lib64/libcudnn.so.9"})
    if (exists(path))
      return true;
  return false;
}

/// Sets an environment variable for the scope, restoring it after.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

private:
  const char *name_;
  bool had_ = false;
  std::string old_;
};

//===----------------------------------------------------------------------===//
// The loader
//===----------------------------------------------------------------------===//

TEST(CudnnLoader, DeclarationsMatchCudnn9Headers) {
#ifdef AMPC_TEST_CUDNN_HEADERS
  static_assert(CUDNN_MAJOR == 9, "the declarations are cuDNN 9's");
  static_assert(cudnn::kStatusSuccess == CUDNN_STATUS_SUCCESS);
  static_assert(cudnn::kDataFloat == CUDNN_DATA_FLOAT && cudnn::kDataHalf == CUDNN_DATA_HALF &&
                cudnn::kDataBfloat16 == CUDNN_DATA_BFLOAT16);
  static_assert(cudnn::kTensorNchw == CUDNN_TENSOR_NCHW);
  static_assert(cudnn::kCrossCorrelation == CUDNN_CROSS_CORRELATION);
  static_assert(cudnn::kDefaultMath == CUDNN_DEFAULT_MATH &&
                cudnn::kTensorOpMath == CUDNN_TENSOR_OP_MATH &&
                cudnn::kTensorOpMathAllowConversion == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
                cudnn::kFmaMath == CUDNN_FMA_MATH);
  static_assert(cudnn::kDeterministic == CUDNN_DETERMINISTIC);
  // The three perf structs share AlgoPerf's layout.
#define AMPC_CHECK_PERF(T)                                                                         \
  static_assert(sizeof(T) == sizeof(cudnn::AlgoPerf));                                             \
  static_assert(offsetof(T, algo) == offsetof(cudnn::AlgoPerf, algo));                             \
  static_assert(offsetof(T, status) == offsetof(cudnn::AlgoPerf, status));                         \
  static_assert(offsetof(T, memory) == offsetof(cudnn::AlgoPerf, memory));                         \
  static_assert(offsetof(T, determinism) == offsetof(cudnn::AlgoPerf, determinism));               \
  static_assert(offsetof(T, mathType) == offsetof(cudnn::AlgoPerf, mathType));
  AMPC_CHECK_PERF(cudnnConvolutionFwdAlgoPerf_t)
  AMPC_CHECK_PERF(cudnnConvolutionBwdDataAlgoPerf_t)
  AMPC_CHECK_PERF(cudnnConvolutionBwdFilterAlgoPerf_t)
#undef AMPC_CHECK_PERF
  static_assert(sizeof(cudnnConvolutionFwdAlgo_t) == sizeof(int) &&
                sizeof(cudnnMathType_t) == sizeof(int) && sizeof(cudnnStatus_t) == sizeof(int));
  SUCCEED();
#else
  GTEST_SKIP() << "no cudnn.h on the include path (the build does not need it)";
#endif
}

TEST(CudnnLoader, PathSetToAMissingFileIsTheOnlyCandidateAndSaysSo) {
  const char *missing = "/nonexistent/ampc-test/libcudnn.so.9";
  ScopedEnv env("AMPC_CUDNN_PATH", missing);
  std::vector<std::string> names = rcuda::cudnnCandidates();
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0], missing);
  cudnn::Api api;
  std::string why;
  EXPECT_FALSE(rcuda::openCudnn(names, api, why));
  EXPECT_EQ(why.rfind(std::string("cuDNN not found (tried ") + missing + ": ", 0), 0u) << why;
  EXPECT_NE(why.find("No such file"), std::string::npos) << why; // dlerror's words
  EXPECT_NE(why.find("AMPC_CUDNN_PATH"), std::string::npos) << why;
  EXPECT_EQ(api.create, nullptr);
}

TEST(CudnnLoader, PathSetToAFolderLooksForTheLibraryThere) {
  ScopedEnv env("AMPC_CUDNN_PATH", "/usr/local/cuda/lib64/");
  std::vector<std::string> names = rcuda::cudnnCandidates();
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0], exists("/usr/local/cuda/lib64") ? "/usr/local/cuda/lib64/libcudnn.so.9"
                                                      : "/usr/local/cuda/lib64/");
}

TEST(CudnnLoader, OpensTheToolkitsCudnnAndBindsEveryEntryPoint) {
  ScopedEnv env("AMPC_CUDNN_PATH", nullptr);
  std::vector<std::string> names = rcuda::cudnnCandidates();
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "libcudnn.so.9"); // the loader's own search first
  cudnn::Api api;
  std::string why;
  bool opened = rcuda::openCudnn(names, api, why);
  if (!cudnnFindable()) {
    EXPECT_FALSE(opened);
    EXPECT_EQ(why.rfind("cuDNN not found (tried libcudnn.so.9", 0), 0u) << why;
    return;
  }
  ASSERT_TRUE(opened) << why;
  const void *const entries[] = {
      reinterpret_cast<const void *>(api.create),
      reinterpret_cast<const void *>(api.destroy),
      reinterpret_cast<const void *>(api.setStream),
      reinterpret_cast<const void *>(api.getErrorString),
      reinterpret_cast<const void *>(api.getVersion),
      reinterpret_cast<const void *>(api.createTensor),
      reinterpret_cast<const void *>(api.setTensorNd),
      reinterpret_cast<const void *>(api.destroyTensor),
      reinterpret_cast<const void *>(api.createFilter),
      reinterpret_cast<const void *>(api.setFilterNd),
      reinterpret_cast<const void *>(api.destroyFilter),
      reinterpret_cast<const void *>(api.createConv),
      reinterpret_cast<const void *>(api.setConvNd),
      reinterpret_cast<const void *>(api.setConvGroupCount),
      reinterpret_cast<const void *>(api.setConvMathType),
      reinterpret_cast<const void *>(api.destroyConv),
      reinterpret_cast<const void *>(api.getFwdAlgorithm),
      reinterpret_cast<const void *>(api.getBwdDataAlgorithm),
      reinterpret_cast<const void *>(api.getBwdFilterAlgorithm),
      reinterpret_cast<const void *>(api.fwdWorkspaceSize),
      reinterpret_cast<const void *>(api.bwdDataWorkspaceSize),
      reinterpret_cast<const void *>(api.bwdFilterWorkspaceSize),
      reinterpret_cast<const void *>(api.forward),
      reinterpret_cast<const void *>(api.backwardData),
      reinterpret_cast<const void *>(api.backwardFilter)};
  static_assert(sizeof(entries) / sizeof(entries[0]) * sizeof(void *) == sizeof(cudnn::Api),
                "every entry point of cudnn::Api is checked");
  for (const void *e : entries)
    EXPECT_NE(e, nullptr);
  size_t version = api.getVersion();
  EXPECT_GE(version, 90000u);
  EXPECT_LT(version, 100000u);
  EXPECT_STREQ(api.getErrorString(cudnn::kStatusSuccess), "CUDNN_STATUS_SUCCESS");
}

/// Without a GPU, cuDNN opens but cannot create its handle: the runner says
/// so (the backend then lowers convolutions to im2col) and plans nothing.
TEST(CudnnLoader, CreateFailsCleanlyWithoutAGpu) {
  ScopedEnv env("AMPC_CUDNN_PATH", nullptr);
  std::string noGpu, loadWhy;
  bool gpu = ampc::rt::cudaAvailable(noGpu);
  bool loads = rcuda::loadCudnn(loadWhy) != nullptr;
  rcuda::CudnnRunner runner;
  std::string why;
  bool started = runner.init(nullptr, why);
  if (!loads) {
    EXPECT_FALSE(started);
    EXPECT_EQ(why, loadWhy);
    return;
  }
  if (gpu) {
    EXPECT_TRUE(started) << why;
    return;
  }
  EXPECT_FALSE(started);
  EXPECT_FALSE(runner.enabled());
  EXPECT_EQ(why.rfind("cudnnCreate: CUDNN_STATUS_", 0), 0u) << why;
  CudnnConvCall c;
  c.type = FusedElem::F32;
  c.N = c.C = c.M = 1;
  EXPECT_FALSE(runner.plan(c));
  std::string error;
  EXPECT_FALSE(runner.run(c, error));
  EXPECT_FALSE(error.empty());
}

//===----------------------------------------------------------------------===//
// Host-side decisions
//===----------------------------------------------------------------------===//

/// A 2-D call: X [N, C, H, W], W [M, C/G, kh, kw].
CudnnConvCall call2d(int64_t N, int64_t C, int64_t M, int64_t G, int64_t H, int64_t W,
                     int64_t k, int64_t stride, int64_t pad, int64_t dil, uint8_t type) {
  CudnnConvCall c;
  c.type = type;
  c.N = N;
  c.C = C;
  c.M = M;
  c.G = G;
  rcuda::Window &w = c.win;
  for (int a : {1, 2}) {
    w.in[a] = a == 1 ? H : W;
    w.k[a] = k;
    w.stride[a] = stride;
    w.dil[a] = dil;
    w.padBegin[a] = w.padEnd[a] = pad;
    w.out[a] = (w.in[a] + 2 * pad - (k - 1) * dil - 1) / stride + 1;
  }
  return c;
}

TEST(CudnnConv, DescriptorParametersOfGroupsStridesPadsDilations) {
  CudnnConvCall c = call2d(2, 6, 9, 3, 11, 13, 3, 2, 1, 2, FusedElem::F16);
  ASSERT_EQ(c.win.out[1], 5); // (11 + 2 - 5) / 2 + 1
  ASSERT_EQ(c.win.out[2], 6); // (13 + 2 - 5) / 2 + 1
  std::string why;
  ASSERT_TRUE(rcuda::cudnnConvFits(c, why)) << why;
  rcuda::CudnnConvDescriptor d = rcuda::describeCudnnConv(c);
  EXPECT_EQ(d.nbDims, 4);
  const int x[] = {2, 6, 11, 13}, xs[] = {6 * 11 * 13, 11 * 13, 13, 1};
  const int y[] = {2, 9, 5, 6}, ys[] = {9 * 5 * 6, 5 * 6, 6, 1};
  const int w[] = {9, 2, 3, 3};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(d.xDims[i], x[i]) << i;
    EXPECT_EQ(d.xStrides[i], xs[i]) << i;
    EXPECT_EQ(d.yDims[i], y[i]) << i;
    EXPECT_EQ(d.yStrides[i], ys[i]) << i;
    EXPECT_EQ(d.wDims[i], w[i]) << i;
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(d.pads[i], 1);
    EXPECT_EQ(d.strides[i], 2);
    EXPECT_EQ(d.dilations[i], 2);
  }
  EXPECT_EQ(d.groups, 3);
  EXPECT_EQ(d.dataType, cudnn::kDataHalf);
  EXPECT_EQ(d.computeType, cudnn::kDataFloat);
  EXPECT_EQ(d.mathType, cudnn::kTensorOpMath);

  // fp32 keeps FMA math (no TF32), bf16 is cuDNN's bfloat16.
  c.type = FusedElem::F32;
  EXPECT_EQ(rcuda::describeCudnnConv(c).mathType, cudnn::kFmaMath);
  EXPECT_EQ(rcuda::describeCudnnConv(c).dataType, cudnn::kDataFloat);
  c.type = FusedElem::BF16;
  EXPECT_EQ(rcuda::describeCudnnConv(c).dataType, cudnn::kDataBfloat16);
  EXPECT_EQ(rcuda::describeCudnnConv(c).mathType, cudnn::kTensorOpMath);
}

TEST(CudnnConv, OneDimensionalAsHeightOneAndThreeDimensional) {
  // 1-D: the Window's leading axes are 1; cuDNN gets [N, C, 1, L].
  CudnnConvCall c = call2d(1, 2, 3, 1, 1, 10, 3, 1, 0, 2, FusedElem::F32);
  c.win.k[1] = 1;
  c.win.dil[1] = 1;
  c.win.out[1] = 1;
  std::string why;
  ASSERT_TRUE(rcuda::cudnnConvFits(c, why)) << why;
  rcuda::CudnnConvDescriptor d = rcuda::describeCudnnConv(c);
  EXPECT_EQ(d.nbDims, 4);
  EXPECT_EQ(d.xDims[2], 1);
  EXPECT_EQ(d.xDims[3], 10);
  EXPECT_EQ(d.wDims[2], 1);
  EXPECT_EQ(d.wDims[3], 3);
  EXPECT_EQ(d.yDims[3], 6);
  EXPECT_EQ(d.dilations[0], 1);
  EXPECT_EQ(d.dilations[1], 2);
  // 3-D: five dimensions, three spatial parameters.
  CudnnConvCall v = call2d(1, 4, 4, 2, 6, 6, 3, 1, 1, 1, FusedElem::BF16);
  v.win.in[0] = 5;
  v.win.k[0] = 3;
  v.win.padBegin[0] = v.win.padEnd[0] = 0;
  v.win.stride[0] = 2;
  v.win.out[0] = 2;
  ASSERT_TRUE(rcuda::cudnnConvFits(v, why)) << why;
  d = rcuda::describeCudnnConv(v);
  EXPECT_EQ(d.nbDims, 5);
  const int x[] = {1, 4, 5, 6, 6}, w[] = {4, 2, 3, 3, 3}, y[] = {1, 4, 2, 6, 6};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(d.xDims[i], x[i]) << i;
    EXPECT_EQ(d.wDims[i], w[i]) << i;
    EXPECT_EQ(d.yDims[i], y[i]) << i;
  }
  EXPECT_EQ(d.pads[0], 0);
  EXPECT_EQ(d.pads[1], 1);
  EXPECT_EQ(d.strides[0], 2);
  EXPECT_EQ(d.strides[2], 1);
  EXPECT_EQ(d.xStrides[0], 4 * 5 * 6 * 6);
  // Equal calls share a key; another direction or type does not.
  EXPECT_EQ(rcuda::cudnnConvKey(v), rcuda::cudnnConvKey(v));
  CudnnConvCall b = v;
  b.dir = CudnnConvCall::BackwardFilter;
  EXPECT_NE(rcuda::cudnnConvKey(v), rcuda::cudnnConvKey(b));
  b = v;
  b.type = FusedElem::F16;
  EXPECT_NE(rcuda::cudnnConvKey(v), rcuda::cudnnConvKey(b));
}

TEST(CudnnConv, FitsOnlyWhatSymmetricPadsReproduce) {
  std::string why;
  CudnnConvCall c = call2d(1, 1, 1, 1, 8, 8, 3, 1, 1, 1, FusedElem::F32);
  EXPECT_TRUE(rcuda::cudnnConvFits(c, why)) << why;
  // SAME_UPPER with an even kernel: pads (0, 1), output 8 = cuDNN's 7 + 1.
  c = call2d(1, 1, 1, 1, 8, 8, 2, 1, 0, 1, FusedElem::F32);
  c.win.padEnd[2] = 1;
  c.win.out[2] = 8;
  EXPECT_FALSE(rcuda::cudnnConvFits(c, why));
  EXPECT_NE(why.find("symmetric pads"), std::string::npos) << why;
  // An extra end pad that no window reads (stride 2): the same output, so
  // cuDNN computes exactly what the plan asks.
  c = call2d(1, 1, 1, 1, 8, 8, 3, 2, 1, 1, FusedElem::F32);
  ASSERT_EQ(c.win.out[2], 4);
  c.win.padEnd[2] = 2;
  EXPECT_TRUE(rcuda::cudnnConvFits(c, why)) << why;
  // Types cuDNN's fp32-compute configurations do not cover here.
  c = call2d(1, 1, 1, 1, 8, 8, 3, 1, 1, 1, FusedElem::F64);
  EXPECT_FALSE(rcuda::cudnnConvFits(c, why));
  // An empty batch (cuDNN refuses zero dimensions).
  c = call2d(0, 1, 1, 1, 8, 8, 3, 1, 1, 1, FusedElem::F32);
  EXPECT_FALSE(rcuda::cudnnConvFits(c, why));
  EXPECT_EQ(why, "an empty tensor");
  // 2^31 elements or more.
  c = call2d(1 << 16, 256, 1, 1, 16, 16, 1, 1, 0, 1, FusedElem::F16);
  EXPECT_FALSE(rcuda::cudnnConvFits(c, why));
  EXPECT_NE(why.find("2^31"), std::string::npos) << why;
}

cudnn::AlgoPerf perf(int algo, int status, size_t memory, int determinism, int math) {
  cudnn::AlgoPerf p{};
  p.algo = algo;
  p.status = status;
  p.memory = memory;
  p.determinism = determinism;
  p.mathType = math;
  return p;
}

TEST(CudnnConv, ChoosesTheBestDeterministicAlgorithmKeepingTheTypesMath) {
  const int ok = cudnn::kStatusSuccess, det = cudnn::kDeterministic, nondet = 0;
  std::vector<cudnn::AlgoPerf> ranked = {
      perf(7, 9, 0, det, cudnn::kTensorOpMath),          // failed (not supported)
      perf(6, ok, 0, nondet, cudnn::kTensorOpMath),      // atomics: not deterministic
      perf(5, ok, size_t(1) << 30, det, cudnn::kTensorOpMath), // 1 GiB of workspace
      perf(4, ok, 4096, det, cudnn::kDefaultMath),       // TF32 allowed for fp32
      perf(3, ok, 8192, det, cudnn::kTensorOpMath),
      perf(2, ok, 0, det, cudnn::kFmaMath)};
  EXPECT_EQ(rcuda::chooseCudnnAlgorithm(ranked, FusedElem::F16), 3);
  EXPECT_EQ(rcuda::chooseCudnnAlgorithm(ranked, FusedElem::BF16), 3);
  EXPECT_EQ(rcuda::chooseCudnnAlgorithm(ranked, FusedElem::F32), 5);
  EXPECT_EQ(rcuda::chooseCudnnAlgorithm(ranked, FusedElem::F16, size_t(2) << 30), 2);
  ranked.pop_back();
  EXPECT_EQ(rcuda::chooseCudnnAlgorithm(ranked, FusedElem::F32), -1);
  EXPECT_EQ(rcuda::chooseCudnnAlgorithm({}, FusedElem::F16), -1);
}

//===----------------------------------------------------------------------===//
// The emulator's reference
//===----------------------------------------------------------------------===//

uint16_t half(float v) {
  uint16_t h;
  ampc::rt::fused::storeFromFloat(FusedElem::F16, &h, 0, v);
  return h;
}
float fromHalf(uint16_t h) { return ampc::rt::fused::loadAsFloat(FusedElem::F16, &h, 0); }

/// The forward with a bias in Y (beta 1) rounds the fp32 sum once: here
/// round(acc + bias) = 1 + 2^-10, where rounding acc first would give
/// 1 + 2^-9 (a tie to even).
TEST(CudnnConv, ReferenceRoundsTheSumWithThePriorValueOnce) {
  CudnnConvCall c = call2d(1, 2, 1, 1, 1, 1, 1, 1, 0, 1, FusedElem::F16);
  uint16_t x[2] = {half(1), half(1)};
  uint16_t w[2] = {half(1), half(0x1.8p-11f)}; // acc = 1 + 0.75 ulp
  uint16_t y = half(0x1p-11f);                 // bias: half an ulp of 1
  c.x = x;
  c.w = w;
  c.y = &y;
  c.beta = 1;
  rcuda::referenceCudnnConv(c);
  EXPECT_EQ(fromHalf(y), 1.0f + 0x1p-10f);
  EXPECT_NE(fromHalf(half(fromHalf(half(1.0f + 0x1.8p-11f)) + 0x1p-11f)), 1.0f + 0x1p-10f)
      << "the case must tell one rounding from two";
}

/// The three directions against direct sums on a small grouped, strided,
/// padded, dilated case (fp32: exact small integers).
TEST(CudnnConv, ReferenceDirectionsAgreeWithDirectSums) {
  CudnnConvCall c = call2d(2, 4, 6, 2, 5, 6, 2, 2, 1, 2, FusedElem::F32);
  const rcuda::Window &win = c.win;
  int64_t Cg = 2, Mg = 3, OH = win.out[1], OW = win.out[2];
  std::vector<float> x(2 * 4 * 5 * 6), w(6 * 2 * 2 * 2), y(2 * 6 * OH * OW);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int>(i * 7 % 5) - 2);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<float>(static_cast<int>(i * 3 % 4) - 1);
  auto X = [&](int64_t n, int64_t ch, int64_t h, int64_t v) -> float {
    if (h < 0 || h >= 5 || v < 0 || v >= 6)
      return 0;
    return x[((n * 4 + ch) * 5 + h) * 6 + v];
  };
  // Direct forward.
  std::vector<float> want(y.size());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t m = 0; m < 6; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float s = 0;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t kh = 0; kh < 2; ++kh)
              for (int64_t kw = 0; kw < 2; ++kw)
                s += X(n, m / Mg * Cg + ci, oh * 2 - 1 + kh * 2, ow * 2 - 1 + kw * 2) *
                     w[((m * Cg + ci) * 2 + kh) * 2 + kw];
          want[((n * 6 + m) * OH + oh) * OW + ow] = s;
        }
  c.x = x.data();
  c.w = w.data();
  c.y = y.data();
  rcuda::referenceCudnnConv(c);
  EXPECT_EQ(y, want);
  // The adjoints: <conv(x, w), dy> = <x, dX(dy, w)> = <w, dW(x, dy)>.
  std::vector<float> dy(y.size());
  for (size_t i = 0; i < dy.size(); ++i)
    dy[i] = static_cast<float>(static_cast<int>(i * 5 % 7) - 3);
  std::vector<float> dx(x.size(), 99.0f), dw(w.size(), 99.0f); // beta 0 ignores them
  CudnnConvCall bd = c, bf = c;
  bd.dir = CudnnConvCall::BackwardData;
  bd.x = dx.data();
  bd.y = dy.data();
  bf.dir = CudnnConvCall::BackwardFilter;
  bf.w = dw.data();
  bf.y = dy.data();
  rcuda::referenceCudnnConv(bd);
  rcuda::referenceCudnnConv(bf);
  double lhs = 0, viaX = 0, viaW = 0;
  for (size_t i = 0; i < y.size(); ++i)
    lhs += double(want[i]) * dy[i];
  for (size_t i = 0; i < x.size(); ++i)
    viaX += double(x[i]) * dx[i];
  for (size_t i = 0; i < w.size(); ++i)
    viaW += double(w[i]) * dw[i];
  EXPECT_NE(lhs, 0.0);
  EXPECT_EQ(lhs, viaX);
  EXPECT_EQ(lhs, viaW);
}

} // namespace
