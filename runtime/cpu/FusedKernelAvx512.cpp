//===- FusedKernelAvx512.cpp - The fused kernel for AVX-512 CPUs -----------===//
//
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c
// and -ffp-contract=off (runtime/CMakeLists.txt): wider vectors, the same
// operations, hence the same bits as the baseline variant, except for the
// transcendentals that SLEEF evaluates when it is found
// (AMPC_FUSED_SLEEF_AVX512): within 1.0 ULP of the exact result, as libm's.
//
//===----------------------------------------------------------------------===//

#include "FusedKernel.h"

#include "ampc/rt/PlanFile.h"

#include <limits>

#include <immintrin.h>
#if AMPC_FUSED_SLEEF_AVX512
#include <sleef.h>
#endif

#define AMPC_FUSED_FACTORY makeFusedKernelAvx512
#include "FusedKernelImpl.inc"

namespace ampc::rt::cpu {

bool expShiftedAvx512(const float *x, float shift, float *out, int64_t n) {
#if AMPC_FUSED_SLEEF_AVX512
  const __m512 s = _mm512_set1_ps(shift);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(out + j, Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(x + j), s)));
  if (j < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(out + j, m,
                          Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), s)));
  }
  return true;
#else
  (void)x, (void)shift, (void)out, (void)n;
  return false;
#endif
}

namespace {
/// sumFloats' combination of its 16 lane sums: lanes j and j + w added for
/// w = 8, 4, 2, 1 (IEEE addition commutes, so lo + hi is acc[j] + acc[j + w]).
inline float combineLanes(__m512 acc) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
} // namespace

bool softmaxRowsAvx512(const float *x, float *y, uint16_t *z, int64_t rows, int64_t n) {
#if AMPC_FUSED_SLEEF_AVX512
  if (n % 16)
    return false;
  for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
    // maxFloats: lane = x > lane ? x : lane (vmaxps returns its second
    // operand on NaN or equality); the lanes hold no NaN, so their maximum
    // is one value whatever the order (a +0 / -0 tie shifts no exponent).
    __m512 lane = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < n; j += 16)
      lane = _mm512_max_ps(_mm512_loadu_ps(x + j), lane);
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(lane));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
      __m512 e = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(x + j), m));
      _mm512_storeu_ps(y + j, e);
      acc = _mm512_add_ps(acc, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / combineLanes(acc));
    for (int64_t j = 0; j < n; j += 16) {
      __m512 v = _mm512_mul_ps(_mm512_loadu_ps(y + j), inv);
      _mm512_storeu_ps(y + j, v);
      if (z)
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(z + j),
                            _mm512_cvtepi32_epi16(bf16Bits(v)));
    }
    if (z)
      z += n;
  }
  return true;
#else
  (void)x, (void)y, (void)z, (void)rows, (void)n;
  return false;
#endif
}

bool softmaxGradRowsAvx512(const void *dy, bool dyBf16, const float *y, float *dx, int64_t rows,
                           int64_t n, uint16_t *z, float divisor) {
  if (n % 16)
    return false;
  const float *dyF = static_cast<const float *>(dy);
  const uint16_t *dyH = static_cast<const uint16_t *>(dy);
  auto loadDy = [&](int64_t i) {
    return dyBf16 ? bf16Widen(_mm512_cvtepu16_epi32(
                        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(dyH + i))))
                  : _mm512_loadu_ps(dyF + i);
  };
  const __m512 div = _mm512_set1_ps(divisor);
  for (int64_t r = 0; r < rows; ++r, y += n) {
    const int64_t row = r * n;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16)
      acc = _mm512_add_ps(acc, _mm512_mul_ps(loadDy(row + j), _mm512_loadu_ps(y + j)));
    const __m512 s = _mm512_set1_ps(combineLanes(acc));
    for (int64_t j = 0; j < n; j += 16) {
      __m512 g = _mm512_mul_ps(_mm512_loadu_ps(y + j), _mm512_sub_ps(loadDy(row + j), s));
      if (dx)
        _mm512_storeu_ps(dx + row + j, g);
      if (z)
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(z + row + j),
                            _mm512_cvtepi32_epi16(bf16Bits(_mm512_div_ps(g, div))));
    }
  }
  return true;
}

} // namespace ampc::rt::cpu
