//===- reductions/ReduceKernels.cu - Reductions over the last axes ---------===//
//
// Reductions over trailing (contiguous) axes, a warp or a block per result
// (ReduceArgs, RowLaunch.cuh).
//
//===----------------------------------------------------------------------===//

#include "../RowLaunch.cuh"

namespace ampc::rt::cuda {

AMPC_ROW_LAUNCH(ReduceArgs)

} // namespace ampc::rt::cuda
