//===- AutocastPolicyTest.cpp - Default lists and policy files ------------===//

#include "ampc/Passes/AutocastPolicy.h"

#include <gtest/gtest.h>

using namespace ampc;

namespace {

using Names = std::vector<std::string>;

std::optional<PrecisionClass> classOf(const AutocastPolicy &p, const std::string &op) {
  auto entry = p.classify(op);
  return entry ? std::optional(entry->cls) : std::nullopt;
}

} // namespace

/// The default lists are exactly those of issue 3 (and of
/// docs/precision-policy.md), with Erf moved from INFER to DENY (GELU's 1 + erf
/// cancels in low precision).
TEST(AutocastPolicy, DefaultLists) {
  AutocastPolicy p = AutocastPolicy::defaults();
  EXPECT_EQ(p.entries(PrecisionClass::Allow),
            (Names{"Conv", "ConvTranspose", "Einsum", "Gemm", "MatMul"}));
  EXPECT_EQ(p.entries(PrecisionClass::Deny),
            (Names{"Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cosh", "CumSum", "Erf", "Exp",
                   "GroupNormalization", "InstanceNormalization", "LayerNormalization",
                   "Log", "LogSoftmax", "LpNormalization", "NegativeLogLikelihoodLoss", "Pow",
                   "Range", "Reciprocal", "Reduce*", "Resize", "Sinh", "Softmax",
                   "SoftmaxCrossEntropyLoss", "Softplus", "Tan", "TopK"}));
  EXPECT_EQ(p.entries(PrecisionClass::Infer),
            (Names{"Add", "AveragePool", "BatchNormalization", "Clip", "Div", "Elu",
                   "GlobalAveragePool", "HardSigmoid", "HardSwish", "LeakyRelu", "Mean", "Mul", "PRelu",
                   "Selu", "Sigmoid", "Sqrt", "Sub", "Sum", "Tanh"}));
  EXPECT_EQ(p.entries(PrecisionClass::Clear),
            (Names{"Abs", "Concat", "Dropout", "Equal", "Expand", "Flatten", "Gather",
                   "GatherElements", "GlobalMaxPool", "Greater", "GreaterOrEqual", "Identity",
                   "Less", "LessOrEqual", "Max", "MaxPool", "Min", "Neg", "Pad", "Relu",
                   "Reshape", "Sign", "Slice", "Split", "Squeeze", "Tile", "Transpose",
                   "Unsqueeze", "Where"}));
}

/// "Reduce*" covers every Reduce op; exact names and longer patterns win;
/// ops on no list have no class.
TEST(AutocastPolicy, PatternsAndUnlisted) {
  AutocastPolicy p = AutocastPolicy::defaults();
  EXPECT_EQ(classOf(p, "ReduceMean"), PrecisionClass::Deny);
  EXPECT_EQ(classOf(p, "ReduceLogSumExp"), PrecisionClass::Deny);
  EXPECT_EQ(classOf(p, "Sin"), std::nullopt);
  EXPECT_EQ(classOf(p, "ampc.MatMul"), std::nullopt);
  p.setClass("ReduceMax", PrecisionClass::Clear, "test");
  EXPECT_EQ(classOf(p, "ReduceMax"), PrecisionClass::Clear);
  EXPECT_EQ(classOf(p, "ReduceMin"), PrecisionClass::Deny);
  p.setClass("ReduceL*", PrecisionClass::Infer, "test");
  EXPECT_EQ(classOf(p, "ReduceL2"), PrecisionClass::Infer);
  p.unlist("ReduceSum", "test");
  EXPECT_EQ(classOf(p, "ReduceSum"), std::nullopt);
  EXPECT_EQ(classOf(p, "ReduceProd"), PrecisionClass::Deny);
}

/// A policy file moves ops between classes, takes them off the lists and
/// forces nodes; origins name the file and line.
TEST(AutocastPolicy, ApplyText) {
  AutocastPolicy p = AutocastPolicy::defaults();
  llvm::Error err = p.applyText("# comment\n"
                                "deny MatMul, Gemm   # trailing comment\n"
                                "\n"
                                "allow\tSoftmax\n"
                                "unlist Relu\n"
                                "fp32-nodes /a/b n2\n"
                                "lowp-nodes n3\n",
                                "p.txt");
  ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
  auto matmul = p.classify("MatMul");
  ASSERT_TRUE(matmul.has_value());
  EXPECT_EQ(matmul->cls, PrecisionClass::Deny);
  EXPECT_EQ(matmul->origin, "p.txt:2");
  EXPECT_EQ(classOf(p, "Gemm"), PrecisionClass::Deny);
  EXPECT_EQ(classOf(p, "Softmax"), PrecisionClass::Allow);
  EXPECT_EQ(classOf(p, "Relu"), std::nullopt);
  ASSERT_EQ(p.forcedNodes().size(), 3u);
  EXPECT_FALSE(p.forcedNodes().at("/a/b").lowPrecision);
  EXPECT_EQ(p.forcedNodes().at("n2").origin, "p.txt:6");
  EXPECT_TRUE(p.forcedNodes().at("n3").lowPrecision);
}

/// Errors name the file and line; forcing a node both ways is refused.
TEST(AutocastPolicy, Errors) {
  AutocastPolicy p = AutocastPolicy::defaults();
  llvm::Error bad = p.applyText("allow MatMul\nsometimes Exp\n", "q.txt");
  ASSERT_TRUE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(std::move(bad)),
            "q.txt:2: unknown directive 'sometimes' (allow, deny, infer, clear, unlist, "
            "fp32-nodes, lowp-nodes)");
  llvm::Error empty = p.applyText("deny\n", "q.txt");
  ASSERT_TRUE(static_cast<bool>(empty));
  EXPECT_EQ(llvm::toString(std::move(empty)), "q.txt:1: 'deny' names nothing");
  llvm::Error both = p.applyText("fp32-nodes n\nlowp-nodes n\n", "q.txt");
  ASSERT_TRUE(static_cast<bool>(both));
  EXPECT_NE(llvm::toString(std::move(both)).find("forced to both fp32 (q.txt:1)"),
            std::string::npos);
  llvm::Error missing = p.applyFile("/nonexistent/policy.txt");
  ASSERT_TRUE(static_cast<bool>(missing));
  llvm::consumeError(std::move(missing));
}
