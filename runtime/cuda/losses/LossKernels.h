//===- losses/LossKernels.h - Cross-entropy and NLL losses ------*- C++ -*-===//
//
// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss of DeviceKernels.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../KernelCommon.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss and their gradients
//===----------------------------------------------------------------------===//

/// Scores [N, C, D...] (D = product of the trailing dims), targets [N, D...].
/// Workspace: losses[samples], then one float (weight sum or grad scale).
struct LossArgs {
  enum Phase : uint8_t {
    PerSample, ///< sample: log-probabilities, the sample's weighted loss
    Reduce,    ///< one thread: the reduced loss
    GradScale, ///< one thread: 1 / weight sum (mean) or 1
    Grad       ///< sample: its row of dX
  };
  enum Reduction : uint8_t { None, Sum, Mean };
  const void *x = nullptr, *target = nullptr, *weight = nullptr, *dLoss = nullptr;
  void *loss = nullptr, *logProb = nullptr, *dx = nullptr;
  uint8_t xType = 0, targetType = 0, weightType = 0, dLossType = 0, lossType = 0,
          logProbType = 0, dxType = 0;
  float *ws = nullptr;
  int64_t N = 0, C = 0, D = 1, ignore = 0;
  bool softmax = true, hasIgnore = false;
  Reduction reduction = Mean;
  Phase phase = PerSample;

  AMPC_HD int64_t targetAt(int64_t s) const {
    return targetType == FusedElem::I64 ? static_cast<const int64_t *>(target)[s]
                                        : static_cast<const int32_t *>(target)[s];
  }
  /// 0 when ignored, NaN when out of range, else the class weight (or 1).
  AMPC_HD float sampleWeight(int64_t t) const {
    if (hasIgnore && t == ignore)
      return 0.0f;
    if (t < 0 || t >= C)
      return nanF();
    return weight ? loadAsFloat(weightType, weight, t) : 1.0f;
  }
  AMPC_HD float weightSum() const {
    float s = 0;
    for (int64_t k = 0; k < N * D; ++k) {
      float w = sampleWeight(targetAt(k));
      s += w == w ? w : 0.0f;
    }
    return s;
  }

  static AMPC_HD void run(const LossArgs &a, int64_t i) {
    const int64_t C = a.C, D = a.D;
    switch (a.phase) {
    case PerSample: {
      int64_t n = i / D, d = i - n * D, base = n * C * D + d;
      auto X = [&](int64_t c) { return loadAsFloat(a.xType, a.x, base + c * D); };
      float lse = 0;
      if (a.softmax) {
        float mx = -infinityF();
        for (int64_t c = 0; c < C; ++c) {
          float v = X(c);
          mx = v > mx ? v : mx; // std::max(mx, v): NaN scores keep the maximum
        }
        float s = 0;
        for (int64_t c = 0; c < C; ++c)
          s += std::exp(X(c) - mx);
        lse = mx + std::log(s);
        if (a.logProb)
          for (int64_t c = 0; c < C; ++c)
            storeFromFloat(a.logProbType, a.logProb, base + c * D, X(c) - lse);
      }
      int64_t t = a.targetAt(i);
      float w = a.sampleWeight(t), l = 0.0f;
      if (w != w)
        l = nanF();
      else if (w != 0.0f)
        l = -(a.softmax ? X(t) - lse : X(t)) * w;
      if (a.reduction == None)
        storeFromFloat(a.lossType, a.loss, i, l);
      else
        a.ws[i] = l;
      return;
    }
    case Reduce: {
      float s = 0;
      for (int64_t k = 0; k < a.N * D; ++k)
        s += a.ws[k];
      storeFromFloat(a.lossType, a.loss, 0, a.reduction == Sum ? s : s / a.weightSum());
      return;
    }
    case GradScale:
      a.ws[0] = a.reduction == Mean ? 1.0f / a.weightSum() : 1.0f;
      return;
    case Grad: {
      int64_t n = i / D, d = i - n * D, base = n * C * D + d;
      int64_t t = a.targetAt(i);
      float w = a.sampleWeight(t);
      float dl = loadAsFloat(a.dLossType, a.dLoss, a.reduction == None ? i : 0);
      float coef = w * dl * a.ws[0];
      for (int64_t c = 0; c < C; ++c) {
        float v;
        if (a.softmax) {
          float p = std::exp(loadAsFloat(a.xType, a.x, base + c * D));
          v = (c == t && coef != 0.0f) ? coef * (p - 1.0f) : coef * p;
        } else {
          v = coef != coef ? nanF() : (c == t && coef != 0.0f ? -coef : 0.0f);
        }
        storeFromFloat(a.dxType, a.dx, base + c * D, v);
      }
      return;
    }
    }
  }
};

} // namespace ampc::rt::cuda
