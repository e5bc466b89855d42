//===- FusedKernel.cpp - Fused elementwise steps on the CPU ----------------===//
//
// Parses an "ampc.Fused" step once and creates the kernel of the best ISA the
// CPU has (FusedKernelImpl.inc, compiled for baseline x86-64 and AVX-512).
// AMPC_CPU_ISA=baseline forces the portable variant (tests compare both).
//
//===----------------------------------------------------------------------===//

#include "FusedKernel.h"

#include "KernelHelpers.h"
#include "ampc/rt/FusedDecode.h"

#include <cmath>

namespace ampc::rt::cpu {

namespace {

/// Broadcast map of an input of shape `in` to the output shape.
bool mapInput(const std::vector<int64_t> &in, const std::vector<int64_t> &out, InputMap &m) {
  int64_t n = 1;
  for (int64_t d : in)
    n *= d;
  if (in == out) {
    m.kind = InputMap::Contiguous;
    return true;
  }
  if (n == 1) {
    m.kind = InputMap::Scalar;
    return true;
  }
  if (in.size() > out.size())
    return false;
  m.kind = InputMap::Strided;
  m.strides.assign(out.size(), 0);
  size_t offset = out.size() - in.size();
  int64_t stride = 1;
  for (size_t d = in.size(); d-- > 0;) {
    if (in[d] != 1 && in[d] != out[d + offset])
      return false;
    m.strides[d + offset] = in[d] == 1 ? 0 : stride;
    stride *= in[d];
  }
  return true;
}

std::unique_ptr<Kernel> createFused(const StepContext &ctx, std::string &error) {
  const plan::FusedProgram &fp = ctx.step.fused();
  if (ctx.outputs.empty() || fp.results_size() != static_cast<int>(ctx.outputs.size()) ||
      fp.num_inputs() != static_cast<int>(ctx.inputs.size())) {
    error = "malformed fused program";
    return nullptr;
  }
  const std::vector<int64_t> &shape = ctx.outputs.front().shape;
  for (const TensorArg &o : ctx.outputs)
    if (o.shape != shape) {
      error = "fused outputs differ in shape";
      return nullptr;
    }
  bool wide = false;
  std::vector<InputMap> maps(ctx.inputs.size());
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!ctx.inputs[i].data || !mapInput(ctx.inputs[i].shape, shape, maps[i])) {
      error = "input " + std::to_string(i) + " does not broadcast to the result";
      return nullptr;
    }
    wide = wide || ctx.inputs[i].type == plan::F64;
  }
  std::vector<Instr> instrs;
  int regs = fp.num_inputs();
  for (const plan::Instruction &pi : fp.instructions()) {
    DecodedInstruction d;
    if (!decodeFusedInstruction(pi, regs, d, error))
      return nullptr;
    Instr in;
    in.op = d.op;
    in.a = d.args[0];
    in.b = d.args[1];
    in.c = d.args[2];
    in.type = pi.type();
    in.params = d.params;
    wide = wide || in.type == plan::F64;
    instrs.push_back(in);
    ++regs;
  }
  std::vector<int> results(fp.results().begin(), fp.results().end());
  for (int r : results)
    if (r < 0 || r >= regs) {
      error = "fused result names an undefined register";
      return nullptr;
    }
  if (static_cast<size_t>(regs) > 512) {
    error = "fused program with " + std::to_string(regs) + " registers (at most 512)";
    return nullptr;
  }
  FusedSpec spec{ctx.inputs, ctx.outputs, maps, instrs, results, wide};
  ColumnSumRequest sums;
  ColumnSumRequest *offer = nullptr;
  if (ctx.columnSumTaken) {
    sums.result = ctx.columnSumOf;
    sums.sums = ctx.columnSums;
    sums.sumsOnly = ctx.columnSumsOnly;
    offer = &sums;
  }
  std::unique_ptr<Kernel> k = useAvx512() ? makeFusedKernelAvx512(spec, ctx.pool, offer)
                                          : makeFusedKernelBaseline(spec, ctx.pool, offer);
  if (k && offer)
    *ctx.columnSumTaken = sums.taken;
  return k;
}

} // namespace

void registerFusedKernels() { registerKernel("ampc.Fused", createFused); }

void expShifted(const float *x, float shift, float *out, int64_t n) {
  static const bool avx512 = __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma");
  if (avx512 && expShiftedAvx512(x, shift, out, n))
    return;
  for (int64_t i = 0; i < n; ++i)
    out[i] = std::exp(x[i] - shift);
}

} // namespace ampc::rt::cpu
