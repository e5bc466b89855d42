//===- LossKernels.cpp - SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss -===//

#include "Kernels.h"

#include <limits>

namespace ampc::interp {

namespace {

/// Log-probabilities over axis 1 of scores shaped [N, C, d1, ...].
std::vector<double> logSoftmaxAxis1(const Tensor &x) {
  int64_t N = x.shape()[0], C = x.shape()[1];
  int64_t inner = N * C != 0 ? x.size() / (N * C) : 0;
  std::vector<double> out(static_cast<size_t>(x.size()));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < inner; ++d) {
      auto at = [&](int64_t c) { return (n * C + c) * inner + d; };
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < C; ++c)
        mx = std::max(mx, x.getDouble(at(c)));
      double sum = 0;
      for (int64_t c = 0; c < C; ++c)
        sum += std::exp(x.getDouble(at(c)) - mx);
      double lse = mx + std::log(sum);
      for (int64_t c = 0; c < C; ++c)
        out[at(c)] = x.getDouble(at(c)) - lse;
    }
  return out;
}

/// The negative log-likelihood of `logp` (shape of `shape`, classes on axis 1)
/// at the target classes, weighted and reduced as ONNX defines it.
llvm::Expected<Tensor> nll(const KernelContext &ctx, const std::vector<double> &logp,
                           const Shape &shape, const Tensor &target, const Tensor *weight,
                           const TensorType &outType) {
  int64_t N = shape[0], C = shape[1];
  int64_t inner = N * C != 0 ? numElements(shape) / (N * C) : 0;
  std::string reduction = ctx.node.getString("reduction", "mean");
  bool hasIgnore = ctx.node.hasAttr("ignore_index");
  int64_t ignore = ctx.node.getInt("ignore_index", 0);
  std::vector<double> losses(static_cast<size_t>(N * inner));
  double weightSum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < inner; ++d) {
      int64_t t = target.getInt(n * inner + d);
      if (hasIgnore && t == ignore) {
        losses[n * inner + d] = 0;
        continue;
      }
      if (t < 0 || t >= C)
        return ctx.error("target class " + llvm::Twine(t) + " is out of range [0, " +
                         llvm::Twine(C) + ")");
      double w = weight ? weight->getDouble(t) : 1.0;
      losses[n * inner + d] = -logp[(n * C + t) * inner + d] * w;
      weightSum += w;
    }
  Tensor y(outType);
  if (reduction == "none") {
    for (size_t i = 0; i < losses.size(); ++i)
      y.setDouble(i, losses[i]);
    return y;
  }
  double sum = 0;
  for (double l : losses)
    sum += l;
  y.setDouble(0, reduction == "sum" ? sum : sum / weightSum);
  return y;
}

KernelResult softmaxCrossEntropyKernel(const KernelContext &ctx) {
  const Tensor &scores = *ctx.in(0), &labels = *ctx.in(1);
  std::vector<double> logp = logSoftmaxAxis1(scores);
  auto loss = nll(ctx, logp, scores.shape(), labels, ctx.in(2), ctx.outType(0));
  if (!loss)
    return loss.takeError();
  std::vector<Tensor> outs;
  outs.push_back(std::move(*loss));
  if (ctx.numOutputs() > 1) {
    if (ctx.wantsOutput(1))
      outs.push_back(Tensor::fromDoubles(ctx.outType(1), logp));
    else
      outs.emplace_back();
  }
  return outs;
}

KernelResult nllKernel(const KernelContext &ctx) {
  const Tensor &input = *ctx.in(0), &target = *ctx.in(1);
  auto loss = nll(ctx, input.toDoubles(), input.shape(), target, ctx.in(2), ctx.outType(0));
  if (!loss)
    return loss.takeError();
  return std::vector<Tensor>{std::move(*loss)};
}

} // namespace

void registerLossKernels(KernelTable &t) {
  t.add("SoftmaxCrossEntropyLoss", softmaxCrossEntropyKernel);
  t.add("NegativeLogLikelihoodLoss", nllKernel);
}

} // namespace ampc::interp
