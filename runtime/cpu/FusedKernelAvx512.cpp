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

} // namespace ampc::rt::cpu
