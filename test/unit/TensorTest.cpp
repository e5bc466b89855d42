//===- TensorTest.cpp - Element types and rounding ------------------------===//

#include "ampc/IR/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace ampc;

/// fp16 rounds to nearest, ties to even, and overflows at 65520.
TEST(Rounding, HalfNearestEven) {
  EXPECT_EQ(roundToDType(2049.0, DType::F16), 2048.0);
  EXPECT_EQ(roundToDType(2051.0, DType::F16), 2052.0);
  EXPECT_EQ(roundToDType(65504.0, DType::F16), 65504.0);
  EXPECT_EQ(roundToDType(65519.0, DType::F16), 65504.0);
  EXPECT_TRUE(std::isinf(roundToDType(65520.0, DType::F16)));
  EXPECT_EQ(roundToDType(std::ldexp(1.0, -24), DType::F16), std::ldexp(1.0, -24));
  EXPECT_EQ(roundToDType(std::ldexp(1.0, -25), DType::F16), 0.0); // tie to even (0)
  EXPECT_EQ(roundToDType(std::ldexp(1.5, -25), DType::F16), std::ldexp(1.0, -24));
}

/// Bit patterns of fp16 special values.
TEST(Rounding, HalfBits) {
  EXPECT_EQ(doubleToHalfBits(65504.0), 0x7BFF);
  EXPECT_EQ(doubleToHalfBits(1e6), 0x7C00);
  EXPECT_EQ(doubleToHalfBits(-1e6), 0xFC00);
  EXPECT_EQ(doubleToHalfBits(std::nan("")), 0x7E00);
  EXPECT_EQ(doubleToHalfBits(1.0), 0x3C00);
  EXPECT_EQ(doubleToHalfBits(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(doubleToHalfBits(-0.0), 0x8000);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    double v = halfBitsToDouble(static_cast<uint16_t>(bits));
    if (std::isnan(v))
      continue;
    ASSERT_EQ(doubleToHalfBits(v), bits) << "round trip of 0x" << std::hex << bits;
  }
}

/// bf16 keeps fp32's range and 8 bits of precision, ties to even.
TEST(Rounding, BFloat16) {
  EXPECT_EQ(doubleToBFloat16Bits(1.0), 0x3F80);
  EXPECT_EQ(roundToDType(1.0 + 1.0 / 256, DType::BF16), 1.0);          // tie -> even
  EXPECT_EQ(roundToDType(1.0 + 3.0 / 256, DType::BF16), 1.0 + 4.0 / 256); // tie -> even
  EXPECT_EQ(doubleToBFloat16Bits(std::nan("")), 0x7FC0);
  EXPECT_EQ(doubleToBFloat16Bits(3.3895313892515355e38), 0x7F7F);
  EXPECT_EQ(doubleToBFloat16Bits(1e39), 0x7F80);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    double v = bfloat16BitsToDouble(static_cast<uint16_t>(bits));
    if (std::isnan(v))
      continue;
    ASSERT_EQ(doubleToBFloat16Bits(v), bits);
  }
}

/// fp32 storage rounds doubles like a C cast and overflows to inf.
TEST(Rounding, Float32) {
  EXPECT_EQ(roundToDType(0.1, DType::F32), static_cast<double>(0.1f));
  EXPECT_TRUE(std::isinf(roundToDType(1e39, DType::F32)));
  EXPECT_EQ(roundToDType(std::ldexp(1.0, -149), DType::F32), std::ldexp(1.0, -149));
}

/// Tensors store in their element type and cast like ONNX Cast.
TEST(Tensor, StoreAndCast) {
  Tensor t(TensorType(DType::F16, {3}));
  t.setDouble(0, 2049.0);
  t.setDouble(1, 1e5);
  t.setDouble(2, -3.25);
  EXPECT_EQ(t.getDouble(0), 2048.0);
  EXPECT_TRUE(std::isinf(t.getDouble(1)));
  Tensor i = t.castTo(DType::I64);
  EXPECT_EQ(i.getInt(2), -3);
  Tensor b = Tensor::fromDoubles(TensorType(DType::Bool, {2}), std::vector<double>{0.0, 0.5});
  EXPECT_EQ(b.getInt(0), 0);
  EXPECT_EQ(b.getInt(1), 1);
  int64_t big = std::numeric_limits<int64_t>::max();
  Tensor l = Tensor::int64Vector(std::vector<int64_t>{big});
  EXPECT_EQ(l.getInt(0), big); // no trip through double
}

/// A deferred cast computes castTo's bytes on first access only, and until
/// then names its source and is not taken for untouched zeros.
TEST(Tensor, DeferredCast) {
  auto source = std::make_shared<const Tensor>(Tensor::fromDoubles(
      TensorType(DType::F32, {2, 3}), std::vector<double>{1.0, -2.5, 3.0e38, 1.0 / 3, 0.0, -0.0}));
  Tensor low = Tensor::deferredCast(source, DType::BF16);
  EXPECT_EQ(low.pendingCastSource(), source.get());
  EXPECT_FALSE(low.untouchedZeros());
  EXPECT_EQ(low.byteSize(), 12u);
  EXPECT_EQ(low.shape(), source->shape());
  Tensor copy = low; // a copy defers too, to the same source
  EXPECT_EQ(copy.pendingCastSource(), source.get());
  Tensor want = source->castTo(DType::BF16);
  EXPECT_TRUE(low.bitwiseEqual(want));
  EXPECT_EQ(low.pendingCastSource(), nullptr);
  EXPECT_TRUE(copy.bitwiseEqual(want));
  EXPECT_EQ(copy.pendingCastSource(), nullptr);
  Tensor empty = Tensor::deferredCast(
      std::make_shared<const Tensor>(Tensor(TensorType(DType::F32, {0}))), DType::F16);
  EXPECT_EQ(empty.pendingCastSource(), nullptr);
  EXPECT_EQ(empty.byteSize(), 0u);
}
