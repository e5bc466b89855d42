//===- datamovement/DataMovementKernels.h - Gather, Pad and friends --*- C++ -*-===//
//
// Data-movement kernels of DeviceKernels.h: Gather, GatherElements, Pad and
// Gather's gradient; one thread per result element (or column).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../KernelCommon.h"

namespace ampc::rt::cuda {

AMPC_HD int64_t loadIndex(uint8_t indexType, const void *indices, int64_t j) {
  return indexType == FusedElem::I64 ? static_cast<const int64_t *>(indices)[j]
                                     : static_cast<const int32_t *>(indices)[j];
}

/// dX of Gather (an Embedding's gradient), in up to three launches: the
/// fp32 accumulator is zeroed (a memset); one thread per (outer slice,
/// column) adds dY over the indices in order, as the CPU kernel does, so
/// repeated indices add up deterministically and in the CPU's order
/// (out-of-range indices dropped); when dX is narrower than fp32, a
/// `convert` launch, one thread per element, rounds the sums into it.
struct GatherGradArgs {
  const void *dy = nullptr, *indices = nullptr;
  void *dx = nullptr;
  float *acc = nullptr; ///< dX itself when fp32
  uint8_t indexType = 0, dyType = 0, dxType = 0;
  bool convert = false;
  int64_t n = 0, dim = 0, inner = 1;

  static AMPC_HD void run(const GatherGradArgs &a, int64_t i) {
    if (a.convert) {
      storeFromFloat(a.dxType, a.dx, i, a.acc[i]);
      return;
    }
    int64_t o = i / a.inner, c = i - o * a.inner;
    for (int64_t j = 0; j < a.n; ++j) {
      int64_t k = loadIndex(a.indexType, a.indices, j);
      if (k < 0)
        k += a.dim;
      if (k < 0 || k >= a.dim)
        continue;
      a.acc[(o * a.dim + k) * a.inner + c] += loadAsFloat(a.dyType, a.dy, (o * a.n + j) * a.inner + c);
    }
  }
};

/// Pad in any mode (math::padSource, the CPU kernel's mapping), cropping
/// included: one thread per result element finds its source along every
/// axis, or writes the pad value (`value`, an element of the result's type,
/// or zeros when null).
struct PadArgs {
  const void *x = nullptr, *value = nullptr;
  void *y = nullptr;
  int elemBytes = 4, rank = 0;
  math::PadMode mode = math::PadMode::Constant;
  int64_t yShape[kMaxRank] = {}, xShape[kMaxRank] = {}, xStrides[kMaxRank] = {},
          before[kMaxRank] = {};

  static AMPC_HD void run(const PadArgs &a, int64_t i) {
    int64_t src = 0, rem = i;
    bool inside = true;
    for (int d = a.rank - 1; d >= 0; --d) {
      int64_t c = rem % a.yShape[d];
      rem /= a.yShape[d];
      int64_t s = math::padSource(a.mode, c - a.before[d], a.xShape[d]);
      inside = inside && s >= 0;
      src += (s < 0 ? 0 : s) * a.xStrides[d];
    }
    if (inside || !a.value)
      copyElement(a.elemBytes, a.x, src, a.y, i, inside);
    else
      copyElement(a.elemBytes, a.value, 0, a.y, i, true);
  }
};

/// Gather along one axis: X viewed as [outer, dim, inner], the result as
/// [outer, n, inner] for n indices; negative indices count from the end, an
/// index out of range yields zeros (as the CPU kernel).
struct GatherArgs {
  const void *x = nullptr, *indices = nullptr;
  void *y = nullptr;
  uint8_t indexType = 0;
  int elemBytes = 4;
  int64_t n = 0, dim = 0, inner = 1;

  static AMPC_HD void run(const GatherArgs &a, int64_t i) {
    int64_t r = i / a.inner, e = i - r * a.inner;
    int64_t o = r / a.n, j = r - o * a.n;
    int64_t k = loadIndex(a.indexType, a.indices, j);
    if (k < 0)
      k += a.dim;
    bool inside = k >= 0 && k < a.dim;
    copyElement(a.elemBytes, a.x, inside ? (o * a.dim + k) * a.inner + e : 0, a.y, i, inside);
  }
};

/// GatherElements: Y[i] = X[i with its `axis` coordinate replaced by
/// indices[i]]; one thread per result element; negative indices count from
/// the end, one out of range yields zeros (as the CPU kernel).
struct GatherElementsArgs {
  const void *x = nullptr, *indices = nullptr;
  void *y = nullptr;
  uint8_t indexType = 0;
  int elemBytes = 4, rank = 0, axis = 0;
  int64_t yShape[kMaxRank] = {}, xStrides[kMaxRank] = {};
  int64_t dim = 0;

  static AMPC_HD void run(const GatherElementsArgs &a, int64_t i) {
    int64_t k = loadIndex(a.indexType, a.indices, i);
    if (k < 0)
      k += a.dim;
    bool inside = k >= 0 && k < a.dim;
    int64_t src = 0, rem = i;
    for (int d = a.rank - 1; d >= 0; --d) {
      int64_t c = rem % a.yShape[d];
      rem /= a.yShape[d];
      src += (d == a.axis ? k : c) * a.xStrides[d];
    }
    copyElement(a.elemBytes, a.x, inside ? src : 0, a.y, i, inside);
  }
};

} // namespace ampc::rt::cuda
