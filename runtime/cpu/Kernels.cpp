//===- Kernels.cpp - Registration of every CPU kernel ----------------------===//

#include "Kernel.h"

namespace ampc::rt::cpu {

// Each kernel file registers its ops; list new files here.
void registerAllCpuKernels() {
  registerFusedKernels();
  registerTrainingKernels();
}

} // namespace ampc::rt::cpu
