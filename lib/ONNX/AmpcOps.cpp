//===- AmpcOps.cpp - The ampc domain's schemas, gathered -------------------===//

#include "AmpcOps.h"

#include "onnx/defs/shape_inference.h"

namespace ampc {

onnx::OpSchema makeAmpcSchema(const char *name, const char *doc, const char *file, int line) {
  onnx::OpSchema s(name, file, line);
  s.SetDomain(kAmpcDomainName).SinceVersion(1).SetDoc(doc);
  return s;
}

void propagateTypeAndShape(onnx::InferenceContext &ctx, size_t in, size_t out) {
  onnx::propagateElemTypeFromInputToOutput(ctx, in, out);
  if (onnx::hasInputShape(ctx, in))
    onnx::propagateShapeFromInputToOutput(ctx, in, out);
}

std::vector<onnx::OpSchema> ampcOpSchemas() {
  std::vector<onnx::OpSchema> schemas;
  appendGradientSchemas(schemas);
  appendTrainingSchemas(schemas);
  return schemas;
}

} // namespace ampc
