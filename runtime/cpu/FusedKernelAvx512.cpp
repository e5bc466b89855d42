//===- FusedKernelAvx512.cpp - The fused kernel for AVX-512 CPUs -----------===//
//
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c
// and -ffp-contract=off (runtime/CMakeLists.txt): wider vectors, the same
// operations, hence the same bits as the baseline variant.
//
//===----------------------------------------------------------------------===//

#include "FusedKernel.h"

#include "ampc/rt/PlanFile.h"

#include <limits>

#define AMPC_FUSED_FACTORY makeFusedKernelAvx512
#include "FusedKernelImpl.inc"
