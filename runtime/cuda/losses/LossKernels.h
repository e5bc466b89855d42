//===- losses/LossKernels.h - Cross-entropy and NLL losses ------*- C++ -*-===//
//
// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss of DeviceKernels.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../RowKernels.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss and their gradients
//===----------------------------------------------------------------------===//

/// Scores [N, C, D...] (D = product of the trailing dims), targets [N, D...].
/// Workspace: losses[samples], then one float (weight sum or grad scale).
struct LossArgs {
  enum Phase : uint8_t {
    PerSample, ///< sample: log-probabilities, the sample's weighted loss
    Reduce,    ///< one row (or thread): the reduced loss
    GradScale, ///< one row (or thread): 1 / weight sum (mean) or 1
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

  /// Sample i's weighted loss (its scores from `base`, classes D apart),
  /// into the result or the workspace.
  AMPC_HD void storeSampleLoss(int64_t i, int64_t base, float lse) const {
    int64_t t = targetAt(i);
    float w = sampleWeight(t), l = 0.0f;
    if (w != w)
      l = nanF();
    else if (w != 0.0f) {
      float xt = loadAsFloat(xType, x, base + t * D);
      l = -(softmax ? xt - lse : xt) * w;
    }
    if (reduction == None)
      storeFromFloat(lossType, loss, i, l);
    else
      ws[i] = l;
  }
  /// The factor of sample i's row of dX.
  AMPC_HD float gradCoef(int64_t i, int64_t t) const {
    float dl = loadAsFloat(dLossType, dLoss, reduction == None ? i : 0);
    return sampleWeight(t) * dl * ws[0];
  }
  /// dX of class c of a sample with target t, from its log-probability
  /// (softmax) or its score.
  AMPC_HD float gradOf(float coef, int64_t c, int64_t t, float xc) const {
    if (softmax) {
      float p = std::exp(xc);
      return (c == t && coef != 0.0f) ? coef * (p - 1.0f) : coef * p;
    }
    return coef != coef ? nanF() : (c == t && coef != 0.0f ? -coef : 0.0f);
  }

  // Row launches (RowKernels.h) when the scores are [N, C] (D == 1):
  // PerSample with softmax reads a row once (online maximum and sum), Grad
  // writes a row with no reduction. Reduce and GradScale are one row of the
  // N * D samples (the sum of their losses in `a`, of their weights in `b`),
  // so that a block, not one thread, sums 16k samples.
  int lanes = 0;
  AMPC_HD bool samplesRow() const { return phase == Reduce || phase == GradScale; }
  AMPC_HD int64_t rowLength() const { return samplesRow() ? N * D : C; }
  static AMPC_HD int rowPasses(const LossArgs &a) {
    return a.phase == PerSample || a.samplesRow() ? 1 : 0;
  }
  static AMPC_HD RowAcc rowInit(const LossArgs &a, int) {
    return a.samplesRow() ? RowAcc() : softmaxInit();
  }
  static AMPC_HD RowAcc rowAccumulate(const LossArgs &a, int64_t row, int, int64_t j0, int n,
                                      RowAcc acc, const RowAcc *) {
    if (a.samplesRow()) {
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k) {
        if (a.phase == Reduce)
          acc.a += a.ws[j0 + k];
        float w = a.sampleWeight(a.targetAt(j0 + k));
        acc.b += w == w ? w : 0.0f;
      }
      return acc;
    }
    float v[kRowChunk];
    loadChunk(a.xType, a.x, row * a.C + j0, n, v);
    AMPC_UNROLL
    for (int k = 0; k < kRowChunk && k < n; ++k)
      acc = softmaxAdd(acc, v[k]);
    return acc;
  }
  static AMPC_HD RowAcc rowCombine(const LossArgs &a, int, RowAcc p, RowAcc q) {
    if (!a.samplesRow())
      return softmaxMerge(p, q);
    p.a += q.a;
    p.b += q.b;
    return p;
  }
  static AMPC_HD float rowLse(const RowAcc *totals) {
    return totals[0].a + std::log(totals[0].b);
  }
  static AMPC_HD void rowFinish(const LossArgs &a, int64_t row, int64_t j0, int n,
                                const RowAcc *totals) {
    float v[kRowChunk];
    if (a.samplesRow())
      return;
    if (a.phase == PerSample) {
      if (!a.logProb)
        return;
      loadChunk(a.xType, a.x, row * a.C + j0, n, v);
      float lse = rowLse(totals);
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k)
        v[k] -= lse;
      storeChunk(a.logProbType, a.logProb, row * a.C + j0, n, v);
      return;
    }
    int64_t t = a.targetAt(row);
    float coef = a.gradCoef(row, t);
    if (a.softmax)
      loadChunk(a.xType, a.x, row * a.C + j0, n, v);
    AMPC_UNROLL
    for (int k = 0; k < kRowChunk && k < n; ++k)
      v[k] = a.gradOf(coef, j0 + k, t, v[k]);
    storeChunk(a.dxType, a.dx, row * a.C + j0, n, v);
  }
  static AMPC_HD void rowDone(const LossArgs &a, int64_t row, const RowAcc *totals) {
    if (a.phase == Reduce)
      storeFromFloat(a.lossType, a.loss, 0,
                     a.reduction == Sum ? totals[0].a : totals[0].a / totals[0].b);
    if (a.phase == GradScale)
      a.ws[0] = a.reduction == Mean ? 1.0f / totals[0].b : 1.0f;
    if (a.phase == PerSample)
      a.storeSampleLoss(row, row * a.C, rowLse(totals));
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
      a.storeSampleLoss(i, base, lse);
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
      float coef = a.gradCoef(i, t);
      for (int64_t c = 0; c < C; ++c) {
        // NLL has no log-probabilities to read (x is null).
        float xc = a.softmax ? loadAsFloat(a.xType, a.x, base + c * D) : 0.0f;
        storeFromFloat(a.dxType, a.dx, base + c * D, a.gradOf(coef, c, t, xc));
      }
      return;
    }
    }
  }
};

} // namespace ampc::rt::cuda
