//===- RematTest.cpp - Recomputation changes no number ---------------------===//
//
// The remat pass recomputes forward values in the backward pass instead of
// keeping them; the cast-cache pass keeps parameter copies as state instead
// of casting them. Neither may change a number: three training steps of each
// fixture, with and without them, run by the reference interpreter, give
// bitwise the same outputs and state.
//
//===----------------------------------------------------------------------===//

#include "FixtureUtil.h"
#include "StepRunner.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace ampc;
using namespace ampc::test;

namespace {

struct Case {
  const char *fixture;
  const char *precision;
};

class RematKeepsNumbers : public ::testing::TestWithParam<Case> {};

bool sameBits(const Tensor &a, const Tensor &b) {
  return a.type() == b.type() && a.byteSize() == b.byteSize() &&
         std::memcmp(a.data(), b.data(), a.byteSize()) == 0;
}

TEST_P(RematKeepsNumbers, ThreeSteps) {
  const Case &c = GetParam();
  bool low = std::string(c.precision) != "fp32";
  std::string base = "canonicalize," +
                     (low ? std::string("autocast{dtype=") + c.precision + "}," : std::string()) +
                     "autodiff,loss-scale,optimizer{optimizer=adamw lr=0.01},canonicalize";
  StepRunner plain, remat;
  ASSERT_TRUE(plain.compile(loadFixtureModel(c.fixture), base));
  ASSERT_TRUE(remat.compile(loadFixtureModel(c.fixture),
                            base + (low ? ",cast-cache" : "") + ",remat"));
  size_t recomputed = 0;
  for (const Node *n : remat.graph().nodes())
    recomputed += n->output() && n->output()->name().find(".remat") != std::string::npos;
  EXPECT_GT(recomputed, 0u) << "nothing was recomputed: the test would prove nothing";

  auto batch = loadFixtureInputs(c.fixture);
  for (int step = 0; step < 3; ++step) {
    auto a = plain.step(batch), b = remat.step(batch);
    for (const auto &[name, t] : a) {
      if (name.find(".next") != std::string::npos)
        continue; // state, compared below (the remat graph has more of it)
      ASSERT_TRUE(b.count(name)) << name;
      EXPECT_TRUE(sameBits(t, b.at(name))) << c.fixture << " " << c.precision << " step " << step
                                           << " output '" << name << "'";
    }
  }
  for (const auto &[name, t] : plain.state())
    EXPECT_TRUE(sameBits(t, remat.state().at(name)))
        << c.fixture << " " << c.precision << " state '" << name << "'";
}

// (In fp32 the MLP and the CNN, and the CNN in bf16, have nothing worth
// recomputing.)
const Case kCases[] = {{"mlp", "fp16"},         {"cnn", "fp16"},         {"mlp", "bf16"},
                       {"transformer", "fp32"}, {"transformer", "fp16"}, {"transformer", "bf16"}};

INSTANTIATE_TEST_SUITE_P(Fixtures, RematKeepsNumbers, ::testing::ValuesIn(kCases),
                         [](const auto &info) {
                           return std::string(info.param.fixture) + "_" + info.param.precision;
                         });

} // namespace
