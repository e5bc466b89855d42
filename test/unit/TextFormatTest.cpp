//===- TextFormatTest.cpp - ONNX text reading and printing ----------------===//

#include "ampc/IR/Printer.h"
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

/// Quoted names, node names, attributes of every kind and fp16 literals
/// survive print -> parse -> print unchanged.
TEST(TextFormat, RoundTrip) {
  const char *text = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] "in.x", float16[2] h) => (float16[3,2] y)
<float[3] "w.0" = {1.0, -2.5, 3e-3}, int64[2] shape = {3, 2}>
{
  [n1] "a/b" = Add ("in.x", "w.0")
  t = Transpose <perm = [1, 0]> ("a/b")
  r = Reshape (t, shape)
  c = Cast <to = 10> (r)
  d = LeakyRelu <alpha = 0.25> (c)
  y = Add (d, h)
}
)";
  auto g = parse(text);
  ASSERT_TRUE(g);
  PrintOptions full;
  full.elideLargeData = false;
  std::string once = printGraphToString(*g, full);
  auto g2 = parse(once);
  ASSERT_TRUE(g2);
  EXPECT_EQ(once, printGraphToString(*g2, full));
  EXPECT_NE(once.find("[n1] \"a/b\" = Add (\"in.x\", \"w.0\")"), std::string::npos) << once;
  EXPECT_NE(once.find("alpha = 0.25"), std::string::npos);
  EXPECT_NE(once.find("float16[3,2]"), std::string::npos);
}

/// Errors point at the line and column.
TEST(TextFormat, ErrorsHaveLocations) {
  auto g = importModelText("<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[2] x) => (y)\n{\n"
                           "  y = Relu (x\n}\n",
                           "bad.onnxtxt");
  ASSERT_FALSE(static_cast<bool>(g));
  std::string msg = llvm::toString(g.takeError());
  EXPECT_NE(msg.find("bad.onnxtxt: line 5"), std::string::npos) << msg;
}

/// An initializer that is also a graph input is a parameter (torch's
/// keep_initializers_as_inputs), unless ampc.input_defaults lists it: then it
/// is an input with a default, which survives a round trip.
TEST(TextFormat, InputDefaults) {
  auto p = parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x, float w = {0.5}) => (float[2] y) { y = Mul (x, w) })");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->findValue("w")->isParameter());
  auto g = parse(R"(<ir_version: 8, opset_import: ["" : 17],
  metadata_props: ["ampc.input_defaults" : "lr"]>
g (float[2] x, float lr = {0.5}) => (float[2] y) { y = Mul (x, lr) })");
  ASSERT_TRUE(g);
  const Value *lr = g->findValue("lr");
  ASSERT_TRUE(lr && lr->hasDefault());
  EXPECT_EQ(lr->data()->getDouble(0), 0.5);
  std::string text = printGraphToString(*g);
  EXPECT_NE(text.find("float lr = {0.5}"), std::string::npos) << text;
  EXPECT_NE(text.find("\"ampc.input_defaults\" : \"lr\""), std::string::npos) << text;
  auto g2 = parse(text);
  ASSERT_TRUE(g2);
  EXPECT_EQ(printGraphToString(*g2), text);
  EXPECT_TRUE(g2->findValue("lr")->isGraphInput());
}
