//===- Builder.h - Creating nodes with their result types -------*- C++ -*-===//
//
// A thin helper for passes that write new computations: each method creates
// one ONNX node at the graph's insertion point with its result type computed
// by the operator's broadcasting / type rule, so passes read like the math
// they implement.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include <string>

namespace ampc {

class Builder {
public:
  /// Nodes are named `prefix` + a counter (unique), for readable printouts.
  Builder(Graph &g, std::string prefix) : g_(g), prefix_(std::move(prefix)) {}

  Graph &graph() { return g_; }

  /// A constant scalar initializer.
  Value *constant(DType dtype, double value);

  // Elementwise arithmetic: numpy broadcasting, result type of `a`.
  Value *add(Value *a, Value *b) { return binary("Add", a, b); }
  Value *sub(Value *a, Value *b) { return binary("Sub", a, b); }
  Value *mul(Value *a, Value *b) { return binary("Mul", a, b); }
  Value *div(Value *a, Value *b) { return binary("Div", a, b); }
  Value *pow(Value *a, Value *b) { return binary("Pow", a, b); }
  Value *min(Value *a, Value *b) { return binary("Min", a, b); }
  Value *max(Value *a, Value *b) { return binary("Max", a, b); }
  Value *sqrt(Value *a) { return unary("Sqrt", a); }
  Value *reciprocal(Value *a) { return unary("Reciprocal", a); }
  Value *neg(Value *a) { return unary("Neg", a); }
  // Comparisons and logic: bool results.
  Value *equal(Value *a, Value *b) { return compare("Equal", a, b); }
  Value *greaterOrEqual(Value *a, Value *b) { return compare("GreaterOrEqual", a, b); }
  Value *notOf(Value *a);
  Value *andOf(Value *a, Value *b) { return compare("And", a, b); }
  Value *isInf(Value *a);
  /// Where(cond, a, b), broadcast; result type of `a`.
  Value *where(Value *cond, Value *a, Value *b);
  Value *cast(Value *a, DType to);
  /// Sum of squares over all elements, as a scalar of a's type.
  Value *sumOfSquares(Value *a);
  /// Variadic Sum (same shapes).
  Value *sum(const std::vector<Value *> &values);

  /// A node with explicit result types, for anything else.
  Node *node(const std::string &op, const std::vector<Value *> &inputs,
             const std::vector<TensorType> &types, std::map<std::string, Attribute> attrs = {},
             const std::string &domain = "", const std::vector<std::string> &outputNames = {});

  /// Renames a value (made unique) and returns it, for graph-facing names.
  Value *named(Value *v, const std::string &name);

private:
  std::string nextName();
  Value *unary(const std::string &op, Value *a);
  Value *binary(const std::string &op, Value *a, Value *b);
  Value *compare(const std::string &op, Value *a, Value *b);

  Graph &g_;
  std::string prefix_;
  unsigned counter_ = 0;
};

/// Numpy broadcast of two static shapes (assumes they are compatible).
Shape broadcastShape(const Shape &a, const Shape &b);

} // namespace ampc
