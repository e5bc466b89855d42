//===- TrainingKernels.cpp - Kernels of ampc's training-step operators -----===//

#include "Kernels.h"

#include "ampc/rt/OptimizerMath.h"

namespace ampc::interp {

namespace {

KernelResult allFiniteKernel(const KernelContext &ctx) {
  bool finite = true;
  for (unsigned i = 0; i < ctx.numInputs() && finite; ++i) {
    const Tensor &t = *ctx.in(i);
    for (int64_t e = 0; e < t.size() && finite; ++e)
      finite = std::isfinite(t.getDouble(e));
  }
  Tensor y = ctx.out();
  y.setInt(0, finite);
  return std::vector<Tensor>{std::move(y)};
}

/// ampc.AllReduce in one process: the average over one rank is the value.
KernelResult allReduceKernel(const KernelContext &ctx) {
  std::vector<Tensor> outs;
  for (unsigned i = 0; i < ctx.numInputs(); ++i) {
    if (!ctx.in(i))
      return ctx.error("AllReduce has no omitted operands");
    outs.push_back(*ctx.in(i));
  }
  return outs;
}

/// ampc.AdamW with the runtime's per-element definition (OptimizerMath.h).
KernelResult adamwKernel(const KernelContext &ctx) {
  const Node &n = ctx.node;
  for (unsigned i = 0; i < 6; ++i)
    if (!ctx.in(i))
      return ctx.error("AdamW needs param, grad, exp_avg, exp_avg_sq, lr and step");
  const Tensor &p = *ctx.in(0), &g = *ctx.in(1), &m = *ctx.in(2), &v = *ctx.in(3);
  if (g.size() != p.size() || m.size() != p.size() || v.size() != p.size() ||
      ctx.in(4)->size() != 1 || ctx.in(5)->size() != 1)
    return ctx.error("AdamW's param, grad and moments must have one size, lr and step one element");
  std::vector<Tensor> outs = {p, m, v};
  // Result 3, when asked for, is the updated parameter's fp16/bf16 copy.
  auto withCopy = [&] {
    if (ctx.numOutputs() > 3 && ctx.wantsOutput(3))
      outs.push_back(outs[0].castTo(ctx.outType(3).dtype));
    return outs;
  };
  const Tensor *found = ctx.in(6);
  if (found && found->size() == 1 && found->getDouble(0) != 0)
    return withCopy();
  double beta1 = n.getFloat("beta1", 0.9), beta2 = n.getFloat("beta2", 0.999);
  rt::math::AdamWConstants c = rt::math::adamwConstants(
      beta1, n.getFloat("one_minus_beta1", 1 - beta1), beta2,
      n.getFloat("one_minus_beta2", 1 - beta2), n.getFloat("epsilon", 1e-8),
      n.getFloat("weight_decay", 0.0));
  rt::math::AdamWStepScalars s = rt::math::adamwStepScalars(
      c, static_cast<float>(ctx.in(4)->getDouble(0)), static_cast<float>(ctx.in(5)->getDouble(0)));
  for (int64_t i = 0; i < p.size(); ++i) {
    float pi = static_cast<float>(p.getDouble(i)), mi = static_cast<float>(m.getDouble(i));
    float vi = static_cast<float>(v.getDouble(i));
    rt::math::adamwUpdate(c, s, static_cast<float>(g.getDouble(i)), pi, mi, vi);
    outs[0].setDouble(i, pi);
    outs[1].setDouble(i, mi);
    outs[2].setDouble(i, vi);
  }
  return withCopy();
}

} // namespace

void registerTrainingKernels(KernelTable &t) {
  t.add("ampc.AllFinite", allFiniteKernel);
  t.add("ampc.AdamW", adamwKernel);
  t.add("ampc.AllReduce", allReduceKernel);
}

} // namespace ampc::interp
