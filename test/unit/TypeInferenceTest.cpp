//===- TypeInferenceTest.cpp - Direct result types against the schemas ----===//
//
// inferNodeTypes computes the result types of the common operators directly
// (lib/ONNX/CommonTypeInference.cpp); these tests hold it to what ONNX's own
// inference functions give for the same nodes, results and errors alike.
//
//===----------------------------------------------------------------------===//

#include "ampc/ONNX/TypeInference.h"

#include <gtest/gtest.h>

#include <random>

namespace ampc {
namespace {

std::string describe(llvm::Expected<std::vector<TensorType>> &types) {
  if (!types)
    return "error: " + llvm::toString(types.takeError());
  std::string s;
  for (const TensorType &t : *types)
    s += t.str() + ";";
  return s;
}

/// Both inferences of `n`, as text: equal when they agree.
void expectSameAsSchema(const Node &n) {
  auto direct = inferNodeTypes(n);
  auto schema = inferNodeTypesWithSchema(n);
  EXPECT_EQ(describe(direct), describe(schema)) << n.opType();
}

Shape randomShape(std::mt19937 &rng) {
  std::uniform_int_distribution<int> rank(0, 4), dim(0, 3);
  Shape s(rank(rng));
  for (int64_t &d : s) {
    int k = dim(rng);
    d = k == 0 ? 1 : k == 1 ? 0 : k + 1; // 1, 0, 3 or 4: broadcasts, empties and clashes
  }
  return s;
}

/// A shape that broadcasts with `s` (a suffix of it with some dims set to 1).
Shape compatibleShape(const Shape &s, std::mt19937 &rng) {
  std::uniform_int_distribution<size_t> keep(0, s.size());
  Shape out(s.end() - keep(rng), s.end());
  for (int64_t &d : out)
    if (rng() % 3 == 0)
      d = 1;
  return out;
}

class TypeInferenceTest : public ::testing::Test {
protected:
  TypeInferenceTest() { g_.opsets[""] = 17; }

  Value *input(const Shape &s, DType t = DType::F32) {
    return g_.addInput("x" + std::to_string(count_++), TensorType(t, s));
  }
  Node *node(const std::string &op, const std::vector<Value *> &inputs,
             std::map<std::string, Attribute> attrs = {}) {
    return g_.createNode(op, inputs, {TensorType(DType::F32, {})}, std::move(attrs));
  }

  Graph g_;
  unsigned count_ = 0;
};

/// Add, Sub, Mul, Div, the comparisons and Where on random shapes, most of
/// them broadcastable, some not (the schema's error either way).
TEST_F(TypeInferenceTest, BroadcastingOpsAgreeWithTheSchema) {
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    Shape a = randomShape(rng);
    Shape b = rng() % 4 ? compatibleShape(a, rng) : randomShape(rng);
    if (rng() % 2)
      std::swap(a, b);
    for (const char *op : {"Add", "Sub", "Mul", "Div", "Greater", "Less", "Equal"})
      expectSameAsSchema(*node(op, {input(a), input(b)}));
    Shape c = rng() % 4 ? compatibleShape(a, rng) : randomShape(rng);
    expectSameAsSchema(*node("Where", {input(c, DType::Bool), input(a, DType::F16), input(b, DType::F16)}));
  }
}

/// Operand types that disagree are refused before any shape is computed.
TEST_F(TypeInferenceTest, MismatchedElementTypesAreRefused) {
  Node *n = node("Add", {input({2, 3}), input({3}, DType::F16)});
  auto types = inferNodeTypes(*n);
  ASSERT_FALSE(types);
  EXPECT_NE(llvm::toString(types.takeError()).find("type parameter T is bound to"),
            std::string::npos);
}

/// Unary ops and Cast to every type keep the shape; an invalid 'to' is the
/// schema's error.
TEST_F(TypeInferenceTest, UnaryAndCastAgreeWithTheSchema) {
  std::mt19937 rng(11);
  for (int i = 0; i < 50; ++i) {
    Shape s = randomShape(rng);
    for (const char *op : {"Neg", "Relu", "Exp", "Log", "Sqrt", "Sigmoid", "Tanh", "Abs",
                           "Reciprocal", "Identity", "Erf", "Sign"})
      expectSameAsSchema(*node(op, {input(s)}));
    for (int64_t to : {1, 7, 9, 10, 11, 16, 0, 99})
      expectSameAsSchema(*node("Cast", {input(s)}, {{"to", Attribute::ofInt(to)}}));
  }
}

/// ReduceSum with constant axes (positive, negative, repeated, out of
/// range), none, keepdims and noop_with_empty_axes; axes known at run time
/// only give the schema's answer.
TEST_F(TypeInferenceTest, ReduceSumAgreesWithTheSchema) {
  std::mt19937 rng(13);
  for (int i = 0; i < 200; ++i) {
    Shape s = randomShape(rng);
    std::vector<int64_t> axes;
    for (int k = rng() % 3; k > 0; --k)
      axes.push_back(static_cast<int64_t>(rng() % 11) - 5);
    std::map<std::string, Attribute> attrs;
    if (rng() % 2)
      attrs["keepdims"] = Attribute::ofInt(rng() % 2);
    if (rng() % 3 == 0)
      attrs["noop_with_empty_axes"] = Attribute::ofInt(1);
    Value *a = g_.addInitializer("axes" + std::to_string(i), Tensor::int64Vector(axes), true);
    expectSameAsSchema(*node("ReduceSum", {input(s), a}, attrs));
    expectSameAsSchema(*node("ReduceSum", {input(s)}, attrs));
    expectSameAsSchema(*node("ReduceSum", {input(s), input({1}, DType::I64)}, attrs));
  }
}

/// Gemm with every transpose flag, matching and clashing inner sizes, and
/// operands that are not matrices.
TEST_F(TypeInferenceTest, GemmAgreesWithTheSchema) {
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1})
      for (Shape a : {Shape{2, 3}, Shape{3, 2}, Shape{0, 3}, Shape{3}})
        for (Shape b : {Shape{3, 4}, Shape{4, 3}, Shape{2, 4}, Shape{1, 3, 4}}) {
          std::map<std::string, Attribute> attrs{{"transA", Attribute::ofInt(ta)},
                                                 {"transB", Attribute::ofInt(tb)}};
          expectSameAsSchema(*node("Gemm", {input(a), input(b)}, attrs));
          expectSameAsSchema(*node("Gemm", {input(a), input(b), input({4})}, attrs));
        }
}

} // namespace
} // namespace ampc
