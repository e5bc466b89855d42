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
  std::vector<int64_t> perm = b.node().getInts("perm");
  if (perm.empty())
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
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
  for (unsigned i = 0; i < n.numOutputs(); ++i)
    pieces.push_back(b.dYOrZeros(i));
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

} // namespace

void registerTensorGradients(GradientRegistry &r) {
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
