//===- TrainingOps.cpp - Schemas of ampc's training-step operators ---------===//
//
// Operators of loss scaling and the optimizers (passes/LossScale.cpp,
// passes/Optimizer.cpp).
//
//===----------------------------------------------------------------------===//

#include "AmpcOps.h"

#include "onnx/defs/shape_inference.h"

namespace ampc {

void appendTrainingSchemas(std::vector<onnx::OpSchema> &schemas) { (void)schemas; }

} // namespace ampc
