//===- fused_update.cpp - The CPU fused kernel on an AdamW update ----------===//
//
// Times the fused elementwise kernel (runtime/cpu/FusedKernelImpl.inc) on the
// program the optimizer pass and the lowering make of one AdamW update (4
// tensor streams, 8 scalars, 14 instructions, 3 outputs written in place),
// with the caches flushed before each run as in a training step, and warm.
//
//   build/bin/ampc-bench-fused-update [THREADS] [ELEMENTS]
//
//===----------------------------------------------------------------------===//

#include "FusedKernel.h"
#include "ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace ampc::rt;
using namespace ampc::rt::cpu;

namespace {

TensorArg arg(void *data, int64_t n) {
  TensorArg t;
  t.data = data;
  t.type = ampc::plan::F32;
  t.shape = {n};
  t.numel = n;
  return t;
}

Instr instr(FusedOp op, int a, int b = 0) {
  Instr in;
  in.op = op;
  in.a = a;
  in.b = b;
  in.type = ampc::plan::F32;
  return in;
}

double medianMs(Kernel &k, bool flush, int runs) {
  static std::vector<float> junk(64 << 20, 1.0f); // 256 MB: more than any cache
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    if (flush)
      for (size_t i = 0; i < junk.size(); i += 16)
        junk[i] += 1;
    auto t0 = std::chrono::steady_clock::now();
    k.run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  int64_t n = argc > 2 ? std::atoll(argv[2]) : (1 << 20);
  std::vector<float> g(n, 0.5f), p(n, 1.0f), m(n, 0.2f), v(n, 0.3f);
  // beta1, 1-beta1, beta2, 1-beta2, eps, lr/bias-correction, 1-lr*wd, sqrt(bias-correction2)
  float scalars[8] = {0.9f, 0.1f, 0.999f, 0.001f, 1e-8f, 0.01f, 0.9999f, 0.5f};
  FusedSpec s;
  s.inputs = {arg(g.data(), n), arg(p.data(), n), arg(m.data(), n), arg(v.data(), n)};
  for (float &x : scalars)
    s.inputs.push_back(arg(&x, 1));
  s.maps.resize(s.inputs.size());
  for (size_t i = 4; i < s.maps.size(); ++i)
    s.maps[i].kind = InputMap::Scalar;
  // Registers 0-3: g, p, m, v; 4-11: the scalars; 12 on: the instructions.
  s.instrs = {instr(FusedOp::Mul, 1, 10),  instr(FusedOp::Mul, 2, 4),   instr(FusedOp::Mul, 0, 5),
              instr(FusedOp::Add, 13, 14), instr(FusedOp::Mul, 3, 6),   instr(FusedOp::Mul, 0, 0),
              instr(FusedOp::Mul, 17, 7),  instr(FusedOp::Add, 16, 18), instr(FusedOp::Sqrt, 19),
              instr(FusedOp::Div, 20, 11), instr(FusedOp::Add, 21, 8),  instr(FusedOp::Div, 15, 22),
              instr(FusedOp::Mul, 23, 9),  instr(FusedOp::Sub, 12, 24)};
  s.outputs = {arg(m.data(), n), arg(v.data(), n), arg(p.data(), n)};
  s.results = {15, 19, 25};
  ThreadPool pool(threads);
  auto avx512 = makeFusedKernelAvx512(s, pool);
  auto baseline = makeFusedKernelBaseline(s, pool);
  for (auto &[name, kernel] : {std::pair{"avx512", avx512.get()}, std::pair{"baseline", baseline.get()}}) {
    double cold = medianMs(*kernel, true, 21), warm = medianMs(*kernel, false, 21);
    std::printf("%-8s %d threads, %lld elements: cold %.3f ms (%.3f ns/element), warm %.3f ms\n",
                name, threads, static_cast<long long>(n), cold, 1e6 * cold / n, warm);
  }
}
