//===- Autocast.h - Mixed precision by a TensorFlow-style painting -*- C++ -*-===//
//
// The autocast pass decides, for every float node, whether it runs in low
// precision (fp16 or bf16) or in fp32, and inserts the casts this implies:
// one per (value, type), only where the colours of neighbours differ. See
// docs/precision-policy.md for the algorithm and its guarantees.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"
#include "ampc/Passes/AutocastPolicy.h"

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace ampc {

struct AutocastOptions {
  /// F16 or BF16.
  DType lowType = DType::F16;
  AutocastPolicy policy = AutocastPolicy::defaults();
  /// bf16 only: also run Conv and pooling in bf16, which every ampc backend
  /// does (PyTorch's CPU autocast does too) although ONNX opset 17 lists no
  /// bf16 form for them; the rewritten graph is then not checker-valid ONNX.
  bool bf16BeyondSchema = false;
};

/// One row of the report: a float node of the input graph.
struct AutocastRow {
  std::string node;
  std::string op;
  std::string precision; ///< "fp16", "bf16", "fp32", or "cast" for a model Cast.
  std::string reason;
};

struct AutocastResult {
  DType lowType = DType::F16;
  /// Where the policy came from: "default lists + my.policy + --fp32-ops".
  std::string policy;
  std::vector<AutocastRow> rows;
  /// Float nodes (model Casts excluded) and those now computing in lowType.
  unsigned floatNodes = 0;
  unsigned lowNodes = 0;
  /// Cast nodes the pass inserted, and among them casts of parameters.
  unsigned casts = 0;
  unsigned weightCasts = 0;
  /// Lines describing each inserted cast and compile-time constant conversion.
  std::vector<std::string> castLines;
  /// Graphviz colours: low precision, fp32 and cast nodes.
  std::map<const Node *, std::string> colors;
  /// Things the user should see even without --emit=report (the pass
  /// prints them as remarks; the report lists them as notes).
  std::vector<std::string> remarks;

  /// "autocast: N/M float nodes in fp16, K casts (W weight casts)".
  std::string summaryLine() const;
  /// The policy line, the table, the casts and the summary line.
  std::string report() const;
};

/// Runs autocast on `g`. Fails (leaving `g` untouched) when an override names
/// a node that does not exist.
llvm::Expected<AutocastResult> autocast(Graph &g, const AutocastOptions &opts);

/// "fp16", "bf16", "fp32", "fp64", or the dtype's ONNX name.
std::string shortDTypeName(DType t);

} // namespace ampc
