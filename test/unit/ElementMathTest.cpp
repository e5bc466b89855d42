//===- ElementMathTest.cpp - fp16/bf16 conversions and per-element math ---===//
//
// The runtime's conversions (ElementMath.h, shared with CUDA, and the CPU
// kernels' block conversions) against the compiler's exact double rounding
// (doubleToHalfBits / doubleToBFloat16Bits): every 16-bit pattern, the
// neighbourhood of every rounding boundary (ties, one float ulp either side),
// subnormals, the overflow threshold 65520, infinities, NaN, and random
// floats. Then the per-element operator definitions against double math.
//
//===----------------------------------------------------------------------===//

#include "ampc/IR/Tensor.h"
#include "ampc/rt/ElementMath.h"

#include "KernelHelpers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

using namespace ampc;
namespace math = ampc::rt::math;

namespace {

bool isNaNHalf(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }
bool isNaNBf16(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F); }

float nextUp(float f) { return std::nextafter(f, std::numeric_limits<float>::infinity()); }
float nextDown(float f) { return std::nextafter(f, -std::numeric_limits<float>::infinity()); }

/// Floats that probe every rounding boundary of a 16-bit format: for each
/// pair of neighbouring 16-bit values a, b (decoded by `decode`), the
/// midpoint and one float ulp either side, plus a and b themselves.
template <typename Decode> std::vector<float> boundaryFloats(Decode decode, bool isHalf) {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x7FFF; ++h) {
    double a = decode(static_cast<uint16_t>(h)), b = decode(static_cast<uint16_t>(h + 1));
    if (!std::isfinite(a) || !std::isfinite(b))
      continue;
    float mid = static_cast<float>((a + b) / 2); // exact: fewer than 24 bits
    for (float f : {static_cast<float>(a), mid, nextUp(mid), nextDown(mid)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  // Overflow: the largest finite value, the tie to infinity and around it.
  float big = isHalf ? 65504.0f : 3.3895313892515355e38f;
  float tie = isHalf ? 65520.0f : 3.3961775292304957e38f;
  for (float f : {big, nextUp(big), nextDown(tie), tie, nextUp(tie), 1e30f,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  0.0f}) {
    out.push_back(f);
    out.push_back(-f);
  }
  return out;
}

std::vector<float> randomFloats(size_t n) {
  std::mt19937 rng(1234);
  std::vector<float> out;
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> unit(-4.0f, 4.0f);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(math::bitsFloat(bits(rng))); // every exponent, NaNs included
    out.push_back(unit(rng));
    out.push_back(unit(rng) * 1e-6f); // fp16 subnormal range
  }
  return out;
}

} // namespace

TEST(ElementMath, HalfToFloatEveryPattern) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    float f = math::halfToFloat(static_cast<uint16_t>(h));
    double want = halfBitsToDouble(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      // The payload survives the round trip.
      EXPECT_EQ(math::floatToHalf(f) & 0x8000, h & 0x8000) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << "pattern " << h;
    // Exactly representable: converting back is the identity.
    ASSERT_EQ(math::floatToHalf(f), h) << "pattern " << h;
  }
}

TEST(ElementMath, BFloat16ToFloatEveryPattern) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    float f = math::bfloat16ToFloat(static_cast<uint16_t>(b));
    double want = bfloat16BitsToDouble(static_cast<uint16_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << b;
      EXPECT_TRUE(isNaNBf16(math::floatToBFloat16(f))) << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << "pattern " << b;
    ASSERT_EQ(math::floatToBFloat16(f), b) << "pattern " << b;
  }
}

TEST(ElementMath, FloatToHalfRoundsToNearestEven) {
  std::vector<float> probes = boundaryFloats(halfBitsToDouble, true);
  std::vector<float> random = randomFloats(300000);
  probes.insert(probes.end(), random.begin(), random.end());
  size_t checked = 0;
  for (float f : probes) {
    uint16_t got = math::floatToHalf(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(isNaNHalf(got)) << f;
      continue;
    }
    ASSERT_EQ(got, doubleToHalfBits(static_cast<double>(f)))
        << "float " << f << " (bits " << std::hex << math::floatBits(f) << ")";
    EXPECT_EQ(math::roundToHalf(f), static_cast<float>(halfBitsToDouble(got)));
    ++checked;
  }
  EXPECT_GT(checked, 500000u);
  // Named cases.
  EXPECT_EQ(math::floatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(math::floatToHalf(nextDown(65520.0f)), 0x7BFF);
  EXPECT_EQ(math::floatToHalf(65520.0f), 0x7C00); // the tie rounds to even: infinity
  EXPECT_EQ(math::floatToHalf(-65520.0f), 0xFC00);
  EXPECT_EQ(math::floatToHalf(std::ldexp(1.0f, -25)), 0x0000);               // tie to even 0
  EXPECT_EQ(math::floatToHalf(nextUp(std::ldexp(1.0f, -25))), 0x0001);       // above the tie
  EXPECT_EQ(math::floatToHalf(std::ldexp(3.0f, -25)), 0x0002);               // 1.5 ulp -> 2
  EXPECT_EQ(math::floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);        // tie to even
  EXPECT_EQ(math::floatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3C02);        // tie to even (up)
  EXPECT_EQ(math::floatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(math::floatToHalf(-0.0f), 0x8000);
}

TEST(ElementMath, FloatToBFloat16RoundsToNearestEven) {
  std::vector<float> probes = boundaryFloats(bfloat16BitsToDouble, false);
  std::vector<float> random = randomFloats(300000);
  probes.insert(probes.end(), random.begin(), random.end());
  for (float f : probes) {
    uint16_t got = math::floatToBFloat16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(isNaNBf16(got)) << f;
      continue;
    }
    ASSERT_EQ(got, doubleToBFloat16Bits(static_cast<double>(f)))
        << "float " << f << " (bits " << std::hex << math::floatBits(f) << ")";
    EXPECT_EQ(math::roundToBFloat16(f), static_cast<float>(bfloat16BitsToDouble(got)));
  }
  EXPECT_EQ(math::floatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3F80); // tie to even
  EXPECT_EQ(math::floatToBFloat16(1.0f + std::ldexp(3.0f, -8)), 0x3F82);
  EXPECT_EQ(math::floatToBFloat16(std::numeric_limits<float>::max()), 0x7F80); // rounds up
}

/// The CPU kernels' block conversions (vector instructions where available)
/// give exactly the scalar results, NaN encodings included.
TEST(ElementMath, BlockConversionsMatchScalar) {
  std::vector<uint16_t> all(65536 + 13);
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<uint16_t>(i * 40503u);
  std::vector<float> f(all.size());
  rt::cpu::toFloat(plan::F16, all.data(), f.data(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(math::floatBits(f[i]), math::floatBits(math::halfToFloat(all[i]))) << all[i];
  rt::cpu::toFloat(plan::BF16, all.data(), f.data(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(math::floatBits(f[i]), math::floatBits(math::bfloat16ToFloat(all[i])));
  std::vector<float> probes = boundaryFloats(halfBitsToDouble, true);
  std::vector<float> more = randomFloats(100000);
  probes.insert(probes.end(), more.begin(), more.end());
  std::vector<uint16_t> out(probes.size());
  rt::cpu::fromFloat(plan::F16, probes.data(), out.data(), static_cast<int64_t>(probes.size()));
  for (size_t i = 0; i < probes.size(); ++i)
    ASSERT_EQ(out[i], math::floatToHalf(probes[i])) << probes[i];
  rt::cpu::fromFloat(plan::BF16, probes.data(), out.data(), static_cast<int64_t>(probes.size()));
  for (size_t i = 0; i < probes.size(); ++i)
    ASSERT_EQ(out[i], math::floatToBFloat16(probes[i])) << probes[i];
}

TEST(ElementMath, OperatorDefinitions) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> u(-30.0f, 30.0f);
  auto near = [](double got, double want) {
    return std::fabs(got - want) <= 4e-7 * std::max(1.0, std::fabs(want));
  };
  for (int i = 0; i < 20000; ++i) {
    float x = u(rng), y = u(rng) / 30.0f;
    double xd = x, yd = y;
    ASSERT_EQ(math::relu(x), x > 0 ? x : 0.0f);
    ASSERT_TRUE(near(math::sigmoid(x), 1.0 / (1.0 + std::exp(-xd)))) << x;
    ASSERT_TRUE(near(math::softplus(x), std::log1p(std::exp(xd)))) << x;
    ASSERT_TRUE(near(math::leakyRelu(x, 0.1f), x >= 0 ? xd : 0.1f * xd));
    ASSERT_TRUE(near(math::elu(x, 1.0f), x >= 0 ? xd : std::expm1(xd))) << x;
    ASSERT_TRUE(near(math::selu(x, 1.6732632f, 1.050701f),
                     x > 0 ? 1.050701f * xd : 1.050701f * (1.6732632f * std::exp(xd) - 1.6732632f)));
    ASSERT_TRUE(near(math::hardSigmoid(x, 0.2f, 0.5f), std::clamp(0.2f * xd + 0.5, 0.0, 1.0)));
    ASSERT_TRUE(near(math::hardSwish(x), xd * std::clamp(xd / 6 + 0.5, 0.0, 1.0))) << x;
    ASSERT_EQ(math::sign(x), static_cast<float>((x > 0) - (x < 0)));
    ASSERT_EQ(math::maxNaN(x, y), std::max(x, y));
    ASSERT_EQ(math::minNaN(x, y), std::min(x, y));
    ASSERT_EQ(math::reluGrad(x, y), y > 0 ? x : 0.0f);
    // fp32 products: error relative to the operands (1 - y*y cancels).
    ASSERT_NEAR(math::sigmoidGrad(x, y), xd * yd * (1 - yd), 1e-6 * std::fabs(xd) + 1e-30);
    ASSERT_NEAR(math::tanhGrad(x, y), xd * (1 - yd * yd), 1e-6 * std::fabs(xd) + 1e-30);
  }
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(math::maxNaN(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(math::maxNaN(1.0f, nan)));
  EXPECT_TRUE(std::isnan(math::minNaN(1.0f, nan)));
  EXPECT_TRUE(std::isnan(math::sign(nan)));
  EXPECT_EQ(math::softplus(100.0f), 100.0f); // no overflow
  EXPECT_LT(math::sigmoid(-100.0f), 1e-40f);
  EXPECT_EQ(math::sigmoid(100.0f), 1.0f);
}

namespace {

/// The shared definitions propagate NaN where PyTorch does: Relu(NaN) is
/// NaN (it was 0), and the other activations follow from their formulas.
TEST(ElementMath, ReluPassesNaN) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(math::relu(nan)));
  EXPECT_EQ(math::relu(-2.0f), 0.0f);
  EXPECT_EQ(math::relu(3.0f), 3.0f);
  EXPECT_TRUE(std::isnan(math::relu(static_cast<double>(nan))));
}

} // namespace
