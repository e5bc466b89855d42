//===- StaticShapes.h - Static shapes by partial evaluation -----*- C++ -*-===//
#pragma once

#include "onnx/onnx_pb.h"

#include "llvm/Support/Error.h"

namespace ampc {

/// Completes the value_info of a bound, shape-inferred model where ONNX's
/// inference left results without static shapes, by evaluating the constant
/// subgraphs that compute them.
llvm::Error completeStaticShapes(onnx::ModelProto &model);

/// A tensor type whose every dimension has a value.
bool hasStaticShape(const onnx::TypeProto &t);

} // namespace ampc
