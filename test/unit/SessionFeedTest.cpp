//===- SessionFeedTest.cpp - Session::feedWith, in place or through a copy -===//
//
// amp-run's data loader writes each batch with Session::feedWith: straight
// into the backend's input buffer where it has one (the CPU backend's tensor,
// the CUDA backend's pinned staging buffer), else into a scratch array kept
// between steps and then written. Both paths must give the program the same
// input; errors name the input.
//
//===----------------------------------------------------------------------===//

#include "FixtureUtil.h"

#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/rt/Backend.h"
#include "ampc/rt/Session.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace ampc;

namespace {

/// A backend without input buffers: everything else goes to the CPU backend.
class NoBuffers : public rt::Backend {
public:
  NoBuffers() : cpu_(rt::createCpuBackend({1})) {}
  std::string name() const override { return "no-buffers"; }
  bool load(const plan::Plan &p, std::string &error) override { return cpu_->load(p, error); }
  bool run(int index, std::string &error) override { return cpu_->run(index, error); }
  bool write(int t, const void *src, size_t bytes, std::string &error) override {
    ++writes;
    return cpu_->write(t, src, bytes, error);
  }
  bool read(int t, void *dst, size_t bytes, std::string &error) override {
    return cpu_->read(t, dst, bytes, error);
  }
  int writes = 0;

private:
  std::unique_ptr<rt::Backend> cpu_;
};

std::unique_ptr<rt::Session> negation(std::unique_ptr<rt::Backend> backend) {
  auto g = importModelText("<ir_version: 8, opset_import: [\"\" : 17]>\n"
                           "g (float[4,3] x) => (float[4,3] y) { y = Neg(x) }",
                           "neg");
  EXPECT_TRUE(static_cast<bool>(g));
  if (!g)
    return nullptr;
  auto p = lowerToPlan(**g, LowerOptions{});
  EXPECT_TRUE(static_cast<bool>(p));
  if (!p)
    return nullptr;
  std::string error;
  auto s = rt::Session::fromPlan(*p, std::move(backend), error);
  EXPECT_TRUE(s) << error;
  return s;
}

/// Feeds x = offset + (0, 1, ..., 11) and checks y = -x.
void feedAndCheck(rt::Session &s, rt::HostArray &scratch, float offset) {
  std::string error;
  auto fill = [&](uint8_t *dst) {
    for (int i = 0; i < 12; ++i) {
      float v = offset + static_cast<float>(i);
      std::memcpy(dst + 4 * i, &v, 4);
    }
  };
  ASSERT_TRUE(s.feedWith(0, "x", rt::ElemType::F32, {4, 3}, fill, scratch, "data.npz", error))
      << error;
  ASSERT_TRUE(s.run(0, error)) << error;
  rt::HostArray y;
  ASSERT_TRUE(s.output(0, "y", y, error)) << error;
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(y.at(i), -(offset + i)) << i;
}

/// The CPU backend's tensor is the buffer: the scratch array stays unused.
TEST(SessionFeed, InPlaceWhereTheBackendHasAnInputBuffer) {
  auto s = negation(rt::createCpuBackend({1}));
  ASSERT_TRUE(s);
  rt::HostArray scratch;
  feedAndCheck(*s, scratch, 0);
  feedAndCheck(*s, scratch, 100);
  EXPECT_TRUE(scratch.bytes.empty());
}

/// Without one, the batch goes through the scratch array, kept between calls.
TEST(SessionFeed, ThroughScratchWhereItHasNone) {
  auto backend = std::make_unique<NoBuffers>();
  NoBuffers *raw = backend.get();
  auto s = negation(std::move(backend));
  ASSERT_TRUE(s);
  rt::HostArray scratch;
  feedAndCheck(*s, scratch, 0);
  const uint8_t *kept = scratch.bytes.data();
  feedAndCheck(*s, scratch, -7);
  EXPECT_EQ(scratch.bytes.size(), 48u);
  EXPECT_EQ(scratch.bytes.data(), kept); // no new allocation
  EXPECT_EQ(raw->writes, 2);
}

/// A wrong shape or name is refused before anything is filled, in one line
/// naming the source and the input.
TEST(SessionFeed, WrongShapesAndNamesAreRefused) {
  auto s = negation(rt::createCpuBackend({1}));
  ASSERT_TRUE(s);
  rt::HostArray scratch;
  std::string error;
  bool filled = false;
  auto fill = [&](uint8_t *) { filled = true; };
  EXPECT_FALSE(s->feedWith(0, "x", rt::ElemType::F32, {3, 4}, fill, scratch, "data.npz", error));
  EXPECT_EQ(error, "data.npz: input 'x' expects float32[4,3], got float32[3,4]");
  EXPECT_FALSE(s->feedWith(0, "z", rt::ElemType::F32, {4, 3}, fill, scratch, "data.npz", error));
  EXPECT_EQ(error, "data.npz: the plan has no input 'z' (its inputs: 'x')");
  EXPECT_FALSE(filled);
}

} // namespace
