//===- Import.h - ONNX models into the IR -----------------------*- C++ -*-===//
//
// Reads binary (.onnx) or textual (.onnxtxt, or "-" for stdin) ONNX models,
// upgrades opsets older than 13 with ONNX's version converter, binds dynamic
// input dimensions, runs ONNX's checker and strict shape inference and builds
// a graph in which every value has a static type.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace ampc {

/// The default-domain opsets ampc accepts as they are; older models are upgraded.
inline constexpr int64_t kMinOpset = 13;
inline constexpr int64_t kMaxOpset = 17;
/// The largest number of elements any tensor may have.
inline constexpr int64_t kMaxElements = int64_t(1) << 31;

struct ImportOptions {
  /// --shape NAME=d0,d1,...: the full static shape of a graph input.
  std::map<std::string, Shape> shapes;
  /// --batch=N: binds the first dimension of every graph input.
  std::optional<int64_t> batch;
  /// Types from ONNX's shape inference over the whole model, the import's
  /// fallback, even where they could be inferred node by node while the
  /// graph is built (what tests compare the two with).
  bool wholeModelInference = false;
};

/// Imports a model file; "-" reads ONNX text from stdin. Errors start with the
/// file name and name the node, input or tensor at fault.
llvm::Expected<std::unique_ptr<Graph>> importModelFile(const std::string &path,
                                                       const ImportOptions &opts = {});

/// Imports ONNX text held in memory; `displayName` prefixes error messages.
llvm::Expected<std::unique_ptr<Graph>> importModelText(std::string_view text,
                                                       const std::string &displayName,
                                                       const ImportOptions &opts = {});

/// Parses "d0,d1,..." of --shape.
llvm::Expected<Shape> parseShapeList(std::string_view text);

} // namespace ampc
