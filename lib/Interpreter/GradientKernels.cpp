//===- GradientKernels.cpp - Kernels of ampc's gradient operators ----------===//
//
// The reference definitions of the ops autodiff emits (schemas in
// lib/ONNX/GradientOps.cpp). Like every kernel they compute in double and
// round once when storing; scatter-style gradients (pooling, gather, conv)
// accumulate every contribution in double before the single rounding.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <algorithm>
#include <limits>

namespace ampc::interp {

namespace {

KernelResult one(Tensor t) { return std::vector<Tensor>{std::move(t)}; }

Tensor fromAccumulator(const TensorType &type, const std::vector<double> &acc) {
  return Tensor::fromDoubles(type, acc);
}

//===----------------------------------------------------------------------===//
// Elementwise activations
//===----------------------------------------------------------------------===//

/// dX[i] = f(dY[i], S[i], node) for the second operand S (Y or X).
template <typename Fn> KernelResult elementwiseGrad(const KernelContext &ctx, Fn fn) {
  const Tensor &dy = *ctx.in(0), &s = *ctx.in(1);
  if (dy.size() != s.size())
    return ctx.error("dY and the forward value differ in shape: " + dy.type().str() + " vs " +
                     s.type().str());
  Tensor dx = ctx.out();
  for (int64_t i = 0; i < dy.size(); ++i)
    dx.setDouble(i, fn(dy.getDouble(i), s.getDouble(i)));
  return one(std::move(dx));
}

KernelResult reluGradKernel(const KernelContext &ctx) {
  return elementwiseGrad(ctx, [](double dy, double y) { return y > 0 ? dy : 0.0; });
}

KernelResult leakyReluGradKernel(const KernelContext &ctx) {
  double alpha = ctx.node.getFloat("alpha", 0.01);
  return elementwiseGrad(ctx, [alpha](double dy, double s) { return s > 0 ? dy : alpha * dy; });
}

KernelResult sigmoidGradKernel(const KernelContext &ctx) {
  return elementwiseGrad(ctx, [](double dy, double y) { return dy * y * (1.0 - y); });
}

KernelResult tanhGradKernel(const KernelContext &ctx) {
  return elementwiseGrad(ctx, [](double dy, double y) { return dy * (1.0 - y * y); });
}

//===----------------------------------------------------------------------===//
// Softmax family
//===----------------------------------------------------------------------===//

KernelResult softmaxGradKernel(const KernelContext &ctx) {
  const Tensor &dy = *ctx.in(0), &y = *ctx.in(1);
  bool isLog = ctx.node.opType() == "LogSoftmaxGrad";
  int64_t rank = y.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", -1), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  int64_t len = y.shape()[axis], inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= y.shape()[d];
  int64_t outer = len * inner != 0 ? y.size() / (len * inner) : 0;
  Tensor dx = ctx.out();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return (o * len + j) * inner + in; };
      double s = 0;
      for (int64_t j = 0; j < len; ++j)
        s += isLog ? dy.getDouble(at(j)) : dy.getDouble(at(j)) * y.getDouble(at(j));
      for (int64_t j = 0; j < len; ++j) {
        double g = isLog ? dy.getDouble(at(j)) - std::exp(y.getDouble(at(j))) * s
                         : y.getDouble(at(j)) * (dy.getDouble(at(j)) - s);
        dx.setDouble(at(j), g);
      }
    }
  return one(std::move(dx));
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// Results of the normalization gradients: dX, dScale, dBias, each present
/// only when the node asks for it.
std::vector<Tensor> normResults(const KernelContext &ctx, Tensor dx,
                                const std::vector<double> &dScale,
                                const std::vector<double> &dBias) {
  std::vector<Tensor> outs(ctx.numOutputs());
  if (ctx.wantsOutput(0))
    outs[0] = std::move(dx);
  if (ctx.numOutputs() > 1 && ctx.wantsOutput(1))
    outs[1] = fromAccumulator(ctx.outType(1), dScale);
  if (ctx.numOutputs() > 2 && ctx.wantsOutput(2))
    outs[2] = fromAccumulator(ctx.outType(2), dBias);
  return outs;
}

/// With g = dY * scale over one normalized group of n elements:
///   dX = inv * (g - mean(g) - xhat * mean(g * xhat)).
void normalizedGroupGrad(const std::vector<double> &g, const std::vector<double> &xhat, double inv,
                         std::vector<double> &dx) {
  double n = static_cast<double>(g.size()), mg = 0, mgx = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    mg += g[i];
    mgx += g[i] * xhat[i];
  }
  mg /= n;
  mgx /= n;
  dx.resize(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    dx[i] = inv * (g[i] - mg - xhat[i] * mgx);
}

KernelResult layerNormGradKernel(const KernelContext &ctx) {
  const Tensor &dy = *ctx.in(0), &x = *ctx.in(1), &scale = *ctx.in(2);
  const Tensor &mean = *ctx.in(3), &invStd = *ctx.in(4);
  int64_t rank = x.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", -1), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape()[d];
  int64_t inner = outer ? x.size() / outer : 0;
  if (mean.size() != outer || invStd.size() != outer)
    return ctx.error("Mean and InvStdDev must hold one value per normalized group");
  Shape normShape(x.shape().begin() + axis, x.shape().end());
  auto smap = broadcastIndexMap(scale.shape(), normShape);
  Tensor dxT = ctx.wantsOutput(0) ? ctx.out(0) : Tensor();
  std::vector<double> dScale(inner, 0.0), dBias(inner, 0.0), g(inner), xhat(inner), dx;
  for (int64_t o = 0; o < outer; ++o) {
    double mu = mean.getDouble(o), inv = invStd.getDouble(o);
    for (int64_t i = 0; i < inner; ++i) {
      double d = dy.getDouble(o * inner + i);
      xhat[i] = (x.getDouble(o * inner + i) - mu) * inv;
      g[i] = d * scale.getDouble(smap[i]);
      dScale[i] += d * xhat[i];
      dBias[i] += d;
    }
    if (!ctx.wantsOutput(0))
      continue;
    normalizedGroupGrad(g, xhat, inv, dx);
    for (int64_t i = 0; i < inner; ++i)
      dxT.setDouble(o * inner + i, dx[i]);
  }
  return normResults(ctx, std::move(dxT), dScale, dBias);
}

KernelResult batchNormGradKernel(const KernelContext &ctx) {
  const Tensor &dy = *ctx.in(0), &x = *ctx.in(1), &scale = *ctx.in(2);
  bool training = ctx.node.getInt("training_mode", 1) != 0;
  double eps = ctx.node.getFloat("epsilon", 1e-5);
  if (!training && (!ctx.in(3) || !ctx.in(4)))
    return ctx.error("inference mode needs the running mean and variance");
  int64_t N = x.shape()[0], C = x.shape()[1];
  int64_t pix = N * C != 0 ? x.size() / (N * C) : 0;
  int64_t count = N * pix;
  Tensor dxT = ctx.wantsOutput(0) ? ctx.out(0) : Tensor();
  std::vector<double> dScale(C, 0.0), dBias(C, 0.0), g(count), xhat(count), dx;
  auto at = [&](int64_t c, int64_t k) { return ((k / pix) * C + c) * pix + k % pix; };
  for (int64_t c = 0; c < C; ++c) {
    double mu, var;
    if (training) {
      double s = 0, ss = 0;
      for (int64_t k = 0; k < count; ++k)
        s += x.getDouble(at(c, k));
      mu = s / double(count);
      for (int64_t k = 0; k < count; ++k)
        ss += (x.getDouble(at(c, k)) - mu) * (x.getDouble(at(c, k)) - mu);
      var = ss / double(count); // population variance, as the forward op uses
    } else {
      mu = ctx.in(3)->getDouble(c);
      var = ctx.in(4)->getDouble(c);
    }
    double inv = 1.0 / std::sqrt(var + eps), sc = scale.getDouble(c);
    for (int64_t k = 0; k < count; ++k) {
      double d = dy.getDouble(at(c, k));
      xhat[k] = (x.getDouble(at(c, k)) - mu) * inv;
      g[k] = d * sc;
      dScale[c] += d * xhat[k];
      dBias[c] += d;
    }
    if (!ctx.wantsOutput(0))
      continue;
    if (training) {
      normalizedGroupGrad(g, xhat, inv, dx);
    } else {
      dx.resize(count);
      for (int64_t k = 0; k < count; ++k)
        dx[k] = g[k] * inv;
    }
    for (int64_t k = 0; k < count; ++k)
      dxT.setDouble(at(c, k), dx[k]);
  }
  return normResults(ctx, std::move(dxT), dScale, dBias);
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

/// The window geometry of a Conv / pooling node, resolved exactly as the
/// forward kernels (NNKernels.cpp) resolve it, auto_pad included.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, padBegin, pads;
};

Window windowOf(const Node &n, const Shape &inSpatial, const Shape &outSpatial,
                const std::vector<int64_t> &kernel) {
  size_t s = kernel.size();
  Window w;
  w.kernel = kernel;
  w.strides = n.getInts("strides", std::vector<int64_t>(s, 1));
  w.dilations = n.getInts("dilations", std::vector<int64_t>(s, 1));
  w.pads = n.getInts("pads", std::vector<int64_t>(2 * s, 0));
  std::string autoPad = n.getString("auto_pad", "NOTSET");
  w.padBegin.assign(w.pads.begin(), w.pads.begin() + s);
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < s; ++i) {
      int64_t eff = (kernel[i] - 1) * w.dilations[i] + 1;
      int64_t total = std::max<int64_t>(0, (outSpatial[i] - 1) * w.strides[i] + eff - inSpatial[i]);
      w.padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    }
  } else if (autoPad == "VALID") {
    std::fill(w.padBegin.begin(), w.padBegin.end(), 0);
  }
  return w;
}

/// Calls fn(kernelFlat, inputOffset) for every kernel position of output
/// position `o` that falls inside the input.
template <typename Fn>
void forEachTap(const Window &win, const Shape &inSp, const std::vector<int64_t> &inStr,
                const std::vector<int64_t> &o, Fn &&fn) {
  size_t s = win.kernel.size();
  int64_t kPix = numElements(win.kernel);
  std::vector<int64_t> k;
  for (int64_t kp = 0; kp < kPix; ++kp) {
    unravel(kp, win.kernel, k);
    int64_t off = 0;
    bool inside = true;
    for (size_t d = 0; d < s && inside; ++d) {
      int64_t pos = o[d] * win.strides[d] - win.padBegin[d] + k[d] * win.dilations[d];
      inside = pos >= 0 && pos < inSp[d];
      off += pos * inStr[d];
    }
    if (inside)
      fn(kp, off);
  }
}

KernelResult convGradKernel(const KernelContext &ctx) {
  const Tensor &dy = *ctx.in(0), &x = *ctx.in(1), &w = *ctx.in(2);
  int64_t N = x.shape()[0], C = x.shape()[1], M = w.shape()[0];
  int64_t group = ctx.node.getInt("group", 1);
  int64_t cPerG = C / group, mPerG = M / group;
  Shape inSp(x.shape().begin() + 2, x.shape().end()), outSp(dy.shape().begin() + 2, dy.shape().end());
  Shape kSp(w.shape().begin() + 2, w.shape().end());
  Window win = windowOf(ctx.node, inSp, outSp, ctx.node.getInts("kernel_shape", kSp));
  int64_t outPix = numElements(outSp), kPix = numElements(kSp), inPix = numElements(inSp);
  auto inStr = stridesOf(inSp);
  std::vector<double> xv = x.toDoubles(), wv = w.toDoubles(), dyv = dy.toDoubles();
  std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0), db(M, 0.0);
  bool wantX = ctx.wantsOutput(0), wantW = ctx.numOutputs() > 1 && ctx.wantsOutput(1);
  std::vector<int64_t> o;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      int64_t g = m / mPerG;
      for (int64_t op = 0; op < outPix; ++op) {
        double d = dyv[(n * M + m) * outPix + op];
        db[m] += d;
        if (d == 0.0 || (!wantX && !wantW))
          continue;
        unravel(op, outSp, o);
        forEachTap(win, inSp, inStr, o, [&](int64_t kp, int64_t off) {
          for (int64_t c = 0; c < cPerG; ++c) {
            int64_t xi = (n * C + g * cPerG + c) * inPix + off, wi = (m * cPerG + c) * kPix + kp;
            dx[xi] += wv[wi] * d;
            dw[wi] += xv[xi] * d;
          }
        });
      }
    }
  std::vector<Tensor> outs(ctx.numOutputs());
  if (wantX)
    outs[0] = fromAccumulator(ctx.outType(0), dx);
  if (wantW)
    outs[1] = fromAccumulator(ctx.outType(1), dw);
  if (ctx.numOutputs() > 2 && ctx.wantsOutput(2))
    outs[2] = fromAccumulator(ctx.outType(2), db);
  return outs;
}

/// The forward op's choice is made again over X: the same window order and
/// comparison as poolKernel (NNKernels.cpp), so ties and NaNs pick the same
/// position the forward Indices would name.
KernelResult maxPoolGradKernel(const KernelContext &ctx) {
  const Tensor &dy = *ctx.in(0), &x = *ctx.in(1);
  const TensorType &type = ctx.outType();
  if (x.shape() != type.shape || dy.type().rank() != x.type().rank() || x.type().rank() < 3)
    return ctx.error("X must be [N, C, ...] with the gradient's shape, dY of X's rank");
  int64_t NC = x.shape()[0] * x.shape()[1];
  Shape inSp(x.shape().begin() + 2, x.shape().end()), outSp(dy.shape().begin() + 2, dy.shape().end());
  std::vector<int64_t> kernel = ctx.node.getInts("kernel_shape");
  if (kernel.size() != inSp.size())
    return ctx.error("kernel_shape must have one entry per spatial axis");
  Window win = windowOf(ctx.node, inSp, outSp, kernel);
  int64_t outPix = numElements(outSp), inPix = numElements(inSp);
  auto inStr = stridesOf(inSp);
  std::vector<double> dx(type.numElements(), 0.0);
  std::vector<int64_t> o;
  for (int64_t op = 0; op < outPix; ++op) {
    unravel(op, outSp, o);
    for (int64_t nc = 0; nc < NC; ++nc) {
      double best = -std::numeric_limits<double>::infinity();
      int64_t bestOff = -1;
      forEachTap(win, inSp, inStr, o, [&](int64_t, int64_t off) {
        double v = x.getDouble(nc * inPix + off);
        if (v > best || bestOff < 0) {
          best = v;
          bestOff = off;
        }
      });
      if (bestOff >= 0)
        dx[nc * inPix + bestOff] += dy.getDouble(nc * outPix + op);
    }
  }
  return one(fromAccumulator(type, dx));
}

KernelResult averagePoolGradKernel(const KernelContext &ctx) {
  const Tensor &dy = *ctx.in(0);
  const TensorType &type = ctx.outType();
  const Shape &xs = type.shape;
  int64_t NC = xs[0] * xs[1];
  Shape inSp(xs.begin() + 2, xs.end()), outSp(dy.shape().begin() + 2, dy.shape().end());
  std::vector<int64_t> kernel = ctx.node.getInts("kernel_shape");
  if (kernel.size() != inSp.size())
    return ctx.error("kernel_shape must have one entry per spatial axis");
  Window win = windowOf(ctx.node, inSp, outSp, kernel);
  bool countPad = ctx.node.getInt("count_include_pad", 0) != 0;
  size_t s = kernel.size();
  int64_t outPix = numElements(outSp), kPix = numElements(kernel), inPix = numElements(inSp);
  auto inStr = stridesOf(inSp);
  std::vector<double> dx(type.numElements(), 0.0);
  std::vector<int64_t> o, k;
  for (int64_t op = 0; op < outPix; ++op) {
    unravel(op, outSp, o);
    // The divisor the forward op used: taps inside the input, or inside the
    // explicitly padded input (not the ceil-mode overhang) with count_include_pad.
    int64_t count = 0, countWithPad = 0;
    for (int64_t kp = 0; kp < kPix; ++kp) {
      unravel(kp, kernel, k);
      bool inside = true, insidePadded = true;
      for (size_t d = 0; d < s; ++d) {
        int64_t pos = o[d] * win.strides[d] - win.padBegin[d] + k[d] * win.dilations[d];
        inside = inside && pos >= 0 && pos < inSp[d];
        insidePadded = insidePadded && pos >= -win.padBegin[d] && pos < inSp[d] + win.pads[s + d];
      }
      count += inside;
      countWithPad += insidePadded;
    }
    double divisor = double(countPad ? countWithPad : count);
    if (divisor == 0)
      continue;
    for (int64_t nc = 0; nc < NC; ++nc) {
      double share = dy.getDouble(nc * outPix + op) / divisor;
      forEachTap(win, inSp, inStr, o, [&](int64_t, int64_t off) { dx[nc * inPix + off] += share; });
    }
  }
  return one(fromAccumulator(type, dx));
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

KernelResult gatherGradKernel(const KernelContext &ctx) {
  const Tensor &dy = *ctx.in(0), &ind = *ctx.in(1);
  const TensorType &type = ctx.outType();
  int64_t rank = type.rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", 0), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  int64_t outer = 1, inner = 1, dim = type.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= type.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= type.shape[d];
  int64_t n = ind.size();
  if (dy.size() != outer * n * inner)
    return ctx.error("dY " + dy.type().str() + " does not match the indices and shape");
  std::vector<double> dx(type.numElements(), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = ind.getInt(j);
      if (k < 0)
        k += dim;
      if (k < 0 || k >= dim)
        return ctx.error("index " + llvm::Twine(ind.getInt(j)) + " is out of range [0, " +
                         llvm::Twine(dim) + ")");
      for (int64_t in = 0; in < inner; ++in)
        dx[(o * dim + k) * inner + in] += dy.getDouble((o * n + j) * inner + in);
    }
  return one(fromAccumulator(type, dx));
}

KernelResult sliceGradKernel(const KernelContext &ctx) {
  const Tensor &dy = *ctx.in(0);
  const TensorType &type = ctx.outType();
  int64_t rank = type.rank();
  std::vector<int64_t> starts = ctx.in(1)->toInt64s();
  std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
  for (size_t i = 0; i < axes.size(); ++i)
    axes[i] = static_cast<int64_t>(i);
  if (ctx.in(3))
    axes = ctx.in(3)->toInt64s();
  if (ctx.in(4))
    steps = ctx.in(4)->toInt64s();
  // Where the slice starts and how it steps on every axis (as Slice computes it).
  std::vector<int64_t> begin(rank, 0), step(rank, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalizeAxis(axes[i], rank);
    if (a < 0 || steps[i] == 0)
      return ctx.error("bad axis or step");
    int64_t dim = type.shape[a], st = steps[i];
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    b = st > 0 ? std::clamp<int64_t>(b, 0, dim) : std::clamp<int64_t>(b, 0, dim - 1);
    begin[a] = b;
    step[a] = st;
  }
  auto xs = stridesOf(type.shape);
  std::vector<double> dx(type.numElements(), 0.0);
  std::vector<int64_t> idx;
  for (int64_t f = 0; f < dy.size(); ++f) {
    unravel(f, dy.shape(), idx);
    int64_t dst = 0;
    for (int64_t d = 0; d < rank; ++d)
      dst += (begin[d] + idx[d] * step[d]) * xs[d];
    dx[dst] += dy.getDouble(f);
  }
  return one(fromAccumulator(type, dx));
}

KernelResult dropoutGradKernel(const KernelContext &ctx) {
  const Tensor &dy = *ctx.in(0), &mask = *ctx.in(1);
  double ratio = ctx.in(2) ? ctx.in(2)->getDouble(0) : 0.5;
  bool training = ctx.in(3) ? ctx.in(3)->getInt(0) != 0 : false;
  if (mask.size() != dy.size())
    return ctx.error("mask and dY differ in shape");
  Tensor dx = ctx.out();
  // The forward op copies its input in inference mode and with ratio 0.
  bool copies = !training || ratio == 0.0;
  double scale = ratio < 1.0 ? 1.0 / (1.0 - ratio) : 0.0;
  for (int64_t i = 0; i < dy.size(); ++i)
    dx.setDouble(i, copies ? dy.getDouble(i) : (mask.getInt(i) ? dy.getDouble(i) * scale : 0.0));
  return one(std::move(dx));
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// For every sample (n, d) of a loss over classes on axis 1, the factor its
/// gradient carries: dLoss, the class weight, and 1/total weight for "mean";
/// 0 for ignored samples. Returns an error for targets out of range.
llvm::Expected<std::vector<double>> sampleCoefficients(const KernelContext &ctx, const Shape &shape,
                                                       const Tensor &dLoss, const Tensor &target,
                                                       const Tensor *weight) {
  int64_t N = shape[0], C = shape[1];
  int64_t inner = N * C != 0 ? numElements(shape) / (N * C) : 0;
  std::string reduction = ctx.node.getString("reduction", "mean");
  bool hasIgnore = ctx.node.hasAttr("ignore_index");
  int64_t ignore = ctx.node.getInt("ignore_index", 0);
  if (reduction == "none" ? dLoss.size() != N * inner : dLoss.size() != 1)
    return ctx.error("dLoss " + dLoss.type().str() + " does not match reduction '" + reduction + "'");
  std::vector<double> coef(N * inner, 0.0);
  double weightSum = 0;
  for (int64_t i = 0; i < N * inner; ++i) {
    int64_t t = target.getInt(i);
    if (hasIgnore && t == ignore)
      continue;
    if (t < 0 || t >= C)
      return ctx.error("target class " + llvm::Twine(t) + " is out of range [0, " + llvm::Twine(C) +
                       ")");
    double w = weight ? weight->getDouble(t) : 1.0;
    coef[i] = w * (reduction == "none" ? dLoss.getDouble(i) : dLoss.getDouble(0));
    weightSum += w;
  }
  if (reduction == "mean")
    for (double &c : coef)
      c /= weightSum;
  return coef;
}

KernelResult softmaxCrossEntropyGradKernel(const KernelContext &ctx) {
  const Tensor &dLoss = *ctx.in(0), &logp = *ctx.in(1), &labels = *ctx.in(2);
  const Shape &shape = logp.shape();
  auto coef = sampleCoefficients(ctx, shape, dLoss, labels, ctx.in(3));
  if (!coef)
    return coef.takeError();
  int64_t N = shape[0], C = shape[1];
  int64_t inner = N * C != 0 ? logp.size() / (N * C) : 0;
  Tensor d = ctx.out();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < inner; ++k) {
        int64_t i = n * inner + k, at = (n * C + c) * inner + k;
        double onehot = (*coef)[i] != 0.0 && labels.getInt(i) == c ? 1.0 : 0.0;
        d.setDouble(at, (*coef)[i] * (std::exp(logp.getDouble(at)) - onehot));
      }
  return one(std::move(d));
}

KernelResult nllGradKernel(const KernelContext &ctx) {
  const Tensor &dLoss = *ctx.in(0), &target = *ctx.in(1);
  const TensorType &type = ctx.outType();
  auto coef = sampleCoefficients(ctx, type.shape, dLoss, target, ctx.in(2));
  if (!coef)
    return coef.takeError();
  int64_t N = type.shape[0], C = type.shape[1];
  int64_t inner = N * C != 0 ? type.numElements() / (N * C) : 0;
  Tensor d = ctx.out();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < inner; ++k) {
      int64_t i = n * inner + k;
      if ((*coef)[i] != 0.0)
        d.setDouble((n * C + target.getInt(i)) * inner + k, -(*coef)[i]);
    }
  return one(std::move(d));
}

} // namespace

void registerGradientKernels(KernelTable &t) {
  t.add("ampc.ReluGrad", reluGradKernel);
  t.add("ampc.LeakyReluGrad", leakyReluGradKernel);
  t.add("ampc.SigmoidGrad", sigmoidGradKernel);
  t.add("ampc.TanhGrad", tanhGradKernel);
  t.add("ampc.SoftmaxGrad", softmaxGradKernel);
  t.add("ampc.LogSoftmaxGrad", softmaxGradKernel);
  t.add("ampc.LayerNormalizationGrad", layerNormGradKernel);
  t.add("ampc.BatchNormalizationGrad", batchNormGradKernel);
  t.add("ampc.ConvGrad", convGradKernel);
  t.add("ampc.MaxPoolGrad", maxPoolGradKernel);
  t.add("ampc.AveragePoolGrad", averagePoolGradKernel);
  t.add("ampc.GatherGrad", gatherGradKernel);
  t.add("ampc.SliceGrad", sliceGradKernel);
  t.add("ampc.DropoutGrad", dropoutGradKernel);
  t.add("ampc.SoftmaxCrossEntropyLossGrad", softmaxCrossEntropyGradKernel);
  t.add("ampc.NegativeLogLikelihoodLossGrad", nllGradKernel);
}

} // namespace ampc::interp
