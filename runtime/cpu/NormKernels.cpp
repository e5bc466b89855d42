//===- NormKernels.cpp - Batch and layer normalization and their gradients -===//
//
// Statistics in fp32 with two passes (mean, then the mean of squared
// deviations: the population variance, as ONNX and the interpreter define
// it), 16-way partial sums per row. BatchNormalization and its gradient split
// the channels over the threads; LayerNormalization and its gradient split
// the rows, and the parameter gradients of LayerNormalizationGrad are per
// range partial sums combined in range order (deterministic for a thread
// count).
//
//===----------------------------------------------------------------------===//

#include "KernelHelpers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ampc::rt::cpu {

namespace {

TensorArg outAt(const StepContext &ctx, unsigned i) {
  return i < ctx.outputs.size() ? ctx.outputs[i] : TensorArg();
}

/// Batch normalization goes over an [N, C, pix] tensor row by row in memory
/// order (row r = n * C + c), the rows split over the threads: one channel's
/// rows are pix elements every C * pix, which the hardware prefetcher follows
/// badly, so a pass in memory order is 2-3x faster than channel by channel
/// even though a pass per statistic rereads the tensor. Each row's partial
/// sum depends only on the row, and a channel's total adds its rows in n
/// order, so the results do not depend on the thread count.
int64_t minRowsFor(int64_t pix) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(pix, 1)); }

/// out[c] = the sum over n, in n order, of part[n * C + c].
void sumOverBatch(const float *part, int64_t N, int64_t C, float *out) {
  std::fill(out, out + C, 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      out[c] += part[n * C + c];
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
/// Sum of g[i] * (x[i] - c).
template <typename G, typename R>
inline AMPC_ROW_INLINE float rowSumProductCentered(G g, R x, float c, int64_t n) {
  return laneSum(n, [&](int64_t i) { return g[i] * (x[i] - c); });
}

//===----------------------------------------------------------------------===//
// BatchNormalization
//===----------------------------------------------------------------------===//

std::unique_ptr<Kernel> createBatchNorm(const StepContext &ctx, std::string &error) {
  for (unsigned i = 0; i < 5; ++i)
    if (!ctx.has(i)) {
      error = "BatchNormalization takes X, scale, B, mean and var";
      return nullptr;
    }
  if (!requireFloat(ctx, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, error))
    return nullptr;
  TensorArg x = ctx.inputs[0], scale = ctx.inputs[1], bias = ctx.inputs[2];
  TensorArg mean = ctx.inputs[3], var = ctx.inputs[4];
  TensorArg y = outAt(ctx, 0);
  if (x.rank() < 2 || !y.data || y.shape != x.shape) {
    error = "X must be [N, C, ...] and Y shaped like it";
    return nullptr;
  }
  int64_t N = x.shape[0], C = x.shape[1];
  int64_t pix = N * C != 0 ? x.numel / (N * C) : 0;
  for (const TensorArg *t : {&scale, &bias, &mean, &var})
    if (t->numel != C) {
      error = "scale, B, mean and var must have C elements";
      return nullptr;
    }
  // training_mode (opset 14+), or the opset-9 form asking for statistics.
  bool training = ctx.attr("training_mode") ? ctx.attrInt("training_mode", 0) != 0
                                            : ctx.outputs.size() > 1;
  float eps = static_cast<float>(ctx.attrFloat("epsilon", 1e-5));
  float momentum = static_cast<float>(ctx.attrFloat("momentum", 0.9));
  std::vector<TensorArg> stats;
  for (unsigned i = 1; i < 5; ++i)
    stats.push_back(training ? outAt(ctx, i) : TensorArg());
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  int64_t rows = N * C;
  // Per row partial sums; per channel mean, variance, scale and shift; a row
  // of fp32 per range (X's row converted, then Y's computed in its place).
  size_t offPart = layout.add<float>(rows), offChan = layout.add<float>(4 * C);
  size_t offRow = layout.add<float>(pix * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    float *part = at<float>(scratch->data(), offPart), *mu = at<float>(scratch->data(), offChan);
    float *vr = mu + C, *mul = mu + 2 * C, *add = mu + 3 * C;
    auto rowPass = [&](auto perRow) {
      pool.parallelFor(rows, minRowsFor(pix), [&](int64_t r0, int64_t r1, int range) {
        float *buf = at<float>(scratch->data(), offRow) + range * pix;
        forEachRow(
            [&](int64_t r) AMPC_ROW_INLINE {
              withRow(x, r * pix, pix, buf, [&](auto xr) AMPC_ROW_INLINE { perRow(r, xr, buf); });
            },
            r0, r1);
      });
    };
    float count = static_cast<float>(N * pix);
    if (training) {
      rowPass([&](int64_t r, auto xr, float *) AMPC_ROW_INLINE { part[r] = rowSum(xr, pix); });
      sumOverBatch(part, N, C, mu);
      for (int64_t c = 0; c < C; ++c)
        mu[c] /= count;
      rowPass([&](int64_t r, auto xr, float *) AMPC_ROW_INLINE {
        part[r] = rowSumSquaredDiff(xr, mu[r % C], pix);
      });
      sumOverBatch(part, N, C, vr);
      for (int64_t c = 0; c < C; ++c)
        vr[c] /= count;
    } else {
      loadFloats(mean, 0, C, mu);
      loadFloats(var, 0, C, vr);
    }
    for (int64_t c = 0; c < C; ++c) {
      float inv = 1.0f / std::sqrt(vr[c] + eps);
      mul[c] = inv * loadFloat(scale, c);
      add[c] = loadFloat(bias, c);
      if (!training)
        continue;
      float values[4] = {loadFloat(mean, c) * momentum + mu[c] * (1 - momentum),
                         loadFloat(var, c) * momentum + vr[c] * (1 - momentum), mu[c], inv};
      for (int i = 0; i < 4; ++i)
        if (stats[i].data)
          storeFloat(stats[i], c, values[i]);
    }
    rowPass([&](int64_t r, auto xr, float *buf) AMPC_ROW_INLINE {
      int64_t c = r % C;
      float m = mu[c], sc = mul[c], b = add[c];
      float *yr = rowOut(y, r * pix, buf); // in place over X's row in buf is fine
      for (int64_t p = 0; p < pix; ++p)
        yr[p] = (xr[p] - m) * sc + b;
      rowCommit(y, r * pix, pix, yr);
    });
  });
}

//===----------------------------------------------------------------------===//
// LayerNormalization
//===----------------------------------------------------------------------===//

/// Scale (and bias) broadcast to the normalized shape, as fp32 per run.
struct ParamExpander {
  TensorArg t;
  std::vector<int64_t> map; ///< empty: same shape
  bool init(const TensorArg &arg, const std::vector<int64_t> &normShape, std::string &error) {
    t = arg;
    if (arg.shape == normShape || arg.numel == product(normShape))
      return true;
    if (arg.shape.size() > normShape.size()) {
      error = argString(arg) + " does not broadcast to the normalized shape";
      return false;
    }
    size_t lead = normShape.size() - arg.shape.size();
    std::vector<int64_t> strides(normShape.size(), 0), src = stridesOf(arg.shape);
    for (size_t d = 0; d < arg.shape.size(); ++d) {
      if (arg.shape[d] != 1 && arg.shape[d] != normShape[lead + d]) {
        error = argString(arg) + " does not broadcast to the normalized shape";
        return false;
      }
      strides[lead + d] = arg.shape[d] == 1 ? 0 : src[d];
    }
    int64_t n = product(normShape);
    map.resize(n);
    std::vector<int64_t> idx(normShape.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t o = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        o += idx[d] * strides[d];
      map[i] = o;
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < normShape[d])
          break;
        idx[d] = 0;
      }
    }
    return true;
  }
  void expand(float *dst, int64_t n) const {
    if (map.empty()) {
      loadFloats(t, 0, n, dst);
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      dst[i] = loadFloat(t, map[i]);
  }
};

std::unique_ptr<Kernel> createLayerNorm(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || !ctx.has(1) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "LayerNormalization takes X and Scale";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, 1, 2}, {0, 1, 2}, error))
    return nullptr;
  TensorArg x = ctx.inputs[0], y = ctx.outputs[0];
  int64_t axis = normalizeAxis(ctx.attrInt("axis", -1), x.rank());
  if (axis < 0 || y.shape != x.shape) {
    error = "axis out of range or Y not shaped like X";
    return nullptr;
  }
  int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis);
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  ParamExpander scale, bias;
  if (!scale.init(ctx.inputs[1], normShape, error) ||
      (ctx.has(2) && !bias.init(ctx.inputs[2], normShape, error)))
    return nullptr;
  bool hasBias = ctx.has(2);
  TensorArg meanOut = outAt(ctx, 1), invOut = outAt(ctx, 2);
  if ((meanOut.data && meanOut.numel != outer) || (invOut.data && invOut.numel != outer)) {
    error = "Mean and InvStdDev must hold one value per row";
    return nullptr;
  }
  float eps = static_cast<float>(ctx.attrFloat("epsilon", 1e-5));
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  size_t offParams = layout.add<float>(2 * inner);
  size_t offRows = layout.add<float>(inner * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  int64_t minRows = std::max<int64_t>(1, 8192 / std::max<int64_t>(inner, 1));
  return std::make_unique<LambdaKernel>([=, &pool] {
    float *sc = at<float>(scratch->data(), offParams), *bs = sc + inner;
    scale.expand(sc, inner);
    if (hasBias)
      bias.expand(bs, inner);
    else
      std::memset(bs, 0, inner * sizeof(float));
    pool.parallelFor(outer, minRows, [&](int64_t r0, int64_t r1, int range) {
      float *buf = at<float>(scratch->data(), offRows) + range * inner;
      forEachRow(
          [&](int64_t r) AMPC_ROW_INLINE {
            const float *xr = rowIn(x, r * inner, inner, buf);
            // sumFloats' and sumSquaredDiff's order: the same bits.
            float mu = rowSum(F32Row{xr}, inner) / static_cast<float>(inner);
            float inv = 1.0f / std::sqrt(rowSumSquaredDiff(F32Row{xr}, mu, inner) /
                                             static_cast<float>(inner) +
                                         eps);
            float *yr = rowOut(y, r * inner, buf);
            for (int64_t i = 0; i < inner; ++i)
              yr[i] = (xr[i] - mu) * inv * sc[i] + bs[i];
            rowCommit(y, r * inner, inner, yr);
            if (meanOut.data)
              storeFloat(meanOut, r, mu);
            if (invOut.data)
              storeFloat(invOut, r, inv);
          },
          r0, r1);
    });
  });
}

std::unique_ptr<Kernel> createLayerNormGrad(const StepContext &ctx, std::string &error) {
  for (unsigned i = 0; i < 5; ++i)
    if (!ctx.has(i)) {
      error = "LayerNormalizationGrad takes dY, X, Scale, Mean and InvStdDev";
      return nullptr;
    }
  if (!requireFloat(ctx, {0, 1, 2, 3, 4}, {0, 1, 2}, error))
    return nullptr;
  TensorArg dy = ctx.inputs[0], x = ctx.inputs[1], mean = ctx.inputs[3], invStd = ctx.inputs[4];
  int64_t axis = normalizeAxis(ctx.attrInt("axis", -1), x.rank());
  if (axis < 0 || dy.shape != x.shape) {
    error = "axis out of range or dY not shaped like X";
    return nullptr;
  }
  int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis);
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  ParamExpander scale;
  if (!scale.init(ctx.inputs[2], normShape, error))
    return nullptr;
  if (mean.numel != outer || invStd.numel != outer) {
    error = "Mean and InvStdDev must hold one value per normalized group";
    return nullptr;
  }
  TensorArg dx = outAt(ctx, 0), dScale = outAt(ctx, 1), dBias = outAt(ctx, 2);
  if ((dx.data && dx.shape != x.shape) || (dScale.data && dScale.numel != inner) ||
      (dBias.data && dBias.numel != inner)) {
    error = "gradient shapes do not match";
    return nullptr;
  }
  ThreadPool &pool = ctx.pool;
  int64_t minRows = std::max<int64_t>(1, 8192 / std::max<int64_t>(inner, 1));
  int ranges = pool.rangesFor(outer, minRows);
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  size_t offScale = layout.add<float>(inner);
  // Per range: dScale and dBias partials, and rows of dY, X, dX.
  int64_t perRange = 5 * inner;
  size_t offRange = layout.add<float>(perRange * std::max(ranges, 1));
  size_t offTotal = layout.add<float>(2 * inner);
  scratch->reserve(layout.size());
  return std::make_unique<LambdaKernel>([=, &pool] {
    float *sc = at<float>(scratch->data(), offScale);
    scale.expand(sc, inner);
    pool.parallelFor(outer, minRows, [&](int64_t r0, int64_t r1, int range) {
      float *part = at<float>(scratch->data(), offRange) + range * perRange;
      float *pScale = part, *pBias = part + inner, *dyBuf = part + 2 * inner,
            *xBuf = part + 3 * inner, *dxBuf = part + 4 * inner;
      std::memset(part, 0, 2 * inner * sizeof(float));
      float invN = 1.0f / static_cast<float>(inner);
      forEachRow(
          [&](int64_t r) AMPC_ROW_INLINE {
            const float *g = rowIn(dy, r * inner, inner, dyBuf);
            const float *xr = rowIn(x, r * inner, inner, xBuf);
            float mu = loadFloat(mean, r), inv = loadFloat(invStd, r);
            // xhat into dxBuf, then sums of g*scale and g*scale*xhat.
            float *xhat = dxBuf;
            float mg = 0, mgx = 0;
            for (int64_t i = 0; i < inner; ++i) {
              xhat[i] = (xr[i] - mu) * inv;
              pScale[i] += g[i] * xhat[i];
              pBias[i] += g[i];
            }
            if (!dx.data)
              return;
            float accA[16] = {0}, accB[16] = {0};
            for (int64_t i = 0; i < inner; ++i) {
              float gs = g[i] * sc[i];
              accA[i & 15] += gs;
              accB[i & 15] += gs * xhat[i];
            }
            for (int j = 0; j < 16; ++j) {
              mg += accA[j];
              mgx += accB[j];
            }
            mg *= invN;
            mgx *= invN;
            float *out = rowOut(dx, r * inner, dxBuf);
            for (int64_t i = 0; i < inner; ++i)
              out[i] = inv * (g[i] * sc[i] - mg - xhat[i] * mgx);
            rowCommit(dx, r * inner, inner, out);
          },
          r0, r1);
    });
    if (!dScale.data && !dBias.data)
      return;
    float *total = at<float>(scratch->data(), offTotal);
    std::memset(total, 0, 2 * inner * sizeof(float));
    for (int r = 0; r < ranges; ++r) {
      const float *part = at<float>(scratch->data(), offRange) + r * perRange;
      for (int64_t i = 0; i < 2 * inner; ++i)
        total[i] += part[i];
    }
    if (dScale.data)
      storeFloats(dScale, 0, inner, total);
    if (dBias.data)
      storeFloats(dBias, 0, inner, total + inner);
  });
}

//===----------------------------------------------------------------------===//
// BatchNormalizationGrad
//===----------------------------------------------------------------------===//

std::unique_ptr<Kernel> createBatchNormGrad(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || !ctx.has(1) || !ctx.has(2)) {
    error = "BatchNormalizationGrad takes dY, X and Scale";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, 1, 2, 3, 4}, {0, 1, 2}, error))
    return nullptr;
  TensorArg dy = ctx.inputs[0], x = ctx.inputs[1], scale = ctx.inputs[2];
  bool training = ctx.attrInt("training_mode", 1) != 0;
  if (!training && (!ctx.has(3) || !ctx.has(4))) {
    error = "inference mode needs the running mean and variance";
    return nullptr;
  }
  TensorArg mean = training ? TensorArg() : ctx.inputs[3];
  TensorArg var = training ? TensorArg() : ctx.inputs[4];
  if (x.rank() < 2 || dy.shape != x.shape) {
    error = "X must be [N, C, ...] and dY shaped like it";
    return nullptr;
  }
  int64_t N = x.shape[0], C = x.shape[1];
  int64_t pix = N * C != 0 ? x.numel / (N * C) : 0;
  TensorArg dx = outAt(ctx, 0), dScale = outAt(ctx, 1), dBias = outAt(ctx, 2);
  if (scale.numel != C || (dx.data && dx.shape != x.shape) || (dScale.data && dScale.numel != C) ||
      (dBias.data && dBias.numel != C)) {
    error = "shapes of the scale or the gradients do not match";
    return nullptr;
  }
  float eps = static_cast<float>(ctx.attrFloat("epsilon", 1e-5));
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  int64_t rows = N * C;
  // Two per row partial sums; per channel mean, 1/stddev, sum of dY and of
  // dY * xhat; rows of fp32 per range (X, dY, dX).
  size_t offPart = layout.add<float>(2 * rows), offChan = layout.add<float>(4 * C);
  size_t offRow = layout.add<float>(3 * pix * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    float *partA = at<float>(scratch->data(), offPart), *partB = partA + rows;
    float *mu = at<float>(scratch->data(), offChan), *inv = mu + C, *sumDy = mu + 2 * C,
          *sumDyXhat = mu + 3 * C;
    auto rowPass = [&](auto perRow) {
      pool.parallelFor(rows, minRowsFor(pix), [&](int64_t r0, int64_t r1, int range) {
        float *buf = at<float>(scratch->data(), offRow) + range * 3 * pix;
        forEachRow(
            [&](int64_t r) AMPC_ROW_INLINE {
              withRow(x, r * pix, pix, buf, [&](auto xr) AMPC_ROW_INLINE {
                withRow(dy, r * pix, pix, buf + pix,
                        [&](auto g) AMPC_ROW_INLINE { perRow(r, xr, g, buf + 2 * pix); });
              });
            },
            r0, r1);
      });
    };
    float count = static_cast<float>(N * pix);
    // sum(dY * xhat) = inv * sum(dY * (X - mean)), once mean is known.
    if (training) {
      rowPass([&](int64_t r, auto xr, auto g, float *) AMPC_ROW_INLINE {
        partA[r] = rowSum(xr, pix);
        partB[r] = rowSum(g, pix);
      });
      sumOverBatch(partA, N, C, mu);
      sumOverBatch(partB, N, C, sumDy);
      for (int64_t c = 0; c < C; ++c)
        mu[c] /= count;
      rowPass([&](int64_t r, auto xr, auto g, float *) AMPC_ROW_INLINE {
        partA[r] = rowSumSquaredDiff(xr, mu[r % C], pix);
        partB[r] = rowSumProductCentered(g, xr, mu[r % C], pix);
      });
      sumOverBatch(partA, N, C, inv);
      for (int64_t c = 0; c < C; ++c)
        inv[c] = 1.0f / std::sqrt(inv[c] / count + eps);
    } else {
      loadFloats(mean, 0, C, mu);
      loadFloats(var, 0, C, inv);
      for (int64_t c = 0; c < C; ++c)
        inv[c] = 1.0f / std::sqrt(inv[c] + eps);
      rowPass([&](int64_t r, auto xr, auto g, float *) AMPC_ROW_INLINE {
        partA[r] = rowSum(g, pix);
        partB[r] = rowSumProductCentered(g, xr, mu[r % C], pix);
      });
      sumOverBatch(partA, N, C, sumDy);
    }
    sumOverBatch(partB, N, C, sumDyXhat);
    for (int64_t c = 0; c < C; ++c) {
      sumDyXhat[c] *= inv[c];
      if (dScale.data)
        storeFloat(dScale, c, sumDyXhat[c]);
      if (dBias.data)
        storeFloat(dBias, c, sumDy[c]);
    }
    if (!dx.data)
      return;
    rowPass([&](int64_t r, auto xr, auto g, float *buf) AMPC_ROW_INLINE {
      int64_t c = r % C;
      float sc = loadFloat(scale, c), m = mu[c], iv = inv[c];
      float mg = sc * sumDy[c] / count, mgx = sc * sumDyXhat[c] / count;
      float *out = rowOut(dx, r * pix, buf);
      if (training)
        for (int64_t p = 0; p < pix; ++p)
          out[p] = iv * (g[p] * sc - mg - (xr[p] - m) * iv * mgx);
      else
        for (int64_t p = 0; p < pix; ++p)
          out[p] = g[p] * sc * iv;
      rowCommit(dx, r * pix, pix, out);
    });
  });
}

} // namespace

void registerNormKernels() {
  registerKernel("BatchNormalization", createBatchNorm);
  registerKernel("LayerNormalization", createLayerNorm);
  registerKernel("ampc.LayerNormalizationGrad", createLayerNormGrad);
  registerKernel("ampc.BatchNormalizationGrad", createBatchNormGrad);
}

} // namespace ampc::rt::cpu
