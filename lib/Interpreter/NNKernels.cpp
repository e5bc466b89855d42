//===- NNKernels.cpp - MatMul, Gemm, Conv, pooling, normalization, softmax -===//
//
// Straight loops that follow the ONNX operator definitions; all accumulation
// is in double.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <limits>

namespace ampc::interp {

namespace {

KernelResult one(Tensor t) { return std::vector<Tensor>{std::move(t)}; }

//===----------------------------------------------------------------------===//
// MatMul and Gemm
//===----------------------------------------------------------------------===//

KernelResult matMulKernel(const KernelContext &ctx) {
  Tensor a = *ctx.in(0), b = *ctx.in(1);
  // Promote 1-D operands as numpy does, and drop the added axis afterwards.
  if (a.type().rank() == 1)
    a = a.reshaped({1, a.shape()[0]});
  if (b.type().rank() == 1)
    b = b.reshaped({b.shape()[0], 1});
  int64_t ra = a.type().rank(), rb = b.type().rank();
  int64_t m = a.shape()[ra - 2], k = a.shape()[ra - 1], n = b.shape()[rb - 1];
  if (b.shape()[rb - 2] != k)
    return ctx.error("inner dimensions differ: " + a.type().str() + " x " + b.type().str());
  Shape batchA(a.shape().begin(), a.shape().end() - 2), batchB(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  if (!broadcastShapes(batchA, batchB, batch))
    return ctx.error("batch dimensions do not broadcast");
  auto mapA = broadcastIndexMap(batchA, batch), mapB = broadcastIndexMap(batchB, batch);
  int64_t nb = numElements(batch);
  Tensor y = ctx.out();
  if (y.size() != nb * m * n)
    return ctx.error("result type " + y.type().str() + " does not match the operands");
  std::vector<double> av = a.toDoubles(), bv = b.toDoubles();
  for (int64_t bi = 0; bi < nb; ++bi) {
    const double *pa = av.data() + mapA[bi] * m * k;
    const double *pb = bv.data() + mapB[bi] * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += pa[i * k + p] * pb[p * n + j];
        y.setDouble((bi * m + i) * n + j, s);
      }
  }
  return one(std::move(y));
}

KernelResult gemmKernel(const KernelContext &ctx) {
  const Tensor &a = *ctx.in(0), &b = *ctx.in(1);
  const Tensor *c = ctx.in(2);
  bool ta = ctx.node.getInt("transA", 0), tb = ctx.node.getInt("transB", 0);
  double alpha = ctx.node.getFloat("alpha", 1.0), beta = ctx.node.getFloat("beta", 1.0);
  int64_t m = ta ? a.shape()[1] : a.shape()[0], k = ta ? a.shape()[0] : a.shape()[1];
  int64_t n = tb ? b.shape()[0] : b.shape()[1];
  Tensor y = ctx.out();
  std::vector<int64_t> cmap;
  if (c)
    cmap = broadcastIndexMap(c->shape(), {m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += a.getDouble(ta ? p * m + i : i * k + p) * b.getDouble(tb ? j * k + p : p * n + j);
      double r = alpha * s;
      if (c)
        r += beta * c->getDouble(cmap[i * n + j]);
      y.setDouble(i * n + j, r);
    }
  return one(std::move(y));
}

//===----------------------------------------------------------------------===//
// Convolution and pooling geometry
//===----------------------------------------------------------------------===//

/// Spatial geometry of a sliding window op: kernel, strides, dilations and the
/// leading pads, resolved from attributes (auto_pad included).
struct Window {
  std::vector<int64_t> kernel, strides, dilations, padBegin;
};

Window windowOf(const Node &n, const Shape &inSpatial, const Shape &outSpatial,
                const std::vector<int64_t> &kernel) {
  size_t s = kernel.size();
  Window w;
  w.kernel = kernel;
  w.strides = n.getInts("strides", std::vector<int64_t>(s, 1));
  w.dilations = n.getInts("dilations", std::vector<int64_t>(s, 1));
  std::vector<int64_t> pads = n.getInts("pads", std::vector<int64_t>(2 * s, 0));
  std::string autoPad = n.getString("auto_pad", "NOTSET");
  w.padBegin.assign(pads.begin(), pads.begin() + s);
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

KernelResult convKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0), &w = *ctx.in(1);
  const Tensor *bias = ctx.in(2);
  Tensor y = ctx.out();
  if (x.shape().size() < 3 || w.shape().size() != x.shape().size() ||
      y.shape().size() != x.shape().size())
    return ctx.error("operand ranks do not fit a convolution");
  int64_t N = x.shape()[0], C = x.shape()[1], M = w.shape()[0];
  int64_t group = ctx.node.getInt("group", 1);
  if (group < 1 || C % group != 0 || M % group != 0 || w.shape()[1] != C / group ||
      y.shape()[1] != M || (bias && bias->size() != M))
    return ctx.error("operand shapes do not fit a convolution of " + std::to_string(group) +
                     " groups");
  int64_t cPerG = C / group, mPerG = M / group;
  size_t s = x.shape().size() - 2;
  Shape inSp(x.shape().begin() + 2, x.shape().end()), outSp(y.shape().begin() + 2, y.shape().end());
  Shape kSp(w.shape().begin() + 2, w.shape().end());
  Window win = windowOf(ctx.node, inSp, outSp, ctx.node.getInts("kernel_shape", kSp));
  int64_t outPix = numElements(outSp), kPix = numElements(kSp), inPix = numElements(inSp);
  auto inStr = stridesOf(inSp);
  std::vector<double> xv = x.toDoubles(), wv = w.toDoubles();
  std::vector<int64_t> o, k;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      int64_t g = m / mPerG;
      for (int64_t op = 0; op < outPix; ++op) {
        unravel(op, outSp, o);
        double acc = bias ? bias->getDouble(m) : 0.0;
        for (int64_t c = 0; c < cPerG; ++c)
          for (int64_t kp = 0; kp < kPix; ++kp) {
            unravel(kp, kSp, k);
            int64_t inOff = 0;
            bool inside = true;
            for (size_t d = 0; d < s && inside; ++d) {
              int64_t pos = o[d] * win.strides[d] - win.padBegin[d] + k[d] * win.dilations[d];
              inside = pos >= 0 && pos < inSp[d];
              inOff += pos * inStr[d];
            }
            if (!inside)
              continue;
            acc += xv[(n * C + g * cPerG + c) * inPix + inOff] * wv[(m * cPerG + c) * kPix + kp];
          }
        y.setDouble((n * M + m) * outPix + op, acc);
      }
    }
  return one(std::move(y));
}

KernelResult convTransposeKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0), &w = *ctx.in(1);
  const Tensor *bias = ctx.in(2);
  Tensor y = ctx.out();
  int64_t N = x.shape()[0], C = x.shape()[1];
  int64_t group = ctx.node.getInt("group", 1);
  int64_t mPerG = w.shape()[1], M = mPerG * group, cPerG = C / group;
  size_t s = x.shape().size() - 2;
  Shape inSp(x.shape().begin() + 2, x.shape().end()), outSp(y.shape().begin() + 2, y.shape().end());
  Shape kSp(w.shape().begin() + 2, w.shape().end());
  std::vector<int64_t> strides = ctx.node.getInts("strides", std::vector<int64_t>(s, 1));
  std::vector<int64_t> dil = ctx.node.getInts("dilations", std::vector<int64_t>(s, 1));
  std::vector<int64_t> pads = ctx.node.getInts("pads", std::vector<int64_t>(2 * s, 0));
  std::string autoPad = ctx.node.getString("auto_pad", "NOTSET");
  std::vector<int64_t> outPad = ctx.node.getInts("output_padding", std::vector<int64_t>(s, 0));
  std::vector<int64_t> padBegin(pads.begin(), pads.begin() + s);
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER" || ctx.node.hasAttr("output_shape")) {
    for (size_t d = 0; d < s; ++d) {
      int64_t total = strides[d] * (inSp[d] - 1) + outPad[d] + ((kSp[d] - 1) * dil[d] + 1) - outSp[d];
      padBegin[d] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      if (autoPad == "NOTSET")
        padBegin[d] = total / 2;
    }
  }
  int64_t outPix = numElements(outSp), kPix = numElements(kSp), inPix = numElements(inSp);
  auto outStr = stridesOf(outSp);
  std::vector<double> acc(static_cast<size_t>(y.size()), 0.0);
  std::vector<int64_t> ip, k;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      int64_t g = c / cPerG;
      for (int64_t p = 0; p < inPix; ++p) {
        unravel(p, inSp, ip);
        double xvv = x.getDouble((n * C + c) * inPix + p);
        for (int64_t mm = 0; mm < mPerG; ++mm)
          for (int64_t kp = 0; kp < kPix; ++kp) {
            unravel(kp, kSp, k);
            int64_t off = 0;
            bool inside = true;
            for (size_t d = 0; d < s && inside; ++d) {
              int64_t pos = ip[d] * strides[d] - padBegin[d] + k[d] * dil[d];
              inside = pos >= 0 && pos < outSp[d];
              off += pos * outStr[d];
            }
            if (!inside)
              continue;
            int64_t m = g * mPerG + mm;
            acc[(n * M + m) * outPix + off] += xvv * w.getDouble((c * mPerG + mm) * kPix + kp);
          }
      }
    }
  for (int64_t i = 0; i < y.size(); ++i) {
    int64_t m = (i / outPix) % M;
    y.setDouble(i, acc[i] + (bias ? bias->getDouble(m) : 0.0));
  }
  return one(std::move(y));
}

KernelResult poolKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  bool isMax = ctx.node.is("MaxPool");
  Tensor y = ctx.out();
  int64_t N = x.shape()[0], C = x.shape()[1];
  Shape inSp(x.shape().begin() + 2, x.shape().end()), outSp(y.shape().begin() + 2, y.shape().end());
  std::vector<int64_t> kernel = ctx.node.getInts("kernel_shape");
  Window win = windowOf(ctx.node, inSp, outSp, kernel);
  bool countPad = ctx.node.getInt("count_include_pad", 0) != 0;
  std::vector<int64_t> pads = ctx.node.getInts("pads", std::vector<int64_t>(2 * kernel.size(), 0));
  size_t s = kernel.size();
  int64_t outPix = numElements(outSp), kPix = numElements(kernel), inPix = numElements(inSp);
  auto inStr = stridesOf(inSp);
  Tensor indices(TensorType(DType::I64, y.shape()));
  bool columnMajor = ctx.node.getInt("storage_order", 0) != 0;
  std::vector<int64_t> o, k, pos(s);
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t op = 0; op < outPix; ++op) {
      unravel(op, outSp, o);
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      int64_t bestIdx = -1, count = 0, countWithPad = 0;
      for (int64_t kp = 0; kp < kPix; ++kp) {
        unravel(kp, kernel, k);
        bool inside = true, insidePadded = true;
        int64_t off = 0;
        for (size_t d = 0; d < s; ++d) {
          pos[d] = o[d] * win.strides[d] - win.padBegin[d] + k[d] * win.dilations[d];
          inside = inside && pos[d] >= 0 && pos[d] < inSp[d];
          // count_include_pad counts explicit padding, not the ceil-mode overhang.
          insidePadded = insidePadded && pos[d] >= -win.padBegin[d] &&
                         pos[d] < inSp[d] + pads[s + d];
          off += pos[d] * inStr[d];
        }
        if (insidePadded)
          ++countWithPad;
        if (!inside)
          continue;
        double v = x.getDouble(nc * inPix + off);
        ++count;
        sum += v;
        if (v > best || bestIdx < 0) {
          best = v;
          int64_t flat = off;
          if (columnMajor) {
            flat = 0;
            int64_t mul = 1;
            for (size_t d = 0; d < s; ++d) {
              flat += pos[d] * mul;
              mul *= inSp[d];
            }
          }
          bestIdx = nc * inPix + flat;
        }
      }
      int64_t dst = nc * outPix + op;
      if (isMax) {
        y.setDouble(dst, best);
        indices.setInt(dst, bestIdx);
      } else {
        y.setDouble(dst, sum / double(countPad ? countWithPad : count));
      }
    }
  std::vector<Tensor> outs;
  outs.push_back(std::move(y));
  if (isMax && ctx.numOutputs() > 1)
    outs.push_back(std::move(indices));
  return outs;
}

KernelResult globalPoolKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  bool isMax = ctx.node.is("GlobalMaxPool");
  Tensor y = ctx.out();
  int64_t NC = x.shape()[0] * x.shape()[1];
  int64_t pix = NC ? x.size() / NC : 0;
  for (int64_t i = 0; i < NC; ++i) {
    double acc = isMax ? -std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t p = 0; p < pix; ++p) {
      double v = x.getDouble(i * pix + p);
      acc = isMax ? std::max(acc, v) : acc + v;
    }
    y.setDouble(i, isMax ? acc : acc / pix);
  }
  return one(std::move(y));
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

KernelResult batchNormKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0), &scale = *ctx.in(1), &bias = *ctx.in(2);
  const Tensor &mean = *ctx.in(3), &var = *ctx.in(4);
  double eps = ctx.node.getFloat("epsilon", 1e-5), momentum = ctx.node.getFloat("momentum", 0.9);
  // Opset 14+: training_mode attribute; the 5-output opset-9 form is training
  // when the optional statistics outputs are requested.
  bool training = ctx.node.getInt("training_mode", 0) != 0 ||
                  (!ctx.node.hasAttr("training_mode") && ctx.numOutputs() > 1 &&
                   ctx.node.graph()->opsetVersion() < 14);
  int64_t N = x.shape()[0], C = x.shape()[1];
  int64_t pix = N * C != 0 ? x.size() / (N * C) : 0;
  std::vector<double> useMean(C), useVar(C);
  for (int64_t c = 0; c < C; ++c) {
    if (!training) {
      useMean[c] = mean.getDouble(c);
      useVar[c] = var.getDouble(c);
      continue;
    }
    double s = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < pix; ++p)
        s += x.getDouble((n * C + c) * pix + p);
    double mu = s / double(N * pix);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < pix; ++p) {
        double d = x.getDouble((n * C + c) * pix + p) - mu;
        ss += d * d;
      }
    useMean[c] = mu;
    useVar[c] = ss / double(N * pix); // population variance, as ONNX defines it
  }
  Tensor y = ctx.out(0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      double inv = 1.0 / std::sqrt(useVar[c] + eps);
      for (int64_t p = 0; p < pix; ++p) {
        int64_t i = (n * C + c) * pix + p;
        y.setDouble(i, (x.getDouble(i) - useMean[c]) * inv * scale.getDouble(c) + bias.getDouble(c));
      }
    }
  std::vector<Tensor> outs;
  outs.push_back(std::move(y));
  if (!training)
    return outs;
  // Outputs 1 and 2: running statistics; opset 9 adds saved mean and variance.
  for (unsigned i = 1; i < ctx.numOutputs(); ++i) {
    if (!ctx.wantsOutput(i)) {
      outs.emplace_back();
      continue;
    }
    Tensor t = ctx.out(i);
    for (int64_t c = 0; c < C; ++c) {
      double v = 0;
      if (i == 1)
        v = mean.getDouble(c) * momentum + useMean[c] * (1 - momentum);
      else if (i == 2)
        v = var.getDouble(c) * momentum + useVar[c] * (1 - momentum);
      else if (i == 3)
        v = useMean[c];
      else
        v = 1.0 / std::sqrt(useVar[c] + eps);
      t.setDouble(c, v);
    }
    outs.push_back(std::move(t));
  }
  return outs;
}

KernelResult layerNormKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0), &scale = *ctx.in(1);
  const Tensor *bias = ctx.in(2);
  int64_t rank = x.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", -1), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  double eps = ctx.node.getFloat("epsilon", 1e-5);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape()[d];
  int64_t inner = outer ? x.size() / outer : 0;
  Shape normShape(x.shape().begin() + axis, x.shape().end());
  auto smap = broadcastIndexMap(scale.shape(), normShape);
  std::vector<int64_t> bmap;
  if (bias)
    bmap = broadcastIndexMap(bias->shape(), normShape);
  Tensor y = ctx.out(0);
  Tensor meanT = ctx.wantsOutput(1) ? ctx.out(1) : Tensor();
  Tensor invT = ctx.wantsOutput(2) ? ctx.out(2) : Tensor();
  for (int64_t o = 0; o < outer; ++o) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < inner; ++i)
      s += x.getDouble(o * inner + i);
    double mu = s / inner;
    for (int64_t i = 0; i < inner; ++i) {
      double d = x.getDouble(o * inner + i) - mu;
      ss += d * d;
    }
    double inv = 1.0 / std::sqrt(ss / inner + eps);
    for (int64_t i = 0; i < inner; ++i) {
      double v = (x.getDouble(o * inner + i) - mu) * inv * scale.getDouble(smap[i]);
      if (bias)
        v += bias->getDouble(bmap[i]);
      y.setDouble(o * inner + i, v);
    }
    if (ctx.wantsOutput(1))
      meanT.setDouble(o, mu);
    if (ctx.wantsOutput(2))
      invT.setDouble(o, inv);
  }
  std::vector<Tensor> outs;
  outs.push_back(std::move(y));
  outs.push_back(std::move(meanT));
  outs.push_back(std::move(invT));
  outs.resize(ctx.numOutputs());
  return outs;
}

KernelResult instanceNormKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0), &scale = *ctx.in(1), &bias = *ctx.in(2);
  double eps = ctx.node.getFloat("epsilon", 1e-5);
  int64_t N = x.shape()[0], C = x.shape()[1];
  int64_t pix = N * C != 0 ? x.size() / (N * C) : 0;
  Tensor y = ctx.out();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      int64_t base = (n * C + c) * pix;
      double s = 0, ss = 0;
      for (int64_t p = 0; p < pix; ++p)
        s += x.getDouble(base + p);
      double mu = s / pix;
      for (int64_t p = 0; p < pix; ++p)
        ss += (x.getDouble(base + p) - mu) * (x.getDouble(base + p) - mu);
      double inv = 1.0 / std::sqrt(ss / pix + eps);
      for (int64_t p = 0; p < pix; ++p)
        y.setDouble(base + p, (x.getDouble(base + p) - mu) * inv * scale.getDouble(c) + bias.getDouble(c));
    }
  return one(std::move(y));
}

//===----------------------------------------------------------------------===//
// Softmax family (opset 13: one axis)
//===----------------------------------------------------------------------===//

KernelResult softmaxKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  const std::string &op = ctx.node.opType();
  int64_t rank = x.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", -1), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  int64_t len = x.shape()[axis];
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= x.shape()[d];
  int64_t outer = len * inner != 0 ? x.size() / (len * inner) : 0;
  Tensor y = ctx.out();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return (o * len + j) * inner + in; };
      double mx = -std::numeric_limits<double>::infinity();
      int64_t arg = 0;
      for (int64_t j = 0; j < len; ++j)
        if (x.getDouble(at(j)) > mx) {
          mx = x.getDouble(at(j));
          arg = j;
        }
      if (op == "Hardmax") {
        for (int64_t j = 0; j < len; ++j)
          y.setDouble(at(j), j == arg ? 1.0 : 0.0);
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < len; ++j)
        sum += std::exp(x.getDouble(at(j)) - mx);
      for (int64_t j = 0; j < len; ++j) {
        double z = x.getDouble(at(j)) - mx;
        y.setDouble(at(j), op == "LogSoftmax" ? z - std::log(sum) : std::exp(z) / sum);
      }
    }
  return one(std::move(y));
}

} // namespace

void registerNNKernels(KernelTable &t) {
  t.add("MatMul", matMulKernel);
  t.add("Gemm", gemmKernel);
  t.add("Conv", convKernel);
  t.add("ConvTranspose", convTransposeKernel);
  t.add("MaxPool", poolKernel);
  t.add("AveragePool", poolKernel);
  t.add("GlobalAveragePool", globalPoolKernel);
  t.add("GlobalMaxPool", globalPoolKernel);
  t.add("BatchNormalization", batchNormKernel);
  t.add("LayerNormalization", layerNormKernel);
  t.add("InstanceNormalization", instanceNormKernel);
  t.add("Softmax", softmaxKernel);
  t.add("LogSoftmax", softmaxKernel);
  t.add("Hardmax", softmaxKernel);
}

} // namespace ampc::interp
