//===- Schemas.h - ONNX schemas of ampc's own operators ---------*- C++ -*-===//
#pragma once

#include <string_view>

namespace onnx {
class OpSchema;
}

namespace ampc {

/// Registers the schemas of the `ampc` domain with ONNX's schema registry, so
/// that the checker and shape inference understand every model ampc writes.
/// Safe to call many times.
void registerAmpcSchemas();

/// onnx::OpSchemaRegistry::Schema(op, version, domain) ("" for the default
/// domain), remembered per thread: the registry's lookup hashes two strings
/// and walks a map, and importers and passes ask for the same few operators
/// once per node. Registers ampc's schemas first.
const onnx::OpSchema *lookupSchema(std::string_view op, int version, std::string_view domain);

} // namespace ampc
