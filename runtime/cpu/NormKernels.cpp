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

#include <cmath>
#include <cstring>

namespace ampc::rt::cpu {

namespace {

TensorArg outAt(const StepContext &ctx, unsigned i) {
  return i < ctx.outputs.size() ? ctx.outputs[i] : TensorArg();
}

/// The rows of one channel of an [N, C, pix] tensor as fp32, for kernels that
/// read each several times: an fp32 tensor's own memory; otherwise the
/// channel converted once into `all` (N * pix floats, when the kernel could
/// give that much scratch: channelFloats), or else row by row into `row`.
class ChannelRows {
public:
  /// Floats of scratch that a channel of `t` takes (0: none needed).
  static int64_t channelFloats(const TensorArg &t, int64_t N, int64_t pix) {
    constexpr int64_t kMaxFloats = int64_t(1) << 20; // 4 MiB a thread
    return t.type != plan::F32 && N * pix <= kMaxFloats ? N * pix : 0;
  }

  ChannelRows(const TensorArg &t, int64_t N, int64_t C, int64_t pix, float *all, float *row)
      : t_(t), N_(N), C_(C), pix_(pix), all_(channelFloats(t, N, pix) ? all : nullptr),
        row_(row) {}

  void load(int64_t c) {
    c_ = c;
    if (all_)
      for (int64_t n = 0; n < N_; ++n)
        loadFloats(t_, (n * C_ + c) * pix_, pix_, all_ + n * pix_);
  }
  const float *row(int64_t n) const {
    if (all_)
      return all_ + n * pix_;
    return rowIn(t_, (n * C_ + c_) * pix_, pix_, row_);
  }

private:
  TensorArg t_;
  int64_t N_, C_, pix_, c_ = 0;
  float *all_, *row_;
};

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
  int64_t all = ChannelRows::channelFloats(x, N, pix), perRange = all + pix + 16;
  size_t off = layout.add<float>(perRange * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(C, 1, [&](int64_t c0, int64_t c1, int range) {
      float *buf = at<float>(scratch->data(), off) + range * perRange + all;
      ChannelRows xs(x, N, C, pix, buf - all, buf);
      for (int64_t c = c0; c < c1; ++c) {
        float mu, v;
        xs.load(c);
        if (training) {
          float s = 0;
          for (int64_t n = 0; n < N; ++n)
            s += sumFloats(xs.row(n), pix);
          mu = s / static_cast<float>(N * pix);
          float ss = 0;
          for (int64_t n = 0; n < N; ++n)
            ss += sumSquaredDiff(xs.row(n), mu, pix);
          v = ss / static_cast<float>(N * pix);
        } else {
          mu = loadFloat(mean, c);
          v = loadFloat(var, c);
        }
        float inv = 1.0f / std::sqrt(v + eps);
        float sc = inv * loadFloat(scale, c), b = loadFloat(bias, c);
        for (int64_t n = 0; n < N; ++n) {
          int64_t base = (n * C + c) * pix;
          const float *xr = xs.row(n);
          float *yr = rowOut(y, base, buf); // in place over a row in buf is fine
          for (int64_t p = 0; p < pix; ++p)
            yr[p] = (xr[p] - mu) * sc + b;
          rowCommit(y, base, pix, yr);
        }
        if (!training)
          continue;
        float values[4] = {loadFloat(mean, c) * momentum + mu * (1 - momentum),
                           loadFloat(var, c) * momentum + v * (1 - momentum), mu, inv};
        for (int i = 0; i < 4; ++i)
          if (stats[i].data)
            storeFloat(stats[i], c, values[i]);
      }
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
      for (int64_t r = r0; r < r1; ++r) {
        const float *xr = rowIn(x, r * inner, inner, buf);
        float mu = sumFloats(xr, inner) / static_cast<float>(inner);
        float inv = 1.0f / std::sqrt(sumSquaredDiff(xr, mu, inner) / static_cast<float>(inner) + eps);
        float *yr = rowOut(y, r * inner, buf);
        for (int64_t i = 0; i < inner; ++i)
          yr[i] = (xr[i] - mu) * inv * sc[i] + bs[i];
        rowCommit(y, r * inner, inner, yr);
        if (meanOut.data)
          storeFloat(meanOut, r, mu);
        if (invOut.data)
          storeFloat(invOut, r, inv);
      }
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
      for (int64_t r = r0; r < r1; ++r) {
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
          continue;
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
      }
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
  int64_t allX = ChannelRows::channelFloats(x, N, pix);
  int64_t allDy = ChannelRows::channelFloats(dy, N, pix);
  int64_t perRange = allX + allDy + 3 * pix + 16;
  size_t off = layout.add<float>(perRange * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(C, 1, [&](int64_t c0, int64_t c1, int range) {
      float *buf = at<float>(scratch->data(), off) + range * perRange;
      float *xAll = buf, *dyAll = buf + allX;
      buf += allX + allDy;
      float *xBuf = buf, *dyBuf = buf + pix, *dxBuf = buf + 2 * pix;
      ChannelRows xs(x, N, C, pix, xAll, xBuf), dys(dy, N, C, pix, dyAll, dyBuf);
      float count = static_cast<float>(N * pix);
      for (int64_t c = c0; c < c1; ++c) {
        float mu, v;
        xs.load(c);
        dys.load(c);
        if (training) {
          float s = 0, ss = 0;
          for (int64_t n = 0; n < N; ++n)
            s += sumFloats(xs.row(n), pix);
          mu = s / count;
          for (int64_t n = 0; n < N; ++n)
            ss += sumSquaredDiff(xs.row(n), mu, pix);
          v = ss / count;
        } else {
          mu = loadFloat(mean, c);
          v = loadFloat(var, c);
        }
        float inv = 1.0f / std::sqrt(v + eps), sc = loadFloat(scale, c);
        float sumDy = 0, sumDyXhat = 0;
        for (int64_t n = 0; n < N; ++n) {
          const float *xr = xs.row(n);
          const float *g = dys.row(n);
          sumDy += sumFloats(g, pix);
          float acc[16] = {0};
          for (int64_t p = 0; p < pix; ++p)
            acc[p & 15] += g[p] * ((xr[p] - mu) * inv);
          for (int j = 0; j < 16; ++j)
            sumDyXhat += acc[j];
        }
        if (dScale.data)
          storeFloat(dScale, c, sumDyXhat);
        if (dBias.data)
          storeFloat(dBias, c, sumDy);
        if (!dx.data)
          continue;
        float mg = sc * sumDy / count, mgx = sc * sumDyXhat / count;
        for (int64_t n = 0; n < N; ++n) {
          int64_t base = (n * C + c) * pix;
          const float *xr = xs.row(n);
          const float *g = dys.row(n);
          float *out = rowOut(dx, base, dxBuf);
          if (training)
            for (int64_t p = 0; p < pix; ++p)
              out[p] = inv * (g[p] * sc - mg - (xr[p] - mu) * inv * mgx);
          else
            for (int64_t p = 0; p < pix; ++p)
              out[p] = g[p] * sc * inv;
          rowCommit(dx, base, pix, out);
        }
      }
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
