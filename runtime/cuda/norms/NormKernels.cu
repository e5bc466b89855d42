//===- norms/NormKernels.cu - LayerNorm row kernels ------------------------===//
//
// LayerNormalization's forward and dX, a warp or a block per row
// (LayerNormArgs, RowLaunch.cuh).
//
//===----------------------------------------------------------------------===//

#include "../RowLaunch.cuh"

namespace ampc::rt::cuda {

AMPC_ROW_LAUNCH(LayerNormArgs)

} // namespace ampc::rt::cuda
