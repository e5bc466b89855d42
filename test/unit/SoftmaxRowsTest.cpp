//===- SoftmaxRowsTest.cpp - AVX-512 softmax rows against the row loops ----===//
//
// softmaxRowsAvx512 / softmaxGradRowsAvx512 (runtime/cpu/FusedKernelAvx512.cpp)
// promise the bits of the portable row loops of the Softmax kernel
// (SoftmaxKernels.cpp: maxFloats, expShifted, sumFloats, one division, a
// product per element; dotFloats for the gradient, whose dY may be bf16),
// including the bf16 cast the Softmax writes with its result. Rows of 16 to 256 values, with the
// causal mask's -inf, an all -inf row, a NaN and ties between +0 and -0.
//
//===----------------------------------------------------------------------===//

#include "FusedKernel.h"
#include "KernelHelpers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace ampc::rt::cpu;

namespace {

std::vector<float> rowsOf(int64_t rows, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-30, 30);
  std::vector<float> x(rows * n);
  for (float &v : x)
    v = u(rng);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) // causal mask: the row's future positions
    for (int64_t j = r % n + 1; j < n && r % 3 == 0; ++j)
      x[r * n + j] = -inf;
  if (rows > 4) {
    for (int64_t j = 0; j < n; ++j)
      x[1 * n + j] = -inf; // all masked: NaN everywhere, as the loops give
    x[2 * n + 5] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t j = 0; j < n; ++j) // the maximum 0 as +0 and -0
      x[4 * n + j] = j % 2 ? 0.0f : -0.0f;
  }
  return x;
}

bool sameBits(const void *a, const void *b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

TEST(SoftmaxRows, Avx512RowsAreTheRowLoopsBits) {
  if (!useAvx512())
    GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int64_t n : {16, 48, 64, 256}) {
    const int64_t rows = 37;
    std::vector<float> x = rowsOf(rows, n, 7 + n), dy = rowsOf(rows, n, 99 + n);
    // The portable Softmax rows, then their bf16 cast.
    std::vector<float> want(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x.data() + r * n;
      float *out = want.data() + r * n;
      float m = maxFloats(xr, n);
      expShifted(xr, m, out, n);
      float inv = 1.0f / sumFloats(out, n);
      for (int64_t i = 0; i < n; ++i)
        out[i] *= inv;
    }
    std::vector<uint16_t> wantCast(x.size());
    fromFloat(ampc::plan::BF16, want.data(), wantCast.data(), static_cast<int64_t>(x.size()));
    std::vector<float> got(x.size());
    std::vector<uint16_t> gotCast(x.size());
    if (!softmaxRowsAvx512(x.data(), got.data(), gotCast.data(), rows, n))
      GTEST_SKIP() << "built without SLEEF";
    EXPECT_TRUE(sameBits(got.data(), want.data(), got.size() * 4)) << "Softmax, n = " << n;
    EXPECT_TRUE(sameBits(gotCast.data(), wantCast.data(), gotCast.size() * 2))
        << "bf16 cast, n = " << n;
    // In place, as the memory plan may place it.
    std::vector<float> inPlace = x;
    ASSERT_TRUE(softmaxRowsAvx512(inPlace.data(), inPlace.data(), nullptr, rows, n));
    EXPECT_TRUE(sameBits(inPlace.data(), want.data(), want.size() * 4)) << "in place, n = " << n;

    // The gradient, dx = y (dy - sum(dy y)), with y the softmax above.
    std::vector<float> wantDx(x.size()), gotDx(x.size());
    auto gradientRows = [&](const std::vector<float> &dyRows) {
      for (int64_t r = 0; r < rows; ++r) {
        const float *d = dyRows.data() + r * n, *y = want.data() + r * n;
        float s = dotFloats(d, y, n);
        for (int64_t i = 0; i < n; ++i)
          wantDx[r * n + i] = y[i] * (d[i] - s);
      }
    };
    gradientRows(dy);
    ASSERT_TRUE(softmaxGradRowsAvx512(dy.data(), false, want.data(), gotDx.data(), rows, n));
    EXPECT_TRUE(sameBits(gotDx.data(), wantDx.data(), gotDx.size() * 4))
        << "SoftmaxGrad, n = " << n;
    // dY in bf16 (a CastPrologue): the loop's bits on the widened values.
    std::vector<uint16_t> dyBf16(dy.size());
    fromFloat(ampc::plan::BF16, dy.data(), dyBf16.data(), static_cast<int64_t>(dy.size()));
    std::vector<float> dyWide(dy.size());
    toFloat(ampc::plan::BF16, dyBf16.data(), dyWide.data(), static_cast<int64_t>(dy.size()));
    gradientRows(dyWide);
    ASSERT_TRUE(softmaxGradRowsAvx512(dyBf16.data(), true, want.data(), gotDx.data(), rows, n));
    EXPECT_TRUE(sameBits(gotDx.data(), wantDx.data(), gotDx.size() * 4))
        << "SoftmaxGrad with bf16 dY, n = " << n;
    // The scaled cast after it, bf16(dX / 8), with dX not written.
    std::vector<float> scaled(x.size());
    for (size_t i = 0; i < scaled.size(); ++i)
      scaled[i] = wantDx[i] / 8.0f;
    std::vector<uint16_t> wantZ(x.size()), gotZ(x.size());
    fromFloat(ampc::plan::BF16, scaled.data(), wantZ.data(), static_cast<int64_t>(x.size()));
    ASSERT_TRUE(softmaxGradRowsAvx512(dyBf16.data(), true, want.data(), nullptr, rows, n,
                                      gotZ.data(), 8.0f));
    EXPECT_TRUE(sameBits(gotZ.data(), wantZ.data(), gotZ.size() * 2))
        << "SoftmaxGrad's scaled cast, n = " << n;
  }
}

TEST(SoftmaxRows, RowsNotAMultipleOf16AreLeftToTheLoops) {
  std::vector<float> x(40, 1.0f), y(40, -1.0f);
  EXPECT_FALSE(softmaxRowsAvx512(x.data(), y.data(), nullptr, 1, 40));
  EXPECT_FALSE(softmaxGradRowsAvx512(x.data(), false, x.data(), y.data(), 1, 40));
  EXPECT_EQ(y[0], -1.0f);
}

} // namespace
