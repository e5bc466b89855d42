//===- reductions/ReduceKernels.h - Reductions over any axes ----*- C++ -*-===//
//
// The Reduce* kernel of DeviceKernels.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../RowKernels.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Reductions over any set of axes
//===----------------------------------------------------------------------===//

enum class ReduceOp : uint8_t { Sum, Mean, SumSquare, L1, L2, Max, Min, Prod, LogSum, LogSumExp };

/// Phase 0: thread i = c * outputs + o (chunk c of result o: consecutive
/// threads take consecutive results, so that a warp's loads of a column
/// reduction are contiguous) reduces its chunk of the reduced elements (the
/// final result when there is one chunk, else the partial partial[i]);
/// phase 1: thread o combines the partials of result o in chunk order.
/// When the reduced axes are the trailing ones (result o reduces the
/// contiguous row [o * count, (o + 1) * count)), the lowering makes phase 0 a
/// row launch (RowKernels.h, `lanes` threads per result) instead.
struct ReduceArgs {
  const void *src = nullptr;
  void *dst = nullptr;
  float *partial = nullptr;
  uint8_t srcType = 0, dstType = 0, phase = 0;
  ReduceOp op = ReduceOp::Sum;
  int keptRank = 0, redRank = 0;
  int64_t keptShape[kMaxRank] = {}, keptStrides[kMaxRank] = {};
  int64_t redShape[kMaxRank] = {}, redStrides[kMaxRank] = {};
  int64_t count = 1, chunk = 1, chunks = 1, outputs = 1;
  /// LogSumExp: each result's maximum (a Max reduction run first), which
  /// every exponent is shifted by, as on the CPU.
  const float *shift = nullptr;
  int lanes = 0;

  AMPC_HD int64_t rowLength() const { return count; }
  static AMPC_HD int rowPasses(const ReduceArgs &) { return 1; }
  static AMPC_HD RowAcc rowInit(const ReduceArgs &a, int) {
    RowAcc r;
    r.a = init(a.op);
    return r;
  }
  static AMPC_HD RowAcc rowAccumulate(const ReduceArgs &a, int64_t row, int, int64_t j0, int n,
                                      RowAcc acc, const RowAcc *) {
    float x[kRowChunk];
    loadChunk(a.srcType, a.src, row * a.count + j0, n, x);
    float shift = a.shift ? shiftOf(a, row) : 0.0f;
    AMPC_UNROLL
    for (int k = 0; k < kRowChunk && k < n; ++k)
      acc.a = combine(a.op, acc.a, x[k] - shift);
    return acc;
  }
  static AMPC_HD RowAcc rowCombine(const ReduceArgs &a, int, RowAcc p, RowAcc q) {
    p.a = merge(a.op, p.a, q.a);
    return p;
  }
  static AMPC_HD void rowFinish(const ReduceArgs &, int64_t, int64_t, int, const RowAcc *) {}
  static AMPC_HD void rowDone(const ReduceArgs &a, int64_t row, const RowAcc *totals) {
    storeFromFloat(a.dstType, a.dst, row, finish(a, totals[0].a, row));
  }

  static AMPC_HD float init(ReduceOp op) {
    switch (op) {
    case ReduceOp::Max:
      return -infinityF();
    case ReduceOp::Min:
      return infinityF();
    case ReduceOp::Prod:
      return 1.0f;
    default:
      return 0.0f;
    }
  }
  static AMPC_HD float combine(ReduceOp op, float acc, float v) {
    switch (op) {
    case ReduceOp::SumSquare:
    case ReduceOp::L2:
      return acc + v * v;
    case ReduceOp::L1:
      return acc + (v < 0 ? -v : v);
    case ReduceOp::Max:
      return (v > acc || v != v) ? v : acc;
    case ReduceOp::Min:
      return (v < acc || v != v) ? v : acc;
    case ReduceOp::Prod:
      return acc * v;
    case ReduceOp::LogSumExp:
      return acc + std::exp(v); // v is already shifted by the maximum
    default:
      return acc + v;
    }
  }
  /// Partials combine like values, except that squares are already squared.
  static AMPC_HD float merge(ReduceOp op, float acc, float p) {
    switch (op) {
    case ReduceOp::Max:
      return (p > acc || p != p) ? p : acc;
    case ReduceOp::Min:
      return (p < acc || p != p) ? p : acc;
    case ReduceOp::Prod:
      return acc * p;
    default:
      return acc + p;
    }
  }
  /// A group's maximum as LogSumExp's shift; none (0) when it is not finite,
  /// as on the CPU: an all -inf group gives -inf (masked attention rows), one
  /// holding +inf gives +inf, instead of inf - inf = NaN.
  static AMPC_HD float shiftOf(const ReduceArgs &a, int64_t o) {
    float m = a.shift[o];
    return m - m == 0.0f ? m : 0.0f; // finite
  }

  static AMPC_HD float finish(const ReduceArgs &a, float acc, int64_t o) {
    switch (a.op) {
    case ReduceOp::Mean:
      return acc / static_cast<float>(a.count);
    case ReduceOp::L2:
      return std::sqrt(acc);
    case ReduceOp::LogSum:
      return std::log(acc);
    case ReduceOp::LogSumExp:
      return shiftOf(a, o) + std::log(acc);
    default:
      return acc;
    }
  }

  static AMPC_HD void run(const ReduceArgs &a, int64_t i) {
    if (a.phase == 1) {
      float acc = init(a.op);
      for (int64_t c = 0; c < a.chunks; ++c)
        acc = merge(a.op, acc, a.partial[c * a.outputs + i]);
      storeFromFloat(a.dstType, a.dst, i, finish(a, acc, i));
      return;
    }
    int64_t o;
    const int64_t c = math::indexDivMod(i, a.outputs, o);
    const int64_t base = stridedOffset(a.keptRank, a.keptShape, a.keptStrides, o);
    const int64_t begin = c * a.chunk;
    const int64_t end = begin + a.chunk < a.count ? begin + a.chunk : a.count;
    const float shift = a.shift ? shiftOf(a, o) : 0.0f;
    float acc = init(a.op);
    int64_t j = begin;
    if (a.redRank == 1) {
      // One reduced axis (adjacent ones merge): offsets by a multiply; four
      // loads issued before their four combines, in order, so that a thread
      // has several loads in flight and the sum is the same as one by one.
      const int64_t step = a.redStrides[0];
      for (; j + 4 <= end; j += 4) {
        float v[4];
        AMPC_UNROLL
        for (int k = 0; k < 4; ++k)
          v[k] = loadAsFloat(a.srcType, a.src, base + (j + k) * step);
        AMPC_UNROLL
        for (int k = 0; k < 4; ++k)
          acc = combine(a.op, acc, v[k] - shift);
      }
    }
    for (; j < end; ++j)
      acc = combine(a.op, acc,
                    loadAsFloat(a.srcType, a.src,
                                base + stridedOffset(a.redRank, a.redShape, a.redStrides, j)) -
                        shift);
    if (a.chunks == 1)
      storeFromFloat(a.dstType, a.dst, o, finish(a, acc, o));
    else
      a.partial[i] = acc;
  }
};

} // namespace ampc::rt::cuda
