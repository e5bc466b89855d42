//===- Verifier.h - Structural checks of a graph ----------------*- C++ -*-===//
//
// Checks the invariants every pass must preserve: each operand is defined
// before its use (which also rules out cycles), use lists match operands,
// every value has a defined element type and a valid static shape, graph
// outputs are defined, state bindings pair a state with an output of its type.
// Operator-level type consistency is checked by verifyTypes (ONNX/TypeInference.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include "llvm/Support/Error.h"

namespace ampc {

llvm::Error verifyGraph(const Graph &g);

} // namespace ampc
