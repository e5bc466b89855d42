//===- Autodiff.h - Reverse-mode differentiation of a graph -----*- C++ -*-===//
//
// The autodiff pass appends to a graph the gradients of a scalar loss with
// respect to its trainable parameters. Each forward operator has one gradient
// rule, registered in a GradientRegistry (as ONNX Runtime's gradient builder
// and TVM's FPrimalGradient do): the operands that carry gradients, and a
// function that emits the backward nodes through a GradientBuilder.
//
// The rules live in passes/GradientRules*.cpp, one file per operator family;
// docs/autodiff.md describes the pass, the rules and the ampc gradient ops.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"
#include "ampc/Pass/Pass.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

namespace ampc {

//===----------------------------------------------------------------------===//
// The transformation
//===----------------------------------------------------------------------===//

struct AutodiffOptions {
  /// The loss to differentiate; empty: the graph's only scalar float output.
  std::string loss;
  /// Parameters to differentiate; empty or {"all"}: every float parameter the
  /// loss depends on, BatchNormalization running statistics excepted.
  std::vector<std::string> params;
  /// Parameters not to differentiate.
  std::vector<std::string> freeze;
};

struct AutodiffResult {
  Value *loss = nullptr;
  /// The graph input `<loss>_grad` (default 1.0) that seeds the backward pass.
  Value *seed = nullptr;
  /// (parameter, its gradient) in the order of the graph's initializers; each
  /// gradient is a graph output named `<parameter>_grad`.
  std::vector<std::pair<Value *, Value *>> gradients;
  /// Where the list of parameters came from, for the report.
  std::string parameterSource;
};

/// Appends the backward graph. Remarks (parameters the loss ignores) go to ctx.
llvm::Expected<AutodiffResult> differentiate(Graph &g, const AutodiffOptions &opts,
                                             PassContext *ctx = nullptr);

//===----------------------------------------------------------------------===//
// Gradient rules
//===----------------------------------------------------------------------===//

class GradientBuilder;
using GradientFn = std::function<void(GradientBuilder &)>;

struct GradientRule {
  /// In differentiableInputs: every operand (variadic operators).
  static constexpr unsigned kAllOperands = ~0u;

  std::string opType; ///< Operator of the default ONNX domain.
  /// Operands that carry gradients. Others stop the gradient: integer operands
  /// always do; float ones listed nowhere (running statistics, a dropout
  /// ratio, class weights) are an error when a parameter reaches them.
  std::vector<unsigned> differentiableInputs;
  GradientFn build;

  bool isDifferentiable(unsigned input) const;
};

class GradientRegistry {
public:
  /// The registry with every rule of passes/GradientRules*.cpp.
  static const GradientRegistry &get();

  void add(std::string opType, std::vector<unsigned> differentiableInputs, GradientFn build);
  const GradientRule *lookup(const Node &n) const;
  /// The operators with a rule, sorted.
  std::vector<std::string> ops() const;

private:
  std::map<std::string, GradientRule> rules_;
};

// One registration function per rule file.
void registerElementwiseGradients(GradientRegistry &r); // GradientRulesElementwise.cpp
void registerNNGradients(GradientRegistry &r);          // GradientRulesNN.cpp
void registerTensorGradients(GradientRegistry &r);      // GradientRulesTensor.cpp
void registerLossGradients(GradientRegistry &r);        // GradientRulesLoss.cpp

/// What a rule sees and how it emits nodes. Every emitted node is typed by its
/// ONNX (or ampc) schema; an emission the schema rejects is recorded as the
/// rule's error (a bug in the rule) and reported once the rule returns.
class GradientBuilder {
public:
  using Attrs = std::map<std::string, Attribute>;

  GradientBuilder(Graph &g, Node &node, std::vector<Value *> outputGrads,
                  std::vector<bool> wantedInputGrads);

  // The forward node.
  const Node &node() const { return node_; }
  Graph &graph() { return g_; }
  Value *x(unsigned i) const { return node_.input(i); }
  Value *y(unsigned i = 0) const { return node_.output(i); }
  /// The gradient of result i, or nullptr when none reaches it.
  Value *dY(unsigned i = 0) const { return i < outputGrads_.size() ? outputGrads_[i] : nullptr; }
  /// The gradient of result i, or zeros of its type (fails, returning
  /// nullptr, when result i is omitted).
  Value *dYOrZeros(unsigned i);
  /// True when operand i needs a gradient (it depends on a parameter).
  bool wantsGrad(unsigned i) const { return i < wanted_.size() && wanted_[i]; }
  /// Contributes `grad` (operand i's type) to operand i's gradient. Calling it
  /// twice for one operand adds the two.
  void setGrad(unsigned i, Value *grad);
  /// Result i of the forward node, requested when the model omits it (saved
  /// statistics, pooling indices, dropout masks): the memory-saving inputs of
  /// the gradient ops. A requested result is named `<node>_<what>`.
  Value *savedOutput(unsigned i, const std::string &what);
  /// The data of a constant operand (a constant initializer or a Constant
  /// node's value), or nullptr.
  static const Tensor *constantData(const Value *v);
  /// Records an error (the first one wins) and returns nullptr.
  Value *fail(const llvm::Twine &msg);

  // Emission. Results are named after the forward node; types are inferred.
  Value *op(const std::string &opType, const std::vector<Value *> &inputs, Attrs attrs = {});
  /// A multi-result node; results with wanted[i] false are omitted (nullptr).
  std::vector<Value *> ops(const std::string &opType, const std::vector<Value *> &inputs,
                           Attrs attrs, const std::vector<bool> &wanted,
                           const std::string &domain = "");
  /// An `ampc` gradient op with one result.
  Value *ampc(const std::string &opType, const std::vector<Value *> &inputs, Attrs attrs = {});

  // Constants (initializers marked constant).
  Value *scalarLike(double v, const Value *like);
  Value *constant(Tensor t);
  Value *ints(const std::vector<int64_t> &values);
  Value *zerosLike(const Value *like);

  // Common compositions.
  Value *add(Value *a, Value *b) { return op("Add", {a, b}); }
  Value *sub(Value *a, Value *b) { return op("Sub", {a, b}); }
  Value *mul(Value *a, Value *b) { return op("Mul", {a, b}); }
  Value *div(Value *a, Value *b) { return op("Div", {a, b}); }
  Value *neg(Value *a) { return op("Neg", {a}); }
  /// a * c for a constant c (a itself when c is 1).
  Value *scale(Value *a, double c);
  Value *reshape(Value *v, const Shape &shape);
  Value *transpose(Value *v, const std::vector<int64_t> &perm);
  /// v with its last two axes swapped.
  Value *transposeLast2(Value *v);
  Value *cast(Value *v, DType to);
  Value *reduceSum(Value *v, const std::vector<int64_t> &axes, bool keepDims);
  Value *expand(Value *v, const Shape &shape);
  /// Undoes numpy broadcasting: sums `grad` over the axes along which a value
  /// of shape `shape` was broadcast, and reshapes it to `shape`.
  Value *sumToShape(Value *grad, const Shape &shape);
  /// Copies the attributes `names` the forward node has.
  Attrs forwardAttrs(const std::vector<std::string> &names) const;

  // For the driver.
  const std::vector<std::vector<Value *>> &inputGrads() const { return inputGrads_; }
  const std::vector<Node *> &emittedNodes() const { return emitted_; }
  bool failed() const { return !error_.empty(); }
  const std::string &errorMessage() const { return error_; }

private:
  std::string nodeName(const std::string &opType);
  Node *emit(const std::string &opType, const std::vector<Value *> &inputs, Attrs attrs,
             const std::vector<bool> &wanted, const std::string &domain);

  Graph &g_;
  Node &node_;
  std::vector<Value *> outputGrads_;
  std::vector<bool> wanted_;
  std::vector<std::vector<Value *>> inputGrads_;
  std::vector<Node *> emitted_;
  /// Emitted nodes per op type, to name them `<node>_Grad/<Op>_<k>`.
  std::map<std::string, unsigned> opCounts_;
  std::string error_;
};

} // namespace ampc
