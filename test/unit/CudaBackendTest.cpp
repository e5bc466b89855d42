//===- CudaBackendTest.cpp - The CUDA backend's code, checked on the CPU ---===//
//
// No GPU is needed for most of these tests. The CUDA backend's kernels are
// per-thread functions (runtime/cuda/DeviceKernels.h) and its work for a plan
// is a launch list computed by plain C++ (runtime/cuda/Lowering.cpp); the host
// emulator runs exactly those functions and lists on the CPU. So:
//   - FusedEval: the shared per-element code (dispatch, rounding, storage
//     conversions) against the CPU kernels' own definitions;
//   - GEMM: the row-major to cuBLAS column-major mapping against a direct
//     row-major product, for every transposition and batch stride;
//   - every op the CUDA backend lowers, on fp32, fp16 and bf16, and the
//     training steps of the three fixtures (fp32, fp16 with loss scaling,
//     bf16, accumulation), emulated, against the CPU backend;
//   - the device memory check's message.
// Tests that need a GPU (the real backend against the CPU) are skipped, with
// the reason, where cudaAvailable() is false.
//
// Tolerances (|emulated - cpu| <= rel * |cpu| + abs * max|cpu| per element):
// single ops rel = one ulp of the stored type (0 for fp32), abs = 2e-5 (sums
// in another order); training steps compare relative to each tensor's
// largest magnitude (stepTolerance), leaving out the elements whose gradient
// is rounding noise in some step (noiseMasks) from the gradient, the parameter
// and its states. scripts/compare_dumps.py applies the same rules to the dumps
// of GPU runs, which hold the last step's gradients only.
//
//===----------------------------------------------------------------------===//

#include "FixturePlans.h"
#include "FixtureUtil.h"

#include "ampc/IR/Graph.h"
#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/rt/Backend.h"
#include "ampc/rt/FusedEval.h"
#include "ampc/rt/PlanFile.h"
#include "ampc/rt/Session.h"

#include "Kernel.h"
#include "cuda/CudnnLoader.h"
#include "cuda/Lowering.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>

using namespace ampc;
namespace rcuda = ampc::rt::cuda;
namespace fused = ampc::rt::fused;
using ampc::rt::FusedOp;
using ampc::test::toHostArray;

namespace {

//===----------------------------------------------------------------------===//
// Shared per-element code
//===----------------------------------------------------------------------===//

std::vector<float> probeValues() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f, 3.0f, -7.25f, 1e-3f,
                          -1e-3f, 88.0f, -88.0f, 1e30f, -1e30f, 65504.0f, 65520.0f, 1e-8f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-4, 4);
  for (int i = 0; i < 40; ++i)
    v.push_back(u(rng));
  return v;
}

template <typename R> bool sameValue(R a, R b) {
  return (a != a && b != b) || std::memcmp(&a, &b, sizeof(R)) == 0;
}

template <FusedOp Op, typename R> void checkDispatch(const std::vector<float> &vals) {
  fused::FusedParams p = fused::fusedDefaults(Op);
  p.hasMin = p.hasMax = true;
  for (float x : vals)
    for (float y : {0.5f, -2.0f, 0.0f, 3.0f})
      for (float z : {1.0f, -1.0f}) {
        R direct = fused::fusedScalar<Op, R>(p, R(x), R(y), R(z));
        R dyn = fused::fusedEval<R>(Op, p, R(x), R(y), R(z));
        ASSERT_TRUE(sameValue(direct, dyn)) << "op " << static_cast<int>(Op) << " x=" << x;
      }
}

TEST(CudaShared, FusedEvalDispatchesEveryOp) {
  std::vector<float> vals = probeValues();
#define AMPC_CHECK_OP(NAME)                                                                        \
  checkDispatch<FusedOp::NAME, float>(vals);                                                       \
  checkDispatch<FusedOp::NAME, double>(vals);
  AMPC_FUSED_OPS(AMPC_CHECK_OP)
#undef AMPC_CHECK_OP
  // Every op of the instruction set has a case (FusedOps.h lists them).
  int listed = 0;
#define AMPC_COUNT_OP(NAME) ++listed;
  AMPC_FUSED_OPS(AMPC_COUNT_OP)
#undef AMPC_COUNT_OP
  EXPECT_EQ(listed, static_cast<int>(FusedOp::Count));
}

TEST(CudaShared, FusedDefinitions) {
  fused::FusedParams p;
  EXPECT_EQ((fused::fusedScalar<FusedOp::Where, float>(p, 1, 2, 3)), 2.0f);
  EXPECT_EQ((fused::fusedScalar<FusedOp::Where, float>(p, 0, 2, 3)), 3.0f);
  p.hasMin = true;
  EXPECT_EQ((fused::fusedScalar<FusedOp::Clip, float>(p, -5, -1, 1)), -1.0f);
  EXPECT_EQ((fused::fusedScalar<FusedOp::Clip, float>(p, 5, -1, 1)), 5.0f);
  p.hasMax = true;
  EXPECT_EQ((fused::fusedScalar<FusedOp::Clip, float>(p, 5, -1, 1)), 1.0f);
  fused::FusedParams lr = fused::fusedDefaults(FusedOp::LeakyRelu);
  EXPECT_FLOAT_EQ((fused::fusedScalar<FusedOp::LeakyRelu, float>(lr, -2, 0, 0)), -0.02f);
  fused::FusedParams selu = fused::fusedDefaults(FusedOp::Selu);
  EXPECT_FLOAT_EQ(selu.gamma, 1.05070102214813232421875f);
  EXPECT_EQ((fused::fusedScalar<FusedOp::ReluGrad, float>(p, 3, -1, 0)), 0.0f);
  EXPECT_EQ((fused::fusedScalar<FusedOp::ReluGrad, float>(p, 3, 1, 0)), 3.0f);
  EXPECT_EQ((fused::fusedScalar<FusedOp::TanhGrad, float>(p, 2, 0.5f, 0)), 1.5f);
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(fused::fusedScalar<FusedOp::Max, float>(p, nan, 1, 0)));
  EXPECT_EQ((fused::fusedScalar<FusedOp::IsInf, float>(p, INFINITY, 0, 0)), 1.0f);
  fused::FusedParams neg;
  neg.detectPos = false;
  EXPECT_EQ((fused::fusedScalar<FusedOp::IsInf, float>(neg, INFINITY, 0, 0)), 0.0f);
}

/// The shared storage conversions are the CPU kernels' loadFloat/storeFloat.
TEST(CudaShared, StorageConversionsMatchTheCpuKernels) {
  using rt::cpu::TensorArg;
  std::vector<float> vals = probeValues();
  for (float &v : vals)
    if (std::isnan(v))
      v = 0.25f; // integer conversions of NaN are undefined
  for (uint8_t t = 0; t <= 8; ++t) {
    uint64_t cpuBuf = 0, sharedBuf = 0;
    TensorArg arg;
    arg.data = &cpuBuf;
    arg.type = static_cast<plan::ElemType>(t);
    for (float v : vals) {
      bool integral = t >= fused::I64 && t <= fused::U8;
      if (integral && !(std::fabs(v) < 100))
        continue;
      if (t == fused::U8 && v < 0)
        continue;
      cpuBuf = sharedBuf = 0;
      rt::cpu::storeFloat(arg, 0, v);
      fused::storeFromFloat(t, &sharedBuf, 0, v);
      ASSERT_EQ(cpuBuf, sharedBuf) << "type " << int(t) << " value " << v;
      float a = rt::cpu::loadFloat(arg, 0), b = fused::loadAsFloat(t, &sharedBuf, 0);
      ASSERT_TRUE(sameValue(a, b)) << "type " << int(t) << " value " << v;
    }
  }
}

TEST(CudaShared, RoundingToStorageTypes) {
  for (float v : probeValues()) {
    EXPECT_TRUE(sameValue(fused::fusedRound<float>(fused::F16, v), rt::math::roundToHalf(v)));
    EXPECT_TRUE(sameValue(fused::fusedRound<float>(fused::BF16, v), rt::math::roundToBFloat16(v)));
    EXPECT_TRUE(sameValue(fused::fusedRound<double>(fused::F32, double(v) + 1e-12),
                          double(float(double(v) + 1e-12))));
    if (!std::isnan(v)) {
      EXPECT_EQ(fused::fusedRound<float>(fused::BOOL, v), v != 0 ? 1.0f : 0.0f);
    }
    EXPECT_TRUE(sameValue(fused::fusedRound<float>(fused::I64, v), v));
  }
}

//===----------------------------------------------------------------------===//
// GEMM mapping
//===----------------------------------------------------------------------===//

TEST(CudaGemm, RowMajorMappingMatchesDirectProduct) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(-4, 4);
  const int64_t M = 5, N = 7, K = 3, B = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool broadcastA : {false, true}) {
        std::vector<float> a(B * M * K), b(B * K * N), y(B * M * N, -1), ref(B * M * N);
        for (float &v : a)
          v = static_cast<float>(u(rng));
        for (float &v : b)
          v = static_cast<float>(u(rng));
        for (int64_t s = 0; s < B; ++s)
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              float acc = 0;
              for (int64_t l = 0; l < K; ++l) {
                int64_t sa = broadcastA ? 0 : s;
                float av = ta ? a[sa * M * K + l * M + i] : a[sa * M * K + i * K + l];
                float bv = tb ? b[s * K * N + j * K + l] : b[s * K * N + l * N + j];
                acc += av * bv;
              }
              ref[s * M * N + i * N + j] = 2 * acc;
            }
        rcuda::GemmCall g = rcuda::rowMajorGemm(M, N, K, a.data(), ta ? M : K, ta, b.data(),
                                                 tb ? K : N, tb, y.data(), N);
        g.batch = B;
        g.strideA = K * N;
        g.strideB = broadcastA ? 0 : M * K;
        g.strideC = M * N;
        g.abType = g.cType = fused::F32;
        g.alpha = 2;
        rcuda::Launch l;
        l.kind = rcuda::Launch::Gemm;
        l.gemm = g;
        rcuda::emulateLaunch(l);
        EXPECT_EQ(y, ref) << "transA " << ta << " transB " << tb << " broadcastA " << broadcastA;
      }
}

//===----------------------------------------------------------------------===//
// Device memory check
//===----------------------------------------------------------------------===//

TEST(CudaMemory, RefusesPlansAboveTheShareOrLimit) {
  std::string error;
  EXPECT_TRUE(rcuda::checkDeviceMemory(900, "arena 900", 1000, 0.9, 0, error));
  EXPECT_FALSE(rcuda::checkDeviceMemory(901, "arena 901", 1000, 0.9, 0, error));
  EXPECT_EQ(error, "the plan needs 901 bytes of device memory (arena 901), more than the 900 bytes "
                   "available under --memory-fraction 0.9000 of the 1000 bytes of the device");
  EXPECT_FALSE(rcuda::checkDeviceMemory(600, "arena 600", 1000, 0.9, 500, error));
  EXPECT_EQ(error, "the plan needs 600 bytes of device memory (arena 600), more than the 500 bytes "
                   "available under --memory-limit 500 bytes");
  EXPECT_TRUE(rcuda::checkDeviceMemory(500, "arena 500", 1000, 0.9, 500, error));
  EXPECT_FALSE(rcuda::checkDeviceMemory(1, "", 1000, 1.5, 0, error));
  EXPECT_NE(error.find("--memory-fraction must be in (0, 1]"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Backends compared: per op and whole training steps
//===----------------------------------------------------------------------===//

bool isFloatHost(rt::ElemType t) {
  return t == rt::ElemType::F32 || t == rt::ElemType::F16 || t == rt::ElemType::BF16 ||
         t == rt::ElemType::F64;
}

/// Largest |a - b| / max|b| over a tensor; `within` checks each element
/// against rel * |b| + abs * max|b|.
double compareArrays(const rt::HostArray &a, const rt::HostArray &b, double rel, double abs,
                     bool &within, std::string &where) {
  within = true;
  if (a.numElements() != b.numElements() || a.type != b.type) {
    within = false;
    where = "shape or type differs";
    return INFINITY;
  }
  double maxRef = 0;
  for (int64_t i = 0; i < b.numElements(); ++i)
    if (std::isfinite(b.at(i)))
      maxRef = std::max(maxRef, std::fabs(b.at(i)));
  double worst = 0;
  for (int64_t i = 0; i < b.numElements(); ++i) {
    double x = a.at(i), y = b.at(i);
    bool ok;
    if (!isFloatHost(b.type) || !std::isfinite(y))
      ok = x == y || (std::isnan(x) && std::isnan(y));
    else
      ok = std::fabs(x - y) <= rel * std::fabs(y) + abs * maxRef;
    if (!ok && within) {
      within = false;
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %lld: %.9g, cpu %.9g", static_cast<long long>(i), x,
                    y);
      where = buf;
    }
    if (std::isfinite(x) && std::isfinite(y))
      worst = std::max(worst, maxRef > 0 ? std::fabs(x - y) / maxRef : std::fabs(x - y));
  }
  return worst;
}

using BackendFactory = std::function<std::unique_ptr<rt::Backend>()>;

std::unique_ptr<rt::Backend> cpuBackend() { return rt::createCpuBackend({1}); }
std::unique_ptr<rt::Backend> emulatorBackend() { return rcuda::createCudaEmulatorBackend(); }
/// The emulator lowering convolutions as a backend without cuDNN does.
std::unique_ptr<rt::Backend> im2colEmulatorBackend() {
  rcuda::EmulatorOptions o;
  o.cudnn = false;
  return rcuda::createCudaEmulatorBackend(o);
}

/// Runs program "step" of a plan once on a backend; returns its outputs.
/// Runs the step `runs` times; `outs` gets every output after each run.
bool runOnce(const plan::Plan &p, const BackendFactory &make,
             const std::map<std::string, Tensor> &feeds, std::vector<rt::HostArray> &outs,
             int runs = 1) {
  std::string error;
  auto session = rt::Session::fromPlan(p, make(), error);
  if (!session) {
    ADD_FAILURE() << "load: " << error;
    return false;
  }
  int prog = session->program("step");
  for (const auto &[name, t] : feeds)
    if (!session->feed(prog, name, toHostArray(t), "test", error)) {
      ADD_FAILURE() << error;
      return false;
    }
  for (int r = 0; r < runs; ++r) {
    if (!session->run(prog, error)) {
      ADD_FAILURE() << "run: " << error;
      return false;
    }
    for (const plan::Binding &b : p.programs(prog).outputs()) {
      rt::HostArray a;
      if (!session->output(prog, b.name(), a, error)) {
        ADD_FAILURE() << error;
        return false;
      }
      outs.push_back(std::move(a));
    }
  }
  return true;
}

using Generator = std::function<Tensor(const TensorType &, std::mt19937_64 &)>;

Generator intsIn(int64_t lo, int64_t hi) {
  return [=](const TensorType &t, std::mt19937_64 &rng) {
    std::uniform_int_distribution<int64_t> u(lo, hi);
    std::vector<int64_t> v(t.numElements());
    for (int64_t &x : v)
      x = u(rng);
    return Tensor::fromInt64s(t, v);
  };
}

/// Values drawn from [0.5, 2]: variances, inverse standard deviations, weights.
Generator positiveValues() {
  return [](const TensorType &t, std::mt19937_64 &rng) {
    std::uniform_real_distribution<double> u(0.5, 2);
    std::vector<double> v(t.numElements());
    for (double &x : v)
      x = u(rng);
    return Tensor::fromDoubles(t, v);
  };
}

/// `T` in the model text stands for the element type under test.
std::string substitute(const std::string &text, const char *name) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    bool word = text[i] == 'T' && (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1]))) &&
                i + 1 < text.size() && (text[i + 1] == '[' || text[i + 1] == ' ');
    out += word ? std::string(name) : std::string(1, text[i]);
  }
  return out;
}

std::string header(bool ampcOps = false) {
  return std::string("<ir_version: 8, opset_import: [\"\" : 17") + (ampcOps ? ", \"ampc\" : 1" : "") +
         "]>\n";
}

/// One model on the emulated CUDA backend and the CPU backend, in fp32,
/// fp16 and bf16; every output compared.
void compareOp(const std::string &op, const std::string &model,
               std::map<std::string, Generator> gens = {}, double absTol = 2e-5,
               const BackendFactory &other = emulatorBackend) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(op + " " + (t == DType::F32 ? "float" : t == DType::F16 ? "float16" : "bfloat16"));
    std::string text = substitute(model, "float");
    auto g = importModelText(text, op);
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError()) << "\n" << text;
    if (t != DType::F32) {
      for (Value *v : (*g)->inputs())
        if (v->dtype() == DType::F32)
          v->setDType(t);
      for (Value *v : (*g)->initializers())
        if (v->dtype() == DType::F32) {
          Tensor d = v->data()->castTo(t);
          v->setDType(t);
          v->setData(std::move(d));
        }
      for (Node *n : (*g)->nodes())
        for (Value *v : n->outputs())
          if (v && v->dtype() == DType::F32)
            v->setDType(t);
    }
    std::mt19937_64 rng(std::hash<std::string>()(op + model));
    std::map<std::string, Tensor> feeds;
    for (const Value *v : (*g)->inputs()) {
      auto it = gens.find(v->name());
      if (it != gens.end()) {
        feeds[v->name()] = it->second(v->type(), rng);
      } else {
        std::uniform_real_distribution<double> u(-1, 1);
        std::vector<double> vals(v->type().numElements());
        for (double &x : vals)
          x = u(rng);
        feeds[v->name()] = Tensor::fromDoubles(v->type(), vals);
      }
    }
    auto p = lowerToPlan(**g, {});
    ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
    std::vector<rt::HostArray> cpu, emu;
    if (!runOnce(*p, cpuBackend, feeds, cpu) || !runOnce(*p, other, feeds, emu))
      return;
    ASSERT_EQ(cpu.size(), emu.size());
    double rel = t == DType::F16 ? std::ldexp(1.0, -10) : t == DType::BF16 ? std::ldexp(1.0, -7) : 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      bool within;
      std::string where;
      compareArrays(emu[i], cpu[i], rel, absTol, within, where);
      EXPECT_TRUE(within) << "output " << p->programs(0).outputs(i).name() << ": " << where;
    }
  }
}

TEST(CudaEmulation, FusedChainsWithBroadcasting) {
  compareOp("fused", header() + R"(g (T[4,5] a, T[5] b, T[4,1] c) => (T[4,5] y, T[4,5] z) {
      s = Add(a, b)
      m = Mul(s, c)
      r = Relu(m)
      t = Sigmoid(a)
      u = Sub(r, t)
      y = Tanh(u)
      k = Greater(a, b)
      z = Where(k, a, c)
    })");
  compareOp("fused-cast", header() + R"(g (T[3,8] a) => (float[3,8] y, T[3,8] z) {
      y = Cast <to = 1> (a)
      e = Exp(a)
      z = Div(e, a)
    })");
}

/// Floats that probe every rounding decision of fp32 -> fp16: each half's
/// value, the midpoint to the next half (ties to even) and the floats either
/// side of it, overflow's threshold, subnormals, infinities and NaN.
std::vector<float> halfRoundingProbes() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7C00u; ++h) {
    float lo = rt::math::halfToFloat(static_cast<uint16_t>(h));
    float hi = h + 1 < 0x7C00u ? rt::math::halfToFloat(static_cast<uint16_t>(h + 1)) : 65520.0f;
    float mid = static_cast<float>((double(lo) + double(hi)) / 2);
    for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  for (float x : {1e6f, 3e38f, INFINITY, -INFINITY, NAN, -NAN, 1e-30f, 1e-40f, -1e-45f})
    v.push_back(x);
  return v;
}

/// Every fp16 and bf16 bit pattern to fp32, and halfRoundingProbes to fp16
/// and bf16, on a backend against the CPU's kernels, bit for bit.
void compareStorageConversions(const BackendFactory &other) {
  std::vector<float> probes = halfRoundingProbes();
  int64_t n = static_cast<int64_t>(probes.size());
  std::string n16 = std::to_string(n);
  std::string text = header() + "g (float[" + n16 + "] a, float16[65536] h, bfloat16[65536] b) => "
                     "(float16[" + n16 + "] ah, bfloat16[" + n16 + "] ab, float[65536] hf, "
                     "float[65536] bf) {\n  ah = Cast <to = 10> (a)\n  ab = Cast <to = 16> (a)\n"
                     "  hf = Cast <to = 1> (h)\n  bf = Cast <to = 1> (b)\n}";
  auto g = importModelText(text, "conversions");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  auto p = lowerToPlan(**g, {});
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  std::vector<uint16_t> patterns(65536);
  for (uint32_t k = 0; k < 65536; ++k)
    patterns[k] = static_cast<uint16_t>(k);
  std::map<std::string, Tensor> feeds;
  feeds["a"] = Tensor::fromBytes(TensorType(DType::F32, {n}), probes.data(), probes.size() * 4);
  feeds["h"] = Tensor::fromBytes(TensorType(DType::F16, {65536}), patterns.data(), 65536 * 2);
  feeds["b"] = Tensor::fromBytes(TensorType(DType::BF16, {65536}), patterns.data(), 65536 * 2);
  std::vector<rt::HostArray> cpu, dev;
  if (!runOnce(*p, cpuBackend, feeds, cpu) || !runOnce(*p, other, feeds, dev))
    return;
  ASSERT_EQ(cpu.size(), dev.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].bytes.size(), dev[i].bytes.size());
    size_t width = cpu[i].bytes.size() / cpu[i].numElements();
    for (size_t b = 0; b < cpu[i].bytes.size(); b += width)
      ASSERT_EQ(0, std::memcmp(&cpu[i].bytes[b], &dev[i].bytes[b], width))
          << "output " << p->programs(0).outputs(i).name() << ", element " << b / width;
  }
}

TEST(CudaEmulation, StorageConversionsAreTheCpus) { compareStorageConversions(emulatorBackend); }

/// AllFinite over more inputs than one launch takes and more flags than one
/// combine folds, with one non-finite element moved between its inputs.
void compareAllFinite(const BackendFactory &other) {
  std::string sig, args;
  for (int k = 0; k < 40; ++k) {
    std::string len = std::to_string(k == 7 ? 700000 : 3 + 97 * k);
    sig += (k ? ", T[" : "T[") + len + "] x" + std::to_string(k);
    args += (k ? ", x" : "x") + std::to_string(k);
  }
  std::string model = header(true) + "g (" + sig + ") => (bool ok) { ok = ampc.AllFinite (" + args + ") }";
  for (int bad : {-1, 0, 7, 39}) {
    SCOPED_TRACE("non-finite element in input " + std::to_string(bad));
    std::map<std::string, Generator> gens;
    if (bad >= 0)
      gens["x" + std::to_string(bad)] = [](const TensorType &t, std::mt19937_64 &) {
        std::vector<double> v(t.numElements(), 0.5);
        v[v.size() - 1 - v.size() / 3] = INFINITY;
        return Tensor::fromDoubles(t, v);
      };
    compareOp("allfinite", model, gens, 0, other);
  }
}

TEST(CudaEmulation, AllFiniteOverManyInputs) { compareAllFinite(emulatorBackend); }

/// Elementwise steps the lowering left unfused (fusion off).
TEST(CudaEmulation, UnfusedElementwiseSteps) {
  const char *model = R"(g (T[4,5] a, T[5] b, T[4,1] c) => (T[4,5] y, float[4,5] z, T[4,5] w) {
      s = Add(a, b)
      k = Greater(a, c)
      y = Where(k, s, c)
      z = Cast <to = 1> (y)
      r = Relu(a)
      w = Sub(r, b)
    })";
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const char *name = t == DType::F32 ? "float" : t == DType::F16 ? "float16" : "bfloat16";
    auto g = importModelText(substitute(header() + model, name), "unfused");
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
    LowerOptions lo;
    lo.fuseElementwise = false;
    auto p = lowerToPlan(**g, lo);
    ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(-1, 1);
    std::map<std::string, Tensor> feeds;
    for (const Value *v : (*g)->inputs()) {
      std::vector<double> vals(v->type().numElements());
      for (double &x : vals)
        x = u(rng);
      feeds[v->name()] = Tensor::fromDoubles(v->type(), vals);
    }
    std::vector<rt::HostArray> cpu, emu;
    ASSERT_TRUE(runOnce(*p, cpuBackend, feeds, cpu) && runOnce(*p, emulatorBackend, feeds, emu));
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_EQ(cpu[i].bytes, emu[i].bytes) << name << " output " << i;
  }
}

TEST(CudaEmulation, MatMulAndGemm) {
  const char *shapes[][3] = {{"[5,7]", "[7,3]", "[5,3]"},         {"[2,4,16]", "[16,48]", "[2,4,48]"},
                             {"[2,3,4,5]", "[2,3,5,6]", "[2,3,4,6]"}, {"[3,1,4,5]", "[2,5,6]", "[3,2,4,6]"},
                             {"[4,5]", "[3,5,2]", "[3,4,2]"},       {"[7]", "[7,3]", "[3]"},
                             {"[2,3,7]", "[7]", "[2,3]"}};
  for (auto &s : shapes)
    compareOp("MatMul", header() + "g (T" + s[0] + " a, T" + s[1] + " b) => (T" + s[2] +
                            " y) { y = MatMul(a, b) }");
  const char *gemms[][5] = {{"[4,6]", "[6,5]", "[5]", "", "[4,5]"},
                            {"[6,4]", "[6,5]", "[4,5]", "<transA = 1>", "[4,5]"},
                            {"[4,6]", "[5,6]", "[1,5]", "<transB = 1>", "[4,5]"},
                            {"[6,4]", "[5,6]", "[4,1]", "<transA = 1, transB = 1, alpha = 0.5, beta = 2.0>",
                             "[4,5]"}};
  for (auto &s : gemms)
    compareOp("Gemm", header() + "g (T" + s[0] + " a, T" + s[1] + " b, T" + s[2] + " c) => (T" +
                          s[4] + " y) { y = Gemm " + s[3] + " (a, b, c) }");
  compareOp("Gemm", header() + "g (T[3,6] a, T[6,5] b) => (T[3,5] y) { y = Gemm <alpha = 1.5> (a, b) }");
}

TEST(CudaEmulation, DataMovement) {
  compareOp("Transpose", header() + "g (T[2,3,4,5] a) => (T[4,2,5,3] y) { y = Transpose <perm = [2,0,3,1]> (a) }");
  compareOp("Transpose", header() + "g (T[6,7] a) => (T[7,6] y) { y = Transpose(a) }");
  // Attention's head split: the innermost dim stays contiguous, so each
  // thread copies 16 bytes (8 or 4 when the rows are narrower).
  compareOp("Transpose-wide", header() + "g (T[3,4,5,16] a) => (T[3,5,4,16] y) { y = Transpose <perm = [0,2,1,3]> (a) }");
  compareOp("Transpose-wide", header() + "g (T[3,4,5,6] a) => (T[3,5,4,6] y) { y = Transpose <perm = [0,2,1,3]> (a) }");
  compareOp("Concat-wide", header() + "g (T[2,3,8] a, T[2,5,8] b) => (T[2,8,8] y) { y = Concat <axis = 1> (a, b) }");
  compareOp("Concat", header() + "g (T[2,3,4] a, T[2,5,4] b) => (T[2,8,4] y) { y = Concat <axis = 1> (a, b) }");
  compareOp("Split", header() + R"(g (T[2,9,4] a) => (T[2,3,4] x, T[2,6,4] y) <int64[2] s = {3, 6}> {
      x, y = Split <axis = 1> (a, s)
    })");
  compareOp("Expand", header() + R"(g (T[3,1] a) => (T[2,3,4] y) <int64[3] s = {2, 3, 4}> {
      y = Expand(a, s)
    })");
  compareOp("Gather", header() + R"(g (T[5,4,3] a, int64[2,3] i) => (T[5,2,3,3] y) {
      y = Gather <axis = 1> (a, i)
    })", {{"i", intsIn(-4, 3)}});
  compareOp("Slice", header() + R"(g (T[6,8] a) => (T[2,3] y)
      <int64[2] st = {1, 7}, int64[2] en = {5, 1}, int64[2] ax = {0, 1}, int64[2] sp = {2, -2}> {
      y = Slice(a, st, en, ax, sp)
    })");
  compareOp("ampc.SliceGrad", header(true) + R"(g (T[2,3] dy) => (T[6,8] dx)
      <int64[2] st = {1, 7}, int64[2] en = {5, 1}, int64[2] ax = {0, 1}, int64[2] sp = {2, -2}> {
      dx = ampc.SliceGrad <shape = [6, 8]> (dy, st, en, ax, sp)
    })");
  compareOp("GatherElements", header() + R"(g (T[4,5,3] a, int64[6,4,3] i) => (T[6,4,3] y) {
      y = GatherElements <axis = 0> (a, i)
    })", {{"i", intsIn(-4, 4)}});
  compareOp("GatherElements-last", header() + R"(g (T[4,5,3] a, int32[4,5,7] i) => (T[4,5,7] y) {
      y = GatherElements <axis = -1> (a, i)
    })", {{"i", intsIn(-3, 3)}});
  compareOp("ampc.GatherGrad", header(true) + R"(g (T[5,2,3,3] dy, int64[2,3] i) => (T[5,4,3] dx) {
      dx = ampc.GatherGrad <axis = 1, shape = [5, 4, 3]> (dy, i)
    })", {{"i", intsIn(-4, 5)}});
  // An Embedding's gradient: 300 indices in 5 segments of the counting sort,
  // rows named many times, some indices out of range; each element sums dY
  // in index order, as the CPU does, so the bits are the CPU's.
  compareOp("ampc.GatherGrad-embedding", header(true) + R"(g (T[300,8] dy, int32[300] i) => (T[7,8] dx) {
      dx = ampc.GatherGrad <axis = 0, shape = [7, 8]> (dy, i)
    })", {{"i", intsIn(-8, 8)}}, 0.0);
  compareOp("Tile", header() + R"(g (T[2,3,4] a) => (T[4,3,12] y) <int64[3] r = {2, 1, 3}> {
      y = Tile(a, r)
    })");
  compareOp("Pad", header() + R"(g (T[2,3,4] a) => (T[3,3,7] y) <int64[6] p = {1, 0, 2, 0, 0, 1}> {
      y = Pad(a, p)
    })");
  compareOp("Pad", header() + R"(g (T[2,3] a, T v) => (T[4,6] y) <int64[4] p = {0, 2, 2, 1}> {
      y = Pad(a, p, v)
    })");
  // Every mode, with cropping (negative pads): one thread per result element
  // finding its source, as the CPU maps them.
  for (const char *mode : {"constant", "edge", "reflect", "wrap"}) {
    compareOp(std::string("Pad-") + mode, header() + R"(g (T[3,4] a, T v) => (T[6,7] y) <int64[4] p = {1, 2, 2, 1}> {
      y = Pad <mode = ")" + mode + R"("> (a, p, v)
    })");
    compareOp(std::string("Pad-crop-") + mode, header() + R"(g (T[2,5,4] a) => (T[2,6,7] y) <int64[6] p = {0, -2, 1, 0, 3, 2}> {
      y = Pad <mode = ")" + mode + R"("> (a, p)
    })");
  }
}

/// Dropout draws the CPU's masks (one generator, ElementMath.h) run after run:
/// the run counter is an int64 state advanced on the device. DropoutGrad
/// scales through the mask.
TEST(CudaEmulation, DropoutMatchesTheCpuRunAfterRun) {
  for (const char *type : {"float", "float16", "bfloat16"}) {
    SCOPED_TRACE(type);
    std::string text = header(true) + "g (" + type + "[6,50] a, " + type +
                       "[6,50] g) => (" + type + "[6,50] y, bool[6,50] m, " + type +
                       "[6,50] dx) <float r = {0.3}, bool t = {1}> {\n"
                       "  y, m = Dropout <seed = 7> (a, r, t)\n"
                       "  dx = ampc.DropoutGrad (g, m, r, t)\n"
                       "}";
    auto graph = importModelText(text, "dropout");
    ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    std::mt19937_64 rng(5);
    std::map<std::string, Tensor> feeds;
    for (const Value *v : (*graph)->inputs()) {
      std::normal_distribution<double> n;
      std::vector<double> vals(v->type().numElements());
      for (double &x : vals)
        x = n(rng);
      feeds[v->name()] = Tensor::fromDoubles(v->type(), vals);
    }
    auto p = lowerToPlan(**graph, {});
    ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
    std::vector<rt::HostArray> cpu, emu;
    ASSERT_TRUE(runOnce(*p, cpuBackend, feeds, cpu, 3));
    ASSERT_TRUE(runOnce(*p, emulatorBackend, feeds, emu, 3));
    ASSERT_EQ(cpu.size(), emu.size());
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_EQ(cpu[i].bytes, emu[i].bytes) << "run " << i / 3 << ", output " << i % 3;
    EXPECT_NE(cpu[1].bytes, cpu[4].bytes) << "the mask did not change between runs";
  }
}

/// A ratio and training flag fed at run time (graph inputs rather than
/// constants) are read on the device every run, as the CPU kernel reads
/// them: same masks and scaling for several values, inference included.
TEST(CudaEmulation, DropoutReadsARatioFedAtRunTime) {
  std::string text = header(true) +
                     "g (float[4,64] a, float[4,64] g, float r, bool t) => (float[4,64] y, "
                     "bool[4,64] m, float[4,64] dx) {\n"
                     "  y, m = Dropout (a, r, t)\n"
                     "  dx = ampc.DropoutGrad (g, m, r, t)\n"
                     "}";
  auto graph = importModelText(text, "dropout-fed");
  ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
  auto p = lowerToPlan(**graph, {});
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  std::mt19937_64 rng(9);
  std::normal_distribution<double> n;
  std::vector<double> a(256), g(256);
  for (double &x : a)
    x = n(rng);
  for (double &x : g)
    x = n(rng);
  for (auto [ratio, training] : {std::pair{0.3, 1.0}, {0.7, 1.0}, {0.0, 1.0}, {0.5, 0.0}}) {
    SCOPED_TRACE("ratio " + std::to_string(ratio) + ", training " + std::to_string(training));
    std::map<std::string, Tensor> feeds = {
        {"a", Tensor::fromDoubles(TensorType(DType::F32, {4, 64}), a)},
        {"g", Tensor::fromDoubles(TensorType(DType::F32, {4, 64}), g)},
        {"r", Tensor::scalar(DType::F32, ratio)},
        {"t", Tensor::scalar(DType::Bool, training)}};
    std::vector<rt::HostArray> cpu, emu;
    ASSERT_TRUE(runOnce(*p, cpuBackend, feeds, cpu, 2));
    ASSERT_TRUE(runOnce(*p, emulatorBackend, feeds, emu, 2));
    ASSERT_EQ(cpu.size(), 6u);
    ASSERT_EQ(emu.size(), 6u);
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_EQ(cpu[i].bytes, emu[i].bytes) << "run " << i / 3 << ", output " << i % 3;
    size_t dropped = std::count(cpu[1].bytes.begin(), cpu[1].bytes.end(), 0);
    EXPECT_EQ(dropped > 0, ratio > 0.0 && training != 0.0) << dropped << " elements dropped";
  }
}

TEST(CudaEmulation, Reductions) {
  compareOp("ReduceSum", header() + R"(g (T[4,5,6] a) => (T[5] y) <int64[2] ax = {0, 2}> {
      y = ReduceSum <keepdims = 0> (a, ax)
    })");
  compareOp("ReduceSum-long", header() + R"(g (T[3,9000] a) => (T[3,1] y) <int64[1] ax = {1}> {
      y = ReduceSum(a, ax)
    })", {}, 2e-4);
  compareOp("ReduceSum-all", header() + R"(g (T[300,70] a) => (T y) <int64[0] ax = {}> {
      y = ReduceSum <keepdims = 0> (a, ax)
    })", {}, 2e-4);
  compareOp("ReduceMean", header() + "g (T[4,5,6] a) => (T[4,1,6] y) { y = ReduceMean <axes = [1]> (a) }");
  compareOp("ReduceSumSquare", header() + "g (T[4,5] a) => (T y) { y = ReduceSumSquare <keepdims = 0> (a) }");
  compareOp("ReduceMax", header() + "g (T[4,5] a) => (T[4] y) { y = ReduceMax <axes = [1], keepdims = 0> (a) }");
  compareOp("GlobalAveragePool", header() + "g (T[2,3,5,5] a) => (T[2,3,1,1] y) { y = GlobalAveragePool(a) }");
  compareOp("ReduceLogSum", header() + R"(g (T[4,5,6] a) => (T[4,1,6] y) {
      e = Exp(a)
      y = ReduceLogSum <axes = [1]> (e)
    })");
  // Exponents up to 40 (beyond fp16 and, unshifted, close to fp32's range):
  // shifted by each result's maximum, as on the CPU; a long one in chunks.
  compareOp("ReduceLogSumExp", header() + R"(g (T[4,5,6] a) => (T[4,6] y) <T[1] k = {40.0}> {
      b = Mul(a, k)
      y = ReduceLogSumExp <axes = [1], keepdims = 0> (b)
    })", {}, 1e-4);
  compareOp("ReduceLogSumExp-long", header() + R"(g (T[2,10000] a) => (T[2,1] y) {
      y = ReduceLogSumExp <axes = [1]> (a)
    })", {}, 1e-4);
  // Groups that are all -inf (a fully masked attention row) or hold +inf:
  // -inf and +inf, as on the CPU, not inf - inf = NaN.
  Generator infinities = [](const TensorType &t, std::mt19937_64 &rng) {
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> v(t.numElements());
    for (double &x : v)
      x = u(rng);
    for (int64_t j = 0; j < 5; ++j)
      v[j] = -std::numeric_limits<double>::infinity(); // row 0
    v[7] = std::numeric_limits<double>::infinity();     // row 1
    return Tensor::fromDoubles(t, v);
  };
  compareOp("ReduceLogSumExp-infinite", header() + R"(g (T[3,5] a) => (T[3] y) {
      y = ReduceLogSumExp <axes = [1], keepdims = 0> (a)
    })", {{"a", infinities}}, 1e-4);
}

TEST(CudaEmulation, SoftmaxAndNormalization) {
  compareOp("Softmax", header() + "g (T[3,4,5] a) => (T[3,4,5] y) { y = Softmax <axis = 1> (a) }");
  compareOp("LogSoftmax", header() + "g (T[3,7] a) => (T[3,7] y) { y = LogSoftmax(a) }");
  compareOp("LayerNormalization", header() + R"(g (T[2,3,8] x, T[8] s, T[8] b) => (T[2,3,8] y, float[2,3,1] m, float[2,3,1] r) {
      y, m, r = LayerNormalization <axis = -1, stash_type = 1> (x, s, b)
    })");
  compareOp("BatchNormalization", header() + R"(g (T[4,3,5,5] x, T[3] s, T[3] b, T[3] m, T[3] v) => (T[4,3,5,5] y, T[3] rm, T[3] rv) {
      y, rm, rv = BatchNormalization <training_mode = 1> (x, s, b, m, v)
    })", {{"v", [](const TensorType &t, std::mt19937_64 &) {
             return Tensor::fromDoubles(t, std::vector<double>(t.numElements(), 1.0));
           }}});
  for (const char *r : {"mean", "sum"})
    compareOp("SoftmaxCrossEntropyLoss", header() + R"(g (T[6,5] x, int64[6] t) => (T l, T[6,5] lp) {
      l, lp = SoftmaxCrossEntropyLoss <reduction = ")" + r + R"("> (x, t)
    })", {{"t", intsIn(0, 4)}});
  compareOp("SoftmaxCrossEntropyLoss", header() + R"(g (T[4,5,3] x, int64[4,3] t, T[5] w) => (T[4,3] l) {
      l = SoftmaxCrossEntropyLoss <reduction = "none", ignore_index = 2> (x, t, w)
    })", {{"t", intsIn(0, 4)}});
}

//===----------------------------------------------------------------------===//
// Row kernels (RowKernels.h): a warp or a block per row, emulated lane by lane
//===----------------------------------------------------------------------===//

/// Row lengths that exercise each shape of row launch: a warp with a short
/// last chunk (40), a warp with several chunks per lane (1000), a block of
/// 256 threads with a short last chunk (5003).
const int64_t kRowLengths[] = {40, 1000, 5003};

std::string rows(int64_t r, int64_t len) {
  return "[" + std::to_string(r) + "," + std::to_string(len) + "]";
}

/// The kernel launches of program 0 of a model's plan, lowered against
/// placeholder addresses.
std::vector<rcuda::Launch> kernelLaunches(const std::string &model) {
  auto g = importModelText(model, "rows");
  EXPECT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  if (!g)
    return {};
  auto p = lowerToPlan(**g, {});
  EXPECT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  if (!p)
    return {};
  alignas(64) static uint8_t fake[64];
  rcuda::DeviceMemory mem{[](int) { return static_cast<void *>(fake); }, fake};
  std::vector<rcuda::Launch> launches, kernels;
  size_t ws = 0;
  std::string error;
  EXPECT_TRUE(rcuda::lowerProgram(*p, 0, mem, launches, ws, error)) << error;
  for (const rcuda::Launch &l : launches)
    if (l.kind == rcuda::Launch::Kernel)
      kernels.push_back(l);
  return kernels;
}

/// Values of a large magnitude, far from zero: exp overflows fp32 unless the
/// row's maximum is subtracted, and the online maximum changes often.
Generator largeNegative(double scale, double offset) {
  return [=](const TensorType &t, std::mt19937_64 &rng) {
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> v(t.numElements());
    for (double &x : v)
      x = offset + scale * u(rng);
    return Tensor::fromDoubles(t, v);
  };
}

/// Copies move 16 bytes a thread (else 8 or 4) where the innermost dim is
/// contiguous on both sides, and an element a thread where it is not.
TEST(CudaEmulation, CopiesWidenWhereRowsAreContiguous) {
  struct Case {
    const char *model;
    int bytes;
    int64_t threads;
  } cases[] = {
      {"g (float16[3,4,5,16] a) => (float16[3,5,4,16] y) { y = Transpose <perm = [0,2,1,3]> (a) }",
       16, 3 * 5 * 4 * 2},
      {"g (float16[3,4,5,6] a) => (float16[3,5,4,6] y) { y = Transpose <perm = [0,2,1,3]> (a) }", 4,
       3 * 5 * 4 * 3},
      {"g (float[3,4,5,6] a) => (float[3,5,4,6] y) { y = Transpose <perm = [0,2,1,3]> (a) }", 8,
       3 * 5 * 4 * 3},
      {"g (float16[6,8] a) => (float16[8,6] y) { y = Transpose(a) }", 2, 48},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.model);
    auto ks = kernelLaunches(header() + c.model);
    ASSERT_EQ(ks.size(), 1u);
    ASSERT_EQ(ks[0].kernel, rcuda::KernelKind::Copy);
    EXPECT_EQ(ks[0].as<rcuda::CopyArgs>().elemBytes, c.bytes);
    EXPECT_EQ(ks[0].threads, c.threads);
  }
}

TEST(CudaRowKernels, LaunchShapes) {
  struct Case {
    int64_t len;
    int lanes;
  } cases[] = {{5, 0}, {31, 0}, {32, 32}, {1000, 32}, {4096, 32}, {4097, 256}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.len);
    auto ks = kernelLaunches(header() + "g (float" + rows(3, c.len) + " a) => (float" +
                             rows(3, c.len) + " y) { y = Softmax(a) }");
    ASSERT_EQ(ks.size(), 1u);
    EXPECT_EQ(ks[0].kernel, rcuda::KernelKind::Softmax);
    EXPECT_EQ(ks[0].as<rcuda::SoftmaxArgs>().lanes, c.lanes);
    EXPECT_EQ(ks[0].threads, 3); // a row (or a column) each
    EXPECT_EQ(rcuda::rowLanesOf(ks[0]), c.lanes);
    EXPECT_EQ(rcuda::describeLaunch(ks[0]),
              c.lanes ? "Softmax kernel, 3 rows x " + std::to_string(c.lanes) + " threads"
                      : std::string("Softmax kernel, 3 threads"));
  }
  // Not the last axis: a thread per column, whose loads are coalesced
  // across threads already.
  auto ks = kernelLaunches(header() + "g (float[3,100,40] a) => (float[3,100,40] y) { y = Softmax <axis = 1> (a) }");
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].as<rcuda::SoftmaxArgs>().lanes, 0);
  EXPECT_EQ(ks[0].threads, 120);
  // LayerNorm's forward and dX by rows, dScale and dBias a thread per column.
  ks = kernelLaunches(header(true) + R"(g (float[6,1000] dy, float[6,1000] x, float[1000] s, float[6,1] m, float[6,1] r) => (float[6,1000] y, float[6,1000] dx, float[1000] ds) {
      y = LayerNormalization <axis = -1> (x, s)
      dx, ds = ampc.LayerNormalizationGrad <axis = -1> (dy, x, s, m, r)
    })");
  ASSERT_EQ(ks.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(ks[k].kernel, rcuda::KernelKind::LayerNorm);
    EXPECT_EQ(rcuda::rowLanesOf(ks[k]), k < 2 ? 32 : 0) << k;
    EXPECT_EQ(ks[k].threads, k < 2 ? 6 : 1000) << k;
  }
}

TEST(CudaRowKernels, SoftmaxOnlineOverLongRows) {
  for (int64_t len : kRowLengths) {
    std::string shape = rows(3, len);
    compareOp("Softmax" + shape, header() + "g (T" + shape + " a) => (T" + shape +
                                     " y) { y = Softmax(a) }");
    compareOp("LogSoftmax" + shape, header() + "g (T" + shape + " a) => (T" + shape +
                                        " y) { y = LogSoftmax(a) }");
    // Around -1000 with a spread of 60: exp(x) underflows to 0 everywhere,
    // exp(x - max) does not, and fp16 represents every input.
    compareOp("Softmax-large" + shape,
              header() + "g (T" + shape + " a) => (T" + shape + " y, T" + shape +
                  " z) { y = Softmax(a)\n z = LogSoftmax(a) }",
              {{"a", largeNegative(30, -1000)}}, 1e-4);
  }
}

TEST(CudaRowKernels, SoftmaxMaskedRows) {
  // Row 0 starts with 300 -inf (a masked attention row: the online maximum
  // is -inf for a while), row 1 is -inf but for one element, row 2 is all
  // -inf (NaN, as the two-pass reference gives), row 3 holds +inf.
  Generator masked = [](const TensorType &t, std::mt19937_64 &rng) {
    std::uniform_real_distribution<double> u(-1, 1);
    const double inf = std::numeric_limits<double>::infinity();
    int64_t len = t.shape.back();
    std::vector<double> v(t.numElements());
    for (double &x : v)
      x = 4 * u(rng);
    for (int64_t j = 0; j < 300; ++j)
      v[j] = -inf;
    for (int64_t j = 0; j < len; ++j)
      v[len + j] = j == 517 ? 2.0 : -inf;
    for (int64_t j = 0; j < len; ++j)
      v[2 * len + j] = -inf;
    v[3 * len + 9] = inf;
    return Tensor::fromDoubles(t, v);
  };
  for (int64_t len : {1000, 5003}) {
    std::string shape = rows(4, len);
    compareOp("Softmax-masked" + shape,
              header() + "g (T" + shape + " a) => (T" + shape + " y, T" + shape +
                  " z) { y = Softmax(a)\n z = LogSoftmax(a) }",
              {{"a", masked}});
  }
}

TEST(CudaRowKernels, SoftmaxGradientsOverLongRows) {
  for (int64_t len : kRowLengths) {
    std::string shape = rows(3, len);
    // Y fed rather than computed, so that a one-ulp difference in the
    // forward does not add to the gradient's.
    compareOp("SoftmaxGrad" + shape, header(true) + "g (T" + shape + " dy, T" + shape +
                                         " y) => (T" + shape + " dx, T" + shape + R"( dl) {
      dx = ampc.SoftmaxGrad <axis = -1> (dy, y)
      dl = ampc.LogSoftmaxGrad <axis = -1> (dy, y)
    })");
  }
}

TEST(CudaRowKernels, LayerNormOverLongRows) {
  for (int64_t len : kRowLengths) {
    std::string shape = rows(3, len), param = "[" + std::to_string(len) + "]";
    compareOp("LayerNormalization" + shape,
              header() + "g (T" + shape + " x, T" + param + " s, T" + param + " b) => (T" +
                  shape + R"( y, float[3,1] m, float[3,1] r) {
      y, m, r = LayerNormalization <axis = -1, stash_type = 1> (x, s, b)
    })");
    // Far from zero: the two passes keep the variance accurate.
    compareOp("LayerNormalization-offset" + shape,
              header() + "g (T" + shape + " x, T" + param + " s) => (T" + shape + R"( y) {
      y = LayerNormalization <axis = -1> (x, s)
    })",
              {{"x", largeNegative(4, 300)}}, 1e-4);
    // The statistics fed, so that the gradient is checked on its own.
    Generator positive = positiveValues();
    compareOp("LayerNormalizationGrad" + shape,
              header(true) + "g (T" + shape + " dy, T" + shape + " x, T" + param +
                  " s, T[3,1] m, T[3,1] r) => (T" + shape + " dx, T" + param + " ds, T" +
                  param + R"( db) {
      dx, ds, db = ampc.LayerNormalizationGrad <axis = -1> (dy, x, s, m, r)
    })",
              {{"r", positive}});
  }
}

TEST(CudaRowKernels, ReductionsOverTrailingAxes) {
  // (ReduceSum takes its axes as an operand since opset 13.)
  const char *ops[] = {"ReduceMean", "ReduceSumSquare", "ReduceL1",
                       "ReduceL2",   "ReduceMax",       "ReduceMin"};
  for (int64_t len : kRowLengths) {
    std::string shape = rows(3, len);
    compareOp("ReduceSum" + shape, header() + "g (T" + shape +
                                       " a) => (T[3,1] y) <int64[1] ax = {1}> { y = ReduceSum(a, ax) }",
              {}, 1e-4);
    for (const char *op : ops)
      compareOp(op + shape, header() + "g (T" + shape + " a) => (T[3,1] y) { y = " + op +
                                "<axes = [1]> (a) }",
                {}, 1e-4);
    compareOp("ReduceLogSumExp" + shape,
              header() + "g (T" + shape + " a) => (T[3] y) { y = ReduceLogSumExp <axes = [-1], keepdims = 0> (a) }",
              {{"a", largeNegative(30, -1000)}}, 1e-4);
  }
  // Two trailing axes reduced together: one row of 10 x 100 per result.
  compareOp("ReduceMean-trailing2", header() + R"(g (T[2,10,100] a) => (T[2] y) {
      y = ReduceMean <axes = [1, 2], keepdims = 0> (a)
    })");
  // Fully masked and infinite rows: -inf and +inf, as on the CPU.
  Generator infinities = [](const TensorType &t, std::mt19937_64 &rng) {
    std::uniform_real_distribution<double> u(-1, 1);
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> v(t.numElements());
    for (double &x : v)
      x = u(rng);
    for (int64_t j = 0; j < 1000; ++j)
      v[j] = -inf;   // row 0
    v[1000 + 77] = inf; // row 1
    return Tensor::fromDoubles(t, v);
  };
  compareOp("ReduceLogSumExp-infinite-rows", header() + R"(g (T[3,1000] a) => (T[3] y, T[3] m) {
      y = ReduceLogSumExp <axes = [1], keepdims = 0> (a)
      m = ReduceMax <axes = [1], keepdims = 0> (a)
    })", {{"a", infinities}}, 1e-4);
  // Launches: trailing axes by rows, a middle axis a thread per result, a
  // few very long rows in chunks.
  auto lanes = [](const std::string &model) {
    auto ks = kernelLaunches(header() + model);
    return ks.empty() ? -1 : rcuda::rowLanesOf(ks[0]);
  };
  EXPECT_EQ(lanes("g (float[8,1000] a) => (float[8,1] y) <int64[1] ax = {1}> { y = ReduceSum(a, ax) }"), 32);
  EXPECT_EQ(lanes("g (float[8,9000] a) => (float[8,1] y) <int64[1] ax = {1}> { y = ReduceSum(a, ax) }"), 256);
  EXPECT_EQ(lanes("g (float[1000,8] a) => (float[1,8] y) <int64[1] ax = {0}> { y = ReduceSum(a, ax) }"), 0);
  EXPECT_EQ(lanes("g (float[2,100000] a) => (float[2,1] y) <int64[1] ax = {1}> { y = ReduceSum(a, ax) }"), 0);
}

/// Sums down columns (a bias's gradient, LayerNorm's dScale and dBias) and
/// the loss's sum over samples are spread over many threads: a thread per
/// (chunk of rows, column), then a combine in chunk order; the loss's
/// reduction is one row launch. Each is checked against the CPU, and so is
/// its launch shape.
/// A bias gradient's [batch, seq, features] -> [features]: the two reduced
/// axes merge into one of batch x seq rows (offsets by a multiply, loads four
/// at a time, a remainder of 3 here), and the kept axes around a reduced one
/// stay apart; the sums are the CPU's within rounding, each op and type.
TEST(CudaRowKernels, ColumnReductionsMergeAdjacentAxes) {
  compareOp("ReduceSum-bias-gradient", header() + R"(g (T[5,7,6] a) => (T[1,1,6] y) <int64[2] ax = {0, 1}> {
      y = ReduceSum(a, ax)
    })", {}, 1e-4);
  for (const char *op : {"ReduceMax", "ReduceLogSumExp", "ReduceSumSquare", "ReduceMean"})
    compareOp(std::string(op) + "-merged", header() + R"(g (T[3,9,2,4] a) => (T[1,1,2,1] y) {
      y = )" + op + R"( <axes = [0, 1, 3]> (a)
    })", {}, 1e-4);
  auto ks = kernelLaunches(header() + R"(g (float[5,7,6] a) => (float[1,1,6] y) <int64[2] ax = {0, 1}> {
      y = ReduceSum(a, ax)
    })");
  ASSERT_FALSE(ks.empty()); // chunks of the 35 rows, then their combine
  const auto &r = ks[0].as<rcuda::ReduceArgs>();
  EXPECT_EQ(r.redRank, 1);
  EXPECT_EQ(r.redShape[0], 35);
  EXPECT_EQ(r.redStrides[0], 6);
  EXPECT_EQ(r.keptRank, 1);
  ks = kernelLaunches(header() + R"(g (float[3,9,2,4] a) => (float[1,1,2,1] y) <int64[3] ax = {0, 1, 3}> {
      y = ReduceSum(a, ax)
    })");
  ASSERT_FALSE(ks.empty());
  const auto &q = ks[0].as<rcuda::ReduceArgs>();
  EXPECT_EQ(q.redRank, 2); // [27 rows, stride 8] and [4, stride 1]: not adjacent
  EXPECT_EQ(q.redShape[0], 27);
  EXPECT_EQ(q.redStrides[0], 8);
}

TEST(CudaRowKernels, ColumnSumsInChunks) {
  compareOp("ReduceSum-columns", header() + R"(g (T[1000,37] a) => (T[1,37] y) <int64[1] ax = {0}> {
      y = ReduceSum(a, ax)
    })", {}, 1e-4);
  auto ks = kernelLaunches(header() + R"(g (float[1000,37] a) => (float[1,37] y) <int64[1] ax = {0}> {
      y = ReduceSum(a, ax)
    })");
  ASSERT_EQ(ks.size(), 2u); // 31 chunks of 33 rows (1000 / 32 chunks at most), then the combine
  EXPECT_EQ(ks[0].threads, 31 * 37);
  EXPECT_EQ(ks[1].threads, 37);
  Generator positive = positiveValues();
  const char *lnGrad = R"(g (T[300,40] dy, T[300,40] x, T[40] s, T[300,1] m, T[300,1] r) => (T[300,40] dx, T[40] ds, T[40] db) {
      dx, ds, db = ampc.LayerNormalizationGrad <axis = -1> (dy, x, s, m, r)
    })";
  compareOp("LayerNormalizationGrad-many-rows", header(true) + lnGrad, {{"r", positive}}, 1e-4);
  std::string f32 = lnGrad;
  for (size_t at; (at = f32.find("T[")) != std::string::npos;)
    f32.replace(at, 1, "float");
  ks = kernelLaunches(header(true) + f32);
  ASSERT_EQ(ks.size(), 3u); // dX by rows, 9 chunks of 34 rows per column, the combine
  EXPECT_EQ(rcuda::rowLanesOf(ks[0]), 32);
  EXPECT_EQ(ks[1].threads, 9 * 40);
  EXPECT_EQ(ks[2].threads, 40);
  for (const char *r : {"mean", "sum"})
    compareOp(std::string("SoftmaxCrossEntropyLoss-many-samples-") + r,
              header() + R"(g (T[100,7] x, int64[100] t, T[7] w) => (T l) {
      l = SoftmaxCrossEntropyLoss <reduction = ")" + r + R"(", ignore_index = 2> (x, t, w)
    })",
              {{"t", intsIn(0, 6)}, {"w", positive}}, 1e-4);
  compareOp("SoftmaxCrossEntropyLossGrad-many-samples",
            header(true) + R"(g (T dl, T[100,7] lp, int64[100] t, T[7] w) => (T[100,7] dx) {
      dx = ampc.SoftmaxCrossEntropyLossGrad <reduction = "mean", ignore_index = 2> (dl, lp, t, w)
    })",
            {{"t", intsIn(0, 6)}, {"w", positive}}, 1e-4);
  ks = kernelLaunches(header() + R"(g (float[100,7] x, int64[100] t) => (float l) {
      l = SoftmaxCrossEntropyLoss(x, t)
    })");
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(rcuda::rowLanesOf(ks[1]), 32); // the mean over 100 samples: one row
  EXPECT_EQ(ks[1].threads, 1);
}

TEST(CudaRowKernels, CrossEntropyOverLongRows) {
  for (int64_t len : kRowLengths) {
    std::string shape = rows(6, len), c = std::to_string(len);
    Generator targets = intsIn(0, len - 1);
    for (const char *r : {"mean", "sum"})
      compareOp(std::string("SoftmaxCrossEntropyLoss-") + r + shape,
                header() + "g (T" + shape + " x, int64[6] t) => (T l, T" + shape + R"( lp) {
      l, lp = SoftmaxCrossEntropyLoss <reduction = ")" + r + R"("> (x, t)
    })",
                {{"t", targets}, {"x", largeNegative(30, -1000)}}, 1e-4);
    // Weights, an ignored class, no reduction; targets drawn from the first
    // classes so that some samples hit the ignored one.
    compareOp("SoftmaxCrossEntropyLoss-weighted" + shape,
              header() + "g (T" + shape + " x, int64[6] t, T[" + c + R"(] w) => (T[6] l) {
      l = SoftmaxCrossEntropyLoss <reduction = "none", ignore_index = 2> (x, t, w)
    })",
              {{"t", intsIn(0, 3)}});
    compareOp("SoftmaxCrossEntropyLossGrad" + shape,
              header(true) + "g (T dl, T" + shape + " lp, int64[6] t) => (T" + shape + R"( dx) {
      dx = ampc.SoftmaxCrossEntropyLossGrad <reduction = "mean"> (dl, lp, t)
    })",
              {{"t", targets}});
    compareOp("NegativeLogLikelihoodLossGrad" + shape,
              header(true) + "g (T[6] dl, int64[6] t, T[" + c + "] w) => (T" + shape + R"( dx) {
      dx = ampc.NegativeLogLikelihoodLossGrad <reduction = "none", shape = [6, )" + c + R"(]> (dl, t, w)
    })",
              {{"t", targets}});
  }
  auto ks = kernelLaunches(header(true) + R"(g (float[6,1000] x, int64[6] t, float dl) => (float l, float[6,1000] dx) {
      l, lp = SoftmaxCrossEntropyLoss (x, t)
      dx = ampc.SoftmaxCrossEntropyLossGrad (dl, lp, t)
    })");
  // Per sample by rows, the reduction and the gradient's scale one thread,
  // dX by rows.
  ASSERT_EQ(ks.size(), 4u);
  const int lanes[] = {32, 0, 0, 32};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(ks[k].kernel, rcuda::KernelKind::Loss);
    EXPECT_EQ(rcuda::rowLanesOf(ks[k]), lanes[k]) << k;
  }
}

TEST(CudaRowKernels, BatchNormStatisticsPerChannel) {
  Generator positive = positiveValues();
  // Channels of 2 x 25 (a warp; samples' segments not chunk-aligned), 8 x 256
  // (a warp) and 16 x 576 elements (a block per chunk of 8 samples: 2 chunks).
  for (const char *shape : {"[2,3,5,5]", "[8,4,16,16]", "[16,2,24,24]"}) {
    std::string xs = shape, c = std::string(1, xs[xs.find(',') + 1]);
    std::string cs = "[" + c + "]";
    compareOp(std::string("BatchNormalization") + shape,
              header() + "g (T" + xs + " x, T" + cs + " s, T" + cs + " b, T" + cs + " m, T" + cs +
                  " v) => (T" + xs + " y, T" + cs + " rm, T" + cs + R"( rv) {
      y, rm, rv = BatchNormalization <training_mode = 1> (x, s, b, m, v)
    })",
              {{"v", positive}}, 1e-4);
    compareOp(std::string("BatchNormalizationGrad") + shape,
              header(true) + "g (T" + xs + " dy, T" + xs + " x, T" + cs + " s) => (T" + xs +
                  " dx, T" + cs + " ds, T" + cs + R"( db) {
      dx, ds, db = ampc.BatchNormalizationGrad <epsilon = 0.001> (dy, x, s)
    })",
              {}, 1e-4);
  }
  // One launch for the statistics, one per channel for the gradient's sums.
  auto ks = kernelLaunches(header(true) + R"(g (float[8,4,16,16] dy, float[8,4,16,16] x, float[4] s) => (float[8,4,16,16] dx, float[4] ds, float[4] db) {
      dx, ds, db = ampc.BatchNormalizationGrad (dy, x, s)
    })");
  ASSERT_EQ(ks.size(), 3u);
  const int lanes[] = {32, 32, 0};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(rcuda::rowLanesOf(ks[k]), lanes[k]) << k;
    EXPECT_EQ(ks[k].threads, k < 2 ? 4 : 8 * 4 * 256) << k;
  }
  // Few channels of many elements (ResNet's first stage at batch 512):
  // 16 rows would leave a GPU idle, so each channel's sums run as 16 rows of
  // 32 samples (blocks), whose partials a thread per channel combines.
  ks = kernelLaunches(header(true) + R"(g (float[512,16,32,32] dy, float[512,16,32,32] x, float[16] s) => (float[512,16,32,32] dx, float[16] ds, float[16] db) {
      dx, ds, db = ampc.BatchNormalizationGrad (dy, x, s)
    })");
  ASSERT_EQ(ks.size(), 7u); // SumX, Mean, SumSqDiff, Variance, SumGrad, CombineGrad, dX
  const int64_t threads[] = {16 * 16, 16, 16 * 16, 16, 16 * 16, 16, 512 * 16 * 1024};
  for (int k = 0; k < 7; ++k) {
    EXPECT_EQ(rcuda::rowLanesOf(ks[k]), k % 2 == 0 && k < 6 ? 256 : 0) << k;
    EXPECT_EQ(ks[k].threads, threads[k]) << k;
  }
}

TEST(CudaEmulation, PoolingAndConvolution) {
  compareOp("MaxPool", header() + R"(g (T[2,3,8,8] x) => (T[2,3,4,4] y, int64[2,3,4,4] i) {
      y, i = MaxPool <kernel_shape = [2,2], strides = [2,2]> (x)
    })");
  compareOp("MaxPool", header() + R"(g (T[2,2,7,7] x) => (T[2,2,4,4] y, int64[2,2,4,4] i) {
      y, i = MaxPool <kernel_shape = [3,3], strides = [2,2], pads = [1,1,1,1], storage_order = 1> (x)
    })");
  compareOp("AveragePool", header() + R"(g (T[2,3,7,7] x) => (T[2,3,4,4] y) {
      y = AveragePool <kernel_shape = [3,3], strides = [2,2], pads = [1,1,1,1], count_include_pad = 1> (x)
    })");
  compareOp("Conv", header() + R"(g (T[2,3,8,8] x, T[4,3,3,3] w, T[4] b) => (T[2,4,8,8] y) {
      y = Conv <pads = [1,1,1,1]> (x, w, b)
    })");
  compareOp("Conv", header() + R"(g (T[2,4,9,9] x, T[6,2,3,3] w) => (T[2,6,4,4] y) {
      y = Conv <strides = [2,2], group = 2> (x, w)
    })");
  compareOp("Conv", header() + R"(g (T[1,2,10] x, T[3,2,3] w) => (T[1,3,6] y) {
      y = Conv <dilations = [2]> (x, w)
    })");
}

/// Conv and ampc.ConvGrad in fp32, fp16 and bf16 on `make` against the CPU:
/// pads, strides, groups, dilations, 1-D and 3-D, partial gradients, and a
/// padding cuDNN's symmetric pads cannot express (im2col even with cuDNN).
void compareConvolutions(const BackendFactory &make) {
  compareOp("Conv", header() + R"(g (T[2,3,8,8] x, T[4,3,3,3] w, T[4] b) => (T[2,4,8,8] y) {
      y = Conv <pads = [1,1,1,1]> (x, w, b)
    })", {}, 2e-5, make);
  compareOp("Conv", header() + R"(g (T[2,4,9,9] x, T[6,2,3,3] w, T[6] b) => (T[2,6,4,4] y) {
      y = Conv <strides = [2,2], group = 2> (x, w, b)
    })", {}, 2e-5, make);
  compareOp("Conv", header() + R"(g (T[1,2,10] x, T[3,2,3] w) => (T[1,3,6] y) {
      y = Conv <dilations = [2]> (x, w)
    })", {}, 2e-5, make);
  compareOp("Conv", header() + R"(g (T[2,2,4,5,5] x, T[3,2,2,3,3] w) => (T[2,3,2,3,3] y) {
      y = Conv <strides = [2,2,2], pads = [0,1,1,0,1,1]> (x, w)
    })", {}, 2e-5, make);
  compareOp("Conv", header() + R"(g (T[1,2,7,7] x, T[2,2,2,2] w, T[2] b) => (T[1,2,7,7] y) {
      y = Conv <auto_pad = "SAME_UPPER"> (x, w, b)
    })", {}, 2e-5, make);
  compareOp("ampc.ConvGrad", header(true) + R"(g (T[2,6,4,4] dy, T[2,4,9,9] x, T[6,2,3,3] w) => (T[2,4,9,9] dx, T[6,2,3,3] dw, T[6] db) {
      dx, dw, db = ampc.ConvGrad <strides = [2,2], group = 2> (dy, x, w)
    })", {}, 2e-5, make);
  compareOp("ampc.ConvGrad", header(true) + R"(g (T[2,4,8,8] dy, T[2,3,8,8] x, T[4,3,3,3] w) => (T[2,3,8,8] dx, T[4,3,3,3] dw) {
      dx, dw = ampc.ConvGrad <pads = [1,1,1,1]> (dy, x, w)
    })", {}, 2e-5, make);
  compareOp("ampc.ConvGrad", header(true) + R"(g (T[1,3,6] dy, T[1,2,10] x, T[3,2,3] w) => (T[3,2,3] dw) {
      _, dw = ampc.ConvGrad <dilations = [2]> (dy, x, w)
    })", {}, 2e-5, make);
  compareOp("ampc.ConvGrad", header(true) + R"(g (T[2,3,2,3,3] dy, T[2,2,4,5,5] x, T[3,2,2,3,3] w) => (T[2,2,4,5,5] dx) {
      dx = ampc.ConvGrad <strides = [2,2,2], pads = [0,1,1,0,1,1]> (dy, x, w)
    })", {}, 2e-5, make);
  compareOp("ampc.ConvGrad", header(true) + R"(g (T[1,2,7,7] dy, T[1,2,7,7] x, T[2,2,2,2] w) => (T[1,2,7,7] dx, T[2,2,2,2] dw) {
      dx, dw = ampc.ConvGrad <auto_pad = "SAME_UPPER"> (dy, x, w)
    })", {}, 2e-5, make);
}

/// The emulator with cuDNN records (referenceCudnnConv) and with im2col.
TEST(CudaEmulation, ConvolutionsThroughCudnnAndIm2col) {
  {
    SCOPED_TRACE("cudnn records");
    compareConvolutions(emulatorBackend);
  }
  {
    SCOPED_TRACE("im2col");
    compareConvolutions(im2colEmulatorBackend);
  }
}

/// One plan's launch list, lowered with or without a cuDNN planner.
std::vector<rcuda::Launch> lowerWith(const plan::Plan &p,
                                     std::function<bool(rcuda::CudnnConvCall &)> cudnn,
                                     size_t &ws) {
  static uint8_t fake[64];
  rcuda::DeviceMemory mem{[](int) { return static_cast<void *>(fake); }, fake, std::move(cudnn)};
  std::vector<rcuda::Launch> launches;
  std::string error;
  ws = 0;
  EXPECT_TRUE(rcuda::lowerProgram(p, 0, mem, launches, ws, error)) << error;
  return launches;
}

/// The lowering reserves what the planner says each call needs in the
/// step's workspace: the shared workspace is the largest step's need, and
/// the two calls of a ConvGrad share one slice.
TEST(CudaEmulation, CudnnWorkspaceIsTheLargestStepsNeed) {
  auto g = importModelText(header(true) + R"(g (float[2,3,8,8] x, float[4,3,3,3] w, float[4,4,3,3] w2, float[2,4,8,8] dy) => (float[2,4,8,8] y, float[2,4,8,8] y2, float[2,3,8,8] dx, float[4,3,3,3] dw) {
      y = Conv <pads = [1,1,1,1]> (x, w)
      y2 = Conv <pads = [1,1,1,1]> (y, w2)
      dx, dw = ampc.ConvGrad <pads = [1,1,1,1]> (dy, x, w)
    })", "ws");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  auto p = lowerToPlan(**g, {});
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  // Sizes per direction and input channels, as a device's heuristics might.
  auto planner = [](rcuda::CudnnConvCall &c) {
    c.algo = static_cast<int>(c.dir) + 1;
    c.workspaceBytes = c.dir == rcuda::CudnnConvCall::Forward ? 1000 * c.C
                       : c.dir == rcuda::CudnnConvCall::BackwardData ? 3000
                                                                     : 7000;
    return true;
  };
  size_t ws = 0;
  std::vector<rcuda::Launch> ls = lowerWith(*p, planner, ws);
  std::vector<const rcuda::CudnnConvCall *> calls;
  for (const rcuda::Launch &l : ls)
    if (l.kind == rcuda::Launch::CudnnConv)
      calls.push_back(&l.conv);
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(ws, 7168u); // ConvGrad's 7000 (the larger of its two), 256-aligned
  size_t sizes[] = {3000, 4000, 3000, 7000};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(calls[i]->workspaceBytes, sizes[i]) << i;
    EXPECT_EQ(calls[i]->algo, static_cast<int>(calls[i]->dir) + 1) << i;
  }
  // Each step's scratch starts at the workspace; the ConvGrad's calls share it.
  EXPECT_EQ(calls[2]->workspace, calls[3]->workspace);
  EXPECT_EQ(calls[0]->workspace, calls[2]->workspace);
  // A planner that declines leaves every convolution to im2col.
  ls = lowerWith(*p, [](rcuda::CudnnConvCall &) { return false; }, ws);
  for (const rcuda::Launch &l : ls)
    EXPECT_NE(l.kind, rcuda::Launch::CudnnConv);
}

//===----------------------------------------------------------------------===//
// Training steps of the fixtures
//===----------------------------------------------------------------------===//

struct StepCase {
  const char *fixture;
  const char *precision; // fp32, fp16, bf16
  const char *optimizer;
  int accumulate;
  bool dataParallel = false; // ampc.AllReduce buckets (one rank: copies)
};

bool compilePlan(const StepCase &c, plan::Plan &out) {
  return test::compileTrainingPlan(c.fixture, c.precision, c.optimizer, out, c.accumulate,
                                   c.dataParallel);
}

/// Largest tolerated |x - cpu| / max|cpu| per tensor after three steps: the
/// backends round the same values in the same places, but sum in other
/// orders (GEMMs, reductions), and low-precision steps amplify a one-ulp
/// difference of a stored activation into their gradients.
double stepTolerance(const std::string &precision) {
  return precision == "fp32" ? 1e-4 : precision == "fp16" ? 2e-2 : 5e-2; // bf16, bf16conv
}

/// How far apart, relative to the larger of the two values, a small gradient
/// element must be to count as noise: 1%, but at least 8 ulps of the step's
/// low-precision type. Gradients that do not cancel agree to about 1e-6 in
/// fp32 and to an ulp or two in fp16 and bf16, so 1% is 10^4 fp32 ulps and 10
/// fp16 ulps (2^-10); but it is about one bf16 ulp (2^-7), which a bf16
/// element whose terms cancel to an eighth of their size already differs by
/// after one rounding of its inputs (2^-9). Hence 8 * 2^-7 = 6.25% for bf16.
double noiseApart(const std::string &precision) {
  return precision == "fp32" || precision == "fp16" ? 1e-2 : 8 * std::ldexp(1.0, -7);
}

/// Gradient elements that are rounding noise: small (below 1% of the step's
/// largest gradient L), apart between the backends (noiseApart) by no more
/// than the step's tolerance at the scale of L (a difference of rounding
/// size), or no larger than the largest difference among their gradient's
/// noise elements (they cannot be told from that noise: a key-bias element on
/// which the backends happen to agree). They are where a gradient vanishes
/// analytically and sums of rounded terms cancel: a convolution bias before
/// BatchNormalization, the key bias of attention. Relative to their own
/// largest element such gradients are all noise; AdamW moreover normalises
/// noise into +-lr steps whose signs no two implementations share
/// (test/unit/TrainingStepTest.cpp leaves these elements out against torch
/// for the same reason). So the comparisons leave these elements out of the
/// gradient, the parameter and every state derived from it (its moments, its
/// fp16 / bf16 copy: "<param>.<suffix>"), the whole tensor when all of the
/// gradient is below 0.1% of L, and skip the running statistics that the
/// resulting activations move.
struct NoiseMasks {
  /// Per parameter (its ONNX name): the union over the steps.
  std::map<std::string, std::vector<bool>> byParam;
  /// Gradient elements masked, and compared.
  int masked = 0;
  int64_t total = 0;

  /// The mask of tensor `name` -- "output <p>_grad", "state <p>" or a state
  /// derived from <p>, "state <p>.<suffix>" (the longest such <p>) -- with
  /// `n` elements, and its parameter; nullptr if none.
  const std::vector<bool> *of(const std::string &name, int64_t n, std::string &param) const {
    const std::vector<bool> *found = nullptr;
    for (const auto &[p, m] : byParam) {
      bool match = name == "output " + p + "_grad" || name == "state " + p ||
                   name.rfind("state " + p + ".", 0) == 0;
      if (match && static_cast<int64_t>(m.size()) == n && p.size() >= param.size()) {
        found = &m;
        param = p;
      }
    }
    return found;
  }
};

/// Noise elements of one step's gradients (`cpu` and `other`: that step's
/// outputs), added to `masks`.
void addNoiseMasks(const plan::Plan &p, const std::map<std::string, rt::HostArray> &cpu,
                   std::map<std::string, rt::HostArray> &other, const std::string &precision,
                   NoiseMasks &masks, std::map<std::string, int64_t> &seen) {
  double largest = 0;
  for (const plan::Parameter &par : p.parameters()) {
    auto it = cpu.find("output " + par.onnx_name() + "_grad");
    if (it != cpu.end())
      for (int64_t i = 0; i < it->second.numElements(); ++i)
        largest = std::max(largest, std::fabs(it->second.at(i)));
  }
  double apart = noiseApart(precision), tol = stepTolerance(precision);
  for (const plan::Parameter &par : p.parameters()) {
    std::string key = "output " + par.onnx_name() + "_grad";
    auto it = cpu.find(key);
    if (it == cpu.end() || other[key].numElements() != it->second.numElements())
      continue;
    const rt::HostArray &a = it->second, &b = other[key];
    seen[par.onnx_name()] = a.numElements();
    std::vector<bool> m(a.numElements());
    bool any = false;
    double tensorMax = 0, noiseDiff = 0;
    for (int64_t i = 0; i < a.numElements(); ++i) {
      double x = a.at(i), y = b.at(i), big = std::max(std::fabs(x), std::fabs(y));
      double diff = std::fabs(x - y);
      m[i] = big < 1e-2 * largest && diff > apart * big && diff <= tol * largest;
      if (m[i])
        noiseDiff = std::max(noiseDiff, diff);
      any |= m[i];
      tensorMax = std::max(tensorMax, big);
    }
    if (!any)
      continue;
    // As small as the noise: it cannot be told from it.
    for (int64_t i = 0; i < a.numElements(); ++i)
      if (std::max(std::fabs(a.at(i)), std::fabs(b.at(i))) <= noiseDiff)
        m[i] = true;
    // A gradient that is all noise: its noise of earlier steps moved every
    // element of the parameter, so it is left out whole.
    if (tensorMax < 1e-3 * largest)
      m.assign(m.size(), true);
    std::vector<bool> &dst = masks.byParam[par.onnx_name()];
    dst.resize(m.size());
    for (size_t i = 0; i < m.size(); ++i)
      dst[i] = dst[i] || m[i];
  }
}

/// The noise masks of every step: an element that was noise in an earlier
/// step moved its parameter by noise (AdamW: +-lr) even when the last step's
/// gradients happen to agree.
NoiseMasks noiseMasks(const plan::Plan &p,
                      const std::vector<std::map<std::string, rt::HostArray>> &cpu,
                      std::vector<std::map<std::string, rt::HostArray>> &other,
                      const std::string &precision) {
  NoiseMasks masks;
  std::map<std::string, int64_t> seen;
  for (size_t s = 0; s < cpu.size() && s < other.size(); ++s)
    addNoiseMasks(p, cpu[s], other[s], precision, masks, seen);
  for (const auto &[param, n] : seen) {
    masks.total += n;
    auto m = masks.byParam.find(param);
    if (m != masks.byParam.end())
      masks.masked += static_cast<int>(std::count(m->second.begin(), m->second.end(), true));
  }
  return masks;
}

/// Every STATE tensor and every output of the last run, after `steps` steps.
struct StepResult {
  std::map<std::string, rt::HostArray> values;
  /// The outputs of each step (gradients among them), for noiseMasks.
  std::vector<std::map<std::string, rt::HostArray>> stepOutputs;
};

bool readOutputs(rt::Session &session, const plan::Plan &p, std::initializer_list<int> programs,
                 std::map<std::string, rt::HostArray> &out) {
  std::string error;
  for (int prog : programs) {
    if (prog < 0)
      continue;
    for (const plan::Binding &b : p.programs(prog).outputs())
      if (!session.output(prog, b.name(), out["output " + b.name()], error)) {
        ADD_FAILURE() << error;
        return false;
      }
  }
  return true;
}

bool train(const plan::Plan &p, const BackendFactory &make, const std::string &fixture, int steps,
           StepResult &r) {
  std::string error;
  auto session = rt::Session::fromPlan(p, make(), error);
  if (!session) {
    ADD_FAILURE() << "load: " << error;
    return false;
  }
  int step = session->program("step"), acc = session->program("accumulate"),
      apply = session->program("apply");
  int feedProg = step >= 0 ? step : acc;
  auto batch = test::loadFixtureInputs(fixture);
  for (const auto &[name, t] : batch)
    if (!session->feed(feedProg, name, toHostArray(t), "fixture", error)) {
      ADD_FAILURE() << error;
      return false;
    }
  for (int s = 0; s < steps; ++s) {
    bool ok = step >= 0 ? session->run(step, error)
                        : session->run(acc, error) && session->run(acc, error) &&
                              session->run(apply, error);
    if (!ok) {
      ADD_FAILURE() << "run: " << error;
      return false;
    }
    r.stepOutputs.emplace_back();
    if (!readOutputs(*session, p, {step, acc, apply}, r.stepOutputs.back()))
      return false;
  }
  for (int i = 0; i < p.tensors_size(); ++i) {
    const plan::Tensor &t = p.tensors(i);
    if (t.storage() != plan::STATE || t.has_view_of())
      continue;
    if (!session->readTensor(i, r.values["state " + t.name()], error)) {
      ADD_FAILURE() << error;
      return false;
    }
  }
  // The last step's outputs, already read.
  if (!r.stepOutputs.empty())
    r.values.insert(r.stepOutputs.back().begin(), r.stepOutputs.back().end());
  return true;
}

/// `only`: the cases of that fixture alone.
void compareTraining(const BackendFactory &make, const char *what, const char *only = nullptr) {
  const StepCase cases[] = {{"mlp", "fp32", "adamw", 1},        {"mlp", "fp16", "adamw", 1},
                            {"mlp", "bf16", "sgd", 1},          {"mlp", "fp16", "sgd", 2},
                            {"cnn", "fp32", "adamw", 1},        {"cnn", "fp16", "adamw", 1},
                            {"cnn", "bf16", "adamw", 1},        {"transformer", "fp32", "adamw", 1},
                            {"transformer", "fp16", "adamw", 1}, {"transformer", "bf16", "adamw", 1},
                            {"gpt", "fp32", "adamw", 1},        {"gpt", "fp16", "adamw", 1},
                            {"decoder", "fp32", "adamw", 1},    {"decoder", "fp16", "sgd", 1},
                            {"cnn", "bf16conv", "adamw", 1},    {"decoder", "bf16conv", "sgd", 1},
                            {"mlp", "fp16", "adamw", 1, true},  {"transformer", "bf16", "adamw", 2, true}};
  for (const StepCase &c : cases) {
    if (only && std::string(c.fixture) != only)
      continue;
    SCOPED_TRACE(std::string(what) + ": " + c.fixture + " " + c.precision + " " + c.optimizer +
                 (c.accumulate > 1 ? " accumulate" : "") + (c.dataParallel ? " data-parallel" : ""));
    plan::Plan p;
    if (!compilePlan(c, p))
      continue;
    StepResult cpu, other;
    if (!train(p, cpuBackend, c.fixture, 3, cpu) || !train(p, make, c.fixture, 3, other))
      continue;
    double tol = stepTolerance(c.precision), worst = 0;
    std::string worstName;
    NoiseMasks masks = noiseMasks(p, cpu.stepOutputs, other.stepOutputs, c.precision);
    // Per parameter: the masked elements that differ beyond the tolerance in
    // the gradient, the parameter or a state derived from it -- what the
    // masks hide (masked elements within the tolerance hide nothing).
    std::map<std::string, std::vector<bool>> hidden;
    for (const auto &[name, ref] : cpu.values) {
      if (!masks.byParam.empty() && name.find("running_") != std::string::npos)
        continue;
      bool within;
      std::string where, param;
      rt::HostArray a = other.values[name], b = ref;
      const std::vector<bool> *m =
          a.numElements() == b.numElements() ? masks.of(name, b.numElements(), param) : nullptr;
      if (m) {
        double maxRef = 0; // compareArrays' reference: the largest element compared
        for (int64_t i = 0; i < b.numElements(); ++i)
          if (!(*m)[i] && std::isfinite(b.at(i)))
            maxRef = std::max(maxRef, std::fabs(b.at(i)));
        std::vector<bool> &h = hidden[param];
        h.resize(m->size());
        for (int64_t i = 0; i < b.numElements(); ++i) {
          if (!(*m)[i])
            continue;
          double x = a.at(i), y = b.at(i);
          if (!(std::fabs(x - y) <= tol * maxRef)) // NaN, inf included
            h[i] = true;
          for (rt::HostArray *arr : {&a, &b}) // compare masked elements as equal zeros
            std::memset(arr->bytes.data() + i * (arr->bytes.size() / arr->numElements()), 0,
                        arr->bytes.size() / arr->numElements());
        }
      }
      double e = compareArrays(a, b, 0, tol, within, where);
      EXPECT_TRUE(within) << name << ": " << where << " (largest error " << e << ")";
      if (e > worst) {
        worst = e;
        worstName = name;
      }
    }
    auto found = cpu.values.find("output found_inf");
    if (found != cpu.values.end()) {
      EXPECT_EQ(found->second.at(0), 0.0) << "the last step overflowed: nothing was updated";
    }
    int beyond = 0;
    for (const auto &[param, h] : hidden)
      beyond += static_cast<int>(std::count(h.begin(), h.end(), true));
    // A few are expected (the gradients that vanish analytically); many would
    // hide real differences.
    EXPECT_LE(beyond, masks.total / 20)
        << "too many noise gradient elements that differ beyond the tolerance";
    std::printf("  %s %-11s %-4s %-5s%s: %zu tensors, largest error %.2e (%s), %d noise "
                "gradient elements masked, %d of them beyond the tolerance\n",
                what, c.fixture, c.precision, c.optimizer, c.accumulate > 1 ? " acc" : "    ",
                cpu.values.size(), worst, worstName.c_str(), masks.masked, beyond);
  }
}

TEST(CudaEmulation, FixtureTrainingStepsMatchTheCpu) {
  compareTraining(emulatorBackend, "emulated");
}

/// Every op of the fixtures' training plans has a CUDA lowering; prints how
/// many launches a step takes on CUDA next to the plan's count (one per step).
TEST(CudaEmulation, LowersEveryFixturePlan) {
  std::printf("  %-11s %-4s %6s %9s %7s %6s %6s\n", "fixture", "prec", "steps", "launches",
              "kernels", "gemms", "copies");
  for (const char *f : {"mlp", "cnn", "transformer", "gpt", "decoder"})
    for (const char *prec : {"fp32", "fp16", "bf16"}) {
      plan::Plan p;
      ASSERT_TRUE(compilePlan({f, prec, "adamw", 1}, p));
      std::string error;
      auto b = rcuda::createCudaEmulatorBackend();
      EXPECT_TRUE(b->load(p, error)) << f << " " << prec << ": " << error;
      // The launch list against placeholder addresses.
      static uint8_t fake[64];
      rcuda::DeviceMemory mem{[](int) { return static_cast<void *>(fake); }, fake};
      std::vector<rcuda::Launch> launches;
      size_t ws = 0;
      ASSERT_TRUE(rcuda::lowerProgram(p, 0, mem, launches, ws, error)) << error;
      int kinds[8] = {};
      for (const rcuda::Launch &l : launches)
        ++kinds[l.kind];
      std::printf("  %-11s %-4s %6d %9zu %7d %6d %6d\n", f, prec, p.programs(0).steps_size(),
                  launches.size(), kinds[rcuda::Launch::Kernel], kinds[rcuda::Launch::Gemm],
                  kinds[rcuda::Launch::Memset] + kinds[rcuda::Launch::Memcpy]);
    }
}

/// With a cuDNN planner every Conv of the cnn fixture's training step is one
/// forward call (after the bias copy) and every ampc.ConvGrad one call per
/// dX / dW it produces, with no im2col, col2im or GEMM left in those steps;
/// without one, the same steps are im2col + GEMMs and no cuDNN call.
TEST(CudaEmulation, CnnConvolutionsLowerToCudnnRecords) {
  for (const char *prec : {"fp32", "fp16", "bf16", "bf16conv"}) {
    SCOPED_TRACE(prec);
    plan::Plan p;
    ASSERT_TRUE(compilePlan({"cnn", prec, "adamw", 1}, p));
    const plan::Program &prog = p.programs(0);
    auto planner = [](rcuda::CudnnConvCall &c) {
      c.algo = 0;
      return true;
    };
    size_t ws = 0;
    std::vector<rcuda::Launch> with = lowerWith(p, planner, ws), without = lowerWith(p, {}, ws);
    int convs = 0, grads = 0;
    for (int s = 0; s < prog.steps_size(); ++s) {
      const plan::Step &st = prog.steps(s);
      bool conv = st.op() == "Conv", grad = st.op() == "ampc.ConvGrad";
      if (!conv && !grad)
        continue;
      convs += conv;
      grads += grad;
      std::vector<rcuda::CudnnConvCall::Direction> dirs;
      int im2col = 0, gemms = 0;
      for (const rcuda::Launch &l : with) {
        if (l.step != s)
          continue;
        if (l.kind == rcuda::Launch::CudnnConv)
          dirs.push_back(l.conv.dir);
        gemms += l.kind == rcuda::Launch::Gemm;
        im2col += l.kind == rcuda::Launch::Kernel && l.kernel == rcuda::KernelKind::Conv;
      }
      EXPECT_EQ(im2col + gemms, 0) << st.name();
      if (conv) {
        ASSERT_EQ(dirs.size(), 1u) << st.name();
        EXPECT_EQ(dirs[0], rcuda::CudnnConvCall::Forward);
      } else {
        size_t want = (st.outputs_size() > 0 && st.outputs(0) >= 0) +
                      (st.outputs_size() > 1 && st.outputs(1) >= 0);
        EXPECT_EQ(dirs.size(), want) << st.name();
        EXPECT_GE(dirs.size(), 1u) << st.name();
      }
      int cudnn = 0, without2col = 0;
      for (const rcuda::Launch &l : without) {
        if (l.step != s)
          continue;
        cudnn += l.kind == rcuda::Launch::CudnnConv;
        without2col += l.kind == rcuda::Launch::Gemm;
      }
      EXPECT_EQ(cudnn, 0) << st.name();
      EXPECT_GE(without2col, 1) << st.name();
    }
    EXPECT_GE(convs, 1);
    EXPECT_GE(grads, 1);
  }
}

/// The fixtures' training steps above run their convolutions through the
/// emulated cuDNN records; the cnn ones again through im2col.
TEST(CudaEmulation, CnnStepsThroughIm2colMatchTheCpu) {
  compareTraining(im2colEmulatorBackend, "emulated im2col", "cnn");
}

/// A data-parallel plan's buckets start right after their last gradient and
/// are waited for only just before the first step that reads an average, so
/// other steps' launches run in between (the overlap), and no reader runs
/// before its wait.
TEST(CudaEmulation, AllReduceWaitsWhereTheAveragesAreRead) {
  plan::Plan p;
  ASSERT_TRUE(compilePlan({"transformer", "fp32", "adamw", 1, true}, p));
  static uint8_t fake[64];
  rcuda::DeviceMemory mem{[](int) { return static_cast<void *>(fake); }, fake};
  std::vector<rcuda::Launch> ls;
  size_t ws = 0;
  std::string error;
  ASSERT_TRUE(rcuda::lowerProgram(p, 0, mem, ls, ws, error)) << error;
  const plan::Program &prog = p.programs(0);
  int buckets = 0, overlapped = 0;
  for (size_t i = 0; i < ls.size(); ++i) {
    if (ls[i].kind != rcuda::Launch::AllReduce)
      continue;
    ++buckets;
    size_t wait = i + 1;
    while (wait < ls.size() && !(ls[wait].kind == rcuda::Launch::AllReduceWait &&
                                 ls[wait].bucket == ls[i].bucket))
      ++wait;
    ASSERT_LT(wait, ls.size()) << "bucket " << ls[i].bucket << " is never waited for";
    bool other = false;
    for (size_t k = i + 1; k < wait; ++k)
      other = other || ls[k].step != ls[i].step;
    overlapped += other;
    // No launch before the wait belongs to a step reading the bucket's averages.
    const plan::Step &ar = prog.steps(ls[i].step);
    for (size_t k = i + 1; k < wait; ++k) {
      if (ls[k].step < 0)
        continue;
      for (int in : prog.steps(ls[k].step).inputs())
        for (int out : ar.outputs())
          EXPECT_NE(in, out) << "step " << ls[k].step << " reads an average before its wait";
    }
  }
  EXPECT_GT(buckets, 2);
  EXPECT_GT(overlapped, 0) << "no bucket travels while other steps run";
}

//===----------------------------------------------------------------------===//
// On a GPU
//===----------------------------------------------------------------------===//

TEST(CudaDevice, FixtureTrainingStepsMatchTheCpu) {
  std::string why;
  if (!rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  compareTraining(
      [] {
        std::string error;
        auto b = rt::createCudaBackend({}, error);
        EXPECT_TRUE(b) << error;
        return b;
      },
      "cuda");
}

TEST(CudaDevice, GraphsOffMatchesGraphsOn) {
  std::string why;
  if (!rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  plan::Plan p;
  ASSERT_TRUE(compilePlan({"cnn", "fp16", "adamw", 1}, p));
  StepResult on, off;
  rt::CudaOptions noGraph;
  noGraph.cudaGraph = false;
  std::string error;
  ASSERT_TRUE(train(p, [&] { return rt::createCudaBackend({}, error); }, "cnn", 4, on));
  ASSERT_TRUE(train(p, [&] { return rt::createCudaBackend(noGraph, error); }, "cnn", 4, off));
  for (const auto &[name, a] : on.values)
    EXPECT_EQ(a.bytes, off.values[name].bytes) << name << " differs with and without a CUDA graph";
}

/// cuDNN's convolutions (forward, backward data and filter) on the GPU
/// against the CPU, and the cnn steps with cuDNN turned off (im2col).
TEST(CudaDevice, CudnnConvolutionsMatchTheCpu) {
  std::string why;
  if (!rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  std::string notLoaded;
  if (!rcuda::loadCudnn(notLoaded))
    ADD_FAILURE() << "cuDNN did not load, so this compares im2col: " << notLoaded;
  compareConvolutions([] {
    std::string error;
    auto b = rt::createCudaBackend({}, error);
    EXPECT_TRUE(b) << error;
    return b;
  });
  rt::CudaOptions noCudnn;
  noCudnn.cudnn = false;
  compareTraining(
      [&] {
        std::string error;
        auto b = rt::createCudaBackend(noCudnn, error);
        EXPECT_TRUE(b) << error;
        return b;
      },
      "cuda im2col", "cnn");
}

std::unique_ptr<rt::Backend> deviceBackend() {
  std::string error;
  auto b = rt::createCudaBackend({}, error);
  EXPECT_TRUE(b) << error;
  return b;
}

/// The device's fp16 conversions (hardware instructions) are the CPU's.
TEST(CudaDevice, StorageConversionsAreTheCpus) {
  std::string why;
  if (!rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  compareStorageConversions(deviceBackend);
}

TEST(CudaDevice, AllFiniteOverManyInputs) {
  std::string why;
  if (!rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  compareAllFinite(deviceBackend);
}

TEST(CudaDevice, MemoryLimitRefusesThePlan) {
  std::string why;
  if (!rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  plan::Plan p;
  ASSERT_TRUE(compilePlan({"mlp", "fp32", "adamw", 1}, p));
  rt::CudaOptions opts;
  opts.memoryLimit = 1024;
  std::string error;
  auto session = rt::Session::fromPlan(p, rt::createCudaBackend(opts, error), error);
  EXPECT_FALSE(session);
  EXPECT_NE(error.find("more than the 1024 bytes available under --memory-limit"), std::string::npos)
      << error;
}

/// Without a GPU the backend is refused with the reason (the message amp-run
/// prints); with one it is created.
TEST(CudaDevice, AvailabilityAndRefusal) {
  std::string why, error;
  bool available = rt::cudaAvailable(why);
  auto b = rt::createCudaBackend({}, error);
  if (available) {
    EXPECT_TRUE(b) << error;
  } else {
    EXPECT_FALSE(b);
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(error.rfind("no CUDA device available (", 0), 0u) << error;
  }
}

} // namespace
