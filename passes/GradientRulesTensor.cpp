//===- GradientRulesTensor.cpp - Gradients of shape, data movement, reductions -===//
//
// Data movement is undone by its inverse: Reshape back to the operand's shape,
// Transpose by the inverse permutation, Split for Concat and Concat for Split,
// a sum over broadcast axes for Expand. Slice and Gather scatter dY into
// zeros (ampc SliceGrad, and GatherGrad which adds for repeated indices, as
// embeddings repeat tokens). Reductions broadcast dY back.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Autodiff.h"

#include <numeric>

namespace ampc {

namespace {

using B = GradientBuilder;

/// Y has X's data in another shape.  dX = reshape(dY, X's shape).
void reshapeGrad(B &b) { b.setGrad(0, b.reshape(b.dY(), b.x(0)->shape())); }

/// Y = transpose(X, perm).  dX = transpose(dY, inverse(perm)).
void transposeGrad(B &b) {
  int64_t rank = b.x(0)->type().rank();
  std::vector<int64_t> perm = transposePerm(b.node()); // import checked its size
  std::vector<int64_t> inverse(rank);
  for (int64_t i = 0; i < rank; ++i)
    inverse[perm[i]] = i;
  b.setGrad(0, b.transpose(b.dY(), inverse));
}

int64_t axisOf(const Node &n, int64_t rank, int64_t dflt = 0) {
  int64_t a = n.getInt("axis", dflt);
  return a < 0 ? a + rank : a;
}

/// Y = concat(X0, X1, ..., axis).  dXi = the i-th piece of split(dY, axis).
void concatGrad(B &b) {
  const Node &n = b.node();
  int64_t axis = axisOf(n, b.y()->type().rank());
  std::vector<int64_t> sizes;
  std::vector<bool> wanted;
  for (unsigned i = 0; i < n.numInputs(); ++i) {
    sizes.push_back(n.input(i)->shape()[axis]);
    wanted.push_back(b.wantsGrad(i));
  }
  if (n.numInputs() == 1) {
    b.setGrad(0, b.dY());
    return;
  }
  // Every piece is a result of Split; the unwanted ones stay unnamed.
  auto pieces = b.ops("Split", {b.dY(), b.ints(sizes)}, {{"axis", Attribute::ofInt(axis)}},
                      std::vector<bool>(n.numInputs(), true));
  for (unsigned i = 0; i < n.numInputs(); ++i)
    if (wanted[i])
      b.setGrad(i, pieces[i]);
}

/// Y0, Y1, ... = split(X, axis).  dX = concat(dY0, dY1, ...), with zeros for
/// the pieces no gradient reaches.
void splitGrad(B &b) {
  const Node &n = b.node();
  int64_t axis = axisOf(n, b.x(0)->type().rank());
  std::vector<Value *> pieces;
  for (unsigned i = 0; i < n.numOutputs(); ++i) {
    pieces.push_back(b.dYOrZeros(i));
    if (!pieces.back())
      return; // dYOrZeros failed: the pass reports it
  }
  if (pieces.size() == 1) {
    b.setGrad(0, pieces[0]);
    return;
  }
  b.setGrad(0, b.op("Concat", pieces, {{"axis", Attribute::ofInt(axis)}}));
}

/// Y = X[starts:ends:steps] on `axes`.  dX = zeros with dY written back at the
/// sliced positions (SliceGrad reads the same starts, ends, axes and steps).
void sliceGrad(B &b) {
  std::vector<Value *> inputs{b.dY(), b.x(1), b.x(2), b.x(3), b.x(4)};
  while (!inputs.back())
    inputs.pop_back();
  b.setGrad(0, b.ampc("SliceGrad", inputs, {{"shape", Attribute::ofInts(b.x(0)->shape())}}));
}

/// Y = take(X, indices, axis).  dX = zeros with dY added at the gathered rows;
/// repeated indices accumulate.
void gatherGrad(B &b) {
  B::Attrs attrs = b.forwardAttrs({"axis"});
  attrs["shape"] = Attribute::ofInts(b.x(0)->shape());
  b.setGrad(0, b.ampc("GatherGrad", {b.dY(), b.x(1)}, std::move(attrs)));
}

/// Y = broadcast(X, shape).  dX = dY summed over the broadcast axes.
void expandGrad(B &b) { b.setGrad(0, b.sumToShape(b.dY(), b.x(0)->shape())); }

/// The reduced axes of a ReduceSum/ReduceMean, from the `axes` operand (a
/// constant) or attribute; all axes when none are given, unless
/// noop_with_empty_axes makes the node an identity (then nullopt).
std::optional<std::vector<int64_t>> reducedAxes(B &b, bool &ok) {
  const Node &n = b.node();
  int64_t rank = b.x(0)->type().rank();
  std::vector<int64_t> axes;
  ok = true;
  if (Value *in = n.input(1)) {
    const Tensor *data = B::constantData(in);
    if (!data) {
      ok = false;
      b.fail("the axes operand must be a constant");
      return std::nullopt;
    }
    axes = data->toInt64s();
  } else {
    axes = n.getInts("axes");
  }
  if (axes.empty()) {
    if (n.getInt("noop_with_empty_axes", 0) != 0)
      return std::nullopt;
    axes.resize(rank);
    std::iota(axes.begin(), axes.end(), 0);
  }
  for (int64_t &a : axes)
    a = a < 0 ? a + rank : a;
  return axes;
}

/// Y = sum (or mean) of X over `axes`.  dX = dY (divided by the count of
/// reduced elements) broadcast back over the reduced axes.
void reduceGrad(B &b, bool mean) {
  bool ok;
  auto axes = reducedAxes(b, ok);
  if (!ok)
    return;
  if (!axes) {
    b.setGrad(0, b.dY());
    return;
  }
  const Shape &xs = b.x(0)->shape();
  Shape kept = xs;
  int64_t count = 1;
  for (int64_t a : *axes) {
    count *= xs[a];
    kept[a] = 1;
  }
  Value *dy = b.reshape(b.dY(), kept); // restores the axes keepdims=0 dropped
  if (mean)
    dy = b.scale(dy, 1.0 / double(count));
  b.setGrad(0, b.expand(dy, xs));
}

/// The reductions whose gradient reads X and Y: dX = dY * local, with dY and
/// Y reshaped to keep the reduced axes (keepdims=0 drops them) so they
/// broadcast against X. `local(x, y, axes)` gives the local derivative.
template <typename Local> void reduceWithResultGrad(B &b, Local local) {
  bool ok;
  auto axes = reducedAxes(b, ok);
  if (!ok)
    return;
  if (!axes) {
    b.setGrad(0, b.dY());
    return;
  }
  Shape kept = b.x(0)->shape();
  for (int64_t a : *axes)
    kept[a] = 1;
  Value *dy = b.reshape(b.dY(), kept), *y = b.reshape(b.y(), kept);
  b.setGrad(0, local(b.x(0), y, dy, *axes));
}

/// Y = max (min) of X over axes.  dY goes to the elements equal to Y, split
/// evenly among ties (torch.amax / amin).
Value *maxMinLocal(B &b, Value *x, Value *y, Value *dy, const std::vector<int64_t> &axes) {
  Value *wins = b.op("Equal", {x, y});
  Value *count = b.reduceSum(b.cast(wins, x->dtype()), axes, /*keepDims=*/true);
  return b.op("Where", {wins, b.div(dy, count), b.scalarLike(0.0, dy)});
}

/// Y = tile(X, repeats).  dX = dY viewed as [r0, d0, r1, d1, ...] and summed
/// over the repeat axes.
void tileGrad(B &b) {
  const Tensor *repeats = B::constantData(b.x(1));
  if (!repeats) {
    b.fail("the repeats operand must be a constant");
    return;
  }
  const Shape &xs = b.x(0)->shape();
  std::vector<int64_t> r = repeats->toInt64s();
  Shape split;
  std::vector<int64_t> repeatAxes;
  for (size_t d = 0; d < xs.size(); ++d) {
    repeatAxes.push_back(static_cast<int64_t>(split.size()));
    split.push_back(r[d]);
    split.push_back(xs[d]);
  }
  b.setGrad(0, b.reduceSum(b.reshape(b.dY(), split), repeatAxes, /*keepDims=*/false));
}

/// Y = pad(X) with a constant.  dX = the slice of dY where X lies. Negative
/// pads (cropping) and the reflect / edge modes are refused.
void padGrad(B &b) {
  std::string mode = b.node().getString("mode", "constant");
  if (mode != "constant") {
    b.fail("the gradient of Pad is defined for mode 'constant', not '" + mode + "'");
    return;
  }
  const Tensor *padsData = B::constantData(b.x(1));
  if (!padsData) {
    b.fail("the pads operand must be a constant");
    return;
  }
  if (b.node().numInputs() > 3 && b.x(3)) {
    b.fail("Pad with an axes operand is not supported");
    return;
  }
  const Shape &xs = b.x(0)->shape();
  std::vector<int64_t> pads = padsData->toInt64s(), starts, ends, axes;
  int64_t rank = static_cast<int64_t>(xs.size());
  for (int64_t d = 0; d < rank; ++d) {
    if (pads[d] < 0 || pads[rank + d] < 0) {
      b.fail("the gradient of Pad with negative pads (cropping) is not supported");
      return;
    }
    starts.push_back(pads[d]);
    ends.push_back(pads[d] + xs[d]);
    axes.push_back(d);
  }
  b.setGrad(0, b.op("Slice", {b.dY(), b.ints(starts), b.ints(ends), b.ints(axes)}));
}

} // namespace

void registerTensorGradients(GradientRegistry &r) {
  r.add("ReduceMax", {0}, [](B &b) {
    reduceWithResultGrad(b, [&](Value *x, Value *y, Value *dy, const std::vector<int64_t> &a) {
      return maxMinLocal(b, x, y, dy, a);
    });
  });
  r.add("ReduceMin", {0}, [](B &b) {
    reduceWithResultGrad(b, [&](Value *x, Value *y, Value *dy, const std::vector<int64_t> &a) {
      return maxMinLocal(b, x, y, dy, a);
    });
  });
  /// Y = sum of X^2.  dX = 2 X dY.
  r.add("ReduceSumSquare", {0}, [](B &b) {
    reduceWithResultGrad(b, [&](Value *x, Value *, Value *dy, const std::vector<int64_t> &) {
      return b.mul(dy, b.scale(x, 2.0));
    });
  });
  /// Y = sum of |X|.  dX = sign(X) dY.
  r.add("ReduceL1", {0}, [](B &b) {
    reduceWithResultGrad(b, [&](Value *x, Value *, Value *dy, const std::vector<int64_t> &) {
      return b.mul(dy, b.op("Sign", {x}));
    });
  });
  /// Y = sqrt(sum of X^2).  dX = X / Y dY, and 0 where Y = 0 (torch.norm).
  r.add("ReduceL2", {0}, [](B &b) {
    reduceWithResultGrad(b, [&](Value *x, Value *y, Value *dy, const std::vector<int64_t> &) {
      Value *zero = b.scalarLike(0.0, y);
      Value *g = b.mul(dy, b.div(x, y));
      return b.op("Where", {b.op("Equal", {y, zero}), b.scalarLike(0.0, g), g});
    });
  });
  /// Y = log(sum of exp(X)).  dX = exp(X - Y) dY.
  r.add("ReduceLogSumExp", {0}, [](B &b) {
    reduceWithResultGrad(b, [&](Value *x, Value *y, Value *dy, const std::vector<int64_t> &) {
      return b.mul(dy, b.op("Exp", {b.sub(x, y)}));
    });
  });
  r.add("Tile", {0}, tileGrad);
  r.add("Pad", {0}, padGrad);

  // Shape operands (Reshape's shape, Squeeze's axes...) are integers: they
  // stop gradients by type.
  for (const char *op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    r.add(op, {0}, reshapeGrad);
  r.add("Transpose", {0}, transposeGrad);
  r.add("Concat", {GradientRule::kAllOperands}, concatGrad);
  r.add("Split", {0}, splitGrad);
  r.add("Slice", {0}, sliceGrad);
  r.add("Gather", {0}, gatherGrad);
  r.add("Expand", {0}, expandGrad);
  r.add("ReduceSum", {0}, [](B &b) { reduceGrad(b, /*mean=*/false); });
  r.add("ReduceMean", {0}, [](B &b) { reduceGrad(b, /*mean=*/true); });
}

} // namespace ampc
