//===- Printer.h - Print the IR as ONNX textual syntax ----------*- C++ -*-===//
//
// Writes a graph in ONNX textual syntax (as read by ampc/ONNX/TextFormat.h).
// Each node line ends with a comment giving its results' types, so FileCheck
// tests can see element types. In display mode large initializers are shown
// as a summary ("{...}" and a comment), which cannot be read back.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace ampc {

struct PrintOptions {
  /// Show initializers with more than `elideThreshold` elements as a summary.
  bool elideLargeData = true;
  int64_t elideThreshold = 16;
  /// End node lines with "# type, type" comments.
  bool printTypes = true;
};

void printGraph(const Graph &g, llvm::raw_ostream &os, const PrintOptions &opts = {});
std::string printGraphToString(const Graph &g, const PrintOptions &opts = {});

/// A name as written in ONNX text: plain identifier or double-quoted.
std::string quoteName(const std::string &name);
/// Shortest text that reads back to the same float / double.
std::string formatFloat(double v, DType precision);

} // namespace ampc
