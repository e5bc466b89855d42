//===- losses/LossKernels.cu - Cross-entropy row kernels -------------------===//
//
// SoftmaxCrossEntropyLoss per sample and the losses' dX over [N, C] scores,
// a warp or a block per sample (LossArgs, RowLaunch.cuh).
//
//===----------------------------------------------------------------------===//

#include "../RowLaunch.cuh"

namespace ampc::rt::cuda {

AMPC_ROW_LAUNCH(LossArgs)

} // namespace ampc::rt::cuda
