//===- TypeInference.h - Result types from ONNX operator schemas -*- C++ -*-===//
//
// The ONNX schema of every operator (ampc's own included) carries a type and
// shape inference function. These helpers run it on one IR node, so passes can
// create nodes without computing result types by hand, and the verifier can
// check that recorded types agree with the operator's definition.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include "llvm/Support/Error.h"

namespace ampc {

/// Static result types of `n` as its ONNX schema infers them from the operand
/// types, attributes and constant operands (initializers).
llvm::Expected<std::vector<TensorType>> inferNodeTypes(const Node &n);
/// inferNodeTypes through the schema's inference function alone, without the
/// direct computation of the common operators (lib/ONNX/CommonTypeInference):
/// what tests compare that computation with.
llvm::Expected<std::vector<TensorType>> inferNodeTypesWithSchema(const Node &n);

/// inferNodeTypes for a node as imported: also an error where an operand's
/// element type is not one the schema allows (ONNX's check_type).
llvm::Expected<std::vector<TensorType>> inferImportedNodeTypes(const Node &n);

/// Creates a node whose result types are inferred from its schema.
llvm::Expected<Node *> createInferredNode(Graph &g, std::string opType,
                                          const std::vector<Value *> &inputs,
                                          std::map<std::string, Attribute> attrs = {},
                                          std::string name = "", std::string domain = "",
                                          unsigned numOutputs = 1,
                                          const std::vector<std::string> &outputNames = {});

/// Checks one node's result types against its schema's inference (operand
/// types, attributes and constant operands); an error names the node.
llvm::Error verifyNodeTypes(const Node &n);

/// Checks every node's result types against its schema's inference.
llvm::Error verifyTypes(const Graph &g);

} // namespace ampc
