//===- PoolKernels.cpp - Pooling and its gradients -------------------------===//
//
// MaxPool (with Indices, storage_order), AveragePool (count_include_pad),
// GlobalAveragePool, GlobalMaxPool, ampc.MaxPoolGrad and ampc.AveragePoolGrad
// for 1 to 3 spatial axes. Window geometry is resolved once (auto_pad, pads,
// dilations, strides; ceil_mode only shows in the output size) into per-axis
// tables of the input positions each output position reads, so run() is
// plain loops; MaxPoolGrad finds each window's maximum in X again, with the
// forward kernel's own loop. Work is split by (n, c) planes; each plane is converted to
// fp32 once and its results rounded once. Gradients accumulate in fp32 and
// are rounded once.
//
//===----------------------------------------------------------------------===//

#include "KernelHelpers.h"

#include <cstring>
#include <limits>

namespace ampc::rt::cpu {

namespace {

/// Per spatial axis (padded to 3 axes with leading size-1 axes): for every
/// output index, the input positions its window reads, and the two divisors
/// of AveragePool.
struct AxisTable {
  int64_t in = 1, out = 1;
  std::vector<int64_t> begin, count; ///< into pos
  std::vector<int64_t> pos;
  std::vector<int64_t> inside, padded; ///< taps inside the input / the padded input
};

struct PoolGeometry {
  AxisTable axis[3];
  int64_t inPix = 1, outPix = 1;
  std::vector<int64_t> inSp; // original spatial dims

  void build(const WindowGeometry &w) {
    size_t s = w.kernel.size(), lead = 3 - s;
    inSp = w.inSp;
    for (size_t d = 0; d < 3; ++d) {
      AxisTable &t = axis[d];
      if (d < lead) {
        t.in = t.out = 1;
        t.begin = {0};
        t.count = {1};
        t.pos = {0};
        t.inside = t.padded = {1};
        continue;
      }
      size_t a = d - lead;
      t.in = w.inSp[a];
      t.out = w.outSp[a];
      for (int64_t o = 0; o < t.out; ++o) {
        t.begin.push_back(static_cast<int64_t>(t.pos.size()));
        int64_t inside = 0, padded = 0;
        for (int64_t k = 0; k < w.kernel[a]; ++k) {
          int64_t p = o * w.strides[a] - w.padBegin[a] + k * w.dilations[a];
          if (p >= 0 && p < t.in) {
            t.pos.push_back(p);
            ++inside;
          }
          // count_include_pad counts explicit padding, not the ceil overhang.
          if (p >= -w.padBegin[a] && p < t.in + w.pads[s + a])
            ++padded;
        }
        t.count.push_back(inside);
        t.inside.push_back(inside);
        t.padded.push_back(padded);
      }
    }
    inPix = axis[0].in * axis[1].in * axis[2].in;
    outPix = axis[0].out * axis[1].out * axis[2].out;
  }

  /// The offset in a plane of x of the first maximum of output position
  /// (a, b, c)'s window, in window order (NaN wins only as the first tap, as
  /// `v > best` never holds for it), or -1 for an empty window. MaxPool and
  /// MaxPoolGrad both choose through this, so they agree on ties.
  int64_t argmax(const float *x, int64_t a, int64_t b, int64_t c, float &best) const {
    best = -std::numeric_limits<float>::infinity();
    int64_t bestOff = -1;
    forEachTap(a, b, c, [&](int64_t off) {
      float v = x[off];
      if (v > best || bestOff < 0) {
        best = v;
        bestOff = off;
      }
    });
    return bestOff;
  }

  /// Calls fn(offset in a plane) for every input position inside x that
  /// output position (a, b, c)'s window reads, in window order.
  template <typename Fn> void forEachTap(int64_t a, int64_t b, int64_t c, Fn &&fn) const {
    const AxisTable &A = axis[0], &B = axis[1], &C = axis[2];
    const int64_t *pc = C.pos.data() + C.begin[c];
    for (int64_t i = 0; i < A.count[a]; ++i) {
      int64_t pa = A.pos[A.begin[a] + i];
      for (int64_t j = 0; j < B.count[b]; ++j) {
        int64_t row = (pa * B.in + B.pos[B.begin[b] + j]) * C.in;
        for (int64_t k = 0; k < C.count[c]; ++k)
          fn(row + pc[k]);
      }
    }
  }

  /// Calls fn(outIndex, (od, oh, ow)) for every output position.
  template <typename Fn> void forEachOutput(Fn &&fn) const {
    int64_t o = 0;
    for (int64_t a = 0; a < axis[0].out; ++a)
      for (int64_t b = 0; b < axis[1].out; ++b)
        for (int64_t c = 0; c < axis[2].out; ++c, ++o)
          fn(o, a, b, c);
  }
};

/// Reads the geometry of a pooling step; xShape / yShape are [N, C, ...].
bool poolGeometry(const StepContext &ctx, const std::vector<int64_t> &xShape,
                  const std::vector<int64_t> &yShape, PoolGeometry &g, std::string &error) {
  if (xShape.size() < 3 || xShape.size() > 5 || yShape.size() != xShape.size() ||
      xShape[0] != yShape[0] || xShape[1] != yShape[1]) {
    error = "pooling needs [N, C, 1 to 3 spatial axes] operands";
    return false;
  }
  std::vector<int64_t> inSp(xShape.begin() + 2, xShape.end()), outSp(yShape.begin() + 2, yShape.end());
  std::vector<int64_t> kernel = ctx.attrInts("kernel_shape");
  if (kernel.size() != inSp.size()) {
    error = "kernel_shape must have one entry per spatial axis";
    return false;
  }
  WindowGeometry w;
  if (!windowGeometry(ctx, inSp, outSp, kernel, w, error))
    return false;
  g.build(w);
  return true;
}

//===----------------------------------------------------------------------===//
// MaxPool / AveragePool
//===----------------------------------------------------------------------===//

class PoolKernel : public Kernel {
public:
  PoolKernel(ThreadPool &pool, TensorArg x, TensorArg y, TensorArg indices, bool isMax,
             bool countPad, bool columnMajor, PoolGeometry g)
      : pool_(pool), x_(x), y_(y), ind_(indices), isMax_(isMax), countPad_(countPad),
        columnMajor_(columnMajor), g_(std::move(g)) {
    NC_ = x_.shape[0] * x_.shape[1];
    scratch_ = SharedScratch::of(pool);
    ScratchLayout layout;
    perRange_ = g_.inPix + g_.outPix;
    offBuf_ = layout.add<float>(perRange_ * pool.size());
    scratch_->reserve(layout.size());
  }

  void run() override {
    pool_.parallelFor(NC_, 1, [&](int64_t p0, int64_t p1, int range) {
      float *buf = at<float>(scratch_->data(), offBuf_) + range * perRange_;
      for (int64_t p = p0; p < p1; ++p)
        plane(p, buf, buf + g_.inPix);
    });
  }

private:
  void plane(int64_t p, float *inBuf, float *outBuf) {
    const float *x = rowIn(x_, p * g_.inPix, g_.inPix, inBuf);
    float *y = rowOut(y_, p * g_.outPix, outBuf);
    int64_t *ind = ind_.data ? ind_.as<int64_t>() + p * g_.outPix : nullptr;
    const AxisTable &A = g_.axis[0], &B = g_.axis[1], &C = g_.axis[2];
    g_.forEachOutput([&](int64_t o, int64_t a, int64_t b, int64_t c) {
      if (isMax_) {
        float best;
        int64_t bestOff = g_.argmax(x, a, b, c, best);
        y[o] = best;
        if (ind)
          ind[o] = bestOff < 0 ? -1 : p * g_.inPix + flatIndex(bestOff);
      } else {
        float sum = 0;
        g_.forEachTap(a, b, c, [&](int64_t off) { sum += x[off]; });
        int64_t div = countPad_ ? A.padded[a] * B.padded[b] * C.padded[c]
                                : A.inside[a] * B.inside[b] * C.inside[c];
        y[o] = sum / static_cast<float>(div);
      }
    });
    rowCommit(y_, p * g_.outPix, g_.outPix, y);
  }

  /// Row-major spatial offset -> the Indices encoding (column-major with
  /// storage_order = 1).
  int64_t flatIndex(int64_t off) const {
    if (!columnMajor_)
      return off;
    size_t s = g_.inSp.size();
    std::vector<int64_t> pos(s);
    for (size_t d = s; d-- > 0;) {
      pos[d] = off % g_.inSp[d];
      off /= g_.inSp[d];
    }
    int64_t flat = 0, mul = 1;
    for (size_t d = 0; d < s; ++d) {
      flat += pos[d] * mul;
      mul *= g_.inSp[d];
    }
    return flat;
  }

  ThreadPool &pool_;
  TensorArg x_, y_, ind_;
  bool isMax_, countPad_, columnMajor_;
  PoolGeometry g_;
  int64_t NC_ = 0, perRange_ = 0;
  std::shared_ptr<SharedScratch> scratch_;
  size_t offBuf_ = 0;
};

std::unique_ptr<Kernel> createPool(const StepContext &ctx, std::string &error, bool isMax) {
  if (!ctx.has(0) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "pooling takes X and produces Y";
    return nullptr;
  }
  if (!requireFloat(ctx, {0}, {0}, error))
    return nullptr;
  const TensorArg &x = ctx.inputs[0], &y = ctx.outputs[0];
  if (x.type != y.type) {
    error = "X and Y must share their element type";
    return nullptr;
  }
  TensorArg ind = ctx.outputs.size() > 1 ? ctx.outputs[1] : TensorArg();
  if (ind.data && (!isMax || ind.type != plan::I64 || ind.shape != y.shape)) {
    error = "Indices must be int64 shaped like Y";
    return nullptr;
  }
  PoolGeometry g;
  if (!poolGeometry(ctx, x.shape, y.shape, g, error))
    return nullptr;
  if (y.numel == 0)
    return std::make_unique<LambdaKernel>([] {});
  return std::make_unique<PoolKernel>(ctx.pool, x, y, ind, isMax,
                                      ctx.attrInt("count_include_pad", 0) != 0,
                                      ctx.attrInt("storage_order", 0) != 0, std::move(g));
}

//===----------------------------------------------------------------------===//
// Global pooling
//===----------------------------------------------------------------------===//

std::unique_ptr<Kernel> createGlobalPool(const StepContext &ctx, std::string &error,
                                         bool isMax) {
  if (!ctx.has(0) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "global pooling takes X and produces Y";
    return nullptr;
  }
  if (!requireFloat(ctx, {0}, {0}, error))
    return nullptr;
  TensorArg x = ctx.inputs[0], y = ctx.outputs[0];
  if (x.rank() < 2 || x.type != y.type) {
    error = "X must be [N, C, ...] and Y of its type";
    return nullptr;
  }
  int64_t NC = x.shape[0] * x.shape[1];
  int64_t pix = NC ? x.numel / NC : 0;
  if (y.numel != NC) {
    error = "Y must hold one value per (n, c)";
    return nullptr;
  }
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  size_t off = layout.add<float>(pix * ctx.pool.size() + 64);
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(NC, 1, [&](int64_t p0, int64_t p1, int range) {
      float *buf = at<float>(scratch->data(), off) + range * pix;
      for (int64_t p = p0; p < p1; ++p) {
        const float *v = rowIn(x, p * pix, pix, buf);
        float r;
        if (isMax) {
          r = -std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < pix; ++i)
            r = r < v[i] ? v[i] : r;
        } else {
          r = sumFloats(v, pix) / static_cast<float>(pix);
        }
        storeFloat(y, p, r);
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

/// dX of MaxPool from (dY, X): each window's maximum is found again in X
/// (PoolGeometry::argmax, as the forward kernel chooses) and dY added there.
std::unique_ptr<Kernel> createMaxPoolGrad(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || !ctx.has(1) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "MaxPoolGrad takes dY and X";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, 1}, {0}, error))
    return nullptr;
  TensorArg dy = ctx.inputs[0], x = ctx.inputs[1], dx = ctx.outputs[0];
  if (x.shape != dx.shape) {
    error = "X and dX must have the same shape";
    return nullptr;
  }
  PoolGeometry g;
  if (!poolGeometry(ctx, dx.shape, dy.shape, g, error))
    return nullptr;
  int64_t NC = dx.shape[0] * dx.shape[1];
  int64_t inPix = g.inPix, outPix = g.outPix;
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  size_t off = layout.add<float>((2 * inPix + outPix) * ctx.pool.size() + 64);
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(NC, 1, [&](int64_t p0, int64_t p1, int range) {
      float *buf = at<float>(scratch->data(), off) + range * (2 * inPix + outPix);
      for (int64_t p = p0; p < p1; ++p) {
        float *acc = rowOut(dx, p * inPix, buf);
        std::memset(acc, 0, inPix * sizeof(float));
        const float *xs = rowIn(x, p * inPix, inPix, buf + inPix);
        const float *gy = rowIn(dy, p * outPix, outPix, buf + 2 * inPix);
        g.forEachOutput([&](int64_t o, int64_t a, int64_t b, int64_t c) {
          float best;
          int64_t at = g.argmax(xs, a, b, c, best);
          if (at >= 0)
            acc[at] += gy[o];
        });
        rowCommit(dx, p * inPix, inPix, acc);
      }
    });
  });
}

std::unique_ptr<Kernel> createAveragePoolGrad(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "AveragePoolGrad takes dY";
    return nullptr;
  }
  if (!requireFloat(ctx, {0}, {0}, error))
    return nullptr;
  TensorArg dy = ctx.inputs[0], dx = ctx.outputs[0];
  PoolGeometry g;
  if (!poolGeometry(ctx, dx.shape, dy.shape, g, error))
    return nullptr;
  bool countPad = ctx.attrInt("count_include_pad", 0) != 0;
  int64_t NC = dx.shape[0] * dx.shape[1];
  int64_t inPix = g.inPix, outPix = g.outPix;
  // The divisor of every output position (0: a window with nothing to count).
  std::vector<float> divisor(outPix);
  const AxisTable *A = g.axis;
  g.forEachOutput([&](int64_t o, int64_t a, int64_t b, int64_t c) {
    int64_t div = countPad ? A[0].padded[a] * A[1].padded[b] * A[2].padded[c]
                           : A[0].inside[a] * A[1].inside[b] * A[2].inside[c];
    divisor[o] = static_cast<float>(div);
  });
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  size_t off = layout.add<float>((inPix + outPix) * ctx.pool.size() + 64);
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    const AxisTable &TA = g.axis[0], &TB = g.axis[1], &TC = g.axis[2];
    pool.parallelFor(NC, 1, [&](int64_t p0, int64_t p1, int range) {
      float *buf = at<float>(scratch->data(), off) + range * (inPix + outPix);
      for (int64_t p = p0; p < p1; ++p) {
        float *acc = rowOut(dx, p * inPix, buf);
        std::memset(acc, 0, inPix * sizeof(float));
        const float *gy = rowIn(dy, p * outPix, outPix, buf + inPix);
        g.forEachOutput([&](int64_t o, int64_t a, int64_t b, int64_t c) {
          if (divisor[o] == 0.0f)
            return;
          float v = gy[o] / divisor[o]; // as the interpreter: dY / divisor
          for (int64_t i = 0; i < TA.count[a]; ++i) {
            int64_t pa = TA.pos[TA.begin[a] + i];
            for (int64_t j = 0; j < TB.count[b]; ++j) {
              int64_t pb = TB.pos[TB.begin[b] + j];
              float *row = acc + (pa * TB.in + pb) * TC.in;
              const int64_t *pc = TC.pos.data() + TC.begin[c];
              for (int64_t k = 0; k < TC.count[c]; ++k)
                row[pc[k]] += v;
            }
          }
        });
        rowCommit(dx, p * inPix, inPix, acc);
      }
    });
  });
}

} // namespace

void registerPoolKernels() {
  registerKernel("MaxPool", [](const StepContext &c, std::string &e) { return createPool(c, e, true); });
  registerKernel("AveragePool",
                 [](const StepContext &c, std::string &e) { return createPool(c, e, false); });
  registerKernel("GlobalMaxPool",
                 [](const StepContext &c, std::string &e) { return createGlobalPool(c, e, true); });
  registerKernel("GlobalAveragePool",
                 [](const StepContext &c, std::string &e) { return createGlobalPool(c, e, false); });
  registerKernel("ampc.MaxPoolGrad", createMaxPoolGrad);
  registerKernel("ampc.AveragePoolGrad", createAveragePoolGrad);
}

} // namespace ampc::rt::cpu
