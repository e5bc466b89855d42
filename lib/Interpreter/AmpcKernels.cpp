//===- AmpcKernels.cpp - Kernels of ampc's own operators -------------------===//
//
// The reference definition of every `ampc` operator (schemas in
// lib/ONNX/AmpcOps.cpp).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

namespace ampc::interp {

void registerAmpcKernels(KernelTable &t) { (void)t; }

} // namespace ampc::interp
