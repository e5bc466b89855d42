//===- Schemas.cpp - ONNX schemas of ampc's own operators ------------------===//
//
// Each `ampc` operator is declared here once, with its inputs, outputs,
// attributes and a shape inference function, so that onnx::checker and strict
// shape inference accept every model ampc writes. The operators themselves
// are defined by their reference-interpreter kernels (lib/Interpreter).
//
//===----------------------------------------------------------------------===//

#include "ampc/ONNX/Schemas.h"

#include "ampc/IR/Graph.h"

#include "AmpcOps.h"

#include "onnx/defs/schema.h"

#include <mutex>

namespace ampc {

void registerAmpcSchemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(
        std::string(kAmpcDomainName), 1, 1);
    for (onnx::OpSchema &schema : ampcOpSchemas())
      onnx::RegisterSchema(std::move(schema));
  });
}

} // namespace ampc
