//===- CommonTypeInference.h - Result types of the common operators ------===//
//
// Private to lib/ONNX: the fast path of TypeInference.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include <optional>

namespace ampc {

/// The single result type of a common operator of the default domain
/// (elementwise arithmetic, comparisons, Where, Cast, ReduceSum, Gemm),
/// computed as its ONNX inference function computes it; std::nullopt for
/// any other node, and for any case the schema should judge (incompatible
/// shapes, bad attributes, axes unknown before run time).
std::optional<TensorType> inferCommonType(const Node &n);

/// What an inference function sees of an operand's data: an initializer's
/// (or an input's default), or a Constant node's value; nullptr otherwise.
const Tensor *constantOperandData(const Value *v);

} // namespace ampc
