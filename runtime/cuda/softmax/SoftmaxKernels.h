//===- softmax/SoftmaxKernels.h - Softmax and its gradients -----*- C++ -*-===//
//
// Softmax, LogSoftmax, Hardmax and the gradients of DeviceKernels.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../KernelCommon.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Softmax, LogSoftmax, Hardmax and the gradients (one thread per slice column)
//===----------------------------------------------------------------------===//

enum class SoftOp : uint8_t { Softmax, LogSoftmax, Hardmax, SoftmaxGrad, LogSoftmaxGrad };

/// The tensor is [outer, len, inner]; thread i handles column (i / inner,
/// i % inner). Gradients: x = dY, y = Y.
struct SoftmaxArgs {
  const void *x = nullptr, *y = nullptr;
  void *out = nullptr;
  uint8_t xType = 0, yType = 0, outType = 0;
  SoftOp op = SoftOp::Softmax;
  int64_t len = 0, inner = 1;

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
