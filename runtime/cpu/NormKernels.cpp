//===- NormKernels.cpp - LayerNormalization and its gradient ---------------===//
//
// Statistics in fp32 with two passes (mean, then the mean of squared
// deviations: the population variance, as ONNX and the interpreter define
// it), 16-way partial sums per row (NormRows.h). The rows are split over the
// threads, and the parameter gradients of LayerNormalizationGrad are per
// range partial sums combined in range order (deterministic for a thread
// count). BatchNormalization is in BatchNormKernels.cpp.
//
//===----------------------------------------------------------------------===//

#include "NormRows.h"

#include <algorithm>
#include <cmath>

namespace ampc::rt::cpu {

namespace {

using namespace norm;

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
  // The Cast to bf16 after this step (NormEpilogue.h): Y rounded as that
  // step rounds it, and with castOnly Y itself not written.
  TensorArg z = ctx.castOutput;
  bool writeY = !(z.data && ctx.castOnly);
  if (z.data && z.numel != y.numel) {
    error = "the bf16 cast written with Y must be shaped like Y";
    return nullptr;
  }
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
            float *yr = writeY ? rowOut(y, r * inner, buf) : buf;
            for (int64_t i = 0; i < inner; ++i)
              yr[i] = (xr[i] - mu) * inv * sc[i] + bs[i];
            if (writeY)
              rowCommit(y, r * inner, inner, yr);
            if (z.data)
              storeFloats(z, r * inner, inner, yr);
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
            // X comes from the forward pass, long out of cache: ask for the
            // row after next while this one is computed.
            if (r + 2 < r1)
              prefetchRow(x, (r + 2) * inner, inner);
            const float *g = rowAsFloats(dy, r * inner, inner, dyBuf);
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
            // 16 partial sums, element i in lane i % 16, the same sums in the
            // same order as `acc[i & 15] +=`, which GCC left scalar (half of
            // this kernel's time); without `omp simd` it vectorizes the outer
            // loop into permutes, slower still.
            float accA[16] = {0}, accB[16] = {0};
            int64_t i = 0;
            for (; i + 16 <= inner; i += 16)
#pragma omp simd
              for (int j = 0; j < 16; ++j) {
                float gs = g[i + j] * sc[i + j];
                accA[j] += gs;
                accB[j] += gs * xhat[i + j];
              }
            for (int j = 0; i < inner; ++i, ++j) {
              float gs = g[i] * sc[i];
              accA[j] += gs;
              accB[j] += gs * xhat[i];
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

} // namespace

void registerNormKernels() {
  registerKernel("LayerNormalization", createLayerNorm);
  registerKernel("ampc.LayerNormalizationGrad", createLayerNormGrad);
}

} // namespace ampc::rt::cpu
