//===- softmax/SoftmaxKernels.cu - Softmax row kernels ---------------------===//
//
// Softmax, LogSoftmax and their gradients over the last axis, a warp or a
// block per row (SoftmaxArgs, RowLaunch.cuh).
//
//===----------------------------------------------------------------------===//

#include "../RowLaunch.cuh"

namespace ampc::rt::cuda {

AMPC_ROW_LAUNCH(SoftmaxArgs)

} // namespace ampc::rt::cuda
