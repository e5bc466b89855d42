//===- gemm_ceiling.cpp - What a plan's GEMMs and convolutions cost at best ===//
//
// Issue #12 asks how close a training step comes to what oneDNN can do on
// the machine. For the `step` program of a plan this prints, as one JSON
// object:
//   - the floating-point operations of its GEMMs (MatMul, Gemm) and
//     convolutions (Conv, and ampc.ConvGrad's dX and dW), per step;
//   - the GEMM ceiling: every MatMul / Gemm step of the plan timed alone
//     through a oneDNN matmul of the same shape, transposes and element
//     type, warm (best of several runs), summed over the steps;
//   - the machine's peak: the best of 1024^3 and 2048^3 oneDNN GEMMs in fp32
//     and in bf16, in GFLOP/s, so that FLOPs / peak bounds a step from below;
//   - the speed of light, independent of any library: the fp32 FLOP/s of
//     FMA instructions with no memory operand on every thread, which no fp32
//     GEMM can beat (a large oneDNN GEMM reaches about three quarters of it
//     here), and the bytes the AdamW steps read and write, the optimizer's
//     traffic through memory, and the least time those bytes take: one
//     pass that reads and rewrites them with no arithmetic (the optimizer
//     floor), warm and with the caches flushed before it.
// bf16 steps are timed the way the CPU backend runs them: natively, or on
// fp32 copies where the CPU has no faster bf16 path (nativeBf16Compute).
//
//   build/bin/ampc-bench-gemm-ceiling PLAN [THREADS] [--verbose] [--cold]
//
// --verbose prints each GEMM step's shape and time on stderr, to compare with
// the step's own time in `AMPC_CPU_PROFILE=1 amp-run`. --cold also times each
// GEMM after writing 1 GiB (caches, TLB and oneDNN's code evicted), median of
// 5, and prints the sum on stderr: a step's GEMMs, whose operands come from
// other kernels, land between the two sums.
//
//===----------------------------------------------------------------------===//

#include "DnnlHelpers.h"

#include "ampc/rt/MatMulShape.h"
#include "ampc/rt/PlanFile.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <immintrin.h>
#include <string>
#include <vector>

using namespace ampc;
using dnnl::memory;

namespace {

dnnl::engine &engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

memory::data_type computeType(plan::ElemType t) { return rt::cpu::dnnlComputeType(t); }

/// One GEMM problem: [batch] x (M x K) x (K x N), A and B possibly
/// transposed (read through strides, as the CPU backend does).
struct Gemm {
  int64_t batch = 1, M = 0, K = 0, N = 0;
  bool ta = false, tb = false;
  memory::data_type type = memory::data_type::f32;
  double flops() const { return 2.0 * batch * M * K * N; }
};

memory::desc operand(int64_t batch, int64_t rows, int64_t cols, bool transposed,
                     memory::data_type t) {
  memory::dims strides = transposed ? memory::dims{rows * cols, 1, rows}
                                    : memory::dims{rows * cols, cols, 1};
  return memory::desc({batch, rows, cols}, t, strides);
}

/// Evicts the caches: writes a buffer larger than the last level.
void flushCaches() {
  static std::vector<uint8_t> junk(1u << 30, 1);
  for (size_t i = 0; i < junk.size(); i += 64)
    junk[i] += 1;
}

/// Best of `runs` executions of the GEMM, warm, in seconds; with `cold`, the
/// median of runs after the caches were flushed.
double timeGemm(const Gemm &g, int runs, bool cold = false) {
  memory::desc a = operand(g.batch, g.M, g.K, g.ta, g.type);
  memory::desc b = operand(g.batch, g.K, g.N, g.tb, g.type);
  memory::desc c({g.batch, g.M, g.N}, g.type, memory::dims{g.M * g.N, g.N, 1});
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine()); // oneDNN 2.x
  dnnl::matmul prim(pd);
  memory ma(a, engine()), mb(b, engine()), mc(c, engine());
  // Inputs of moderate values (zeros would be as fast; denormals slower).
  for (memory *m : {&ma, &mb}) {
    size_t bytes = m->get_desc().get_size();
    std::vector<uint8_t> fill(bytes, 0x3c);
    std::copy(fill.begin(), fill.end(), static_cast<uint8_t *>(m->get_data_handle()));
  }
  dnnl::stream s(engine());
  double best = 1e30;
  std::vector<double> times;
  for (int r = 0; r < runs + 1; ++r) {
    if (cold)
      flushCaches();
    auto t0 = std::chrono::steady_clock::now();
    prim.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    s.wait();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) { // the first run pays for first touches
      best = std::min(best, t);
      times.push_back(t);
    }
  }
  if (!cold)
    return best;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int64_t attrInt(const plan::Step &s, const std::string &name, int64_t fallback) {
  for (const plan::Attribute &a : s.attrs())
    if (a.name() == name)
      return a.i();
  return fallback;
}

std::vector<int64_t> shapeOf(const plan::Plan &p, int id) {
  const plan::Tensor &t = p.tensors(id);
  return {t.shape().begin(), t.shape().end()};
}

int64_t product(const std::vector<int64_t> &v, size_t from = 0) {
  int64_t n = 1;
  for (size_t i = from; i < v.size(); ++i)
    n *= v[i];
  return n;
}

/// The GEMM of a MatMul or Gemm step; false for shapes it does not cover.
bool gemmOf(const plan::Plan &p, const plan::Step &s, Gemm &g) {
  g.ta = attrInt(s, "transA", 0) != 0;
  g.tb = attrInt(s, "transB", 0) != 0;
  std::vector<int64_t> a = shapeOf(p, s.inputs(0)), b = shapeOf(p, s.inputs(1));
  if (a.size() < 2 || b.size() < 2)
    return false;
  if (g.ta)
    std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (g.tb)
    std::swap(b[b.size() - 1], b[b.size() - 2]);
  rt::MatMulShape ms;
  std::string error;
  if (!rt::matMulShape(a, b, product(shapeOf(p, s.outputs(0))), "A", "B", "Y", ms, error))
    return false;
  g.M = ms.M;
  g.K = ms.K;
  g.N = ms.N;
  g.batch = product(ms.batch);
  // A batched A against a shared B is one taller GEMM, as the backends run it.
  if (product(ms.batchB) == 1 && !g.ta) {
    g.M *= g.batch;
    g.batch = 1;
  }
  plan::ElemType storage = p.tensors(s.inputs(0)).type();
  g.type = computeType(storage);
  // The backend copies such an A plain before the GEMM (copyTransposedA): the
  // ceiling is the GEMM on the plain copy, the copy being the step's own cost.
  if (g.ta && g.batch == 1 && rt::cpu::copyTransposedA(storage, g.M * g.K * 2))
    g.ta = false;
  return true;
}

/// Multiply-adds of the forward convolution with output `y` and weights `w`.
double convMacs(const std::vector<int64_t> &y, const std::vector<int64_t> &w) {
  // y: [N, Cout, spatial...]; w: [Cout, Cin / groups, kernel...].
  return static_cast<double>(product(y)) * static_cast<double>(product(w, 1));
}

//===----------------------------------------------------------------------===//
// Speed of light: what the cores and the memory allow, with no library.
//===----------------------------------------------------------------------===//

/// 16 independent chains of AVX-512 FMAs (latency 4, two ports: 8 hide it),
/// `iters` rounds; returns a value that depends on all of them.
__attribute__((target("avx512f"))) float fmaChainsAvx512(int64_t iters) {
  __m512 acc[16];
  for (int k = 0; k < 16; ++k)
    acc[k] = _mm512_set1_ps(1.0f + k * 1e-3f);
  const __m512 mul = _mm512_set1_ps(0.9999999f), add = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 16; ++k)
      acc[k] = _mm512_fmadd_ps(acc[k], mul, add);
  __m512 sum = acc[0];
  for (int k = 1; k < 16; ++k)
    sum = _mm512_add_ps(sum, acc[k]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  return lanes[0] + lanes[15];
}

/// fp32 GFLOP/s of AVX-512 FMAs on every thread, best of 5 runs of about 30
/// ms; 0 on a CPU without AVX-512 (peer.py then leaves the column empty).
double fmaPeakGflops() {
  if (!__builtin_cpu_supports("avx512f"))
    return 0;
  const double flopsPerIter = 16 * 16 * 2;
  const int64_t iters = 10'000'000;
  double best = 0;
  float total = 0;
  for (int run = 0; run < 5; ++run) {
    int threads = 1;
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {
#pragma omp single
      threads = omp_get_num_threads();
      float r = fmaChainsAvx512(iters);
#pragma omp atomic
      total += r;
    }
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, threads * iters * flopsPerIter / t / 1e9);
  }
  volatile float sink = total; // the chains' results are used
  (void)sink;
  return best;
}

/// Bytes the AdamW steps of `prog` read (every tensor operand once) and
/// write (every result once: an update in place still writes its state).
void optimizerBytes(const plan::Plan &p, const plan::Program &prog, size_t &read, size_t &written) {
  read = written = 0;
  for (const plan::Step &s : prog.steps()) {
    if (s.op() != "ampc.AdamW")
      continue;
    for (int id : s.inputs())
      if (id >= 0)
        read += rt::planTensorBytes(p.tensors(id));
    for (int id : s.outputs())
      if (id >= 0)
        written += rt::planTensorBytes(p.tensors(id));
  }
}

/// The least time the AdamW steps' bytes take through memory, in seconds:
/// one pass on every thread over `read` bytes that writes `written` of them
/// back in place (an update's pattern: the parameter and both moments are
/// read and rewritten) and does no arithmetic, best of 7. No AdamW moves its
/// bytes faster, whatever its arithmetic, so that the optimizer alone bounds
/// a step from below: what issue #12's "share in oneDNN" and "within 1.3x of
/// the GEMM ceiling" leave room for. `warm` (the pass before leaves what fits
/// in the last-level cache) is a bound for any step; `cold` (the caches
/// flushed before each pass) is the price of state that comes from memory,
/// as state larger than the last-level cache does every step. Both passes
/// run over one buffer.
struct OptimizerFloor {
  double warm = 0, cold = 0;
};

OptimizerFloor optimizerFloor(size_t read, size_t written) {
  if (read == 0)
    return {};
  const int64_t lines = static_cast<int64_t>((read + 63) / 64);
  // The first `written` bytes are read and rewritten (the parameters and
  // moments), the rest only read (the gradients).
  const int64_t writtenLines = static_cast<int64_t>(std::min(written, read) / 64);
  auto *buf = static_cast<uint64_t *>(std::aligned_alloc(64, static_cast<size_t>(lines) * 64));
  if (!buf)
    return {};
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < lines * 8; ++j) // first touch by the thread that streams it
    buf[j] = static_cast<uint64_t>(j);
  uint64_t sink = 0, key = 0;
  auto best = [&](bool flush) {
    double fastest = 1e30;
    for (int run = 0; run < 8; ++run) {
      uint64_t acc = 0;
      ++key;
      if (flush)
        flushCaches();
      auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) reduction(^ : acc)
      for (int64_t j = 0; j < lines; ++j) {
        uint64_t *line = buf + j * 8;
        if (j < writtenLines) {
          for (int k = 0; k < 8; ++k)
            line[k] ^= key;
        } else {
          acc ^= line[0]; // one word loads the whole line
        }
      }
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      sink ^= acc;
      if (run > 0)
        fastest = std::min(fastest, t);
    }
    return fastest;
  };
  OptimizerFloor f;
  f.warm = best(false);
  f.cold = best(true);
  volatile uint64_t keep = sink ^ buf[0];
  (void)keep;
  std::free(buf);
  return f;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PLAN [THREADS] [--verbose] [--cold]\n", argv[0]);
    return 1;
  }
  omp_set_num_threads(argc > 2 ? std::atoi(argv[2]) : 2);
  bool verbose = false, cold = false;
  for (int i = 3; i < argc; ++i) {
    verbose = verbose || std::string(argv[i]) == "--verbose";
    cold = cold || std::string(argv[i]) == "--cold";
  }
  plan::Plan p;
  std::string error;
  if (!rt::readPlanFile(argv[1], p, error)) {
    std::fprintf(stderr, "ampc-bench-gemm-ceiling: error: %s\n", error.c_str());
    return 1;
  }
  const plan::Program *step = nullptr;
  for (const plan::Program &prog : p.programs())
    if (prog.name() == "step")
      step = &prog;
  if (!step) {
    std::fprintf(stderr, "ampc-bench-gemm-ceiling: error: %s: no program 'step'\n", argv[1]);
    return 1;
  }
  double gemmFlops = 0, convFlops = 0, ceiling = 0, coldCeiling = 0;
  int gemms = 0, convs = 0;
  for (const plan::Step &s : step->steps()) {
    if (s.op() == "MatMul" || s.op() == "Gemm") {
      Gemm g;
      if (!gemmOf(p, s, g)) {
        std::fprintf(stderr, "ampc-bench-gemm-ceiling: error: %s: step '%s': shape not covered\n",
                     argv[1], s.name().c_str());
        return 1;
      }
      gemmFlops += g.flops();
      double t = timeGemm(g, 5);
      ceiling += t;
      double tc = cold ? timeGemm(g, 5, true) : 0;
      coldCeiling += tc;
      if (verbose)
        std::fprintf(stderr, "%8.3f ms%s  %s [%lld] %lldx%lldx%lld%s%s %s\n", t * 1e3,
                     cold ? (" (cold " + std::to_string(tc * 1e3) + ")").c_str() : "",
                     s.op().c_str(), static_cast<long long>(g.batch),
                     static_cast<long long>(g.M), static_cast<long long>(g.K),
                     static_cast<long long>(g.N), g.ta ? " transA" : "", g.tb ? " transB" : "",
                     s.name().c_str());
      ++gemms;
    } else if (s.op() == "Conv") {
      convFlops += 2 * convMacs(shapeOf(p, s.outputs(0)), shapeOf(p, s.inputs(1)));
      ++convs;
    } else if (s.op() == "ampc.ConvGrad") {
      // inputs dY, X, W; outputs dX, dW (each as costly as the forward), dB.
      double macs = convMacs(shapeOf(p, s.inputs(0)), shapeOf(p, s.inputs(2)));
      for (int i = 0; i < std::min(2, s.outputs_size()); ++i)
        if (s.outputs(i) >= 0)
          convFlops += 2 * macs;
      ++convs;
    }
  }
  auto peak = [](memory::data_type type) {
    double best = 0;
    for (int64_t n : {1024, 2048}) {
      Gemm square;
      square.M = square.K = square.N = n;
      square.type = type;
      best = std::max(best, square.flops() / timeGemm(square, 3) / 1e9);
    }
    return best;
  };
  double peakF32 = peak(memory::data_type::f32);
  double peakBF16 = peak(memory::data_type::bf16);
  size_t optRead = 0, optWritten = 0;
  optimizerBytes(p, *step, optRead, optWritten);
  double fmaPeak = fmaPeakGflops();
  OptimizerFloor optFloor = optimizerFloor(optRead, optWritten);
  if (cold)
    std::fprintf(stderr, "GEMM ceiling, caches flushed before each run (median): %.3f ms\n",
                 coldCeiling * 1e3);
  std::printf("{\"gemm_steps\": %d, \"conv_steps\": %d, \"gemm_gflop\": %.4f, "
              "\"conv_gflop\": %.4f, \"gemm_ceiling_ms\": %.3f, \"peak_gflops_f32\": %.1f, "
              "\"peak_gflops_bf16\": %.1f, \"bf16_native\": %s, \"fma_peak_gflops_f32\": %.1f, "
              "\"optimizer_bytes\": %zu, \"optimizer_floor_ms\": %.3f, "
              "\"optimizer_floor_cold_ms\": %.3f}\n",
              gemms, convs, gemmFlops / 1e9, convFlops / 1e9, ceiling * 1e3, peakF32, peakBF16,
              rt::cpu::nativeBf16Compute() ? "true" : "false", fmaPeak, optRead + optWritten,
              optFloor.warm * 1e3, optFloor.cold * 1e3);
  return 0;
}
