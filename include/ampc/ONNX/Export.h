//===- Export.h - The IR back to ONNX ---------------------------*- C++ -*-===//
#pragma once

#include "ampc/IR/Graph.h"

#include "llvm/Support/Error.h"

#include <string>
#include <unordered_set>
#include <vector>

namespace onnx {
class ModelProto;
}

namespace ampc {

enum class ModelFormat { Binary, Text };

/// Converts a graph to a ModelProto (ampc ops are declared in opset_import;
/// state bindings become TrainingInfoProto.update_binding). Initializers
/// named in `dataless` get their name, type and dims only.
void graphToModelProto(const Graph &g, onnx::ModelProto &model,
                       const std::unordered_set<std::string> *dataless = nullptr);

/// Runs onnx::checker (full check) and strict shape inference on a model.
/// Initializers without a value are accepted (a plan's snapshot of the
/// model, whose trained values are the plan's state).
llvm::Error checkModelProto(onnx::ModelProto &model);

/// Serializes the model; the text form is the printer's, with full data.
llvm::Expected<std::string> serializeModel(const Graph &g, ModelFormat format);

/// Serializes a model with the initializers named in `dataless` reduced to
/// their name, type and dims (their data is cleared from `model`): a plan
/// keeps the model to export trained weights into, and those weights are
/// the plan's own state, not stored twice.
llvm::Expected<std::string> serializeWithoutData(onnx::ModelProto &model,
                                                 const std::vector<std::string> &dataless);

/// Writes the model to `path` atomically (temporary file, then rename), after
/// checking it. "-" writes to stdout.
llvm::Error exportModel(const Graph &g, const std::string &path, ModelFormat format);

/// Writes `contents` to `path` through a temporary file and a rename, so that
/// readers never see a partial file.
llvm::Error writeFileAtomically(const std::string &path, std::string_view contents);

} // namespace ampc
