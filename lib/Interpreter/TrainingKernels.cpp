//===- TrainingKernels.cpp - Kernels of ampc's training-step operators -----===//

#include "Kernels.h"

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

} // namespace

void registerTrainingKernels(KernelTable &t) { t.add("ampc.AllFinite", allFiniteKernel); }

} // namespace ampc::interp
