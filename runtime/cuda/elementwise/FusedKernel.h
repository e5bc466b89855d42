//===- elementwise/FusedKernel.h - What generated fused kernels include -*- C++ -*-===//
//
// The one header a generated fused kernel (FusedCodegen.cpp) includes: its
// argument block and the few helpers its text calls. It is compiled three
// ways, always with FusedEval.h's per-element functions, so a generated
// kernel computes exactly what the interpreted FusedArgs kernel computes:
//   - by NVRTC at plan load (FusedCompiler.cpp embeds this header, FusedEval.h
//     and what it includes as strings, so no header path is needed at run
//     time); the entry point is the __global__ `ampc_fused_kernel`;
//   - by the host compiler in the unit tests, which run the generated text
//     on the CPU against the interpreter (the entry is then `<ns>_host`);
//   - by g++ into the runtime, for FusedKernelArgs (CompiledFused launches).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/rt/FusedEval.h"

#include <cstdint>
#ifndef __CUDACC_RTC__
#include <cstring>
#endif

#ifdef __CUDACC__
#define AMPC_FUSED_FN __device__ __forceinline__
#define AMPC_FUSED_UNROLL _Pragma("unroll")
#else
#define AMPC_FUSED_FN inline
#define AMPC_FUSED_UNROLL
#endif

namespace ampc::rt::cuda {

/// The arguments of a compiled fused kernel (a __grid_constant__ parameter):
/// what varies between steps that share a program.
struct FusedKernelArgs {
  static constexpr int kMaxInputs = 16, kMaxOutputs = 8, kRank = 6;
  const void *in[kMaxInputs];
  void *out[kMaxOutputs];
  int64_t n;                           ///< result elements
  int64_t shape[kRank];                ///< the result's (strided inputs only)
  int64_t strides[kMaxInputs][kRank];  ///< per result dimension (strided inputs)
  int32_t rank;
  uint32_t zero; ///< always 0: see fusedKeep
  int32_t vector; ///< 1: thread t takes elements [t * width, t * width + width)
};

/// Offset of result element i in strided input k.
AMPC_FUSED_FN int64_t fusedOffset(const FusedKernelArgs &a, int k, int64_t i) {
  int64_t off = 0;
  for (int d = a.rank - 1; d >= 0; --d) {
    int64_t rem;
    i = math::indexDivMod(i, a.shape[d], rem);
    off += rem * a.strides[k][d];
  }
  return off;
}

/// An instruction's attributes from their bit patterns (exact).
AMPC_FUSED_FN fused::FusedParams fusedParams(uint32_t alpha, uint32_t beta, uint32_t gamma,
                                             bool hasMin, bool hasMax, bool detectPos,
                                             bool detectNeg) {
  fused::FusedParams p;
  p.alpha = math::bitsFloat(alpha);
  p.beta = math::bitsFloat(beta);
  p.gamma = math::bitsFloat(gamma);
  p.hasMin = hasMin;
  p.hasMax = hasMax;
  p.detectPos = detectPos;
  p.detectNeg = detectNeg;
  return p;
}

/// v, unchanged (zero is 0), but opaque to the compiler. The interpreter
/// keeps every instruction's result in a local array indexed at run time, so
/// nothing fuses a multiply of one instruction with an add of the next into
/// an FMA; in straight-line code NVVM and ptxas would (fp32 results are not
/// rounded by fusedRound). XOR with a run-time zero hides the value's origin
/// and keeps every bit, NaN payloads included.
template <typename R> AMPC_FUSED_FN R fusedKeep(R v, uint32_t zero) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(R) == 4)
    return __uint_as_float(__float_as_uint(v) ^ zero);
  else
    return __longlong_as_double(__double_as_longlong(v) ^ static_cast<long long>(zero));
#else
  (void)zero;
  return v;
#endif
}

/// Copies Bytes bytes (a group of elements) with the widest loads and stores
/// their alignment allows: 16-byte vectors on the GPU. Both pointers are
/// aligned to min(Bytes, 16) (the launch checks it).
template <int Bytes> AMPC_FUSED_FN void fusedCopyBytes(void *dst, const void *src) {
#ifdef __CUDA_ARCH__
  if constexpr (Bytes % 16 == 0) {
#pragma unroll
    for (int c = 0; c < Bytes / 16; ++c)
      static_cast<uint4 *>(dst)[c] = static_cast<const uint4 *>(src)[c];
  } else if constexpr (Bytes == 8) {
    *static_cast<uint2 *>(dst) = *static_cast<const uint2 *>(src);
  } else if constexpr (Bytes == 4) {
    *static_cast<unsigned *>(dst) = *static_cast<const unsigned *>(src);
  } else if constexpr (Bytes == 2) {
    *static_cast<unsigned short *>(dst) = *static_cast<const unsigned short *>(src);
  } else {
    *static_cast<unsigned char *>(dst) = *static_cast<const unsigned char *>(src);
  }
#else
  std::memcpy(dst, src, Bytes);
#endif
}

} // namespace ampc::rt::cuda

// The entry point of a generated kernel whose code is in namespace NS:
// grid-stride over thread indices [0, threads), as Kernels.cu's kernels.
#define AMPC_FUSED_ENTRY(NS) AMPC_FUSED_ENTRY_(NS)
#ifdef __CUDACC_RTC__
#define AMPC_FUSED_ENTRY_(NS)                                                                      \
  extern "C" __global__ void __launch_bounds__(256)                                                \
      ampc_fused_kernel(const __grid_constant__ ::ampc::rt::cuda::FusedKernelArgs a,              \
                        long long threads) {                                                       \
    long long step = static_cast<long long>(gridDim.x) * blockDim.x;                              \
    for (long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;             \
         t < threads; t += step)                                                                   \
      NS::thread(a, t);                                                                            \
  }
#else
#define AMPC_FUSED_ENTRY_(NS)                                                                      \
  extern "C" void NS##_host(const ::ampc::rt::cuda::FusedKernelArgs *a, long long threads) {     \
    for (long long t = 0; t < threads; ++t)                                                        \
      NS::thread(*a, t);                                                                           \
  }
#endif
