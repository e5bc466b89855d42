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
