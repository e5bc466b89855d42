//===- softmax/SoftmaxKernels.h - Softmax and its gradients -----*- C++ -*-===//
//
// Softmax, LogSoftmax, Hardmax and the gradients of DeviceKernels.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../RowKernels.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Softmax, LogSoftmax, Hardmax and the gradients (one thread per slice column)
//===----------------------------------------------------------------------===//

enum class SoftOp : uint8_t { Softmax, LogSoftmax, Hardmax, SoftmaxGrad, LogSoftmaxGrad };

/// The tensor is [outer, len, inner]; thread i handles column (i / inner,
/// i % inner). Gradients: x = dY, y = Y. When the axis is the last one
/// (inner == 1) and the rows are long, the lowering makes it a row launch
/// (RowKernels.h, `lanes` threads per row; Hardmax excepted): Softmax and
/// LogSoftmax read the row once (online maximum and sum), the gradients
/// reduce sum(dY * Y) or sum(dY), then every lane writes its chunks.
struct SoftmaxArgs {
  const void *x = nullptr, *y = nullptr;
  void *out = nullptr;
  uint8_t xType = 0, yType = 0, outType = 0;
  SoftOp op = SoftOp::Softmax;
  int64_t len = 0, inner = 1;
  int lanes = 0;

  AMPC_HD int64_t rowLength() const { return len; }
  static AMPC_HD int rowPasses(const SoftmaxArgs &) { return 1; }
  AMPC_HD bool forward() const { return op == SoftOp::Softmax || op == SoftOp::LogSoftmax; }
  static AMPC_HD RowAcc rowInit(const SoftmaxArgs &a, int) {
    return a.forward() ? softmaxInit() : RowAcc();
  }
  static AMPC_HD RowAcc rowAccumulate(const SoftmaxArgs &a, int64_t row, int, int64_t j0, int n,
                                      RowAcc acc, const RowAcc *) {
    float x[kRowChunk], y[kRowChunk];
    loadChunk(a.xType, a.x, row * a.len + j0, n, x);
    if (a.forward()) {
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k)
        acc = softmaxAdd(acc, x[k]);
      return acc;
    }
    if (a.op == SoftOp::LogSoftmaxGrad) {
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k)
        acc.a += x[k];
      return acc;
    }
    loadChunk(a.yType, a.y, row * a.len + j0, n, y);
    AMPC_UNROLL
    for (int k = 0; k < kRowChunk && k < n; ++k)
      acc.a += x[k] * y[k];
    return acc;
  }
  static AMPC_HD RowAcc rowCombine(const SoftmaxArgs &a, int, RowAcc p, RowAcc q) {
    if (a.forward())
      return softmaxMerge(p, q);
    p.a += q.a;
    return p;
  }
  /// The reference's formulas (run), given the row's maximum and sum.
  static AMPC_HD void rowFinish(const SoftmaxArgs &a, int64_t row, int64_t j0, int n,
                                const RowAcc *totals) {
    float x[kRowChunk], y[kRowChunk], r[kRowChunk];
    int64_t off = row * a.len + j0;
    loadChunk(a.xType, a.x, off, n, x);
    float mx = totals[0].a, s = totals[0].b;
    switch (a.op) {
    case SoftOp::Softmax: {
      float inv = 1.0f / s;
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k)
        r[k] = std::exp(x[k] - mx) * inv;
      break;
    }
    case SoftOp::LogSoftmax: {
      float lse = std::log(s);
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k)
        r[k] = (x[k] - mx) - lse;
      break;
    }
    default: {
      float sum = totals[0].a;
      loadChunk(a.yType, a.y, off, n, y);
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k)
        r[k] = a.op == SoftOp::LogSoftmaxGrad ? x[k] - std::exp(y[k]) * sum : y[k] * (x[k] - sum);
      break;
    }
    }
    storeChunk(a.outType, a.out, off, n, r);
  }
  static AMPC_HD void rowDone(const SoftmaxArgs &, int64_t, const RowAcc *) {}

  static AMPC_HD void run(const SoftmaxArgs &a, int64_t i) {
    int64_t o = i / a.inner, base = o * a.len * a.inner + (i - o * a.inner), st = a.inner;
    auto X = [&](int64_t j) { return loadAsFloat(a.xType, a.x, base + j * st); };
    switch (a.op) {
    case SoftOp::Softmax:
    case SoftOp::LogSoftmax: {
      float mx = -infinityF();
      for (int64_t j = 0; j < a.len; ++j) {
        float v = X(j);
        mx = v > mx ? v : mx;
      }
      float sum = 0;
      for (int64_t j = 0; j < a.len; ++j)
        sum += std::exp(X(j) - mx);
      if (a.op == SoftOp::Softmax) {
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < a.len; ++j)
          storeFromFloat(a.outType, a.out, base + j * st, std::exp(X(j) - mx) * inv);
      } else {
        float lse = std::log(sum);
        for (int64_t j = 0; j < a.len; ++j)
          storeFromFloat(a.outType, a.out, base + j * st, (X(j) - mx) - lse);
      }
      return;
    }
    case SoftOp::Hardmax: {
      float mx = -infinityF();
      int64_t arg = 0;
      for (int64_t j = 0; j < a.len; ++j) {
        float v = X(j);
        if (v > mx) {
          mx = v;
          arg = j;
        }
      }
      for (int64_t j = 0; j < a.len; ++j)
        storeFromFloat(a.outType, a.out, base + j * st, j == arg ? 1.0f : 0.0f);
      return;
    }
    case SoftOp::SoftmaxGrad:
    case SoftOp::LogSoftmaxGrad: {
      bool isLog = a.op == SoftOp::LogSoftmaxGrad;
      auto Y = [&](int64_t j) { return loadAsFloat(a.yType, a.y, base + j * st); };
      float s = 0;
      for (int64_t j = 0; j < a.len; ++j)
        s += isLog ? X(j) : X(j) * Y(j);
      for (int64_t j = 0; j < a.len; ++j) {
        float g = X(j), yv = Y(j);
        storeFromFloat(a.outType, a.out, base + j * st,
                       isLog ? g - std::exp(yv) * s : yv * (g - s));
      }
      return;
    }
    }
  }
};

} // namespace ampc::rt::cuda
