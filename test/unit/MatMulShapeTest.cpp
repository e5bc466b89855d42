//===- MatMulShapeTest.cpp - The backends' MatMul shape rules -------------===//

#include "ampc/rt/MatMulShape.h"

#include <gtest/gtest.h>

namespace ampc::rt {
namespace {

/// Batch dimensions broadcast as in numpy: 1 takes the other's size, an
/// empty batch (0) included; unequal sizes other than 1 are refused.
TEST(MatMulShape, BatchBroadcasting) {
  MatMulShape s;
  std::string error;
  ASSERT_TRUE(matMulShape({3, 1, 2, 4}, {5, 4, 6}, 3 * 5 * 2 * 6, "a", "b", "y", s, error)) << error;
  EXPECT_EQ(s.batch, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(s.batchB, (std::vector<int64_t>{1, 5}));
  ASSERT_TRUE(matMulShape({0, 8, 16}, {16, 48}, 0, "a", "b", "y", s, error)) << error;
  EXPECT_EQ(s.batch, (std::vector<int64_t>{0}));
  ASSERT_TRUE(matMulShape({1, 8, 16}, {0, 16, 48}, 0, "a", "b", "y", s, error)) << error;
  EXPECT_EQ(s.batch, (std::vector<int64_t>{0}));
  EXPECT_FALSE(matMulShape({2, 8, 16}, {3, 16, 48}, 0, "a", "b", "y", s, error));
  EXPECT_EQ(error, "batch dimensions do not broadcast: a x b");
  EXPECT_FALSE(matMulShape({8, 16}, {15, 4}, 32, "a", "b", "y", s, error));
}

} // namespace
} // namespace ampc::rt
