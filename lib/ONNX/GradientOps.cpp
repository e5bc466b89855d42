//===- GradientOps.cpp - Schemas of ampc's gradient operators --------------===//
//
// Operators that autodiff emits where a composition of ONNX operators would
// waste memory or time (see passes/GradientRules.cpp for their use).
//
//===----------------------------------------------------------------------===//

#include "AmpcOps.h"

#include "onnx/defs/shape_inference.h"

namespace ampc {

void appendGradientSchemas(std::vector<onnx::OpSchema> &schemas) { (void)schemas; }

} // namespace ampc
