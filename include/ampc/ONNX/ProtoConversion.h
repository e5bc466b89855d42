//===- ProtoConversion.h - Tensor and graph <-> ONNX protos -----*- C++ -*-===//
//
// Conversions shared by import, export, the interpreter's tests and shape
// inference. Includes protobuf headers: keep it out of public tool headers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <vector>

#include "ampc/IR/Graph.h"
#include "ampc/ONNX/Import.h"

#include "onnx/onnx_pb.h"

#include "llvm/Support/Error.h"

namespace ampc {

/// Reads a TensorProto (raw or typed fields; external data relative to baseDir).
llvm::Expected<Tensor> tensorFromProto(const onnx::TensorProto &t, const std::string &baseDir = "");
void tensorToProto(const Tensor &t, const std::string &name, onnx::TensorProto &proto);

Attribute attributeFromProto(const onnx::AttributeProto &a, llvm::Error &err);
void attributeToProto(const std::string &name, const Attribute &a, onnx::AttributeProto &proto);

/// Checks what ONNX 1.12's checker and shape inference would trust and crash
/// on (tensor data against dims, window attributes, Transpose perms, outputs
/// named like inputs): one-line errors naming the tensor or node.
llvm::Error checkBeforeOnnx(const onnx::ModelProto &model);

/// Gives Conv-like nodes whose weight is an initializer an explicit
/// kernel_shape (its spatial dims, what the attribute means when absent):
/// ONNX 1.12's inference then compares its length with the input's spatial
/// rank, where, deriving it from the weight, it indexed past its per-axis
/// lists and crashed (found by fuzzing: a rank-4 weight on a rank-2 input).
/// Returns the nodes given one, for removeAddedKernelShapes once inference
/// is done (the imported model stays as it was read).
std::vector<int> makeConvKernelShapesExplicit(onnx::GraphProto &graph);
void removeAddedKernelShapes(onnx::GraphProto &graph, const std::vector<int> &nodes);

/// Imports an in-memory ModelProto (checked, inferred). `displayName` prefixes
/// error messages; `baseDir` locates external data.
llvm::Expected<std::unique_ptr<Graph>> importModelProto(onnx::ModelProto &model,
                                                        const std::string &displayName,
                                                        const std::string &baseDir,
                                                        const ImportOptions &opts = {});

} // namespace ampc
