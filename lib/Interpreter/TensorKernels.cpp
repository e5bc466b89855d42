//===- TensorKernels.cpp - Shape computation and data movement -------------===//
//
// Data movement copies element bytes, so it is exact for every element type.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include "ampc/Interpreter/ResizeCoordinates.h"

#include <cstring>
#include <numeric>
#include <random>

namespace ampc::interp {

namespace {

/// Copies element `from` of src into element `to` of dst (same dtype).
inline void copyElem(const Tensor &src, int64_t from, Tensor &dst, int64_t to) {
  unsigned sz = dtypeSize(src.dtype());
  std::memcpy(dst.data() + to * sz, src.data() + from * sz, sz);
}

KernelResult one(Tensor t) { return std::vector<Tensor>{std::move(t)}; }

/// The result tensor holding `src`'s data under the recorded result shape.
KernelResult sameDataKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  if (x.size() != ctx.outType().numElements())
    return ctx.error("cannot view " + x.type().str() + " as " + ctx.outType().str());
  return one(x.reshaped(ctx.outType().shape));
}

KernelResult shapeKernel(const KernelContext &ctx) {
  const Shape &s = ctx.in(0)->shape();
  int64_t rank = static_cast<int64_t>(s.size());
  int64_t start = ctx.node.getInt("start", 0), end = ctx.node.getInt("end", rank);
  if (start < 0)
    start += rank;
  if (end < 0)
    end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  Tensor y = ctx.out();
  for (int64_t i = start; i < end; ++i)
    y.setInt(i - start, s[i]);
  return one(std::move(y));
}

KernelResult sizeKernel(const KernelContext &ctx) {
  Tensor y = ctx.out();
  y.setInt(0, ctx.in(0)->size());
  return one(std::move(y));
}

KernelResult constantKernel(const KernelContext &ctx) {
  const Node &n = ctx.node;
  if (const Tensor *t = n.getTensor("value"))
    return one(t->castTo(ctx.outType().dtype).reshaped(ctx.outType().shape));
  Tensor y = ctx.out();
  if (n.hasAttr("value_float"))
    y.setDouble(0, n.getFloat("value_float", 0));
  else if (n.hasAttr("value_int"))
    y.setInt(0, n.getInt("value_int", 0));
  else if (n.hasAttr("value_floats")) {
    auto v = n.getFloats("value_floats");
    for (size_t i = 0; i < v.size(); ++i)
      y.setDouble(i, v[i]);
  } else if (n.hasAttr("value_ints")) {
    auto v = n.getInts("value_ints");
    for (size_t i = 0; i < v.size(); ++i)
      y.setInt(i, v[i]);
  } else {
    return ctx.error("unsupported Constant attribute");
  }
  return one(std::move(y));
}

KernelResult constantOfShapeKernel(const KernelContext &ctx) {
  Tensor y = ctx.out();
  if (const Tensor *v = ctx.node.getTensor("value")) {
    for (int64_t i = 0; i < y.size(); ++i) {
      if (isFloat(y.dtype()))
        y.setDouble(i, v->getDouble(0));
      else
        y.setInt(i, v->getInt(0));
    }
  }
  return one(std::move(y));
}

KernelResult transposeKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  int64_t rank = x.type().rank();
  std::vector<int64_t> perm = ctx.node.getInts("perm");
  if (perm.empty())
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  Tensor y = ctx.out();
  auto xs = stridesOf(x.shape());
  std::vector<int64_t> idx;
  for (int64_t f = 0; f < y.size(); ++f) {
    unravel(f, y.shape(), idx);
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d)
      src += idx[d] * xs[perm[d]];
    copyElem(x, src, y, f);
  }
  return one(std::move(y));
}

KernelResult concatKernel(const KernelContext &ctx) {
  Tensor y = ctx.out();
  int64_t rank = y.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", 0), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= y.shape()[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= y.shape()[d];
  int64_t offset = 0;
  for (unsigned i = 0; i < ctx.numInputs(); ++i) {
    const Tensor &x = *ctx.in(i);
    int64_t len = x.shape()[axis];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t a = 0; a < len; ++a)
        for (int64_t in = 0; in < inner; ++in)
          copyElem(x, (o * len + a) * inner + in, y,
                   (o * y.shape()[axis] + offset + a) * inner + in);
    offset += len;
  }
  return one(std::move(y));
}

KernelResult splitKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  int64_t rank = x.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", 0), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape()[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= x.shape()[d];
  std::vector<Tensor> outs;
  int64_t offset = 0;
  for (unsigned i = 0; i < ctx.numOutputs(); ++i) {
    Tensor y = ctx.out(i);
    int64_t len = y.type().rank() ? y.shape()[axis] : 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t a = 0; a < len; ++a)
        for (int64_t in = 0; in < inner; ++in)
          copyElem(x, (o * x.shape()[axis] + offset + a) * inner + in, y,
                   (o * len + a) * inner + in);
    offset += len;
    outs.push_back(std::move(y));
  }
  return outs;
}

KernelResult sliceKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  int64_t rank = x.type().rank();
  std::vector<int64_t> starts = ctx.in(1)->toInt64s(), ends = ctx.in(2)->toInt64s();
  std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
  std::iota(axes.begin(), axes.end(), 0);
  if (ctx.in(3))
    axes = ctx.in(3)->toInt64s();
  if (ctx.in(4))
    steps = ctx.in(4)->toInt64s();
  std::vector<int64_t> begin(rank, 0), step(rank, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalizeAxis(axes[i], rank);
    if (a < 0)
      return ctx.error("axis out of range");
    int64_t dim = x.shape()[a], s = steps[i];
    if (s == 0)
      return ctx.error("step 0");
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    b = s > 0 ? std::clamp<int64_t>(b, 0, dim) : std::clamp<int64_t>(b, 0, dim - 1);
    begin[a] = b;
    step[a] = s;
  }
  Tensor y = ctx.out();
  auto xs = stridesOf(x.shape());
  std::vector<int64_t> idx;
  for (int64_t f = 0; f < y.size(); ++f) {
    unravel(f, y.shape(), idx);
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d)
      src += (begin[d] + idx[d] * step[d]) * xs[d];
    copyElem(x, src, y, f);
  }
  return one(std::move(y));
}

KernelResult gatherKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0), &ind = *ctx.in(1);
  int64_t rank = x.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", 0), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  int64_t outer = 1, inner = 1, dim = x.shape()[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape()[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= x.shape()[d];
  Tensor y = ctx.out();
  int64_t n = ind.size();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = ind.getInt(j);
      if (k < 0)
        k += dim;
      if (k < 0 || k >= dim)
        return ctx.error("index " + llvm::Twine(ind.getInt(j)) + " is out of range [0, " +
                         llvm::Twine(dim) + ")");
      for (int64_t in = 0; in < inner; ++in)
        copyElem(x, (o * dim + k) * inner + in, y, (o * n + j) * inner + in);
    }
  return one(std::move(y));
}

KernelResult gatherElementsKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0), &ind = *ctx.in(1);
  int64_t rank = x.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", 0), rank);
  Tensor y = ctx.out();
  auto xs = stridesOf(x.shape());
  std::vector<int64_t> idx;
  for (int64_t f = 0; f < y.size(); ++f) {
    unravel(f, y.shape(), idx);
    int64_t k = ind.getInt(f);
    if (k < 0)
      k += x.shape()[axis];
    if (k < 0 || k >= x.shape()[axis])
      return ctx.error("index out of range");
    idx[axis] = k;
    copyElem(x, ravel(idx, xs), y, f);
  }
  return one(std::move(y));
}

KernelResult scatterElementsKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0), &ind = *ctx.in(1), &upd = *ctx.in(2);
  int64_t rank = x.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", 0), rank);
  std::string reduction = ctx.node.getString("reduction", "none");
  Tensor y = x;
  auto ys = stridesOf(y.shape());
  std::vector<int64_t> idx;
  for (int64_t f = 0; f < ind.size(); ++f) {
    unravel(f, ind.shape(), idx);
    int64_t k = ind.getInt(f);
    if (k < 0)
      k += x.shape()[axis];
    if (k < 0 || k >= x.shape()[axis])
      return ctx.error("index out of range");
    idx[axis] = k;
    int64_t dst = ravel(idx, ys);
    double u = upd.getDouble(f), cur = y.getDouble(dst);
    if (reduction == "add")
      y.setDouble(dst, cur + u);
    else if (reduction == "mul")
      y.setDouble(dst, cur * u);
    else
      copyElem(upd, f, y, dst);
  }
  return one(std::move(y));
}

KernelResult expandKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  Tensor y = ctx.out();
  auto map = broadcastIndexMap(x.shape(), y.shape());
  for (int64_t f = 0; f < y.size(); ++f)
    copyElem(x, map[f], y, f);
  return one(std::move(y));
}

KernelResult tileKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  Tensor y = ctx.out();
  auto xs = stridesOf(x.shape());
  std::vector<int64_t> idx;
  for (int64_t f = 0; f < y.size(); ++f) {
    unravel(f, y.shape(), idx);
    for (size_t d = 0; d < idx.size(); ++d)
      idx[d] %= x.shape()[d];
    copyElem(x, ravel(idx, xs), y, f);
  }
  return one(std::move(y));
}

/// Resize, modes nearest and linear (cubic is not implemented): each output
/// coordinate is mapped to the input (ampc/Interpreter/ResizeCoordinates.h),
/// then to one element (nearest_mode) or to two per axis, weighted (linear,
/// separable over the axes), indices clamped to the input.
KernelResult resizeKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  std::string mode = ctx.node.getString("mode", "nearest");
  if (mode != "nearest" && mode != "linear")
    return ctx.error("mode '" + mode + "' is not implemented (nearest and linear are)");
  std::string ctm = ctx.node.getString("coordinate_transformation_mode", "half_pixel");
  std::string nearest = ctx.node.getString("nearest_mode", "round_prefer_floor");
  Tensor y = ctx.out();
  size_t rank = x.shape().size();
  const Tensor *scalesIn = ctx.numInputs() > 2 ? ctx.in(2) : nullptr;
  // Per axis and output index: the input elements read and their weights.
  std::vector<std::vector<std::vector<std::pair<int64_t, double>>>> taps(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t in = x.shape()[d], out = y.shape()[d];
    double scale = scalesIn && scalesIn->size() == static_cast<int64_t>(rank)
                       ? scalesIn->getDouble(d)
                       : double(out) / double(in);
    for (int64_t i = 0; i < out; ++i) {
      auto c = ampc::resize::sourceCoordinate(ctm, i, scale, in, out);
      if (!c)
        return ctx.error("coordinate_transformation_mode '" + ctm + "' is not implemented");
      if (mode == "nearest") {
        auto at = ampc::resize::nearestIndex(nearest, *c, in);
        if (!at)
          return ctx.error("nearest_mode '" + nearest + "' is not implemented");
        taps[d].push_back(std::vector<std::pair<int64_t, double>>{{*at, 1.0}});
      } else {
        auto [a, b] = ampc::resize::linearTaps(*c, in);
        taps[d].push_back(std::vector<std::pair<int64_t, double>>{a, b});
      }
    }
  }
  auto xs = stridesOf(x.shape());
  std::vector<int64_t> idx, corner(rank);
  for (int64_t f = 0; f < y.size(); ++f) {
    unravel(f, y.shape(), idx);
    if (mode == "nearest") {
      for (size_t d = 0; d < rank; ++d)
        corner[d] = taps[d][idx[d]][0].first;
      copyElem(x, ravel(corner, xs), y, f);
      continue;
    }
    double sum = 0;
    for (int64_t m = 0; m < (int64_t(1) << rank); ++m) {
      double w = 1;
      for (size_t d = 0; d < rank; ++d) {
        const auto &tap = taps[d][idx[d]][(m >> d) & 1];
        corner[d] = tap.first;
        w *= tap.second;
      }
      if (w != 0)
        sum += w * x.getDouble(ravel(corner, xs));
    }
    y.setDouble(f, sum);
  }
  return one(std::move(y));
}

KernelResult padKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  int64_t rank = x.type().rank();
  std::vector<int64_t> pads = ctx.in(1) ? ctx.in(1)->toInt64s() : ctx.node.getInts("pads");
  std::vector<int64_t> axes(rank);
  std::iota(axes.begin(), axes.end(), 0);
  if (ctx.in(3)) {
    axes = ctx.in(3)->toInt64s();
    for (auto &a : axes)
      a = normalizeAxis(a, rank);
  }
  std::vector<int64_t> before(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i)
    before[axes[i]] = pads[i];
  std::string mode = ctx.node.getString("mode", "constant");
  double value = ctx.in(2) ? ctx.in(2)->getDouble(0) : ctx.node.getFloat("value", 0.0);
  Tensor y = ctx.out();
  auto xs = stridesOf(x.shape());
  std::vector<int64_t> idx;
  for (int64_t f = 0; f < y.size(); ++f) {
    unravel(f, y.shape(), idx);
    bool inside = true;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t s = idx[d] - before[d], n = x.shape()[d];
      if (s >= 0 && s < n) {
        idx[d] = s;
        continue;
      }
      if (mode == "constant") {
        inside = false;
        break;
      }
      if (mode == "edge")
        s = std::clamp<int64_t>(s, 0, n - 1);
      else if (mode == "reflect") {
        int64_t period = 2 * (n - 1);
        if (period == 0)
          s = 0;
        else {
          s = ((s % period) + period) % period;
          if (s >= n)
            s = period - s;
        }
      } else if (mode == "wrap") {
        s = ((s % n) + n) % n;
      }
      idx[d] = s;
    }
    if (inside)
      copyElem(x, ravel(idx, xs), y, f);
    else
      y.setDouble(f, value);
  }
  return one(std::move(y));
}

KernelResult rangeKernel(const KernelContext &ctx) {
  Tensor y = ctx.out();
  bool isInt = !isFloat(y.dtype());
  for (int64_t i = 0; i < y.size(); ++i) {
    if (isInt)
      y.setInt(i, ctx.in(0)->getInt(0) + i * ctx.in(2)->getInt(0));
    else
      y.setDouble(i, ctx.in(0)->getDouble(0) + i * ctx.in(2)->getDouble(0));
  }
  return one(std::move(y));
}

/// Dropout: the mask is drawn from a generator seeded by the node's `seed`
/// attribute or the interpreter's seed; ratio 0 or inference mode copies.
KernelResult dropoutKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  double ratio = ctx.in(1) ? ctx.in(1)->getDouble(0) : 0.5;
  bool training = ctx.in(2) ? ctx.in(2)->getInt(0) != 0 : false;
  Tensor y = ctx.out(0);
  Tensor mask(TensorType(DType::Bool, x.shape()));
  uint64_t seed = ctx.node.hasAttr("seed") ? uint64_t(ctx.node.getInt("seed", 0)) : ctx.opts.seed;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  double scale = ratio < 1.0 ? 1.0 / (1.0 - ratio) : 0.0;
  for (int64_t i = 0; i < x.size(); ++i) {
    bool keep = !training || ratio == 0.0 || uni(gen) >= ratio;
    mask.setInt(i, keep);
    double v = !training || ratio == 0.0 ? x.getDouble(i) : (keep ? x.getDouble(i) * scale : 0.0);
    y.setDouble(i, v);
  }
  std::vector<Tensor> outs;
  outs.push_back(std::move(y));
  if (ctx.numOutputs() > 1)
    outs.push_back(std::move(mask));
  return outs;
}

KernelResult oneHotKernel(const KernelContext &ctx) {
  const Tensor &ind = *ctx.in(0), &vals = *ctx.in(2);
  int64_t depth = static_cast<int64_t>(ctx.in(1)->getDouble(0));
  Tensor y = ctx.out();
  int64_t rank = y.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", -1), rank);
  std::vector<int64_t> idx;
  auto is = stridesOf(ind.shape());
  for (int64_t f = 0; f < y.size(); ++f) {
    unravel(f, y.shape(), idx);
    int64_t pos = idx[axis];
    idx.erase(idx.begin() + axis);
    int64_t k = static_cast<int64_t>(ind.getDouble(ravel(idx, is)));
    if (k < 0)
      k += depth;
    y.setDouble(f, vals.getDouble(k == pos ? 1 : 0));
  }
  return one(std::move(y));
}

KernelResult triluKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  int64_t k = ctx.in(1) ? ctx.in(1)->getInt(0) : 0;
  bool upper = ctx.node.getInt("upper", 1) != 0;
  Tensor y = x;
  int64_t rank = x.type().rank();
  int64_t rows = x.shape()[rank - 2], cols = x.shape()[rank - 1];
  for (int64_t f = 0; f < x.size(); ++f) {
    int64_t c = f % cols, r = (f / cols) % rows;
    bool keep = upper ? c - r >= k : c - r <= k;
    if (!keep)
      y.setDouble(f, 0.0);
  }
  return one(std::move(y));
}

} // namespace

void registerTensorKernels(KernelTable &t) {
  for (const char *op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    t.add(op, sameDataKernel);
  t.add("Shape", shapeKernel);
  t.add("Size", sizeKernel);
  t.add("Constant", constantKernel);
  t.add("ConstantOfShape", constantOfShapeKernel);
  t.add("Transpose", transposeKernel);
  t.add("Concat", concatKernel);
  t.add("Split", splitKernel);
  t.add("Slice", sliceKernel);
  t.add("Gather", gatherKernel);
  t.add("GatherElements", gatherElementsKernel);
  t.add("ScatterElements", scatterElementsKernel);
  t.add("Expand", expandKernel);
  t.add("Tile", tileKernel);
  t.add("Pad", padKernel);
  t.add("Resize", resizeKernel);
  t.add("Range", rangeKernel);
  t.add("Dropout", dropoutKernel);
  t.add("OneHot", oneHotKernel);
  t.add("Trilu", triluKernel);
}

} // namespace ampc::interp
