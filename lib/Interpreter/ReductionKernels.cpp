//===- ReductionKernels.cpp - Reduce*, ArgMax/ArgMin, CumSum ---------------===//

#include "Kernels.h"

#include <limits>

namespace ampc::interp {

namespace {

KernelResult one(Tensor t) { return std::vector<Tensor>{std::move(t)}; }

/// Groups the input elements by their position with the reduced axes removed.
/// Calls fn(outIndex, inIndex) for every input element.
template <typename Fn>
void forEachReduced(const Shape &in, const std::vector<bool> &reduced, Fn &&fn) {
  Shape outShape;
  for (size_t d = 0; d < in.size(); ++d)
    outShape.push_back(reduced[d] ? 1 : in[d]);
  auto outStrides = stridesOf(outShape);
  std::vector<int64_t> idx;
  int64_t n = numElements(in);
  for (int64_t f = 0; f < n; ++f) {
    unravel(f, in, idx);
    int64_t o = 0;
    for (size_t d = 0; d < in.size(); ++d)
      if (!reduced[d])
        o += idx[d] * outStrides[d];
    fn(o, f);
  }
}

KernelResult reduceKernel(const KernelContext &ctx) {
  const std::string &op = ctx.node.opType();
  const Tensor &x = *ctx.in(0);
  int64_t rank = x.type().rank();
  bool given = false;
  // ReduceSum takes axes as an operand from opset 13; the others from 18.
  auto axes = readAxes(ctx, 1, rank, given);
  if (!axes)
    return axes.takeError();
  Tensor y = ctx.out();
  bool noop = ctx.node.getInt("noop_with_empty_axes", 0) != 0;
  if (axes->empty() && noop) {
    for (int64_t i = 0; i < x.size(); ++i)
      y.setDouble(i, x.getDouble(i));
    return one(std::move(y));
  }
  std::vector<bool> reduced(rank, axes->empty());
  for (int64_t a : *axes)
    reduced[a] = true;

  int64_t m = y.size();
  const double inf = std::numeric_limits<double>::infinity();
  double init = op == "ReduceMax" ? -inf : op == "ReduceMin" ? inf : op == "ReduceProd" ? 1.0 : 0.0;
  std::vector<double> acc(m, init);
  std::vector<int64_t> count(m, 0);
  // LogSumExp is computed stably around the per-group maximum.
  std::vector<double> groupMax(m, -inf);
  if (op == "ReduceLogSumExp")
    forEachReduced(x.shape(), reduced,
                   [&](int64_t o, int64_t f) { groupMax[o] = std::max(groupMax[o], x.getDouble(f)); });
  forEachReduced(x.shape(), reduced, [&](int64_t o, int64_t f) {
    double v = x.getDouble(f);
    ++count[o];
    if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceLogSum")
      acc[o] += v;
    else if (op == "ReduceSumSquare" || op == "ReduceL2")
      acc[o] += v * v;
    else if (op == "ReduceL1")
      acc[o] += std::fabs(v);
    else if (op == "ReduceProd")
      acc[o] *= v;
    else if (op == "ReduceMax")
      acc[o] = std::isnan(v) || std::isnan(acc[o]) ? NAN : std::max(acc[o], v);
    else if (op == "ReduceMin")
      acc[o] = std::isnan(v) || std::isnan(acc[o]) ? NAN : std::min(acc[o], v);
    else if (op == "ReduceLogSumExp")
      acc[o] += std::exp(v - groupMax[o]);
  });
  bool isInt = !isFloat(y.dtype());
  for (int64_t o = 0; o < m; ++o) {
    double r = acc[o];
    if (op == "ReduceMean")
      r = count[o] ? r / count[o] : NAN;
    else if (op == "ReduceL2")
      r = std::sqrt(r);
    else if (op == "ReduceLogSum")
      r = std::log(r);
    else if (op == "ReduceLogSumExp")
      r = count[o] ? groupMax[o] + std::log(r) : -inf;
    if (isInt)
      y.setInt(o, static_cast<int64_t>(r));
    else
      y.setDouble(o, r);
  }
  return one(std::move(y));
}

KernelResult argKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  int64_t rank = x.type().rank();
  int64_t axis = normalizeAxis(ctx.node.getInt("axis", 0), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  bool isMax = ctx.node.is("ArgMax");
  bool last = ctx.node.getInt("select_last_index", 0) != 0;
  std::vector<bool> reduced(rank, false);
  reduced[axis] = true;
  Tensor y = ctx.out();
  std::vector<double> best(y.size());
  std::vector<int64_t> bestIdx(y.size(), -1);
  auto xs = stridesOf(x.shape());
  forEachReduced(x.shape(), reduced, [&](int64_t o, int64_t f) {
    double v = x.getDouble(f);
    int64_t k = (f / xs[axis]) % x.shape()[axis];
    bool better = bestIdx[o] < 0 || (isMax ? v > best[o] : v < best[o]) ||
                  (last && v == best[o]);
    if (better) {
      best[o] = v;
      bestIdx[o] = k;
    }
  });
  for (int64_t o = 0; o < y.size(); ++o)
    y.setInt(o, bestIdx[o]);
  return one(std::move(y));
}

KernelResult cumSumKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  int64_t rank = x.type().rank();
  int64_t axis = normalizeAxis(ctx.in(1)->getInt(0), rank);
  if (axis < 0)
    return ctx.error("axis out of range");
  bool exclusive = ctx.node.getInt("exclusive", 0) != 0;
  bool reverse = ctx.node.getInt("reverse", 0) != 0;
  Tensor y = ctx.out();
  auto xs = stridesOf(x.shape());
  int64_t len = x.shape()[axis], stride = xs[axis];
  for (int64_t f = 0; f < x.size(); ++f) {
    int64_t k = (f / stride) % len;
    if (k != 0)
      continue; // start of a line along the axis
    double acc = 0;
    for (int64_t j = 0; j < len; ++j) {
      int64_t pos = reverse ? len - 1 - j : j;
      int64_t e = f + pos * stride;
      double v = x.getDouble(e);
      if (exclusive) {
        y.setDouble(e, acc);
        acc += v;
      } else {
        acc += v;
        y.setDouble(e, acc);
      }
    }
  }
  return one(std::move(y));
}

} // namespace

void registerReductionKernels(KernelTable &t) {
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                         "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
                         "ReduceLogSumExp"})
    t.add(op, reduceKernel);
  t.add("ArgMax", argKernel);
  t.add("ArgMin", argKernel);
  t.add("CumSum", cumSumKernel);
}

} // namespace ampc::interp
