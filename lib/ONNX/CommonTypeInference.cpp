//===- CommonTypeInference.cpp - Result types of the common operators -----===//
//
// The operators the passes create by the thousand (the elementwise ops of
// gradient rules and optimizers, Cast, Where, comparisons, ReduceSum, Gemm)
// get their result types computed here directly, the way ONNX's inference
// functions compute them. Running a schema's inference function means
// building a NodeProto, TypeProtos and TensorProtos for the operands: about
// 11,000 instructions a node, 10% of compiling a graph of 10,000 nodes with
// 12,000 parameters. Anything unusual (an incompatible broadcast, a rank or
// an attribute out of range, an axes operand that is not a constant) is left
// to the schema, so that errors read as before.
//
//===----------------------------------------------------------------------===//

#include "CommonTypeInference.h"

#include "ampc/IR/Builder.h"

#include "llvm/ADT/StringSwitch.h"

#include <algorithm>

namespace ampc {

namespace {

enum class Rule { None, SameAsFirst, Broadcast, Compare, Where, Cast, ReduceSum, Gemm };

Rule ruleOf(const Node &n) {
  if (!n.domain().empty())
    return Rule::None;
  return llvm::StringSwitch<Rule>(n.opType())
      .Cases("Add", "Sub", "Mul", "Div", Rule::Broadcast)
      .Cases("Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual", Rule::Compare)
      .Cases("Neg", "Relu", "Exp", "Log", "Sqrt", "Sigmoid", "Tanh", Rule::SameAsFirst)
      .Cases("Abs", "Reciprocal", "Identity", "Erf", "Sign", Rule::SameAsFirst)
      .Case("Where", Rule::Where)
      .Case("Cast", Rule::Cast)
      .Case("ReduceSum", Rule::ReduceSum)
      .Case("Gemm", Rule::Gemm)
      .Default(Rule::None);
}

bool allPresent(const Node &n, unsigned count) {
  if (n.numInputs() != count || n.numOutputs() != 1 || !n.output())
    return false;
  for (unsigned i = 0; i < count; ++i)
    if (!n.input(i))
      return false;
  return true;
}

/// ONNX's multidirectional broadcast; false where two dims differ and
/// neither is 1 (the schema reports it).
bool broadcastAll(const Node &n, Shape &out) {
  out = n.input(0)->shape();
  for (unsigned i = 1; i < n.numInputs(); ++i) {
    const Shape &s = n.input(i)->shape();
    size_t rank = std::max(out.size(), s.size());
    for (size_t d = 0; d < rank; ++d) {
      int64_t a = d < rank - out.size() ? 1 : out[d - (rank - out.size())];
      int64_t b = d < rank - s.size() ? 1 : s[d - (rank - s.size())];
      if (a != b && a != 1 && b != 1)
        return false;
    }
    out = broadcastShape(out, s);
  }
  return true;
}

/// The constant int64 data of operand i, if it has some.
const Tensor *constantInts(const Node &n, unsigned i) {
  const Tensor *data = constantOperandData(n.input(i));
  return data && data->dtype() == DType::I64 && data->shape().size() == 1 ? data : nullptr;
}

std::optional<TensorType> reduceSum(const Node &n) {
  if (n.numOutputs() != 1 || !n.output() || n.numInputs() < 1 || !n.input(0))
    return std::nullopt;
  std::vector<int64_t> axes;
  if (n.graph()->opsetVersion() >= 13) {
    if (n.numInputs() > 2 || n.hasAttr("axes"))
      return std::nullopt;
    if (n.numInputs() == 2 && n.input(1)) {
      const Tensor *data = constantInts(n, 1);
      if (!data)
        return std::nullopt; // axes known at run time only: the schema says so
      axes = data->toInt64s();
    }
  } else {
    if (n.numInputs() != 1)
      return std::nullopt;
    axes = n.getInts("axes", {});
  }
  int64_t keep = n.getInt("keepdims", 1);
  int64_t noop = n.getInt("noop_with_empty_axes", 0);
  const Shape &in = n.input(0)->shape();
  int64_t rank = static_cast<int64_t>(in.size());
  if (axes.empty() && noop)
    return n.input(0)->type();
  std::vector<bool> reduced(in.size(), axes.empty());
  for (int64_t a : axes) {
    int64_t axis = a < 0 ? a + rank : a;
    if (axis < 0 || axis >= rank || reduced[axis])
      return std::nullopt;
    reduced[axis] = true;
  }
  Shape out;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d])
      out.push_back(in[d]);
    else if (keep)
      out.push_back(1);
  return TensorType(n.input(0)->dtype(), out);
}

std::optional<TensorType> gemm(const Node &n) {
  if (n.numInputs() < 2 || n.numInputs() > 3 || n.numOutputs() != 1 || !n.output() ||
      !n.input(0) || !n.input(1))
    return std::nullopt;
  const Shape &a = n.input(0)->shape(), &b = n.input(1)->shape();
  if (a.size() != 2 || b.size() != 2)
    return std::nullopt;
  bool transA = n.getInt("transA", 0) != 0, transB = n.getInt("transB", 0) != 0;
  if (a[transA ? 0 : 1] != b[transB ? 1 : 0])
    return std::nullopt;
  return TensorType(n.input(0)->dtype(), {a[transA ? 1 : 0], b[transB ? 0 : 1]});
}

} // namespace

const Tensor *constantOperandData(const Value *v) {
  if (!v)
    return nullptr;
  if (const Tensor *data = v->data())
    return data;
  if (v->producer() && v->producer()->is("Constant"))
    return v->producer()->getTensor("value");
  return nullptr;
}

std::optional<TensorType> inferCommonType(const Node &n) {
  Shape shape;
  Rule rule = ruleOf(n);
  switch (rule) {
  case Rule::None:
    return std::nullopt;
  case Rule::SameAsFirst:
    if (!allPresent(n, 1))
      return std::nullopt;
    return n.input(0)->type();
  case Rule::Broadcast:
  case Rule::Compare:
    if (!allPresent(n, 2) || !broadcastAll(n, shape))
      return std::nullopt;
    return TensorType(rule == Rule::Compare ? DType::Bool : n.input(0)->dtype(), shape);
  case Rule::Where:
    if (!allPresent(n, 3) || !broadcastAll(n, shape))
      return std::nullopt;
    return TensorType(n.input(1)->dtype(), shape);
  case Rule::Cast: {
    const Attribute *to = n.attr("to");
    if (!allPresent(n, 1) || !to || to->kind != Attribute::Kind::Int ||
        to->i != static_cast<int32_t>(to->i))
      return std::nullopt;
    DType dtype = dtypeFromOnnx(static_cast<int32_t>(to->i));
    if (dtype == DType::Undefined)
      return std::nullopt;
    return TensorType(dtype, n.input(0)->shape());
  }
  case Rule::ReduceSum:
    return reduceSum(n);
  case Rule::Gemm:
    return gemm(n);
  }
  return std::nullopt;
}

} // namespace ampc
