//===- CpuTransposedResultTest.cpp - MatMuls writing their Transpose ------===//
//
// runtime/cpu/TransposedResult.h: which MatMul steps the CPU backend lets
// write the Transpose of their result directly, with which strides, and
// the lowering's part (lib/Lower: that Transpose's result lives from the
// MatMul on). The bits are checked end to end by
// test/runtime/cpu-transposed-result.test.
//
//===----------------------------------------------------------------------===//

#include "FixturePlans.h"

#include "cpu/TransposedResult.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace ampc;
namespace rcpu = ampc::rt::cpu;

namespace {

/// The MatMul steps whose result only a Transpose keeping the last axis
/// reads, found without the analysis.
std::vector<int> candidates(const plan::Plan &p) {
  const plan::Program &prog = p.programs(0);
  std::vector<int> out;
  for (int m = 0; m < prog.steps_size(); ++m) {
    const plan::Step &mm = prog.steps(m);
    if (mm.op() != "MatMul" || p.tensors(mm.outputs(0)).shape_size() < 3)
      continue;
    int y = mm.outputs(0), readers = 0, t = -1;
    for (int s = 0; s < prog.steps_size(); ++s)
      for (int in : prog.steps(s).inputs())
        if (in == y)
          ++readers, t = s;
    if (readers != 1 || prog.steps(t).op() != "Transpose")
      continue;
    const auto &perm = prog.steps(t).attrs(0).ints().values();
    if (perm[perm.size() - 1] == perm.size() - 1)
      out.push_back(m);
  }
  return out;
}

std::vector<int> takers(const plan::Plan &p) {
  std::vector<int> out;
  std::vector<rcpu::TransposedResult> e = rcpu::transposedResults(p, p.programs(0));
  for (int s = 0; s < static_cast<int>(e.size()); ++s)
    if (e[s].transposeStep >= 0)
      out.push_back(s);
  return out;
}

} // namespace

/// In the GPT fixture every attention MatMul whose result a Transpose moves
/// the heads of (P V forward; dQ, dK, dV backward) takes it, in fp32 and
/// bf16, since the lowering makes the Transpose's result live from the
/// MatMul on; the strides are Z's own, permuted.
TEST(CpuTransposedResult, GptAttentionResultsTakeIt) {
  for (const char *precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    plan::Plan p;
    ASSERT_TRUE(test::compileTrainingPlan("gpt", precision, "adamw", p));
    std::vector<int> want = candidates(p);
    ASSERT_GE(want.size(), 3u);
    EXPECT_EQ(takers(p), want);
    const plan::Program &prog = p.programs(0);
    std::vector<rcpu::TransposedResult> e = rcpu::transposedResults(p, prog);
    for (int m : want) {
      const plan::Step &t = prog.steps(e[m].transposeStep);
      ASSERT_EQ(t.inputs(0), prog.steps(m).outputs(0));
      const plan::Tensor &z = p.tensors(t.outputs(0));
      const auto &perm = t.attrs(0).ints().values();
      int64_t stride = 1;
      for (int d = z.shape_size() - 1; d >= 0; --d) {
        EXPECT_EQ(e[m].strides[perm[d]], stride) << "step " << m << " axis " << perm[d];
        stride *= z.shape(d);
      }
    }
  }
}

/// The MatMul writes Z while it reads its operands: Z on an operand's bytes
/// rules it out, as does a second reader of the result or a Transpose that
/// moves the last axis.
TEST(CpuTransposedResult, RefusedWhereTheCopyIsNeeded) {
  plan::Plan p;
  ASSERT_TRUE(test::compileTrainingPlan("gpt", "bf16", "adamw", p));
  std::vector<int> steps = takers(p);
  ASSERT_FALSE(steps.empty());
  int m = steps.front();
  const plan::Program &prog = p.programs(0);
  int t = rcpu::transposedResults(p, prog)[m].transposeStep;
  int a = prog.steps(m).inputs(0), z = prog.steps(t).outputs(0);
  ASSERT_EQ(p.tensors(a).storage(), plan::ARENA);
  plan::Plan overlap = p;
  overlap.mutable_tensors(z)->set_offset(p.tensors(a).offset());
  EXPECT_EQ(rcpu::transposedResults(overlap, overlap.programs(0))[m].transposeStep, -1)
      << "Z on the MatMul's operand";
  plan::Plan twice = p;
  twice.mutable_programs(0)->mutable_steps(t)->add_inputs(prog.steps(m).outputs(0));
  EXPECT_EQ(rcpu::transposedResults(twice, twice.programs(0))[m].transposeStep, -1)
      << "the result read twice";
  plan::Plan lastMoved = p;
  auto *perm = lastMoved.mutable_programs(0)->mutable_steps(t)->mutable_attrs(0)->mutable_ints();
  int r = perm->values_size();
  std::swap(*perm->mutable_values()->Mutable(r - 1), *perm->mutable_values()->Mutable(r - 2));
  EXPECT_EQ(rcpu::transposedResults(lastMoved, lastMoved.programs(0))[m].transposeStep, -1)
      << "the last axis moved";
}
