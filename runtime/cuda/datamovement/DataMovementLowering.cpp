//===- datamovement/DataMovementLowering.cpp - Copies, Gather, Pad --------===//
//
// Lowers the data-movement steps: reshapes, Transpose, Expand, Concat, Split,
// Slice, Tile, Pad, Gather, GatherElements and their gradients, to strided
// copies and datamovement/DataMovementKernels.h.
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"

#include <limits>

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

/// Reshape-like steps that are not views: the bytes, unchanged.
bool StepLowering::lowerCopyLike(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.numel != y.numel || x.type != y.type) {
    error = "expects one operand and a result of the same type and size";
    return false;
  }
  memcpy(y.p, x.p, static_cast<size_t>(y.numel) * y.elemBytes());
  return true;
}


bool StepLowering::copyKernel(const std::vector<int64_t> &shape,
                              const std::vector<int64_t> &srcStrides,
                              const std::vector<int64_t> &dstStrides, const void *src, void *dst,
                              size_t elemBytes, std::string &error) {
  CopyArgs c;
  int64_t threads =
      addCopy(shape, srcStrides, dstStrides, src, dst, static_cast<int>(elemBytes), c);
  if (c.rank > kMaxRank) {
    error = "rank above " + std::to_string(kMaxRank);
    return false;
  }
  kernel(KernelKind::Copy, c, threads);
  return true;
}

bool StepLowering::lowerTranspose(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.numel != y.numel) {
    error = "Transpose takes one operand and a result of its type";
    return false;
  }
  int r = x.rank();
  std::vector<int64_t> perm = attrInts("perm");
  if (perm.empty())
    for (int d = r - 1; d >= 0; --d)
      perm.push_back(d);
  if (static_cast<int>(perm.size()) != r || y.rank() != r) {
    error = "perm does not match the rank";
    return false;
  }
  std::vector<int64_t> xs = stridesOf(x.shape), src(r);
  for (int d = 0; d < r; ++d) {
    int64_t a = normalizeAxis(perm[d], r);
    if (a < 0 || y.shape[d] != x.shape[a]) {
      error = "perm does not match the shapes";
      return false;
    }
    src[d] = xs[a];
  }
  return copyKernel(y.shape, src, stridesOf(y.shape), x.p, y.p, x.elemBytes(), error);
}

bool StepLowering::lowerExpand(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.rank() > y.rank()) {
    error = "Expand: the operand does not broadcast to the result";
    return false;
  }
  size_t lead = y.shape.size() - x.shape.size();
  std::vector<int64_t> xs = stridesOf(x.shape), src(y.shape.size(), 0);
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (x.shape[d] != 1 && x.shape[d] != y.shape[d + lead]) {
      error = "Expand: " + argString(x) + " does not broadcast to " + argString(y);
      return false;
    }
    src[d + lead] = x.shape[d] == 1 ? 0 : xs[d];
  }
  return copyKernel(y.shape, src, stridesOf(y.shape), x.p, y.p, x.elemBytes(), error);
}

bool StepLowering::lowerConcat(std::string &error) {
  Operand y = output(0);
  if (!y.present() || in_.empty()) {
    error = "Concat takes operands and a result";
    return false;
  }
  int64_t axis = normalizeAxis(attrInt("axis", 0), y.rank());
  if (axis < 0) {
    error = "axis out of range";
    return false;
  }
  std::vector<int64_t> ys = stridesOf(y.shape);
  int64_t at = 0;
  for (const Operand &x : in_) {
    if (!x.present() || x.type != y.type || x.rank() != y.rank()) {
      error = "Concat operands must share the result's type and rank";
      return false;
    }
    if (!copyKernel(x.shape, stridesOf(x.shape), ys, x.p, y.at(at * ys[axis]), x.elemBytes(),
                    error))
      return false;
    at += x.shape[axis];
  }
  if (at != y.shape[axis]) {
    error = "operand sizes do not add up to the result";
    return false;
  }
  return true;
}

bool StepLowering::lowerSplit(std::string &error) {
  Operand x = input(0);
  if (!x.present() || outs_.empty()) {
    error = "Split takes an operand and results";
    return false;
  }
  int64_t axis = normalizeAxis(attrInt("axis", 0), x.rank());
  if (axis < 0) {
    error = "axis out of range";
    return false;
  }
  std::vector<int64_t> xs = stridesOf(x.shape);
  int64_t at = 0;
  for (const Operand &y : outs_) {
    if (!y.present()) {
      error = "Split results must all be present";
      return false;
    }
    if (y.type != x.type || y.rank() != x.rank()) {
      error = "Split results must share the operand's type and rank";
      return false;
    }
    if (!copyKernel(y.shape, xs, stridesOf(y.shape), x.at(at * xs[axis]), y.p, x.elemBytes(),
                    error))
      return false;
    at += y.shape[axis];
  }
  if (at != x.shape[axis]) {
    error = "result sizes do not add up to the operand";
    return false;
  }
  return true;
}

/// Slice with constant starts, ends, axes and steps (ONNX clamping rules).
/// Where a Slice (or its gradient) reads in the sliced tensor of shape
/// `shape`: the first element's offset and each axis's stride there.
bool StepLowering::sliceGeometry(const std::vector<int64_t> &shape, int64_t &offset,
                                 std::vector<int64_t> &strides, std::string &error) const {
  std::vector<int64_t> starts, ends, axes, steps;
  if (!constantInts(1, starts, error) || !constantInts(2, ends, error))
    return false;
  if (has(3)) {
    if (!constantInts(3, axes, error))
      return false;
  } else {
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  }
  if (has(4)) {
    if (!constantInts(4, steps, error))
      return false;
  } else {
    steps.assign(starts.size(), 1);
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    error = "starts, ends, axes and steps differ in length";
    return false;
  }
  int r = static_cast<int>(shape.size());
  std::vector<int64_t> xs = stridesOf(shape), begin(r, 0), step(r, 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = normalizeAxis(axes[i], r);
    if (a < 0 || steps[i] == 0) {
      error = "bad axis or zero step";
      return false;
    }
    int64_t dim = shape[a], s = starts[i];
    if (s < 0)
      s += dim;
    s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    begin[a] = s;
    step[a] = steps[i];
  }
  offset = 0;
  strides.assign(r, 0);
  for (int d = 0; d < r; ++d) {
    offset += begin[d] * xs[d];
    strides[d] = xs[d] * step[d];
  }
  return true;
}

bool StepLowering::lowerSlice(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.rank() != y.rank()) {
    error = "Slice takes an operand and a result of its type and rank";
    return false;
  }
  int64_t offset;
  std::vector<int64_t> src;
  if (!sliceGeometry(x.shape, offset, src, error))
    return false;
  return copyKernel(y.shape, src, stridesOf(y.shape), x.at(offset), y.p, x.elemBytes(), error);
}

/// Tile: one strided copy over Y viewed as [r0, d0, r1, d1, ...], reading X
/// with stride 0 along the repeat axes.
bool StepLowering::lowerTile(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.rank() != y.rank()) {
    error = "Tile takes an operand and a result of its type and rank";
    return false;
  }
  std::vector<int64_t> repeats;
  if (!constantInts(1, repeats, error))
    return false;
  if (static_cast<int>(repeats.size()) != x.rank()) {
    error = "repeats must hold one entry per axis";
    return false;
  }
  std::vector<int64_t> xs = stridesOf(x.shape), ys = stridesOf(y.shape), shape, src, dst;
  for (int d = 0; d < x.rank(); ++d) {
    if (repeats[d] < 0 || x.shape[d] * repeats[d] != y.shape[d]) {
      error = "the result's shape is not the operand's times repeats";
      return false;
    }
    shape.insert(shape.end(), {repeats[d], x.shape[d]});
    src.insert(src.end(), {0, xs[d]});
    dst.insert(dst.end(), {x.shape[d] * ys[d], ys[d]});
  }
  if (y.numel == 0)
    return true;
  return copyKernel(shape, src, dst, x.p, y.p, x.elemBytes(), error);
}

/// dX of a Slice: zeros, and dY copied to the elements the slice read (a
/// slice never reads an element twice).
bool StepLowering::lowerSliceGrad(std::string &error) {
  Operand dy = input(0), dx = output(0);
  if (!dy.present() || !dx.present() || dy.type != dx.type || dy.rank() != dx.rank()) {
    error = "SliceGrad takes dY and a result of its type and rank";
    return false;
  }
  int64_t offset;
  std::vector<int64_t> dst;
  if (!sliceGeometry(dx.shape, offset, dst, error))
    return false;
  memset0(dx.p, static_cast<size_t>(dx.numel) * dx.elemBytes());
  if (dy.numel == 0)
    return true;
  return copyKernel(dy.shape, stridesOf(dy.shape), dst, dy.p, dx.at(offset), dx.elemBytes(),
                    error);
}

/// Pad, mode constant, pads >= 0: the constant everywhere, then X copied
/// into the interior.
bool StepLowering::lowerPad(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.rank() != y.rank()) {
    error = "Pad takes an operand and a result of its type and rank";
    return false;
  }
  math::PadMode mode;
  if (!math::padModeByName(attrString("mode", "constant"), mode)) {
    error = "unknown mode '" + attrString("mode", "constant") + "'";
    return false;
  }
  int r = x.rank();
  if (r > kMaxRank) {
    error = "rank above " + std::to_string(kMaxRank);
    return false;
  }
  std::vector<int64_t> pads;
  if (!constantInts(1, pads, error))
    return false;
  std::vector<int64_t> axes(r);
  for (int d = 0; d < r; ++d)
    axes[d] = d;
  if (has(3) && !constantInts(3, axes, error))
    return false;
  if (pads.size() != 2 * axes.size()) {
    error = "pads do not match the axes";
    return false;
  }
  std::vector<int64_t> before(r, 0), after(r, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t d = normalizeAxis(axes[i], r);
    if (d < 0) {
      error = "axis out of range";
      return false;
    }
    before[d] = pads[i];
    after[d] = pads[axes.size() + i];
  }
  bool cropsOrCopies = mode != math::PadMode::Constant;
  for (int d = 0; d < r; ++d) {
    if (x.shape[d] + before[d] + after[d] != y.shape[d]) {
      error = "result " + argString(y) + " does not match the pads";
      return false;
    }
    cropsOrCopies = cropsOrCopies || before[d] < 0 || after[d] < 0;
  }
  Operand value = has(2) ? input(2) : Operand();
  if (value.present() && (value.type != y.type || value.numel != 1)) {
    error = "the pad value must be a scalar of the result's type";
    return false;
  }
  std::vector<int64_t> ys = stridesOf(y.shape);
  if (!cropsOrCopies) {
    // Constant padding: fill, then one strided copy of X into the middle.
    if (value.present()) {
      if (!copyKernel(y.shape, std::vector<int64_t>(r, 0), ys, value.p, y.p, y.elemBytes(), error))
        return false;
    } else {
      memset0(y.p, static_cast<size_t>(y.numel) * y.elemBytes());
    }
    if (x.numel == 0)
      return true;
    int64_t offset = 0;
    for (int d = 0; d < r; ++d)
      offset += before[d] * ys[d];
    return copyKernel(x.shape, stridesOf(x.shape), ys, x.p, y.at(offset), y.elemBytes(), error);
  }
  // Edge, reflect, wrap, or cropping: every result element finds its source.
  PadArgs p;
  p.x = x.p;
  p.value = value.present() ? value.p : nullptr;
  p.y = y.p;
  p.elemBytes = static_cast<int>(y.elemBytes());
  p.rank = r;
  p.mode = mode;
  std::vector<int64_t> xs = stridesOf(x.shape);
  for (int d = 0; d < r; ++d) {
    p.yShape[d] = y.shape[d];
    p.xShape[d] = x.shape[d];
    p.xStrides[d] = xs[d];
    p.before[d] = before[d];
  }
  if (y.numel > 0)
    kernel(KernelKind::Pad, p, y.numel);
  return true;
}

/// Gather, GatherElements and GatherGrad take int64 or int32 indices.
bool StepLowering::requireIndices(const Operand &ind, std::string &error) const {
  if (ind.type == FusedElem::I64 || ind.type == FusedElem::I32)
    return true;
  error = "indices must be int64 or int32";
  return false;
}

bool StepLowering::lowerGather(std::string &error) {
  Operand x = input(0), ind = input(1), y = output(0);
  if (!x.present() || !ind.present() || !y.present() || x.type != y.type) {
    error = "Gather takes data and indices and a result of the data's type";
    return false;
  }
  if (!requireIndices(ind, error))
    return false;
  int64_t axis = normalizeAxis(attrInt("axis", 0), x.rank());
  if (axis < 0) {
    error = "axis out of range";
    return false;
  }
  GatherArgs g;
  g.x = x.p;
  g.indices = ind.p;
  g.y = y.p;
  g.indexType = ind.type;
  g.elemBytes = static_cast<int>(x.elemBytes());
  g.n = ind.numel;
  g.dim = x.shape[axis];
  g.inner = product(x.shape, axis + 1);
  if (y.numel != product(x.shape, 0, axis) * g.n * g.inner) {
    error = "result does not match the indices";
    return false;
  }
  kernel(KernelKind::Gather, g, y.numel);
  return true;
}

bool StepLowering::lowerGatherElements(std::string &error) {
  Operand x = input(0), ind = input(1), y = output(0);
  if (!x.present() || !ind.present() || !y.present() || x.type != y.type ||
      ind.shape != y.shape || ind.rank() != x.rank()) {
    error = "GatherElements takes data and indices of its rank, and a result shaped like the "
            "indices";
    return false;
  }
  if (!requireIndices(ind, error))
    return false;
  int64_t axis = normalizeAxis(attrInt("axis", 0), x.rank());
  if (axis < 0 || x.rank() > kMaxRank) {
    error = "axis out of range or rank above " + std::to_string(kMaxRank);
    return false;
  }
  for (int d = 0; d < x.rank(); ++d)
    if (d != axis && ind.shape[d] > x.shape[d]) {
      error = "the indices reach beyond the data off the gathered axis";
      return false;
    }
  GatherElementsArgs g;
  g.x = x.p;
  g.indices = ind.p;
  g.y = y.p;
  g.indexType = ind.type;
  g.elemBytes = static_cast<int>(x.elemBytes());
  g.rank = x.rank();
  g.axis = static_cast<int>(axis);
  g.dim = x.shape[axis];
  std::vector<int64_t> strides = stridesOf(x.shape);
  for (int d = 0; d < g.rank; ++d) {
    g.yShape[d] = y.shape[d];
    g.xStrides[d] = strides[d];
  }
  kernel(KernelKind::GatherElements, g, y.numel);
  return true;
}

bool StepLowering::lowerGatherGrad(std::string &error) {
  Operand dy = input(0), ind = input(1), dx = output(0);
  if (!dy.present() || !ind.present() || !dx.present()) {
    error = "GatherGrad takes dY and indices";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  if (!requireIndices(ind, error))
    return false;
  int64_t axis = normalizeAxis(attrInt("axis", 0), dx.rank());
  if (axis < 0) {
    error = "axis out of range";
    return false;
  }
  GatherGradArgs g;
  g.dy = dy.p;
  g.indices = ind.p;
  g.dx = dx.p;
  g.indexType = ind.type;
  g.dyType = dy.type;
  g.dxType = dx.type;
  g.n = ind.numel;
  g.dim = dx.shape[axis];
  g.inner = product(dx.shape, axis + 1);
  int64_t outer = product(dx.shape, 0, axis);
  if (dy.numel != outer * g.n * g.inner) {
    error = "dY does not match the indices and shape";
    return false;
  }
  if (outer * g.inner == 0 || g.dim == 0) {
    memset0(dx.p, static_cast<size_t>(dx.numel) * dx.elemBytes());
    return true;
  }
  if (g.n > std::numeric_limits<int32_t>::max()) {
    error = "more than 2^31 indices";
    return false;
  }
  // Segments: enough that walking one is short (64 indices), few enough that
  // the table of rows x segments stays within 4M counts.
  constexpr int64_t kSegmentIndices = 64, kTableCounts = int64_t(1) << 22;
  g.segments = std::max<int64_t>(
      1, std::min((g.n + kSegmentIndices - 1) / kSegmentIndices, kTableCounts / g.dim));
  g.segmentLength = std::max<int64_t>(1, (g.n + g.segments - 1) / g.segments);
  g.segments = std::max<int64_t>(1, (g.n + g.segmentLength - 1) / g.segmentLength);
  int64_t blocks = (g.dim + GatherGradArgs::kScanBlock - 1) / GatherGradArgs::kScanBlock;
  g.table = ws_.alloc<int32_t>(g.dim * g.segments);
  g.rowCount = ws_.alloc<int32_t>(g.dim);
  g.rowStart = ws_.alloc<int32_t>(g.dim);
  g.blockSum = ws_.alloc<int32_t>(blocks);
  g.positions = ws_.alloc<int32_t>(std::max<int64_t>(g.n, 1));
  memset0(g.table, static_cast<size_t>(g.dim * g.segments) * sizeof(int32_t));
  auto phase = [&](GatherGradArgs::Phase ph, int64_t threads) {
    g.phase = ph;
    kernel(KernelKind::GatherGrad, g, threads);
  };
  phase(GatherGradArgs::Count, g.segments);
  phase(GatherGradArgs::RowTotals, g.dim);
  phase(GatherGradArgs::BlockSums, blocks);
  phase(GatherGradArgs::BlockScan, 1);
  phase(GatherGradArgs::RowStarts, g.dim);
  phase(GatherGradArgs::Scatter, g.segments);
  phase(GatherGradArgs::Sum, dx.numel);
  return true;
}

} // namespace ampc::rt::cuda
