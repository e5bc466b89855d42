//===- LossKernels.cpp - Cross-entropy and NLL losses and their gradients --===//
//
// SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and the ampc gradients
// of both. Classes are axis 1 of [N, C, d...]. Log-probabilities are computed
// per sample in fp32 (max, log of the sum of exponentials), split over the
// threads by sample rows; the per-sample losses go to scratch and are summed
// on one thread in a fixed order, so the loss does not depend on the thread
// count. A target outside [0, C) that is not ignore_index has no defined loss:
// the kernels cannot fail at run time, so such a sample's loss (and the
// reduced loss) is NaN, and its gradient row is NaN.
//
//===----------------------------------------------------------------------===//

#include "FusedKernel.h"
#include "KernelHelpers.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ampc::rt::cpu {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Reduction and ignore_index of a loss step.
struct LossAttrs {
  enum Reduction { None, Sum, Mean } reduction = Mean;
  bool hasIgnore = false;
  int64_t ignore = 0;

  bool read(const StepContext &ctx, std::string &error) {
    std::string r = ctx.attrString("reduction", "mean");
    if (r == "none")
      reduction = None;
    else if (r == "sum")
      reduction = Sum;
    else if (r == "mean")
      reduction = Mean;
    else {
      error = "unknown reduction '" + r + "'";
      return false;
    }
    hasIgnore = ctx.attr("ignore_index") != nullptr;
    ignore = ctx.attrInt("ignore_index", 0);
    return true;
  }
};

struct LossShape {
  int64_t N = 0, C = 0, D = 0; ///< D: product of the trailing dims
  bool read(const TensorArg &scores, const TensorArg &target, std::string &error) {
    if (scores.rank() < 2) {
      error = "scores must be [N, C, ...]";
      return false;
    }
    N = scores.shape[0];
    C = scores.shape[1];
    D = N * C != 0 ? scores.numel / (N * C) : 0;
    if (!isIndexType(target.type) || target.numel != N * D) {
      error = "targets must be int64/int32 shaped [N, d...]: " + argString(target);
      return false;
    }
    return true;
  }
};

/// Per-sample weight (0 when ignored, NaN when out of range).
inline float sampleWeight(const LossAttrs &a, const TensorArg &weight, int64_t t, int64_t C) {
  if (a.hasIgnore && t == a.ignore)
    return 0.0f;
  if (t < 0 || t >= C)
    return kNaN;
  return weight.data ? loadFloat(weight, t) : 1.0f;
}

/// Sum of the sample weights in sample order (the "mean" divisor).
float weightSum(const LossAttrs &a, const TensorArg &target, const TensorArg &weight, int64_t n,
                int64_t C) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) {
    float w = sampleWeight(a, weight, loadInt(target, i), C);
    s += w == w ? w : 0.0f; // out-of-range samples make the loss NaN elsewhere
  }
  return s;
}

/// out[i] = x[i] - s. The shift is a value, and out cannot alias x, so the
/// loop vectorizes (written through the row pointers, with lse in the same
/// scratch as lp, GCC reloaded the shift every element and ran it scalar:
/// 36% of a [1024, 1000] loss step).
void subtractFrom(const float *__restrict x, float s, float *__restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = x[i] - s;
}

/// Writes the reduced or per-sample losses.
void finishLoss(const LossAttrs &a, const float *losses, int64_t n, float wsum,
                const TensorArg &out) {
  if (a.reduction == LossAttrs::None) {
    storeFloats(out, 0, n, losses);
    return;
  }
  float s = sumFloats(losses, n);
  storeFloat(out, 0, a.reduction == LossAttrs::Sum ? s : s / wsum);
}

std::unique_ptr<Kernel> createLoss(const StepContext &ctx, std::string &error, bool softmax) {
  if (!ctx.has(0) || !ctx.has(1) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "the loss takes scores and targets";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, 2}, {0, 1}, error))
    return nullptr;
  TensorArg x = ctx.inputs[0], target = ctx.inputs[1];
  TensorArg weight = ctx.has(2) ? ctx.inputs[2] : TensorArg();
  TensorArg loss = ctx.outputs[0];
  TensorArg logProb = softmax && ctx.outputs.size() > 1 ? ctx.outputs[1] : TensorArg();
  LossAttrs attrs;
  LossShape s;
  if (!attrs.read(ctx, error) || !s.read(x, target, error))
    return nullptr;
  if ((weight.data && weight.numel != s.C) || (logProb.data && logProb.shape != x.shape) ||
      loss.numel != (attrs.reduction == LossAttrs::None ? s.N * s.D : 1)) {
    error = "weights, loss or log_prob shapes do not match";
    return nullptr;
  }
  int64_t samples = s.N * s.D, slice = s.C * s.D;
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  size_t offLoss = layout.add<float>(samples);
  int64_t perRange = 3 * slice + 2 * s.D + 32;
  size_t offRange = layout.add<float>(perRange * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    float *losses = at<float>(scratch->data(), offLoss);
    const int64_t C = s.C, D = s.D;
    pool.parallelFor(s.N, std::max<int64_t>(1, 2048 / std::max<int64_t>(slice, 1)),
                     [&](int64_t n0, int64_t n1, int range) {
      float *buf = at<float>(scratch->data(), offRange) + range * perRange;
      float *xBuf = buf, *lpBuf = buf + slice, *mx = buf + 2 * slice, *lse = mx + D;
      float *expBuf = lse + D;
      for (int64_t n = n0; n < n1; ++n) {
        const float *xs = rowIn(x, n * slice, slice, xBuf);
        if (softmax && D == 1) {
          // Scores [N, C]: one contiguous row (16 lanes, partial sums).
          mx[0] = maxFloats(xs, C);
          expShifted(xs, mx[0], expBuf, C);
          lse[0] = mx[0] + std::log(sumFloats(expBuf, C));
        } else if (softmax) {
          // lse = max + log(sum(exp(x - max))), per position d.
          for (int64_t d = 0; d < D; ++d)
            mx[d] = -std::numeric_limits<float>::infinity();
          for (int64_t c = 0; c < C; ++c)
            for (int64_t d = 0; d < D; ++d)
              mx[d] = std::max(mx[d], xs[c * D + d]);
          std::memset(lse, 0, D * sizeof(float));
          for (int64_t c = 0; c < C; ++c)
            for (int64_t d = 0; d < D; ++d)
              lse[d] += std::exp(xs[c * D + d] - mx[d]);
          for (int64_t d = 0; d < D; ++d)
            lse[d] = mx[d] + std::log(lse[d]);
        }
        if (softmax && logProb.data) {
          float *lp = rowOut(logProb, n * slice, lpBuf);
          if (D == 1)
            subtractFrom(xs, lse[0], lp, C);
          else
            for (int64_t c = 0; c < C; ++c)
              for (int64_t d = 0; d < D; ++d)
                lp[c * D + d] = xs[c * D + d] - lse[d];
          rowCommit(logProb, n * slice, slice, lp);
        }
        for (int64_t d = 0; d < D; ++d) {
          int64_t t = loadInt(target, n * D + d);
          float w = sampleWeight(attrs, weight, t, C);
          float l = 0.0f;
          if (w != w)
            l = kNaN;
          else if (w != 0.0f) {
            float logp = softmax ? xs[t * D + d] - lse[d] : xs[t * D + d];
            l = -logp * w;
          }
          losses[n * D + d] = l;
        }
      }
    });
    float wsum = attrs.reduction == LossAttrs::Mean ? weightSum(attrs, target, weight, samples, C) : 1.0f;
    finishLoss(attrs, losses, samples, wsum, loss);
  });
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

/// ampc.SoftmaxCrossEntropyLossGrad (dLoss, log_prob, labels, weights?) and
/// ampc.NegativeLogLikelihoodLossGrad (dLoss, target, weight?).
std::unique_ptr<Kernel> createLossGrad(const StepContext &ctx, std::string &error, bool softmax) {
  unsigned targetIn = softmax ? 2 : 1, weightIn = softmax ? 3 : 2;
  if (!ctx.has(0) || !ctx.has(targetIn) || (softmax && !ctx.has(1)) || ctx.outputs.empty() ||
      !ctx.outputs[0].data) {
    error = "missing operands";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, static_cast<int>(weightIn)}, {0}, error) ||
      (softmax && !requireFloat(ctx, {1}, {}, error)))
    return nullptr;
  TensorArg dLoss = ctx.inputs[0], target = ctx.inputs[targetIn];
  TensorArg logp = softmax ? ctx.inputs[1] : TensorArg();
  TensorArg weight = ctx.has(weightIn) ? ctx.inputs[weightIn] : TensorArg();
  TensorArg dx = ctx.outputs[0];
  LossAttrs attrs;
  LossShape s;
  if (!attrs.read(ctx, error) || !s.read(dx, target, error))
    return nullptr;
  if ((softmax && logp.shape != dx.shape) || (weight.data && weight.numel != s.C) ||
      dLoss.numel != (attrs.reduction == LossAttrs::None ? s.N * s.D : 1)) {
    error = "dLoss, log_prob or weight shapes do not match";
    return nullptr;
  }
  int64_t samples = s.N * s.D, slice = s.C * s.D;
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  int64_t perRange = 2 * slice + 32;
  size_t offRange = layout.add<float>(perRange * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    const int64_t C = s.C, D = s.D;
    float scale = 1.0f;
    if (attrs.reduction == LossAttrs::Mean)
      scale = 1.0f / weightSum(attrs, target, weight, samples, C);
    float dl0 = attrs.reduction == LossAttrs::None ? 0.0f : loadFloat(dLoss, 0);
    pool.parallelFor(s.N, std::max<int64_t>(1, 2048 / std::max<int64_t>(slice, 1)),
                     [&](int64_t n0, int64_t n1, int range) {
      float *buf = at<float>(scratch->data(), offRange) + range * perRange;
      float *lpBuf = buf, *outBuf = buf + slice;
      for (int64_t n = n0; n < n1; ++n) {
        float *out = rowOut(dx, n * slice, outBuf);
        const float *lp = softmax ? rowIn(logp, n * slice, slice, lpBuf) : nullptr;
        if (!softmax)
          std::memset(out, 0, slice * sizeof(float));
        for (int64_t d = 0; d < D; ++d) {
          int64_t t = loadInt(target, n * D + d);
          float w = sampleWeight(attrs, weight, t, C);
          float dl = attrs.reduction == LossAttrs::None ? loadFloat(dLoss, n * D + d) : dl0;
          float coef = w * dl * scale;
          if (softmax && D == 1) {
            // One contiguous row: the exponentials 16 lanes at a time.
            expShifted(lp, 0.0f, out, C);
            float et = t >= 0 && t < C ? out[t] : 0.0f;
            for (int64_t c = 0; c < C; ++c)
              out[c] = coef * out[c];
            if (coef != 0.0f && t >= 0 && t < C)
              out[t] = coef * (et - 1.0f);
          } else if (softmax) {
            for (int64_t c = 0; c < C; ++c)
              out[c * D + d] = coef * std::exp(lp[c * D + d]);
            if (coef != 0.0f && t >= 0 && t < C)
              out[t * D + d] = coef * (std::exp(lp[t * D + d]) - 1.0f);
          } else if (coef != coef) {
            for (int64_t c = 0; c < C; ++c)
              out[c * D + d] = kNaN;
          } else if (coef != 0.0f) {
            out[t * D + d] = -coef;
          }
        }
        rowCommit(dx, n * slice, slice, out);
      }
    });
  });
}

} // namespace

void registerLossKernels() {
  registerKernel("SoftmaxCrossEntropyLoss",
                 [](const StepContext &c, std::string &e) { return createLoss(c, e, true); });
  registerKernel("NegativeLogLikelihoodLoss",
                 [](const StepContext &c, std::string &e) { return createLoss(c, e, false); });
  registerKernel("ampc.SoftmaxCrossEntropyLossGrad",
                 [](const StepContext &c, std::string &e) { return createLossGrad(c, e, true); });
  registerKernel("ampc.NegativeLogLikelihoodLossGrad",
                 [](const StepContext &c, std::string &e) { return createLossGrad(c, e, false); });
}

} // namespace ampc::rt::cpu
