//===- norms/NormKernels.cu - LayerNorm and BatchNorm row kernels ---------===//
//
// LayerNormalization's forward and dX, a warp or a block per row, and
// BatchNormalization's statistics, a warp or a block per channel
// (LayerNormArgs, BatchNormArgs, RowLaunch.cuh).
//
//===----------------------------------------------------------------------===//

#include "../RowLaunch.cuh"

namespace ampc::rt::cuda {

AMPC_ROW_LAUNCH(LayerNormArgs)
AMPC_ROW_LAUNCH(BatchNormArgs)

} // namespace ampc::rt::cuda
