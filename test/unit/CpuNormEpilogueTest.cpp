//===- CpuNormEpilogueTest.cpp - BatchNormalization writing its Relu ------===//
//
// runtime/cpu/NormEpilogue.h: which BatchNormalization steps the CPU backend
// lets write the Relu (or Add then Relu) after them. The bits are checked end
// to end by test/runtime/cpu-norm-epilogue.test.
//
//===----------------------------------------------------------------------===//

#include "FixturePlans.h"

#include "cpu/NormEpilogue.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

using namespace ampc;
namespace rcpu = ampc::rt::cpu;

namespace {

std::string model(const std::string &body, const std::string &outputs) {
  return "<ir_version: 8, opset_import: [\"\" : 17]>\n"
         "g (float[2,16,4,4] x, float[2,16,4,4] res, float[16] s, float[16] b, float[16] m, "
         "float[16] v) => (" +
         outputs + ") {\ny = BatchNormalization(x, s, b, m, v)\n" + body + "\n}";
}

/// The normalization steps given an epilogue, as (step, residual) pairs.
std::vector<std::pair<int, int>> fusedSteps(const plan::Plan &p) {
  std::vector<std::pair<int, int>> fused;
  std::vector<rcpu::NormEpilogue> e = rcpu::normEpilogues(p, p.programs(0));
  for (int s = 0; s < static_cast<int>(e.size()); ++s)
    if (e[s].fused)
      fused.push_back({s, e[s].residual});
  return fused;
}

} // namespace

/// Relu, and Add of the residual then Relu, are taken; not when anything
/// else reads Y, nor another activation.
TEST(CpuNormEpilogue, ReluOrAddReluThatAloneReadsTheResult) {
  struct Case {
    std::string body, outputs;
    bool fuse;
    int expected; // -1: none; 0: a Relu; 1: an Add then Relu
  };
  const Case cases[] = {
      {"r = Relu(y)", "float[2,16,4,4] r", true, 0},
      {"r = Relu(y)", "float[2,16,4,4] r", false, 0}, // a plain Relu step
      {"a = Add(y, res)\nr = Relu(a)", "float[2,16,4,4] r", true, 1},
      {"a = Add(res, y)\nr = Relu(a)", "float[2,16,4,4] r", true, 1},
      {"a = Add(y, res)\nr = Relu(a)", "float[2,16,4,4] r", false, -1},  // two steps
      {"r = Relu(y)", "float[2,16,4,4] r, float[2,16,4,4] y", true, -1}, // Y an output
      {"r = Relu(y)\nz = Add(y, r)", "float[2,16,4,4] z", false, -1},    // Y read twice
      {"r = Sigmoid(y)", "float[2,16,4,4] r", true, -1},
      {"a = Add(y, y)\nr = Relu(a)", "float[2,16,4,4] r", true, -1},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.body + " => " + c.outputs + (c.fuse ? " (fused)" : ""));
    plan::Plan p;
    ASSERT_TRUE(test::planFromText(model(c.body, c.outputs), c.fuse, p));
    auto fused = fusedSteps(p);
    if (c.expected < 0) {
      EXPECT_TRUE(fused.empty());
      continue;
    }
    ASSERT_EQ(fused.size(), 1u);
    const plan::Program &prog = p.programs(0);
    EXPECT_EQ(prog.steps(fused[0].first).op(), "BatchNormalization");
    int res = -1;
    for (const plan::Binding &b : prog.inputs())
      if (b.name() == "res")
        res = b.tensor();
    EXPECT_EQ(fused[0].second, c.expected == 1 ? res : -1);
  }
}

/// The result is written while the normalization reads its operands: it may
/// not share their bytes. The residual may be the result's own bytes from
/// the same first byte (each element is read before it is written), but not
/// overlap it otherwise.
TEST(CpuNormEpilogue, ResultClobbersNothingTheNormalizationStillReads) {
  plan::Plan p;
  ASSERT_TRUE(
      test::planFromText(model("a = Add(y, res)\nr = Relu(a)", "float[2,16,4,4] r"), true, p));
  ASSERT_EQ(fusedSteps(p).size(), 1u);
  const plan::Program &prog = p.programs(0);
  int s = fusedSteps(p)[0].first;
  int x = prog.steps(s).inputs(0), z = prog.steps(s + 1).outputs(0);
  int res = fusedSteps(p)[0].second;
  auto base = [&](const plan::Plan &q, int id) {
    while (q.tensors(id).has_view_of())
      id = q.tensors(id).view_of();
    return id;
  };
  int zb = base(p, z);
  ASSERT_EQ(p.tensors(zb).storage(), plan::ARENA);
  auto moved = [&](int id, uint64_t offset) {
    plan::Plan q = p;
    plan::Tensor &t = *q.mutable_tensors(base(q, id));
    t.set_storage(plan::ARENA);
    t.set_offset(offset);
    return q;
  };
  uint64_t zOff = p.tensors(zb).offset();
  EXPECT_TRUE(fusedSteps(moved(x, zOff + 64)).empty()) << "Z over X";
  EXPECT_TRUE(fusedSteps(moved(prog.steps(s).inputs(1), zOff)).empty()) << "Z over scale";
  EXPECT_TRUE(fusedSteps(moved(res, zOff + 64)).empty()) << "R partly over Z";
  EXPECT_EQ(fusedSteps(moved(res, zOff)).size(), 1u) << "R in place under Z";
  // Y on the bytes of another tensor (an update in place): it must be
  // written. On Z's own bytes (the Relu in place) it need not.
  int y = prog.steps(s).outputs(0);
  plan::Plan onX = p;
  onX.mutable_tensors(y)->set_view_of(x);
  EXPECT_TRUE(fusedSteps(onX).empty()) << "Y a view of X";
  plan::Plan onZ = p;
  plan::Tensor &ty = *onZ.mutable_tensors(y), &tz = *onZ.mutable_tensors(z);
  if (tz.has_view_of()) { // the planner put Z on Y's bytes: the other way round
    ty.clear_view_of();
    tz.clear_view_of();
    tz.set_storage(plan::ARENA);
    tz.set_offset(p.tensors(base(p, z)).offset());
  }
  ty.set_view_of(z);
  EXPECT_EQ(fusedSteps(onZ).size(), 1u) << "Y a view of Z";
  // The fused step rounding its Add to another type than Y's: its values
  // are not the epilogue's.
  plan::Plan otherType = p;
  plan::FusedProgram &f = *otherType.mutable_programs(0)->mutable_steps(s + 1)->mutable_fused();
  f.mutable_instructions(0)->set_type(plan::BF16);
  f.mutable_instructions(1)->set_type(plan::BF16);
  EXPECT_TRUE(fusedSteps(otherType).empty()) << "the Add in bf16";
}
