//===- ProtoConversion.h - Tensor and graph <-> ONNX protos -----*- C++ -*-===//
//
// Conversions shared by import, export, the interpreter's tests and shape
// inference. Includes protobuf headers: keep it out of public tool headers.
//
//===----------------------------------------------------------------------===//
#pragma once

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

/// Imports an in-memory ModelProto (checked, inferred). `displayName` prefixes
/// error messages; `baseDir` locates external data.
llvm::Expected<std::unique_ptr<Graph>> importModelProto(onnx::ModelProto &model,
                                                        const std::string &displayName,
                                                        const std::string &baseDir,
                                                        const ImportOptions &opts = {});

} // namespace ampc
