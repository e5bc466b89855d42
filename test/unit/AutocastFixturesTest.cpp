//===- AutocastFixturesTest.cpp - Autocast on the torch fixtures ----------===//
//
// For each fixture, in fp16 and bf16: the autocast graph verifies and passes
// the ONNX checker, has no duplicate or round-trip casts, gives every used
// parameter exactly one weight cast, and evaluated by the reference
// interpreter (which rounds every stored value to its type) gives a loss
// close to the fp32 loss.
//
//===----------------------------------------------------------------------===//

#include "FixtureUtil.h"

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/ONNX/Export.h"
#include "ampc/Pass/Pass.h"
#include "ampc/Passes/Autocast.h"
#include "ampc/Passes/Passes.h"

#include <gtest/gtest.h>

#include <set>

using namespace ampc;
using namespace ampc::test;

namespace {

struct Case {
  const char *fixture;
  DType lowType;
  double tolerance;
  /// The expected summary line.
  const char *summary;
};

std::string caseName(const testing::TestParamInfo<Case> &info) {
  return std::string(info.param.fixture) + "_" + shortDTypeName(info.param.lowType);
}

double lossOf(const Graph &g, const std::map<std::string, Tensor> &feeds) {
  auto outputs = Interpreter(g).run(feeds);
  if (!outputs) {
    ADD_FAILURE() << llvm::toString(outputs.takeError());
    return 0;
  }
  return outputs->front().getDouble(0);
}

/// Every (value, type) has at most one Cast, and no Cast undoes another.
void expectMinimalCasts(const Graph &g) {
  std::set<std::pair<const Value *, int64_t>> seen;
  for (const Node *n : g.nodes()) {
    if (!n->is("Cast"))
      continue;
    const Value *in = n->input(0);
    int64_t to = n->getInt("to", 0);
    EXPECT_TRUE(seen.insert({in, to}).second)
        << "value '" << in->name() << "' is cast to type " << to << " twice";
    const Node *p = in->producer();
    if (p && p->is("Cast")) {
      EXPECT_NE(p->input(0)->dtype(), n->output()->dtype())
          << "round trip through '" << in->name() << "'";
    }
  }
}

/// Parameters are read only in fp32 or through their one weight cast.
void expectOneWeightCastPerParameter(const Graph &g) {
  for (const Value *v : g.initializers()) {
    if (!v->isParameter())
      continue;
    unsigned casts = 0;
    for (const Use &u : v->uses())
      if (u.user->is("Cast"))
        ++casts;
    EXPECT_LE(casts, 1u) << "parameter '" << v->name() << "'";
  }
}

class AutocastFixture : public testing::TestWithParam<Case> {};

TEST_P(AutocastFixture, CheckerCastsAndLoss) {
  const Case &c = GetParam();
  std::unique_ptr<Graph> g = loadFixtureModel(c.fixture);
  ASSERT_TRUE(g);
  ASSERT_FALSE(static_cast<bool>(canonicalize(*g)));
  auto feeds = loadFixtureInputs(c.fixture);
  double reference = lossOf(*g, feeds);
  ASSERT_NE(reference, 0.0);

  AutocastOptions opts;
  opts.lowType = c.lowType;
  auto result = autocast(*g, opts);
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  EXPECT_EQ(result->summaryLine(), c.summary);
  EXPECT_GT(result->lowNodes, 0u);

  llvm::Error verified = verifyGraphAndTypes(*g);
  EXPECT_FALSE(static_cast<bool>(verified)) << llvm::toString(std::move(verified));
  auto bytes = serializeModel(*g, ModelFormat::Binary);
  EXPECT_TRUE(static_cast<bool>(bytes)) << llvm::toString(bytes.takeError());
  expectMinimalCasts(*g);
  expectOneWeightCastPerParameter(*g);
  for (const Value *v : g->outputs())
    EXPECT_EQ(v->dtype(), DType::F32) << "graph output '" << v->name() << "'";

  double loss = lossOf(*g, feeds);
  double relative = std::fabs(loss - reference) / std::fabs(reference);
  EXPECT_LE(relative, c.tolerance) << "fp32 loss " << reference << ", " << shortDTypeName(c.lowType)
                                   << " loss " << loss;
  // The low-precision graph must really round somewhere: an autocast that
  // changed nothing would match exactly.
  EXPECT_NE(loss, reference);
}

/// A second autocast finds nothing left to do.
TEST_P(AutocastFixture, Idempotent) {
  const Case &c = GetParam();
  std::unique_ptr<Graph> g = loadFixtureModel(c.fixture);
  ASSERT_TRUE(g);
  ASSERT_FALSE(static_cast<bool>(canonicalize(*g)));
  AutocastOptions opts;
  opts.lowType = c.lowType;
  auto first = autocast(*g, opts);
  ASSERT_TRUE(static_cast<bool>(first)) << llvm::toString(first.takeError());
  size_t nodes = g->numNodes();
  auto second = autocast(*g, opts);
  ASSERT_TRUE(static_cast<bool>(second)) << llvm::toString(second.takeError());
  EXPECT_EQ(second->casts, 0u);
  EXPECT_EQ(second->lowNodes, first->lowNodes);
  EXPECT_EQ(g->numNodes(), nodes);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, AutocastFixture,
    testing::Values(
        Case{"mlp", DType::F16, 1e-2, "autocast: 5/6 float nodes in fp16, 8 casts (6 weight casts)"},
        Case{"mlp", DType::BF16, 3e-2,
             "autocast: 5/6 float nodes in bf16, 8 casts (6 weight casts)"},
        Case{"cnn", DType::F16, 1e-2, "autocast: 6/7 float nodes in fp16, 6 casts (4 weight casts)"},
        Case{"cnn", DType::BF16, 3e-2,
             "autocast: 2/7 float nodes in bf16, 4 casts (2 weight casts)"},
        Case{"transformer", DType::F16, 1e-2,
             "autocast: 20/37 float nodes in fp16, 13 casts (5 weight casts)"},
        Case{"transformer", DType::BF16, 3e-2,
             "autocast: 20/37 float nodes in bf16, 13 casts (5 weight casts)"}),
    caseName);

} // namespace
