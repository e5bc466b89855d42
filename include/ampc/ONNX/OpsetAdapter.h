//===- OpsetAdapter.h - Opsets 18 to 22 rewritten to opset 17 ---*- C++ -*-===//
//
// Debian's ONNX library (1.12) knows the default domain up to opset 17, but
// PyTorch 2.x exports opset 18 and newer. Before ONNX's checker and shape
// inference see a model of opset 18 to 22, the adapter rewrites every node
// whose operator version is newer than 17 into its opset-17 form: one
// declarative rule per (operator, version), as ONNX's own version converter
// has one adapter per step. Most newer versions only added element types
// (float8, int4, bfloat16 for Conv) and keep the node as it is; the others
// move an input to an attribute (Reduce*-18 axes), drop an attribute that
// is at its default (Resize-18 antialias, Cast-19 saturate), or expand into
// opset-17 ops (Gelu-20, GroupNormalization-18/21, Mish-18). A version no
// rule covers is refused with a line naming the operator, its version and
// the newest version ampc reads.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "onnx/onnx_pb.h"
#include "llvm/Support/Error.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ampc {

/// The newest default-domain opset ampc reads (through the adapter).
inline constexpr int64_t kMaxAdaptedOpset = 22;
/// The opset the adapter rewrites to: the newest ONNX 1.12 knows.
inline constexpr int64_t kAdapterTargetOpset = 17;
/// The newest IR version ampc reads, and the one ONNX 1.12's checker takes.
inline constexpr int64_t kMaxIrVersion = 10;
inline constexpr int64_t kCheckerIrVersion = 8;

/// What a rule can ask about the model: constants, ranks, fresh names.
class AdapterContext {
public:
  explicit AdapterContext(const onnx::GraphProto &graph);

  /// The value of an initializer or a Constant node's output; nullptr if
  /// `name` is neither.
  const onnx::TensorProto *constant(const std::string &name) const;
  /// The values of a small constant int64 tensor, flattened (also one that
  /// views or joins such constants); false when `name` is not one.
  bool constantInts(const std::string &name, std::vector<int64_t> &values, int depth = 0) const;
  /// The rank the model declares for `name` (inputs, value_info,
  /// initializers); -1 when it declares none.
  int rank(const std::string &name) const;
  /// A value name not used anywhere in the graph, derived from `base`.
  std::string fresh(const std::string &base);

  /// Appends a node to `out` and returns it.
  onnx::NodeProto &emit(std::vector<onnx::NodeProto> &out, const std::string &op,
                        const std::vector<std::string> &inputs,
                        const std::vector<std::string> &outputs);
  /// Appends a Constant node holding int64 `values` (rank 1); returns its output.
  std::string int64s(std::vector<onnx::NodeProto> &out, const std::string &base,
                     const std::vector<int64_t> &values);
  /// Appends a float scalar constant cast to the element type of `like`
  /// (CastLike, which the importer turns into a Cast); returns its output.
  std::string scalarLike(std::vector<onnx::NodeProto> &out, const std::string &base,
                         float value, const std::string &like);

private:
  std::unordered_map<std::string, const onnx::TensorProto *> constants_;
  std::unordered_map<std::string, int> ranks_;
  std::unordered_map<std::string, const onnx::NodeProto *> producers_;
  std::unordered_set<std::string> used_;
};

/// Rewrites `node` (an operator version newer than 17) into opset-17 nodes
/// appended to `out`. A null rewrite keeps the node unchanged.
using AdapterRewrite = llvm::Error (*)(AdapterContext &ctx, const onnx::NodeProto &node,
                                       std::vector<onnx::NodeProto> &out);

struct OpsetRule {
  const char *op;
  int version;
  /// What the version changed and what the rule does with it.
  const char *summary;
  AdapterRewrite rewrite;
};

/// Every rule, by operator then version (OpsetRules.cpp).
const std::vector<OpsetRule> &opsetRules();

/// The default-domain versions newer than 17 that ONNX defined up to opset
/// 22, whether ampc has a rule for them or not (for an operator at a given
/// opset, the version in force is the newest one not above it).
const std::unordered_map<std::string, std::vector<int>> &newerOperatorVersions();

/// Rewrites a model of default-domain opset 18 to 22 to opset 17 (and its
/// IR version to one ONNX 1.12's checker takes). Errors name the node.
llvm::Error adaptToOpset17(onnx::ModelProto &model, int64_t opset);

} // namespace ampc
