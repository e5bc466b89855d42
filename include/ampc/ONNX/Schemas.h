//===- Schemas.h - ONNX schemas of ampc's own operators ---------*- C++ -*-===//
#pragma once

namespace ampc {

/// Registers the schemas of the `ampc` domain with ONNX's schema registry, so
/// that the checker and shape inference understand every model ampc writes.
/// Safe to call many times.
void registerAmpcSchemas();

} // namespace ampc
