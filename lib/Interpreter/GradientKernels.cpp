//===- GradientKernels.cpp - Kernels of ampc's gradient operators ----------===//

#include "Kernels.h"

namespace ampc::interp {

void registerGradientKernels(KernelTable &t) { (void)t; }

} // namespace ampc::interp
