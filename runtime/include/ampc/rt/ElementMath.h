//===- ElementMath.h - Per-element math shared by CPU and CUDA --*- C++ -*-===//
//
// Storage conversions (fp16 / bf16 <-> fp32, round to nearest even) and the
// per-element definitions of the fused operators (FusedOps.h). Every function
// is __host__ __device__ under nvcc, so the CUDA kernels compute exactly what
// the CPU backend computes, and the CPU unit tests cover both.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#ifndef __CUDACC_RTC__ // NVRTC (generated fused kernels) has no std::string
#include <string>
#include <utility>
#endif

#ifdef __CUDACC__
#define AMPC_HD __host__ __device__ __forceinline__
#else
#define AMPC_HD inline
#endif

namespace ampc::rt::math {

AMPC_HD uint32_t floatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

AMPC_HD float bitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// i / n, with i - (i / n) n in `rem`, for an index i >= 0 and extent n > 0.
/// On the GPU in 32 bits when both fit: there a 64-bit division is a long
/// software routine, and offsets of strided operands divide once per dimension.
AMPC_HD int64_t indexDivMod(int64_t i, int64_t n, int64_t &rem) {
#ifdef __CUDA_ARCH__
  if (((i | n) >> 32) == 0) {
    uint32_t q = static_cast<uint32_t>(i) / static_cast<uint32_t>(n);
    rem = static_cast<int64_t>(static_cast<uint32_t>(i) - q * static_cast<uint32_t>(n));
    return q;
  }
#endif
  int64_t q = i / n;
  rem = i - q * n;
  return q;
}

/// fp32 -> fp16 bits, round to nearest even; overflow to inf, NaN stays NaN.
AMPC_HD uint16_t floatToHalf(float f) {
#ifdef __CUDA_ARCH__
  // The GPU's conversion rounds to nearest even as the code below does, in one
  // instruction instead of branches; only NaN differs (it writes 0x7FFF), so
  // NaN keeps this function's bits.
  uint32_t bits = floatBits(f);
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  uint16_t nan = static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7E00u);
  return (bits & 0x7FFFFFFFu) > 0x7F800000u ? nan : static_cast<uint16_t>(h);
#else
  uint32_t x = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7FFFFFFFu;
  if (absx > 0x7F800000u) // NaN
    return sign | 0x7E00u;
  if (absx >= 0x477FF000u) // >= 65520 rounds to inf
    return sign | 0x7C00u;
  if (absx < 0x38800000u) { // below 2^-14: subnormal or zero
    if (absx < 0x33000000u) // below 2^-25: rounds to 0 (2^-25 ties to even 0)
      return sign;
    uint32_t mant = (absx & 0x7FFFFFu) | 0x800000u;
    // value = mant * 2^(e-150); half subnormal unit 2^-24 -> shift by (e-150+24)
    int rshift = 150 - 24 - static_cast<int>(absx >> 23);
    uint32_t q = mant >> rshift;
    uint32_t rem = mant & ((1u << rshift) - 1);
    uint32_t halfway = 1u << (rshift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u)))
      ++q;
    return sign | static_cast<uint16_t>(q);
  }
  // Normal: rebias the exponent and round the mantissa from 23 to 10 bits.
  uint32_t rounded = absx + 0xFFFu + ((absx >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
#endif
}

AMPC_HD float halfToFloat(uint16_t h) {
#ifdef __CUDA_ARCH__
  // Exact in hardware; NaN keeps its payload as below.
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(h)));
  uint32_t nan = (static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7F800000u |
                 (static_cast<uint32_t>(h & 0x3FFu) << 13);
  return (h & 0x7FFFu) > 0x7C00u ? bitsFloat(nan) : f;
#else
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0x1F)
    return bitsFloat(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0)
      return bitsFloat(sign);
    // Subnormal: mant * 2^-24, exact in fp32.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
}

/// fp32 -> bf16 bits, round to nearest even; NaN stays (quiet) NaN.
/// Written as a select rather than a branch, so that loops storing bf16
/// (AdamW's parameter copies, block conversions) vectorize.
AMPC_HD uint16_t floatToBFloat16(float f) {
  uint32_t x = floatBits(f);
  uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  uint32_t quiet = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded);
}

AMPC_HD float bfloat16ToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

/// SplitMix64's output function: the hash behind Dropout's masks.
AMPC_HD uint64_t splitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Dropout's generator, the same on every backend: run `run` of a node with
/// attribute `seed` keeps element i when the top 24 bits of
/// hash(key(seed, run) + i), as a number in [0, 1), reach the ratio
/// (`threshold` = ratio * 2^24). It depends only on (seed, run, element):
/// not on threads or launch geometry, and a run can be replayed.
AMPC_HD uint64_t dropoutKey(uint64_t seed, uint64_t run) { return splitMix64(seed ^ splitMix64(run)); }
AMPC_HD bool dropoutKeeps(uint64_t key, int64_t i, uint32_t threshold) {
  return (splitMix64(key + static_cast<uint64_t>(i)) >> 40) >= threshold;
}

/// Pad's modes, the same on every backend: the source index along one axis
/// of length n for result index `s` minus the leading pad (s may fall
/// outside [0, n)), or -1 where the pad value goes.
enum class PadMode : uint8_t { Constant, Edge, Reflect, Wrap };
AMPC_HD int64_t padSource(PadMode mode, int64_t s, int64_t n) {
  if (s >= 0 && s < n)
    return s;
  if (mode == PadMode::Constant || n == 0)
    return -1;
  if (mode == PadMode::Edge)
    return s < 0 ? 0 : n - 1;
  if (mode == PadMode::Reflect) {
    int64_t period = 2 * (n - 1);
    if (period == 0)
      return 0;
    s = ((s % period) + period) % period;
    return s >= n ? period - s : s;
  }
  return ((s % n) + n) % n; // Wrap
}

#ifndef __CUDACC_RTC__
/// The mode named by Pad's `mode` attribute; false for an unknown name.
inline bool padModeByName(const std::string &name, PadMode &mode) {
  const std::pair<const char *, PadMode> modes[] = {{"constant", PadMode::Constant},
                                                    {"edge", PadMode::Edge},
                                                    {"reflect", PadMode::Reflect},
                                                    {"wrap", PadMode::Wrap}};
  for (const auto &[n, m] : modes)
    if (name == n) {
      mode = m;
      return true;
    }
  return false;
}
#endif

/// Rounds an fp32 value to what fp16 / bf16 storage would hold.
AMPC_HD float roundToHalf(float f) { return halfToFloat(floatToHalf(f)); }
AMPC_HD float roundToBFloat16(float f) { return bfloat16ToFloat(floatToBFloat16(f)); }

//===----------------------------------------------------------------------===//
// Per-element operator definitions (ONNX semantics, fp32 math)
//===----------------------------------------------------------------------===//

/// NaN passes through, as in PyTorch and numpy's maximum(x, 0).
template <typename T> AMPC_HD T relu(T x) { return x < T(0) ? T(0) : x; }
template <typename T> AMPC_HD T sigmoid(T x) { return T(1) / (T(1) + exp(-x)); }
template <typename T> AMPC_HD T softplus(T x) {
  return x > T(0) ? x + log1p(exp(-x)) : log1p(exp(x));
}
template <typename T> AMPC_HD T leakyRelu(T x, T alpha) { return x >= T(0) ? x : alpha * x; }
template <typename T> AMPC_HD T elu(T x, T alpha) { return x >= T(0) ? x : alpha * expm1(x); }
template <typename T> AMPC_HD T selu(T x, T alpha, T gamma) {
  return x > T(0) ? gamma * x : gamma * (alpha * exp(x) - alpha);
}
template <typename T> AMPC_HD T hardSigmoid(T x, T alpha, T beta) {
  T v = alpha * x + beta;
  return v < T(0) ? T(0) : (v > T(1) ? T(1) : v);
}
/// x * hardSigmoid(x) with ONNX's fixed alpha = 1/6, beta = 0.5.
template <typename T> AMPC_HD T hardSwish(T x) {
  T v = x / T(6) + T(0.5);
  return x * (v < T(0) ? T(0) : (v > T(1) ? T(1) : v));
}
template <typename T> AMPC_HD T sign(T x) {
  return x != x ? x : T((x > T(0)) - (x < T(0)));
}
/// ONNX Max/Min propagate NaN.
template <typename T> AMPC_HD T maxNaN(T a, T b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
template <typename T> AMPC_HD T minNaN(T a, T b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
template <typename T> AMPC_HD T reluGrad(T dy, T y) { return y > T(0) ? dy : T(0); }
/// s is X, or Y when alpha > 0 (the same sign).
template <typename T> AMPC_HD T leakyReluGrad(T dy, T s, T alpha) { return s > T(0) ? dy : alpha * dy; }
template <typename T> AMPC_HD T sigmoidGrad(T dy, T y) { return dy * y * (T(1) - y); }
template <typename T> AMPC_HD T tanhGrad(T dy, T y) { return dy * (T(1) - y * y); }

} // namespace ampc::rt::math
