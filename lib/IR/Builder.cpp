//===- Builder.cpp - Creating nodes with their result types ----------------===//

#include "ampc/IR/Builder.h"

#include <algorithm>

namespace ampc {

Shape broadcastShape(const Shape &a, const Shape &b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::string Builder::nextName() { return prefix_ + std::to_string(counter_++); }

Node *Builder::node(const std::string &op, const std::vector<Value *> &inputs,
                    const std::vector<TensorType> &types, std::map<std::string, Attribute> attrs,
                    const std::string &domain, const std::vector<std::string> &outputNames) {
  std::string name = nextName();
  std::vector<std::string> names = outputNames;
  if (names.empty())
    names.push_back(name);
  return g_.createNode(op, inputs, types, std::move(attrs), name, domain, names);
}

Value *Builder::constant(DType dtype, double value) {
  return g_.addInitializer(nextName(), Tensor::scalar(dtype, value), /*constant=*/true);
}

Value *Builder::unary(const std::string &op, Value *a) {
  return node(op, {a}, {a->type()})->output();
}

Value *Builder::binary(const std::string &op, Value *a, Value *b) {
  return node(op, {a, b}, {TensorType(a->dtype(), broadcastShape(a->shape(), b->shape()))})
      ->output();
}

Value *Builder::compare(const std::string &op, Value *a, Value *b) {
  return node(op, {a, b}, {TensorType(DType::Bool, broadcastShape(a->shape(), b->shape()))})
      ->output();
}

Value *Builder::notOf(Value *a) { return node("Not", {a}, {a->type()})->output(); }

Value *Builder::isInf(Value *a) {
  return node("IsInf", {a}, {TensorType(DType::Bool, a->shape())})->output();
}

Value *Builder::where(Value *cond, Value *a, Value *b) {
  Shape s = broadcastShape(cond->shape(), broadcastShape(a->shape(), b->shape()));
  return node("Where", {cond, a, b}, {TensorType(a->dtype(), s)})->output();
}

Value *Builder::cast(Value *a, DType to) {
  if (a->dtype() == to)
    return a;
  return node("Cast", {a}, {TensorType(to, a->shape())},
              {{"to", Attribute::ofInt(dtypeToOnnx(to))}})
      ->output();
}

Value *Builder::sumOfSquares(Value *a) {
  return node("ReduceSumSquare", {a}, {TensorType(a->dtype(), {})},
              {{"keepdims", Attribute::ofInt(0)}})
      ->output();
}

Value *Builder::sum(const std::vector<Value *> &values) {
  if (values.size() == 1)
    return values.front();
  return node("Sum", values, {values.front()->type()})->output();
}

Value *Builder::named(Value *v, const std::string &name) {
  g_.renameValue(v, name);
  return v;
}

} // namespace ampc
