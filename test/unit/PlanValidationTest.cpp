//===- PlanValidationTest.cpp - Corrupt plans load with an error -----------===//
//
// Plans whose fields a fuzzer changed (issue #15): the CPU backend refuses
// them at load with one error instead of writing out of bounds.
//
//===----------------------------------------------------------------------===//

#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/rt/Backend.h"
#include "ampc/rt/Session.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

namespace ampc {
namespace {

plan::Plan lowerText(const std::string &text) {
  auto g = importModelText(text, "test");
  EXPECT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  auto p = lowerToPlan(**g, LowerOptions{});
  EXPECT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  return std::move(*p);
}

std::string loadError(const plan::Plan &p) {
  std::string error;
  auto session = rt::Session::fromPlan(p, rt::createCpuBackend({1}), error);
  return session ? std::string() : error;
}

const char *kTranspose = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x) => (float[3,2] y) { y = Transpose <perm = [1, 0]> (x) })";

/// An arena of 2^64 - 1 bytes wrapped to 64 bytes when rounded up.
TEST(PlanValidation, ArenaSizeNearSizeMaxIsRefused) {
  plan::Plan p = lowerText(kTranspose);
  ASSERT_EQ(loadError(p), "");
  p.mutable_memory()->set_arena_bytes(~uint64_t(0));
  EXPECT_NE(loadError(p), "");
}

/// A Transpose whose result has another rank than its operand read past
/// the result's shape.
TEST(PlanValidation, TransposeResultOfAnotherRankIsRefused) {
  plan::Plan p = lowerText(kTranspose);
  int y = -1;
  for (const plan::Step &s : p.programs(0).steps())
    if (s.op() == "Transpose")
      y = s.outputs(0);
  ASSERT_GE(y, 0);
  plan::Tensor &t = *p.mutable_tensors(y);
  t.clear_shape();
  t.add_shape(6); // rank 1, same bytes
  std::string error = loadError(p);
  EXPECT_NE(error.find("perm does not match the rank"), std::string::npos) << error;
}

const char *kChain = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4,8] x, float[8,8] w) => (float[4,8] y) {
  a = MatMul (x, w)
  b = Relu (a)
  c = MatMul (b, w)
  y = Tanh (c)
})";

/// Offsets that are not a multiple of the element size made every kernel
/// load and store misaligned (UBSan).
TEST(PlanValidation, MisalignedOffsetIsRefused) {
  plan::Plan p = lowerText(kChain);
  ASSERT_EQ(loadError(p), "");
  for (plan::Tensor &t : *p.mutable_tensors())
    if (t.storage() == plan::ARENA && !t.has_view_of() && t.offset() + 2 + 128 <= p.memory().arena_bytes()) {
      t.set_offset(t.offset() + 2);
      break;
    }
  EXPECT_NE(loadError(p).find("is misaligned"), std::string::npos) << loadError(p);
}

/// Every offset set to 0: simultaneously live buffers share bytes (the plan
/// trained with loss 0 and exit 0).
TEST(PlanValidation, OverlappingLiveBuffersAreRefused) {
  plan::Plan p = lowerText(kChain);
  for (plan::Tensor &t : *p.mutable_tensors())
    if (t.storage() == plan::ARENA && !t.has_view_of())
      t.set_offset(0);
  EXPECT_NE(loadError(p).find("share arena bytes while both are live"), std::string::npos)
      << loadError(p);
}

const char *kConcat = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x) => (float[2,6] y) {
  a = Relu (x)
  c = Concat <axis = 1> (a, a)
  y = Tanh (c)
})";

/// An operand's bytes may be taken by a result of the step that reads it
/// last, which the steps computed in place (ampc.Fused) need; any other
/// kernel would read the operand after writing over it (a Concat here).
TEST(PlanValidation, ResultOnTheBytesOfAnOperandIsRefused) {
  plan::Plan p = lowerText(kConcat);
  ASSERT_EQ(loadError(p), "");
  int a = -1, c = -1;
  for (const plan::Step &s : p.programs(0).steps())
    if (s.op() == "Concat") {
      a = s.inputs(0);
      c = s.outputs(0);
    }
  ASSERT_GE(a, 0);
  // c is computed in the bytes of y (Tanh writes its program output in place).
  int base = p.tensors(c).has_view_of() ? p.tensors(c).view_of() : c;
  ASSERT_EQ(p.tensors(a).storage(), plan::ARENA);
  ASSERT_EQ(p.tensors(base).storage(), plan::ARENA);
  p.mutable_tensors(base)->set_offset(p.tensors(a).offset());
  std::string error = loadError(p);
  EXPECT_NE(error.find("(Concat 'c'): its result tensor"), std::string::npos) << error;
  EXPECT_NE(error.find("shares bytes with its operand tensor"), std::string::npos) << error;
}

/// Concat's copies are sized by the result's dims off the axis: with its
/// axis attribute's name mutated (the default axis 0) it read and wrote past
/// its tensors (ampc-fuzz-plan; ASan first saw the read run into the result).
TEST(PlanValidation, ConcatOperandsNotMatchingTheResultAreRefused) {
  plan::Plan p = lowerText(kConcat);
  ASSERT_EQ(loadError(p), "");
  for (plan::Step &s : *p.mutable_programs(0)->mutable_steps())
    if (s.op() == "Concat")
      for (plan::Attribute &a : *s.mutable_attrs())
        if (a.name() == "axis")
          a.set_name("a8is");
  std::string error = loadError(p);
  EXPECT_NE(error.find("does not match the result"), std::string::npos) << error;
}

/// Split likewise: a result whose dims off the axis are not the operand's.
TEST(PlanValidation, SplitResultsNotMatchingTheOperandAreRefused) {
  plan::Plan p = lowerText(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4,6] x) => (float[4,3] y, float[4,3] z) {
  a = Relu (x)
  b, c = Split <axis = 1> (a)
  y = Tanh (b)
  z = Tanh (c)
})");
  ASSERT_EQ(loadError(p), "");
  for (const plan::Step &s : p.programs(0).steps())
    if (s.op() == "Split") {
      plan::Tensor &t = *p.mutable_tensors(s.outputs(0));
      t.set_shape(0, 2);
      t.set_shape(1, 6);
    }
  std::string error = loadError(p);
  EXPECT_NE(error.find("does not match the operand"), std::string::npos) << error;
}

} // namespace
} // namespace ampc
