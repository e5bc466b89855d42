//===- CpuCastPrologueTest.cpp - Steps reading the bf16 value a cast widened ===//
//
// runtime/cpu/CastPrologue.h: which LayerNormalizationGrad and SoftmaxGrad
// steps the CPU backend lets read the bf16 gradient that a Cast widens, and
// the lowering's part (lib/Lower: the bf16 operand lives until that step).
// The bits are checked end to end by test/runtime/cpu-cast-prologue.test.
//
//===----------------------------------------------------------------------===//

#include "FixturePlans.h"

#include "cpu/CastPrologue.h"

#include "ampc/rt/PlanQueries.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

using namespace ampc;
namespace rcpu = ampc::rt::cpu;

namespace {

/// The steps given a prologue.
std::vector<int> takers(const plan::Plan &p) {
  std::vector<int> out;
  std::vector<rcpu::CastPrologue> e = rcpu::castPrologues(p, p.programs(0));
  for (int s = 0; s < static_cast<int>(e.size()); ++s)
    if (e[s].source >= 0)
      out.push_back(s);
  return out;
}

} // namespace

/// In the GPT fixture in bf16, each LayerNormalizationGrad and the
/// SoftmaxGrad read a Cast of a bf16 gradient: all take it, since the
/// lowering keeps the bf16 operand alive until they run; none in fp32.
TEST(CpuCastPrologue, GptGradientsTakeIt) {
  plan::Plan p;
  ASSERT_TRUE(test::compileTrainingPlan("gpt", "bf16", "adamw", p));
  const plan::Program &prog = p.programs(0);
  std::vector<int> steps = takers(p);
  int lnGrads = 0, softmaxGrads = 0;
  for (const plan::Step &s : prog.steps()) {
    lnGrads += s.op() == "ampc.LayerNormalizationGrad";
    softmaxGrads += s.op() == "ampc.SoftmaxGrad";
  }
  ASSERT_GT(lnGrads, 0);
  EXPECT_EQ(static_cast<int>(steps.size()), lnGrads + softmaxGrads);
  std::vector<rcpu::CastPrologue> e = rcpu::castPrologues(p, prog);
  for (int s : steps) {
    const plan::Step &cast = prog.steps(e[s].castStep);
    EXPECT_TRUE(rt::isCastStep(cast, plan::F32));
    EXPECT_EQ(cast.outputs(0), prog.steps(s).inputs(0));
    EXPECT_EQ(cast.inputs(0), e[s].source);
    EXPECT_EQ(p.tensors(e[s].source).type(), plan::BF16);
  }
  plan::Plan fp32;
  ASSERT_TRUE(test::compileTrainingPlan("gpt", "fp32", "adamw", fp32));
  EXPECT_TRUE(takers(fp32).empty());
}

/// The step writes its results while it reads the bf16 tensor: a result on
/// those bytes (as the memory plan made them before the lowering kept the
/// operand alive) rules it out, as does a step in between writing them.
TEST(CpuCastPrologue, NothingWritesTheBf16OperandBeforeTheStepReadsIt) {
  plan::Plan p;
  ASSERT_TRUE(test::compileTrainingPlan("gpt", "bf16", "adamw", p));
  const plan::Program &prog = p.programs(0);
  std::vector<rcpu::CastPrologue> e = rcpu::castPrologues(p, prog);
  std::vector<int> steps = takers(p);
  ASSERT_FALSE(steps.empty());
  int s = steps.front();
  int x = e[s].source;
  ASSERT_EQ(p.tensors(x).storage(), plan::ARENA);
  ASSERT_FALSE(p.tensors(x).has_view_of());
  // The step's first result moved onto X's bytes.
  int out = prog.steps(s).outputs(0);
  ASSERT_GE(out, 0);
  plan::Plan q = p;
  plan::Tensor &t = *q.mutable_tensors(out);
  t.clear_view_of();
  t.set_storage(plan::ARENA);
  t.set_offset(p.tensors(x).offset());
  EXPECT_EQ(rcpu::castPrologues(q, q.programs(0))[s].source, -1) << "a result over X";
  // The Cast's result read by another step too.
  plan::Plan twice = p;
  int y = prog.steps(s).inputs(0);
  twice.mutable_programs(0)->mutable_steps(s)->add_inputs(y);
  EXPECT_EQ(rcpu::castPrologues(twice, twice.programs(0))[s].source, -1) << "Y read twice";
}
