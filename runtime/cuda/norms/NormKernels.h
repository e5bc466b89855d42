//===- norms/NormKernels.h - LayerNorm and BatchNorm ------------*- C++ -*-===//
//
// LayerNormalization and BatchNormalization (and their gradients) of
// DeviceKernels.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../RowKernels.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// LayerNormalization and its gradient
//===----------------------------------------------------------------------===//

/// Scale and bias broadcast to the normalized shape: element i of a row reads
/// offset i (contiguous) or its strided offset.
struct NormParam {
  const void *p = nullptr;
  uint8_t type = 0;
  bool contiguous = true;
  int rank = 0;
  int64_t shape[kMaxRank] = {}, strides[kMaxRank] = {};
  AMPC_HD float at(int64_t i) const {
    return loadAsFloat(type, p, contiguous ? i : stridedOffset(rank, shape, strides, i));
  }
};

/// Phase 0 (forward) and 1 (dX): one thread per row, or (lanes > 0) a row
/// launch (RowKernels.h): the forward reduces the sum, then the squared
/// deviations from the mean (the reference's two passes, kept for their
/// accuracy), dX reduces sum(dY * scale) and sum(dY * scale * x̂) in one
/// pass. Phase 2: thread i = k * inner + column sums dScale and dBias of
/// that column over chunk k of the rows (columnChunk: a thread per column
/// alone would leave most of a GPU idle and run 16k rows in series), into
/// the results when there is one chunk, else into the partials part[i]
/// (dScale) and part[inner * chunks + i] (dBias); phase 3: thread column
/// combines them in chunk order.
struct LayerNormArgs {
  const void *x = nullptr, *dy = nullptr, *meanIn = nullptr, *invIn = nullptr;
  void *y = nullptr, *mean = nullptr, *inv = nullptr, *dScale = nullptr, *dBias = nullptr;
  uint8_t xType = 0, dyType = 0, meanInType = 0, invInType = 0, yType = 0, meanType = 0,
          invType = 0, dScaleType = 0, dBiasType = 0;
  NormParam scale, bias; ///< bias.p null: no bias
  int64_t rows = 0, inner = 0;
  float eps = 1e-5f;
  uint8_t phase = 0;
  int lanes = 0;
  int64_t chunk = 1, chunks = 1;
  float *part = nullptr;

  AMPC_HD int64_t rowLength() const { return inner; }
  static AMPC_HD int rowPasses(const LayerNormArgs &a) { return a.phase == 0 ? 2 : 1; }
  static AMPC_HD RowAcc rowInit(const LayerNormArgs &, int) { return RowAcc(); }
  AMPC_HD float rowMean(const RowAcc *totals) const {
    return totals[0].a / static_cast<float>(inner);
  }
  AMPC_HD float rowInv(const RowAcc *totals) const {
    return 1.0f / std::sqrt(totals[1].a / static_cast<float>(inner) + eps);
  }
  static AMPC_HD RowAcc rowAccumulate(const LayerNormArgs &a, int64_t row, int pass, int64_t j0,
                                      int n, RowAcc acc, const RowAcc *totals) {
    float x[kRowChunk];
    loadChunk(a.xType, a.x, row * a.inner + j0, n, x);
    if (a.phase == 0) {
      float mu = pass == 0 ? 0.0f : a.rowMean(totals);
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k) {
        float d = x[k] - mu;
        acc.a += pass == 0 ? x[k] : d * d;
      }
      return acc;
    }
    float g[kRowChunk];
    loadChunk(a.dyType, a.dy, row * a.inner + j0, n, g);
    float mu = loadAsFloat(a.meanInType, a.meanIn, row);
    float inv = loadAsFloat(a.invInType, a.invIn, row);
    AMPC_UNROLL
    for (int k = 0; k < kRowChunk && k < n; ++k) {
      float gs = g[k] * a.scale.at(j0 + k);
      acc.a += gs;
      acc.b += gs * ((x[k] - mu) * inv);
    }
    return acc;
  }
  static AMPC_HD RowAcc rowCombine(const LayerNormArgs &, int, RowAcc p, RowAcc q) {
    p.a += q.a;
    p.b += q.b;
    return p;
  }
  /// The reference's formulas (run), given the row's sums.
  static AMPC_HD void rowFinish(const LayerNormArgs &a, int64_t row, int64_t j0, int n,
                                const RowAcc *totals) {
    float x[kRowChunk], r[kRowChunk];
    const int64_t off = row * a.inner + j0;
    loadChunk(a.xType, a.x, off, n, x);
    if (a.phase == 0) {
      float mu = a.rowMean(totals), inv = a.rowInv(totals);
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k)
        r[k] = (x[k] - mu) * inv * a.scale.at(j0 + k) + (a.bias.p ? a.bias.at(j0 + k) : 0.0f);
      storeChunk(a.yType, a.y, off, n, r);
      return;
    }
    float g[kRowChunk];
    loadChunk(a.dyType, a.dy, off, n, g);
    float mu = loadAsFloat(a.meanInType, a.meanIn, row);
    float inv = loadAsFloat(a.invInType, a.invIn, row);
    float invN = 1.0f / static_cast<float>(a.inner);
    float mg = totals[0].a * invN, mgx = totals[0].b * invN;
    AMPC_UNROLL
    for (int k = 0; k < kRowChunk && k < n; ++k)
      r[k] = inv * (g[k] * a.scale.at(j0 + k) - mg - ((x[k] - mu) * inv) * mgx);
    storeChunk(a.yType, a.y, off, n, r);
  }
  static AMPC_HD void rowDone(const LayerNormArgs &a, int64_t row, const RowAcc *totals) {
    if (a.phase != 0)
      return;
    if (a.mean)
      storeFromFloat(a.meanType, a.mean, row, a.rowMean(totals));
    if (a.inv)
      storeFromFloat(a.invType, a.inv, row, a.rowInv(totals));
  }

  AMPC_HD void storeParamGrads(int64_t col, float ds, float db) const {
    if (dScale)
      storeFromFloat(dScaleType, dScale, col, ds);
    if (dBias)
      storeFromFloat(dBiasType, dBias, col, db);
  }

  static AMPC_HD void run(const LayerNormArgs &a, int64_t i) {
    if (a.phase == 2) {
      int64_t k = i / a.inner, col = i - k * a.inner;
      int64_t begin = k * a.chunk, end = begin + a.chunk < a.rows ? begin + a.chunk : a.rows;
      float ds = 0, db = 0;
      for (int64_t r = begin; r < end; ++r) {
        int64_t off = r * a.inner + col;
        float g = loadAsFloat(a.dyType, a.dy, off);
        float xhat = (loadAsFloat(a.xType, a.x, off) - loadAsFloat(a.meanInType, a.meanIn, r)) *
                     loadAsFloat(a.invInType, a.invIn, r);
        ds += g * xhat;
        db += g;
      }
      if (a.chunks > 1) {
        a.part[i] = ds;
        a.part[a.inner * a.chunks + i] = db;
        return;
      }
      a.storeParamGrads(col, ds, db);
      return;
    }
    if (a.phase == 3) {
      float ds = 0, db = 0;
      for (int64_t k = 0; k < a.chunks; ++k) {
        ds += a.part[k * a.inner + i];
        db += a.part[a.inner * a.chunks + k * a.inner + i];
      }
      a.storeParamGrads(i, ds, db);
      return;
    }
    int64_t base = i * a.inner, n = a.inner;
    auto X = [&](int64_t j) { return loadAsFloat(a.xType, a.x, base + j); };
    if (a.phase == 0) {
      float s = 0;
      for (int64_t j = 0; j < n; ++j)
        s += X(j);
      float mu = s / static_cast<float>(n);
      float ss = 0;
      for (int64_t j = 0; j < n; ++j) {
        float d = X(j) - mu;
        ss += d * d;
      }
      float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + a.eps);
      for (int64_t j = 0; j < n; ++j)
        storeFromFloat(a.yType, a.y, base + j,
                       (X(j) - mu) * inv * a.scale.at(j) + (a.bias.p ? a.bias.at(j) : 0.0f));
      if (a.mean)
        storeFromFloat(a.meanType, a.mean, i, mu);
      if (a.inv)
        storeFromFloat(a.invType, a.inv, i, inv);
      return;
    }
    // dX = inv * (g*scale - mean(g*scale) - xhat * mean(g*scale*xhat)).
    float mu = loadAsFloat(a.meanInType, a.meanIn, i), inv = loadAsFloat(a.invInType, a.invIn, i);
    auto G = [&](int64_t j) { return loadAsFloat(a.dyType, a.dy, base + j) * a.scale.at(j); };
    float mg = 0, mgx = 0;
    for (int64_t j = 0; j < n; ++j) {
      float gs = G(j);
      mg += gs;
      mgx += gs * ((X(j) - mu) * inv);
    }
    float invN = 1.0f / static_cast<float>(n);
    mg *= invN;
    mgx *= invN;
    for (int64_t j = 0; j < n; ++j)
      storeFromFloat(a.yType, a.y, base + j, inv * (G(j) - mg - ((X(j) - mu) * inv) * mgx));
  }
};

//===----------------------------------------------------------------------===//
// BatchNormalization (training and inference) and its gradient
//===----------------------------------------------------------------------===//

/// X is [N, C, pix]; channel c has count = N * pix elements, split into
/// `chunks` chunks of `chunk` for the partial sums. Workspace (fp32):
/// partA[C * chunks], partB[C * chunks], mu[C], inv[C], mg[C], mgx[C].
struct BatchNormArgs {
  enum Phase : uint8_t {
    SumX,        ///< (c, chunk): partial sums of x
    Mean,        ///< c: mu
    SumSqDiff,   ///< (c, chunk): partial sums of (x - mu)^2
    Variance,    ///< c: inv (and the forward's statistics outputs)
    Apply,       ///< element: y
    SumGrad,     ///< (c, chunk): partial sums of dy and dy * xhat
    CombineGrad, ///< c: dScale, dBias, mg, mgx
    ApplyGrad,   ///< element: dx
    Stats,       ///< row launch per channel: SumX to Variance in one launch
    GradStats    ///< row launch per channel: SumGrad and CombineGrad
  };
  const void *x = nullptr, *dy = nullptr, *scale = nullptr, *bias = nullptr,
             *runMean = nullptr, *runVar = nullptr;
  void *y = nullptr, *outMean = nullptr, *outVar = nullptr, *savedMean = nullptr,
       *savedInv = nullptr, *dScale = nullptr, *dBias = nullptr;
  uint8_t xType = 0, dyType = 0, scaleType = 0, biasType = 0, runMeanType = 0, runVarType = 0,
          yType = 0, outMeanType = 0, outVarType = 0, savedMeanType = 0, savedInvType = 0,
          dScaleType = 0, dBiasType = 0;
  float *ws = nullptr;
  int64_t N = 0, C = 0, pix = 0, chunk = 1, chunks = 1;
  float eps = 1e-5f, momentum = 0.9f;
  bool training = true;
  Phase phase = SumX;

  AMPC_HD float *partA() const { return ws; }
  AMPC_HD float *partB() const { return ws + C * chunks; }
  AMPC_HD float *mu() const { return ws + 2 * C * chunks; }
  AMPC_HD float *invs() const { return mu() + C; }
  AMPC_HD float *mg() const { return mu() + 2 * C; }
  AMPC_HD float *mgx() const { return mu() + 3 * C; }
  /// Element j of channel c (j in [0, N * pix)).
  AMPC_HD int64_t offset(int64_t c, int64_t j) const {
    int64_t n = j / pix;
    return (n * C + c) * pix + (j - n * pix);
  }

  /// Channel c's inv (and, when training, the statistics outputs) from its
  /// mean and biased variance, as the CPU kernel computes them.
  AMPC_HD void storeStatistics(int64_t c, float m, float v) const {
    float inv = 1.0f / std::sqrt(v + eps);
    invs()[c] = inv;
    if (!training)
      return;
    if (outMean)
      storeFromFloat(outMeanType, outMean, c,
                     loadAsFloat(runMeanType, runMean, c) * momentum + m * (1 - momentum));
    if (outVar)
      storeFromFloat(outVarType, outVar, c,
                     loadAsFloat(runVarType, runVar, c) * momentum + v * (1 - momentum));
    if (savedMean)
      storeFromFloat(savedMeanType, savedMean, c, m);
    if (savedInv)
      storeFromFloat(savedInvType, savedInv, c, inv);
  }
  /// dScale, dBias and the dX terms of channel c from its sums.
  AMPC_HD void storeGradSums(int64_t c, float sumDy, float sumDyXhat) const {
    float count = static_cast<float>(N * pix);
    if (dScale)
      storeFromFloat(dScaleType, dScale, c, sumDyXhat);
    if (dBias)
      storeFromFloat(dBiasType, dBias, c, sumDy);
    float sc = loadAsFloat(scaleType, scale, c);
    mg()[c] = sc * sumDy / count;
    mgx()[c] = sc * sumDyXhat / count;
  }

  // Row launches (RowKernels.h), a channel's N * pix elements as its row
  // (loaded one by one: they are contiguous only within a sample): Stats
  // reduces the sum, then the squared deviations; GradStats sum(dY) and
  // sum(dY * x̂). When a GPU would be left mostly idle by C rows (16
  // channels of 512 x 32 x 32), the chunk phases SumX, SumSqDiff and SumGrad
  // run as row launches too, row c * chunks + k being chunk k (`chunk`
  // elements, whole samples) of channel c, and write partials that Mean,
  // Variance and CombineGrad combine.
  int lanes = 0;
  AMPC_HD bool chunkPhase() const {
    return phase == SumX || phase == SumSqDiff || phase == SumGrad;
  }
  AMPC_HD int64_t rowLength() const { return chunkPhase() ? chunk : N * pix; }
  static AMPC_HD int rowPasses(const BatchNormArgs &a) { return a.phase == Stats ? 2 : 1; }
  static AMPC_HD RowAcc rowInit(const BatchNormArgs &, int) { return RowAcc(); }
  static AMPC_HD RowAcc rowAccumulate(const BatchNormArgs &a, int64_t row, int pass, int64_t j0,
                                      int n, RowAcc acc, const RowAcc *totals) {
    const bool chunked = a.chunkPhase();
    const int64_t c = chunked ? row / a.chunks : row;
    const int64_t first = chunked ? (row - c * a.chunks) * a.chunk + j0 : j0;
    const bool sumX = a.phase == Stats ? pass == 0 : a.phase == SumX;
    const bool sumSq = a.phase == Stats ? pass == 1 : a.phase == SumSqDiff;
    if (sumX || sumSq) {
      const float count = static_cast<float>(a.N * a.pix);
      const float m = sumX ? 0.0f : a.phase == Stats ? totals[0].a / count : a.mu()[c];
      AMPC_UNROLL
      for (int k = 0; k < kRowChunk && k < n; ++k) {
        float xv = loadAsFloat(a.xType, a.x, a.offset(c, first + k));
        float d = xv - m;
        acc.a += sumX ? xv : d * d;
      }
      return acc;
    }
    const float m = a.mu()[c], inv = a.invs()[c];
    AMPC_UNROLL
    for (int k = 0; k < kRowChunk && k < n; ++k) {
      int64_t off = a.offset(c, first + k);
      float xv = loadAsFloat(a.xType, a.x, off), g = loadAsFloat(a.dyType, a.dy, off);
      acc.a += g;
      acc.b += g * ((xv - m) * inv);
    }
    return acc;
  }
  static AMPC_HD RowAcc rowCombine(const BatchNormArgs &, int, RowAcc p, RowAcc q) {
    p.a += q.a;
    p.b += q.b;
    return p;
  }
  static AMPC_HD void rowFinish(const BatchNormArgs &, int64_t, int64_t, int, const RowAcc *) {}
  static AMPC_HD void rowDone(const BatchNormArgs &a, int64_t row, const RowAcc *totals) {
    if (a.chunkPhase()) {
      a.partA()[row] = totals[0].a;
      if (a.phase == SumGrad)
        a.partB()[row] = totals[0].b;
      return;
    }
    const float count = static_cast<float>(a.N * a.pix);
    if (a.phase == GradStats) {
      a.storeGradSums(row, totals[0].a, totals[0].b);
      return;
    }
    float m = totals[0].a / count;
    a.mu()[row] = m;
    a.storeStatistics(row, m, totals[1].a / count);
  }

  static AMPC_HD void run(const BatchNormArgs &a, int64_t i) {
    float count = static_cast<float>(a.N * a.pix);
    switch (a.phase) {
    case SumX:
    case SumSqDiff:
    case SumGrad: {
      int64_t c = i / a.chunks, k = i - c * a.chunks;
      int64_t begin = k * a.chunk, total = a.N * a.pix;
      int64_t end = begin + a.chunk < total ? begin + a.chunk : total;
      float s = 0, t = 0, mu = a.phase == SumX ? 0.0f : a.mu()[c];
      float inv = a.phase == SumGrad ? a.invs()[c] : 0.0f;
      for (int64_t j = begin; j < end; ++j) {
        int64_t off = a.offset(c, j);
        float xv = loadAsFloat(a.xType, a.x, off);
        if (a.phase == SumX) {
          s += xv;
        } else if (a.phase == SumSqDiff) {
          float d = xv - mu;
          s += d * d;
        } else {
          float g = loadAsFloat(a.dyType, a.dy, off);
          s += g;
          t += g * ((xv - mu) * inv);
        }
      }
      a.partA()[i] = s;
      if (a.phase == SumGrad)
        a.partB()[i] = t;
      return;
    }
    case Mean: {
      float s = 0;
      for (int64_t k = 0; k < a.chunks; ++k)
        s += a.partA()[i * a.chunks + k];
      a.mu()[i] = s / count;
      return;
    }
    case Variance: {
      float mu, v;
      if (a.training) {
        float s = 0;
        for (int64_t k = 0; k < a.chunks; ++k)
          s += a.partA()[i * a.chunks + k];
        mu = a.mu()[i];
        v = s / count;
      } else {
        mu = loadAsFloat(a.runMeanType, a.runMean, i);
        v = loadAsFloat(a.runVarType, a.runVar, i);
        a.mu()[i] = mu;
      }
      a.storeStatistics(i, mu, v);
      return;
    }
    case Apply: {
      int64_t c = (i / a.pix) % a.C;
      float sc = a.invs()[c] * loadAsFloat(a.scaleType, a.scale, c);
      float b = loadAsFloat(a.biasType, a.bias, c);
      storeFromFloat(a.yType, a.y, i, (loadAsFloat(a.xType, a.x, i) - a.mu()[c]) * sc + b);
      return;
    }
    case CombineGrad: {
      float sumDy = 0, sumDyXhat = 0;
      for (int64_t k = 0; k < a.chunks; ++k) {
        sumDy += a.partA()[i * a.chunks + k];
        sumDyXhat += a.partB()[i * a.chunks + k];
      }
      a.storeGradSums(i, sumDy, sumDyXhat);
      return;
    }
    case Stats:
    case GradStats:
      return; // row launches only (rowDone)
    case ApplyGrad: {
      int64_t c = (i / a.pix) % a.C;
      float inv = a.invs()[c], sc = loadAsFloat(a.scaleType, a.scale, c);
      float g = loadAsFloat(a.dyType, a.dy, i);
      float v = a.training ? inv * (g * sc - a.mg()[c] -
                                    (loadAsFloat(a.xType, a.x, i) - a.mu()[c]) * inv * a.mgx()[c])
                           : g * sc * inv;
      storeFromFloat(a.yType, a.y, i, v);
      return;
    }
    }
  }
};

} // namespace ampc::rt::cuda
