//===- Kernels.cpp - Registration of every CPU kernel ----------------------===//

#include "Kernel.h"
#include "KernelHelpers.h"

namespace ampc::rt::cpu {

// Each kernel file registers its ops; list new files here.
void registerAllCpuKernels() {
  registerFusedKernels();
  registerGemmKernels();
  registerConvKernels();
  registerPoolKernels();
  registerNormKernels();
  registerBatchNormKernels();
  registerSoftmaxKernels();
  registerLossKernels();
  registerReduceKernels();
  registerDataMovementKernels();
  registerElementwiseKernels();
  registerTrainingKernels();
  registerCollectiveKernels();
}

} // namespace ampc::rt::cpu
