//===- datamovement/DataMovementKernels.h - Gather, Pad and friends --*- C++ -*-===//
//
// Data-movement kernels of DeviceKernels.h: Gather, GatherElements, Pad and
// Gather's gradient; one thread per result element (Gather's gradient after
// a counting sort of its indices).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../KernelCommon.h"

namespace ampc::rt::cuda {

AMPC_HD int64_t loadIndex(uint8_t indexType, const void *indices, int64_t j) {
  return indexType == FusedElem::I64 ? static_cast<const int64_t *>(indices)[j]
                                     : static_cast<const int32_t *>(indices)[j];
}

/// dX of Gather (an Embedding's gradient): each element of dX is the sum of
/// dY over the indices that name its row, in index order (the CPU kernel's
/// order, so the bits are the CPU's), without atomics on floats and with a
/// thread per dX element. The positions of the indices are first sorted by
/// row, stably, by a counting sort over `segments` segments of the indices
/// (a thread per segment walks its indices in order), in these phases:
///
///   Count      thread s: table[k * segments + s] = occurrences of row k in
///              segment s (the table zeroed by a memset before)
///   RowTotals  thread k: rowCount[k] = the sum of row k's counts
///   BlockSums  thread b: blockSum[b] = the sum of rows [b * kScanBlock, ...)
///   BlockScan  one thread: blockSum becomes its exclusive prefix sums
///   RowStarts  thread k: rowStart[k], and row k's table entries become the
///              first position of each segment's occurrences
///   Scatter    thread s: positions[...] = the indices of segment s in order
///   Sum        thread (outer slice, row k, column): the sum over row k's
///              positions, stored in dX's type
///
/// Out-of-range indices are dropped, negative ones count from the end.
struct GatherGradArgs {
  enum Phase : uint8_t { Count, RowTotals, BlockSums, BlockScan, RowStarts, Scatter, Sum };
  static constexpr int64_t kScanBlock = 256;
  const void *dy = nullptr, *indices = nullptr;
  void *dx = nullptr;
  int32_t *table = nullptr, *rowCount = nullptr, *rowStart = nullptr, *blockSum = nullptr,
          *positions = nullptr;
  uint8_t indexType = 0, dyType = 0, dxType = 0;
  Phase phase = Count;
  int64_t n = 0, dim = 0, inner = 1, segments = 1, segmentLength = 1;

  /// Index j's row, or -1 when it is out of range.
  AMPC_HD int64_t rowOf(int64_t j) const {
    int64_t k = loadIndex(indexType, indices, j);
    if (k < 0)
      k += dim;
    return k < 0 || k >= dim ? -1 : k;
  }
  AMPC_HD int64_t segmentEnd(int64_t s) const {
    int64_t end = (s + 1) * segmentLength;
    return end < n ? end : n;
  }

  static AMPC_HD void run(const GatherGradArgs &a, int64_t i) {
    switch (a.phase) {
    case Count:
      for (int64_t j = i * a.segmentLength; j < a.segmentEnd(i); ++j)
        if (int64_t k = a.rowOf(j); k >= 0)
          ++a.table[k * a.segments + i];
      return;
    case RowTotals: {
      int32_t c = 0;
      for (int64_t s = 0; s < a.segments; ++s)
        c += a.table[i * a.segments + s];
      a.rowCount[i] = c;
      return;
    }
    case BlockSums: {
      int32_t c = 0;
      for (int64_t k = i * kScanBlock; k < (i + 1) * kScanBlock && k < a.dim; ++k)
        c += a.rowCount[k];
      a.blockSum[i] = c;
      return;
    }
    case BlockScan: {
      int32_t c = 0;
      for (int64_t b = 0; b < (a.dim + kScanBlock - 1) / kScanBlock; ++b) {
        int32_t t = a.blockSum[b];
        a.blockSum[b] = c;
        c += t;
      }
      return;
    }
    case RowStarts: {
      int32_t start = a.blockSum[i / kScanBlock];
      for (int64_t k = i / kScanBlock * kScanBlock; k < i; ++k)
        start += a.rowCount[k];
      a.rowStart[i] = start;
      for (int64_t s = 0; s < a.segments; ++s) {
        int32_t c = a.table[i * a.segments + s];
        a.table[i * a.segments + s] = start;
        start += c;
      }
      return;
    }
    case Scatter:
      for (int64_t j = i * a.segmentLength; j < a.segmentEnd(i); ++j)
        if (int64_t k = a.rowOf(j); k >= 0)
          a.positions[a.table[k * a.segments + i]++] = static_cast<int32_t>(j);
      return;
    case Sum: {
      int64_t c = i % a.inner, k = i / a.inner % a.dim, o = i / (a.inner * a.dim);
      float acc = 0.0f;
      for (int32_t p = a.rowStart[k], e = p + a.rowCount[k]; p < e; ++p)
        acc += loadAsFloat(a.dyType, a.dy, (o * a.n + a.positions[p]) * a.inner + c);
      storeFromFloat(a.dxType, a.dx, i, acc);
      return;
    }
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
    int64_t e, j;
    int64_t r = math::indexDivMod(i, a.inner, e);
    int64_t o = math::indexDivMod(r, a.n, j);
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
