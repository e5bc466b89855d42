//===- InterpreterTest.cpp - Reference interpreter behaviour --------------===//

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/ONNX/Import.h"

#include <gtest/gtest.h>

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
