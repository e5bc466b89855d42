//===- TrainingKernels.cpp - Kernels of ampc's training-step operators -----===//

#include "Kernels.h"

namespace ampc::interp {

void registerTrainingKernels(KernelTable &t) { (void)t; }

} // namespace ampc::interp
