//===- NormRows.h - Row loops shared by the normalization kernels -*- C++ -*-===//
//
// Batch and layer normalization and their gradients go over rows of fp32 or
// bf16 values with 16-way partial sums (laneSum), in runForThisCpu's two
// builds: the same operations in the same order, so the same bits.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "KernelHelpers.h"

#include <cstring>

namespace ampc::rt::cpu::norm {

inline TensorArg outAt(const StepContext &ctx, unsigned i) {
  return i < ctx.outputs.size() ? ctx.outputs[i] : TensorArg();
}

/// A row read element by element as fp32: fp32 in place, or bf16 widened as
/// it is read (exact), so the passes over a bf16 tensor convert nothing into
/// memory; other types are converted into a buffer first (rowIn).
struct F32Row {
  const float *p;
  float operator[](int64_t i) const { return p[i]; }
};
struct Bf16Row {
  const uint16_t *p;
  float operator[](int64_t i) const {
    uint32_t u = static_cast<uint32_t>(p[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

/// Row functions are inlined into forEachRow's two builds (below), so that
/// the AVX-512 one vectorizes them 16 lanes wide.
#define AMPC_ROW_INLINE AMPC_ALWAYS_INLINE

/// Calls body(r) for r in [r0, r1), in runForThisCpu's two builds: the
/// AVX-512 one inlines the body and the row functions it calls
/// (AMPC_ROW_INLINE) and vectorizes them with 16-lane vectors, the same
/// operations in the same order (16 partial sums per row), so the same bits
/// as the baseline build, about 1.3x as fast on BatchNormalization and its
/// gradient (SSE2's 4 lanes left them short of memory bandwidth).
template <typename Body> void forEachRow(const Body &body, int64_t r0, int64_t r1) {
  runForThisCpu([&]() AMPC_ROW_INLINE {
    for (int64_t r = r0; r < r1; ++r)
      body(r);
  });
}

/// Elements [begin, begin + n) of t as fp32, like rowIn, but bf16 rows widen
/// in the calling build's loop (16 lanes in the AVX-512 one) rather than in
/// rowIn's baseline-compiled conversion.
inline AMPC_ROW_INLINE const float *rowAsFloats(const TensorArg &t, int64_t begin, int64_t n,
                                                float *buf) {
  if (t.type != plan::BF16)
    return rowIn(t, begin, n, buf);
  Bf16Row row{static_cast<const uint16_t *>(t.data) + begin};
  for (int64_t i = 0; i < n; ++i)
    buf[i] = row[i];
  return buf;
}

/// Asks for the cache lines of elements [begin, begin + n) of t.
inline AMPC_ROW_INLINE void prefetchRow(const TensorArg &t, int64_t begin, int64_t n) {
  const char *p = static_cast<const char *>(t.data) + begin * int64_t(elemBytes(t.type));
  for (int64_t b = 0; b < n * int64_t(elemBytes(t.type)); b += 64)
    __builtin_prefetch(p + b);
}

/// Calls fn with elements [begin, begin + n) of t as an F32Row or a Bf16Row.
template <typename Fn>
inline AMPC_ROW_INLINE void withRow(const TensorArg &t, int64_t begin, int64_t n, float *buf,
                                    Fn &&fn) {
  if (t.type == plan::BF16)
    fn(Bf16Row{static_cast<const uint16_t *>(t.data) + begin});
  else
    fn(F32Row{rowIn(t, begin, n, buf)});
}

/// The sum over i < n of term(i) in 16 lanes (lane i % 16) combined
/// pairwise: sumFloats' order, so these have sumFloats' bits.
template <typename Term> inline AMPC_ROW_INLINE float laneSum(int64_t n, Term term) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      acc[j] += term(i + j);
  for (int j = 0; i < n; ++i, ++j)
    acc[j] += term(i);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j)
      acc[j] += acc[j + w];
  return acc[0];
}

template <typename R> inline AMPC_ROW_INLINE float rowSum(R x, int64_t n) {
  return laneSum(n, [&](int64_t i) { return x[i]; });
}
template <typename R> inline AMPC_ROW_INLINE float rowSumSquaredDiff(R x, float c, int64_t n) {
  return laneSum(n, [&](int64_t i) {
    float d = x[i] - c;
    return d * d;
  });
}

} // namespace ampc::rt::cpu::norm
