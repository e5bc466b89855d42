//===- reductions/ReduceKernels.h - Reductions over any axes ----*- C++ -*-===//
//
// The Reduce* kernel of DeviceKernels.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../KernelCommon.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Reductions over any set of axes
//===----------------------------------------------------------------------===//

enum class ReduceOp : uint8_t { Sum, Mean, SumSquare, L1, L2, Max, Min, Prod, LogSum, LogSumExp };

/// Phase 0: thread (result o, chunk c) reduces its chunk of the reduced
/// elements (the final result when there is one chunk, else a partial);
/// phase 1: thread o combines the partials of result o in chunk order.
struct ReduceArgs {
  const void *src = nullptr;
  void *dst = nullptr;
  float *partial = nullptr;
  uint8_t srcType = 0, dstType = 0, phase = 0;
  ReduceOp op = ReduceOp::Sum;
  int keptRank = 0, redRank = 0;
  int64_t keptShape[kMaxRank] = {}, keptStrides[kMaxRank] = {};
  int64_t redShape[kMaxRank] = {}, redStrides[kMaxRank] = {};
  int64_t count = 1, chunk = 1, chunks = 1;
  /// LogSumExp: each result's maximum (a Max reduction run first), which
  /// every exponent is shifted by, as on the CPU.
  const float *shift = nullptr;

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
        acc = merge(a.op, acc, a.partial[i * a.chunks + c]);
      storeFromFloat(a.dstType, a.dst, i, finish(a, acc, i));
      return;
    }
    int64_t o = i / a.chunks, c = i - o * a.chunks;
    int64_t base = stridedOffset(a.keptRank, a.keptShape, a.keptStrides, o);
    int64_t begin = c * a.chunk, end = begin + a.chunk < a.count ? begin + a.chunk : a.count;
    float shift = a.shift ? shiftOf(a, o) : 0.0f;
    float acc = init(a.op);
    for (int64_t j = begin; j < end; ++j)
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
