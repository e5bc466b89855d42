//===- AmpcKernels.cpp - Kernels of ampc's own operators -------------------===//
//
// The reference definition of every `ampc` operator (schemas in
// lib/ONNX/*Ops.cpp), registered by area.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

namespace ampc::interp {

void registerAmpcKernels(KernelTable &t) {
  registerGradientKernels(t);
  registerTrainingKernels(t);
}

} // namespace ampc::interp
