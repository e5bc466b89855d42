//===- ColumnSumEpilogue.cpp - Fused steps summing their columns ----------===//

#include "ColumnSumEpilogue.h"

#include "NormEpilogue.h"

#include "ampc/rt/PlanFile.h"
#include "ampc/rt/PlanQueries.h"

namespace ampc::rt::cpu {

namespace {

/// `axes` (int64 or int32, negative ones counted from the end) are exactly
/// 0 .. rank - 2, each once.
bool leadingAxes(const TensorArg &axes, int64_t rank) {
  if (!axes.data || (axes.type != plan::I64 && axes.type != plan::I32) || axes.numel != rank - 1)
    return false;
  std::vector<char> seen(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < axes.numel; ++i) {
    int64_t a = loadInt(axes, i);
    if (a < 0)
      a += rank;
    if (a < 0 || a >= rank - 1 || seen[a]++)
      return false;
  }
  return true;
}

/// The output index of `fused` that ReduceSum step `sum` reduces over its
/// leading axes into column sums, or -1.
int summedResult(const plan::Plan &p, const plan::Step &fused, const plan::Step &sum,
                 const std::function<TensorArg(int)> &constant) {
  if (sum.op() != "ReduceSum" || sum.inputs_size() != 2 || sum.outputs_size() != 1 ||
      !planValidTensor(p, sum.inputs(0)) || !planValidTensor(p, sum.inputs(1)) ||
      !planValidTensor(p, sum.outputs(0)))
    return -1;
  int t = sum.inputs(0), r = sum.outputs(0);
  int result = -1;
  for (int o = 0; o < fused.outputs_size(); ++o)
    if (fused.outputs(o) == t)
      result = result < 0 ? o : -2; // written twice: not ours to judge
  if (result < 0)
    return -1;
  const plan::Tensor &tt = p.tensors(t), &rt = p.tensors(r);
  int64_t rank = tt.shape_size();
  if (tt.type() != plan::F32 || rt.type() != plan::F32 || rank < 2 || tt.has_view_of() ||
      planNumElements(tt) == 0 || planNumElements(rt) != tt.shape(rank - 1))
    return -1;
  if (p.tensors(sum.inputs(1)).storage() != plan::CONSTANT ||
      !leadingAxes(constant(sum.inputs(1)), rank))
    return -1;
  // The sums are written after the fused step's last read of its operands,
  // but while its results still matter.
  for (int out : fused.outputs())
    if (out >= 0 && planTensorsMayOverlap(p, out, r))
      return -1;
  return result;
}

} // namespace

std::vector<ColumnSumEpilogue> columnSumEpilogues(const plan::Plan &p, const plan::Program &prog,
                                                  const std::function<TensorArg(int)> &constant) {
  std::vector<ColumnSumEpilogue> out(prog.steps_size());
  if (cpuEpiloguesOff())
    return out;
  for (int s = 0; s + 1 < prog.steps_size(); ++s) {
    const plan::Step &fused = prog.steps(s), &sum = prog.steps(s + 1);
    if (fused.op() != "ampc.Fused")
      continue;
    int result = summedResult(p, fused, sum, constant);
    if (result < 0)
      continue;
    int t = fused.outputs(result);
    out[s].result = result;
    out[s].sums = sum.outputs(0);
    out[s].sumsOnly = planTensorUses(p, t, -1) == 1 && p.tensors(t).storage() == plan::ARENA;
  }
  return out;
}

} // namespace ampc::rt::cpu
