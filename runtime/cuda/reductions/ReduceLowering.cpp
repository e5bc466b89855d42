//===- reductions/ReduceLowering.cpp - Reduce* and global pooling ---------===//
//
// Lowers the Reduce* ops and GlobalMax/AveragePool to reductions/ReduceKernels.h.
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

void StepLowering::reduce(const Operand &src, const std::vector<bool> &reduced, ReduceOp op,
                          void *dst, uint8_t dstType) {
  ReduceArgs r;
  if (op == ReduceOp::LogSumExp) {
    // Shifted by each result's maximum, as the CPU kernel does, so that the
    // exponentials cannot overflow.
    int64_t outputs = 1;
    for (size_t d = 0; d < src.shape.size(); ++d)
      if (!reduced[d])
        outputs *= src.shape[d];
    float *maxima = ws_.alloc<float>(std::max<int64_t>(outputs, 1));
    reduce(src, reduced, ReduceOp::Max, maxima, FusedElem::F32);
    r.shift = maxima;
  }
  r.src = src.p;
  r.srcType = src.type;
  r.dst = dst;
  r.dstType = dstType;
  r.op = op;
  std::vector<int64_t> st = stridesOf(src.shape);
  int64_t outputs = 1;
  bool trailing = true; // no kept axis after a reduced one
  int lastKind = -1;     // the previous axis of size above 1: 1 reduced, 0 kept
  for (size_t d = 0; d < src.shape.size(); ++d) {
    if (src.shape[d] == 1)
      continue;
    trailing = trailing && (reduced[d] || r.redRank == 0);
    // Axes next to one of their kind merge (row-major order, so the element
    // order and the sums' bits stay the same): the bias gradient's
    // [batch, seq, features] -> [features] reads one axis of batch x seq
    // rows, one multiply an element instead of a division per axis.
    const int kind = reduced[d] ? 1 : 0;
    int &rank = kind ? r.redRank : r.keptRank;
    int64_t *shape = kind ? r.redShape : r.keptShape;
    int64_t *strides = kind ? r.redStrides : r.keptStrides;
    if (lastKind == kind) {
      shape[rank - 1] *= src.shape[d];
      strides[rank - 1] = st[d];
    } else {
      shape[rank] = src.shape[d];
      strides[rank++] = st[d];
    }
    lastKind = kind;
    (kind ? r.count : outputs) *= src.shape[d];
  }
  // Contiguous rows: a warp or a block per result; a few very long rows
  // keep the chunked form below, which spreads each over many blocks.
  constexpr int64_t kLongRow = 16 * 4096;
  r.outputs = std::max<int64_t>(outputs, 1);
  if (trailing && rowLanes(r.count) && (r.count <= kLongRow || outputs >= 256)) {
    r.lanes = rowLanes(r.count);
    kernel(KernelKind::Reduce, r, outputs);
    return;
  }
  // Otherwise a thread per (chunk, result), then a combine of the partials.
  r.chunk = columnChunk(r.outputs, r.count);
  r.chunks = (r.count + r.chunk - 1) / r.chunk;
  if (r.chunks > 1)
    r.partial = ws_.alloc<float>(r.outputs * r.chunks);
  kernel(KernelKind::Reduce, r, outputs * r.chunks);
  if (r.chunks > 1) {
    r.phase = 1;
    kernel(KernelKind::Reduce, r, outputs);
  }
}

bool StepLowering::lowerReduce(ReduceOp op, std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || !isFloat(x.type) || !isFloat(y.type)) {
    error = "the CUDA reductions take float, float16 or bfloat16 operands";
    return false;
  }
  std::vector<int64_t> axes;
  bool fromInput = has(1);
  if (fromInput) {
    if (!constantInts(1, axes, error))
      return false;
  } else {
    axes = attrInts("axes");
  }
  int r = x.rank();
  if (r > kMaxRank) {
    error = "rank above " + std::to_string(kMaxRank);
    return false;
  }
  std::vector<bool> reduced(r, false);
  if (axes.empty()) {
    if (attrInt("noop_with_empty_axes", 0) != 0) {
      // The identity (with the op's elementwise part: squares, abs, ...).
      if (op == ReduceOp::Sum || op == ReduceOp::Mean || op == ReduceOp::Max ||
          op == ReduceOp::Min || op == ReduceOp::Prod) {
        FusedArgs f = convertArgs(x.p, x.type, y);
        kernel(KernelKind::Fused, f, y.numel);
        return true;
      }
      reduce(x, reduced, op, y.p, y.type); // count 1: v^2, |v|, sqrt(v^2)
      return true;
    }
    reduced.assign(r, true);
  }
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(a, r);
    if (n < 0) {
      error = "axis " + std::to_string(a) + " out of range for " + argString(x);
      return false;
    }
    reduced[n] = true;
  }
  int64_t outputs = 1;
  for (int d = 0; d < r; ++d)
    if (!reduced[d])
      outputs *= x.shape[d];
  if (outputs != y.numel) {
    error = "result " + argString(y) + " does not match the reduction of " + argString(x);
    return false;
  }
  reduce(x, reduced, op, y.p, y.type);
  return true;
}

bool StepLowering::lowerGlobalPool(bool isMax, std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.rank() < 2 || !isFloat(x.type) || x.type != y.type ||
      y.numel != x.shape[0] * x.shape[1]) {
    error = "global pooling takes X [N, C, ...] and Y [N, C, 1...] of its type";
    return false;
  }
  std::vector<bool> reduced(x.rank(), true);
  reduced[0] = reduced[1] = false;
  reduce(x, reduced, isMax ? ReduceOp::Max : ReduceOp::Mean, y.p, y.type);
  return true;
}

} // namespace ampc::rt::cuda
