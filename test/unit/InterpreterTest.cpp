//===- InterpreterTest.cpp - Reference interpreter behaviour --------------===//

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/ONNX/Import.h"

#include <gtest/gtest.h>

#include <random>

using namespace ampc;

namespace {
std::unique_ptr<Graph> parse(const std::string &text) {
  auto g = importModelText(text, "test");
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return nullptr;
  }
  return std::move(*g);
}
} // namespace

/// Values stored as fp16 are rounded: 1 + 2^-11 is not representable.
TEST(Interpreter, RoundsToStoredType) {
  auto g = parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float16[1] a, float16[1] b) => (float16[1] y, float[1] z) {
  y = Add (a, b)
  ya = Cast <to = 1> (a)
  yb = Cast <to = 1> (b)
  z = Add (ya, yb)
})");
  ASSERT_TRUE(g);
  Interpreter interp(*g);
  std::map<std::string, Tensor> feeds;
  feeds["a"] = Tensor::fromDoubles(TensorType(DType::F16, {1}), std::vector<double>{1.0});
  feeds["b"] = Tensor::fromDoubles(TensorType(DType::F16, {1}),
                                   std::vector<double>{std::ldexp(1.0, -11)});
  auto out = interp.run(feeds);
  ASSERT_TRUE(static_cast<bool>(out)) << llvm::toString(out.takeError());
  EXPECT_EQ((*out)[0].getDouble(0), 1.0);                        // tie rounds to even
  EXPECT_EQ((*out)[1].getDouble(0), 1.0 + std::ldexp(1.0, -11)); // fp32 keeps it
}

/// A missing feed is an error naming the input.
TEST(Interpreter, MissingFeed) {
  auto g = parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1] a) => (float[1] y) { y = Relu (a) })");
  ASSERT_TRUE(g);
  Interpreter interp(*g);
  auto out = interp.run({});
  ASSERT_FALSE(static_cast<bool>(out));
  EXPECT_NE(llvm::toString(out.takeError()).find("'a'"), std::string::npos);
}

/// MaxPoolGrad finds each window's maximum in X again: the result equals
/// scattering dY through the Indices MaxPool returns (PyTorch's definition),
/// including windows with tied maxima (the first in window order wins) and
/// overlapping windows, where one input collects several dY values.
TEST(Interpreter, MaxPoolGradMatchesIndices) {
  auto g = parse(R"(<ir_version: 8, opset_import: ["" : 17, "ampc" : 1]>
g (float[2,3,7,7] x, float[2,3,4,4] dy) => (float[2,3,7,7] dx, int64[2,3,4,4] i) {
  y, i = MaxPool <kernel_shape = [3,3], strides = [2,2], pads = [1,1,1,1]> (x)
  dx = ampc.MaxPoolGrad <kernel_shape = [3,3], strides = [2,2], pads = [1,1,1,1], shape = [2,3,7,7]> (dy, x)
})");
  ASSERT_TRUE(g);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> level(0, 2); // few values: many ties
  std::normal_distribution<double> normal;
  std::vector<double> x(2 * 3 * 7 * 7), dy(2 * 3 * 4 * 4);
  for (double &v : x)
    v = level(rng);
  for (double &v : dy)
    v = normal(rng);
  std::map<std::string, Tensor> feeds;
  feeds["x"] = Tensor::fromDoubles(TensorType(DType::F32, {2, 3, 7, 7}), x);
  feeds["dy"] = Tensor::fromDoubles(TensorType(DType::F32, {2, 3, 4, 4}), dy);
  Interpreter interp(*g);
  auto out = interp.run(feeds);
  ASSERT_TRUE(static_cast<bool>(out)) << llvm::toString(out.takeError());
  const Tensor &dx = (*out)[0], &indices = (*out)[1];
  std::vector<double> want(x.size(), 0.0);
  for (size_t k = 0; k < dy.size(); ++k)
    want[indices.getInt(k)] += static_cast<float>(dy[k]);
  int ties = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    EXPECT_FLOAT_EQ(dx.getDouble(k), want[k]) << "element " << k;
    ties += x[k] == 2.0;
  }
  EXPECT_GT(ties, 20); // the case is not vacuous: windows hold several maxima
}
