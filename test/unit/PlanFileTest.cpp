//===- PlanFileTest.cpp - The plan file's data section --------------------===//
//
// Plan format 3 (issue #13): tensor values live in a data section after the
// message, at 64-byte aligned offsets; state that starts at zero is not
// stored. These tests write and read plan files and check that a corrupt,
// truncated or lying file ends in a one-line error, never a crash.
//
//===----------------------------------------------------------------------===//

#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/rt/Backend.h"
#include "ampc/rt/PlanFile.h"
#include "ampc/rt/Session.h"

#include "plan.pb.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

namespace ampc {
namespace {

/// y = Relu(x W) with a constant W of 8x8 floats (256 bytes: the data
/// section) and a constant bias of 8 floats (32 bytes: inline).
plan::Plan weightPlan() {
  std::string w, b;
  for (int i = 0; i < 64; ++i)
    w += (i ? ", " : "") + std::to_string(0.25 * (i % 7) - 0.5);
  for (int i = 0; i < 8; ++i)
    b += (i ? ", " : "") + std::to_string(0.125 * i);
  std::string text = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4,8] x) => (float[4,8] y) <float[8,8] w = {)" + w + R"(}, float[8] b = {)" + b + R"(}> {
  a = MatMul (x, w)
  c = Add (a, b)
  y = Relu (c)
})";
  auto g = importModelText(text, "test");
  EXPECT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  auto p = lowerToPlan(**g, LowerOptions{});
  EXPECT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  return std::move(*p);
}

int tensorNamed(const plan::Plan &p, const std::string &name) {
  for (int i = 0; i < p.tensors_size(); ++i)
    if (p.tensors(i).name() == name)
      return i;
  return -1;
}

std::string serialize(plan::Plan &p) {
  std::string bytes, error;
  EXPECT_TRUE(rt::serializePlan(p, bytes, error)) << error;
  return bytes;
}

std::string parseError(const std::string &bytes) {
  plan::Plan p;
  std::string error;
  return rt::parsePlanBytes(bytes, "m.plan", p, error) ? std::string() : error;
}

template <typename T> T headerField(const std::string &bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

template <typename T> void setHeaderField(std::string &bytes, size_t at, T v) {
  std::memcpy(&bytes[at], &v, sizeof(T));
}

/// Large values go to the aligned data section and come back on reading;
/// small ones stay inline; the plan given to the writer is left as it was.
TEST(PlanFile, ValuesRoundTripThroughTheDataSection) {
  plan::Plan p = weightPlan();
  int w = tensorNamed(p, "w"), b = tensorNamed(p, "b");
  ASSERT_GE(w, 0);
  ASSERT_GE(b, 0);
  std::string wData = p.tensors(w).data();
  ASSERT_EQ(wData.size(), 256u);
  std::string bytes = serialize(p);
  EXPECT_EQ(p.tensors(w).data(), wData);
  EXPECT_FALSE(p.tensors(w).has_data_offset());

  uint64_t dataStart = headerField<uint64_t>(bytes, 32), dataSize = headerField<uint64_t>(bytes, 40);
  EXPECT_EQ(dataStart % rt::kPlanDataAlignment, 0u);
  EXPECT_EQ(dataSize, 256u);
  EXPECT_EQ(dataStart + dataSize, bytes.size());
  EXPECT_EQ(bytes.compare(dataStart, 256, wData), 0);

  plan::Plan loaded;
  std::string error;
  ASSERT_TRUE(rt::parsePlanBytes(bytes, "m.plan", loaded, error)) << error;
  EXPECT_EQ(loaded.tensors(w).data(), wData);
  EXPECT_EQ(loaded.tensors(b).data(), p.tensors(b).data());
  EXPECT_FALSE(loaded.tensors(w).has_data_offset());
}

/// A file cut anywhere in its data section, or in its message, is refused.
TEST(PlanFile, TruncatedDataSectionIsRefused) {
  plan::Plan p = weightPlan();
  std::string bytes = serialize(p);
  for (size_t cut : {size_t(1), size_t(200), bytes.size() - headerField<uint64_t>(bytes, 32) + 10}) {
    std::string error = parseError(bytes.substr(0, bytes.size() - cut));
    EXPECT_NE(error.find("m.plan: truncated plan file"), std::string::npos) << cut << ": " << error;
  }
  EXPECT_NE(parseError(bytes.substr(0, 40)).find("truncated"), std::string::npos);
}

/// One flipped byte of a weight fails the data section's checksum.
TEST(PlanFile, CorruptDataSectionIsRefused) {
  plan::Plan p = weightPlan();
  std::string bytes = serialize(p);
  bytes[headerField<uint64_t>(bytes, 32) + 17] ^= 0x40;
  EXPECT_EQ(parseError(bytes), "m.plan: the plan file is corrupt (checksum mismatch)");
}

/// A header whose data section starts inside the message, or off the
/// 64-byte grid, is refused before anything is read from it.
TEST(PlanFile, LyingHeaderIsRefused) {
  plan::Plan p = weightPlan();
  std::string good = serialize(p);
  std::string bytes = good;
  setHeaderField<uint64_t>(bytes, 32, 64);
  EXPECT_NE(parseError(bytes).find("corrupt (its data section starts at byte 64)"),
            std::string::npos);
  bytes = good;
  setHeaderField<uint64_t>(bytes, 32, headerField<uint64_t>(good, 32) + 8);
  EXPECT_NE(parseError(bytes).find("corrupt"), std::string::npos);
  bytes = good;
  setHeaderField<uint64_t>(bytes, 16, ~uint64_t(0)); // payload size
  EXPECT_NE(parseError(bytes).find("truncated"), std::string::npos);
  bytes = good;
  setHeaderField<uint64_t>(bytes, 40, uint64_t(1) << 62); // data size
  EXPECT_NE(parseError(bytes).find("truncated"), std::string::npos);
}

/// Offsets of a tensor's value that point past the section (even past 4
/// GiB), off the alignment, or at a value the tensor also holds inline.
TEST(PlanFile, LyingDataOffsetsAreRefused) {
  struct Case {
    uint64_t offset;
    bool keepInline;
    const char *message;
  } cases[] = {{uint64_t(5) << 30, false, "lies outside the data section"},
               {~uint64_t(0) - 63, false, "lies outside the data section"},
               {8, false, "is misaligned in the data section (offset 8)"},
               {0, true, "may not take a value from the data section"}};
  for (const Case &c : cases) {
    plan::Plan p = weightPlan();
    int b = tensorNamed(p, "b"); // 32 bytes: the writer keeps it inline
    ASSERT_GE(b, 0);
    plan::Tensor &t = *p.mutable_tensors(b);
    if (!c.keepInline)
      t.clear_data();
    t.set_data_offset(c.offset);
    std::string bytes = serialize(p);
    std::string error = parseError(bytes);
    EXPECT_NE(error.find("tensor " + std::to_string(b) + " 'b' "), std::string::npos) << error;
    EXPECT_NE(error.find(c.message), std::string::npos) << error;
  }
}

/// State that starts at zero carries no bytes in the file and loads as
/// zeros; a constant may not claim it.
TEST(PlanFile, ZeroInitStateLoadsAsZeros) {
  plan::Plan p = weightPlan();
  int w = tensorNamed(p, "w");
  ASSERT_GE(w, 0);
  plan::Tensor &t = *p.mutable_tensors(w);
  t.clear_data();
  t.set_zero_init(true);
  std::string error;
  EXPECT_FALSE(rt::parsePlanBytes(serialize(p), "m.plan", *std::make_unique<plan::Plan>(), error));
  EXPECT_NE(error.find("starts at zero but is no state"), std::string::npos) << error;

  t.set_storage(plan::STATE);
  std::string bytes = serialize(p);
  EXPECT_EQ(headerField<uint64_t>(bytes, 40), 0u); // nothing stored
  plan::Plan loaded;
  ASSERT_TRUE(rt::parsePlanBytes(bytes, "m.plan", loaded, error)) << error;
  auto session = rt::Session::fromPlan(loaded, rt::createCpuBackend({1}), error);
  ASSERT_TRUE(session) << error;
  rt::HostArray a;
  ASSERT_TRUE(session->readTensor(w, a, error)) << error;
  ASSERT_EQ(a.bytes.size(), 256u);
  for (uint8_t byte : a.bytes)
    ASSERT_EQ(byte, 0);
}

/// A bf16 copy of an fp32 state is converted at load (round to nearest
/// even) and stores nothing; a conversion from anything but an fp32 state
/// with a value of its own is refused.
TEST(PlanFile, CastStateIsConvertedAtLoad) {
  plan::Plan p = weightPlan();
  int w = tensorNamed(p, "w");
  ASSERT_GE(w, 0);
  p.mutable_tensors(w)->set_storage(plan::STATE);
  // Values bf16 cannot hold, so that the rounding shows.
  std::string values(256, '\0');
  for (int k = 0; k < 64; ++k) {
    float x = (k % 2 ? -1.0f : 1.0f) / static_cast<float>(k + 3);
    std::memcpy(&values[4 * k], &x, 4);
  }
  p.mutable_tensors(w)->set_data(values);
  plan::Tensor &copy = *p.add_tensors();
  copy.set_name("w.bf16");
  copy.set_type(plan::BF16);
  copy.add_shape(8);
  copy.add_shape(8);
  copy.set_storage(plan::STATE);
  copy.set_cast_of(w);
  int c = p.tensors_size() - 1;
  std::string bytes = serialize(p), error;
  plan::Plan loaded;
  ASSERT_TRUE(rt::parsePlanBytes(bytes, "m.plan", loaded, error)) << error;
  auto session = rt::Session::fromPlan(loaded, rt::createCpuBackend({1}), error);
  ASSERT_TRUE(session) << error;
  rt::HostArray master, low;
  ASSERT_TRUE(session->readTensor(w, master, error)) << error;
  ASSERT_TRUE(session->readTensor(c, low, error)) << error;
  ASSERT_EQ(low.bytes.size(), 128u);
  for (int k = 0; k < 64; ++k) {
    float x;
    uint16_t bits;
    std::memcpy(&x, master.bytes.data() + 4 * k, 4);
    std::memcpy(&bits, low.bytes.data() + 2 * k, 2);
    uint32_t u;
    std::memcpy(&u, &x, 4);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    ASSERT_EQ(bits, rounded) << "element " << k;
  }

  struct Case {
    std::function<void(plan::Plan &)> corrupt;
    std::string message;
  };
  std::vector<Case> cases = {
      {[&](plan::Plan &q) { q.mutable_tensors(c)->set_cast_of(c + 5); }, "does not exist"},
      {[&](plan::Plan &q) { q.mutable_tensors(c)->set_cast_of(c); }, "does not exist"},
      {[&](plan::Plan &q) { q.mutable_tensors(w)->set_storage(plan::CONSTANT); }, "not an fp32 state"},
      {[&](plan::Plan &q) { q.mutable_tensors(c)->add_shape(2); }, "not an fp32 state"},
      {[&](plan::Plan &q) { q.mutable_tensors(c)->set_type(plan::F32); }, "no fp16/bf16 state"},
      {[&](plan::Plan &q) { q.mutable_tensors(c)->set_data(std::string(128, '\0')); },
       "no fp16/bf16 state, or has a value"},
      {[&](plan::Plan &q) {
         q.mutable_tensors(w)->clear_data();
         q.mutable_tensors(w)->set_zero_init(true);
       },
       "with a stored value"},
      // Found by fuzzing: the backends converted every tensor marked
      // cast_of, an arena temporary or a view included, past their bytes.
      {[&](plan::Plan &q) {
         for (plan::Tensor &t : *q.mutable_tensors())
           if (t.storage() == plan::ARENA && !t.has_view_of()) {
             t.set_cast_of(w);
             break;
           }
       },
       "no fp16/bf16 state"},
      {[&](plan::Plan &q) {
         plan::Tensor &view = *q.add_tensors();
         view = q.tensors(c);
         view.set_name("w.bf16.view");
         view.set_view_of(c);
       },
       "is a view of another tensor but also has a value of its own"},
  };
  for (const Case &k : cases) {
    plan::Plan q = p;
    k.corrupt(q);
    std::string e;
    plan::Plan out;
    EXPECT_FALSE(rt::parsePlanBytes(serialize(q), "m.plan", out, e));
    EXPECT_NE(e.find(k.message), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

/// A backend's copy of a plan is the plan without its values: every other
/// field (a new one included) is kept.
TEST(PlanFile, CopyWithoutValuesKeepsEverythingElse) {
  plan::Plan p = weightPlan();
  p.set_original_model("model bytes");
  (*p.mutable_info())["precision"] = "fp32";
  p.add_parameters()->set_onnx_name("w");
  plan::Plan copy;
  rt::copyPlanWithoutValues(p, copy);
  for (const plan::Tensor &t : copy.tensors())
    EXPECT_TRUE(t.data().empty()) << t.name();
  rt::dropPlanValues(p);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(p, copy));
}

} // namespace
} // namespace ampc
