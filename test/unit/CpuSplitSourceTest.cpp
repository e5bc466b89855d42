//===- CpuSplitSourceTest.cpp - Transposes reading a Split's operand ------===//
//
// runtime/cpu/SplitSource.h: which Transposes the CPU backend lets gather
// their part from a Split's operand (and so skip the Split), and where in
// the operand. The bits are checked end to end by
// test/runtime/cpu-split-source.test.
//
//===----------------------------------------------------------------------===//

#include "FixturePlans.h"

#include "cpu/SplitSource.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

using namespace ampc;
namespace rcpu = ampc::rt::cpu;

namespace {

/// The Transpose steps given a source.
std::vector<int> takers(const plan::Plan &p) {
  std::vector<int> out;
  std::vector<rcpu::SplitSource> e = rcpu::splitSources(p, p.programs(0));
  for (int s = 0; s < static_cast<int>(e.size()); ++s)
    if (e[s].source >= 0)
      out.push_back(s);
  return out;
}

} // namespace

/// The GPT fixture's Split of Q/K/V into three: its three Transposes read
/// the projection at the offsets of the three parts, with the projection's
/// row length as the stride of the rows, in fp32 and bf16.
TEST(CpuSplitSource, GptProjectionIsGathered) {
  for (const char *precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    plan::Plan p;
    ASSERT_TRUE(test::compileTrainingPlan("gpt", precision, "adamw", p));
    const plan::Program &prog = p.programs(0);
    std::vector<int> steps = takers(p);
    ASSERT_EQ(steps.size(), 3u);
    std::vector<rcpu::SplitSource> e = rcpu::splitSources(p, prog);
    const plan::Step &split = prog.steps(e[steps[0]].splitStep);
    ASSERT_EQ(split.op(), "Split");
    const plan::Tensor &x = p.tensors(split.inputs(0));
    int64_t row = x.shape(x.shape_size() - 1), part = row / 3;
    std::vector<int64_t> offsets;
    for (int t : steps) {
      EXPECT_EQ(prog.steps(t).op(), "Transpose");
      EXPECT_EQ(e[t].source, split.inputs(0));
      EXPECT_EQ(e[t].splitStep, e[steps[0]].splitStep);
      offsets.push_back(e[t].offset);
      // [batch, rows, heads, cols]: cols contiguous, heads a part's cols
      // apart, rows a projection row apart.
      const std::vector<int64_t> &st = e[t].strides;
      ASSERT_EQ(st.size(), 4u);
      EXPECT_EQ(st[3], 1);
      EXPECT_EQ(st[1], row);
      EXPECT_EQ(st[0], row * p.tensors(prog.steps(t).inputs(0)).shape(1));
    }
    std::sort(offsets.begin(), offsets.end());
    EXPECT_EQ(offsets, (std::vector<int64_t>{0, part, 2 * part}));
  }
}

/// The Transposes read the operand after the Split: a result landing on it,
/// a part taller than the operand, a second reader of a part, or a Split along another axis rules it out.
TEST(CpuSplitSource, RefusedWhereTheSplitIsNeeded) {
  plan::Plan p;
  ASSERT_TRUE(test::compileTrainingPlan("gpt", "bf16", "adamw", p));
  std::vector<int> steps = takers(p);
  ASSERT_FALSE(steps.empty());
  const plan::Program &prog = p.programs(0);
  int t = steps.back();
  int s = rcpu::splitSources(p, prog)[t].splitStep;
  int x = prog.steps(s).inputs(0);
  int root = p.tensors(x).has_view_of() ? p.tensors(x).view_of() : x;
  plan::Plan overlap = p;
  overlap.mutable_tensors(prog.steps(t).outputs(0))->set_offset(p.tensors(root).offset());
  EXPECT_TRUE(takers(overlap).empty()) << "a Transpose's result on the operand";
  plan::Plan twice = p;
  twice.mutable_programs(0)->mutable_steps(t)->add_inputs(prog.steps(t).inputs(0));
  EXPECT_TRUE(takers(twice).empty()) << "a part read twice";
  plan::Plan axis = p;
  for (plan::Attribute &a : *axis.mutable_programs(0)->mutable_steps(s)->mutable_attrs())
    if (a.name() == "axis")
      a.set_i(0);
  EXPECT_TRUE(takers(axis).empty()) << "another axis";
  // A corrupt plan: a part with more rows than the operand (the skipped
  // Split's kernel would have refused it) must not be gathered past it.
  plan::Plan taller = p;
  int part = prog.steps(s).outputs(0);
  taller.mutable_tensors(part)->set_shape(0, p.tensors(part).shape(0) + 1);
  EXPECT_TRUE(takers(taller).empty()) << "a part taller than the operand";
}
