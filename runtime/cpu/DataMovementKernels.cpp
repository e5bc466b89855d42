//===- DataMovementKernels.cpp - Copies, gathers, padding, dropout ---------===//
//
// Transpose, Concat, Split, Slice, Gather, GatherElements, Expand, Tile, Pad
// and Dropout, plus ampc.GatherGrad, ampc.SliceGrad and ampc.DropoutGrad.
// Data movement copies element bytes, so it is exact for every element type.
// Index tables and strides are computed when the kernel is created; shape
// operands (Slice starts/ends/axes/steps, Pad pads) must be constants, which
// they are after canonicalization (static shapes). Out-of-range gather
// indices cannot fail at run time: they read zeros (GatherGrad drops them).
//
// Dropout's generator (math::dropoutKeeps in ElementMath.h, shared with the
// CUDA backend): the keep decision of element i in run r is
// hash(seed, r, i) >= ratio. It depends only on (seed, run counter,
// element), so it differs from step to step, does not depend on the thread
// count, and a run can be replayed. The seed is the node's `seed` attribute
// (the lowering derives one for a node without it; 0 in a plan that has
// none); the run counter is an int64 state of the plan.
//
//===----------------------------------------------------------------------===//

#include "KernelHelpers.h"

#include <atomic>
#include <cstring>

namespace ampc::rt::cpu {

namespace {

constexpr size_t kMaxRank = 16;

//===----------------------------------------------------------------------===//
// Strided copies: y (dense, shape `dims`) gathers x at base + sum(idx * strides)
//===----------------------------------------------------------------------===//

struct StridedCopy {
  std::vector<int64_t> dims, strides; // in elements, per output dim
  int64_t base = 0;
  size_t es = 4;

  /// Merges dims that walk memory contiguously; drops size-1 dims.
  void simplify() {
    std::vector<int64_t> d, s;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] == 1)
        continue;
      if (!d.empty() && s.back() == strides[i] * dims[i]) {
        d.back() *= dims[i];
        s.back() = strides[i];
        continue;
      }
      d.push_back(dims[i]);
      s.push_back(strides[i]);
    }
    if (d.empty()) {
      d.push_back(1);
      s.push_back(1);
    }
    dims = d;
    strides = s;
  }

  template <typename E> static void gather(E *dst, const E *src, int64_t n, int64_t stride) {
    if (stride == 0) {
      E v = src[0];
      for (int64_t i = 0; i < n; ++i)
        dst[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i)
        dst[i] = src[i * stride];
    }
  }
  template <typename E> static void scatter(E *dst, const E *src, int64_t n, int64_t stride) {
    for (int64_t i = 0; i < n; ++i)
      dst[i * stride] = src[i];
  }

  /// y[f] = x[...] (or, with reverse, x-shaped dst[...] = dense src[f]).
  void run(ThreadPool &pool, const void *x, void *y, bool reverse = false) const {
    int64_t inner = dims.back(), innerStride = strides.back();
    int64_t rows = product(dims) / std::max<int64_t>(inner, 1);
    size_t r = dims.size() - 1;
    pool.parallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                     [&](int64_t r0, int64_t r1, int) {
      int64_t idx[kMaxRank] = {0};
      int64_t rem = r0, off = base;
      for (size_t d = r; d-- > 0;) {
        idx[d] = rem % dims[d];
        rem /= dims[d];
        off += idx[d] * strides[d];
      }
      for (int64_t row = r0; row < r1; ++row) {
        const uint8_t *src = static_cast<const uint8_t *>(x);
        uint8_t *dst = static_cast<uint8_t *>(y);
        if (!reverse) {
          uint8_t *out = dst + row * inner * es;
          const uint8_t *in = src + off * static_cast<int64_t>(es);
          if (innerStride == 1)
            std::memcpy(out, in, inner * es);
          else
            dispatch(out, in, inner, innerStride, false);
        } else {
          const uint8_t *in = src + row * inner * es;
          uint8_t *out = dst + off * static_cast<int64_t>(es);
          if (innerStride == 1)
            std::memcpy(out, in, inner * es);
          else
            dispatch(out, in, inner, innerStride, true);
        }
        for (size_t d = r; d-- > 0;) {
          off += strides[d];
          if (++idx[d] < dims[d])
            break;
          off -= strides[d] * dims[d];
          idx[d] = 0;
        }
      }
    });
  }

  void dispatch(uint8_t *out, const uint8_t *in, int64_t n, int64_t stride, bool rev) const {
    switch (es) {
    case 1:
      return rev ? scatter(out, in, n, stride) : gather(out, in, n, stride);
    case 2:
      return rev ? scatter(reinterpret_cast<uint16_t *>(out), reinterpret_cast<const uint16_t *>(in), n, stride)
                 : gather(reinterpret_cast<uint16_t *>(out), reinterpret_cast<const uint16_t *>(in), n, stride);
    case 4:
      return rev ? scatter(reinterpret_cast<uint32_t *>(out), reinterpret_cast<const uint32_t *>(in), n, stride)
                 : gather(reinterpret_cast<uint32_t *>(out), reinterpret_cast<const uint32_t *>(in), n, stride);
    default:
      return rev ? scatter(reinterpret_cast<uint64_t *>(out), reinterpret_cast<const uint64_t *>(in), n, stride)
                 : gather(reinterpret_cast<uint64_t *>(out), reinterpret_cast<const uint64_t *>(in), n, stride);
    }
  }
};

bool sameType(const StepContext &ctx, const TensorArg &a, const TensorArg &b, std::string &error) {
  if (a.type != b.type) {
    error = "element types differ: " + argString(a) + " and " + argString(b);
    return false;
  }
  return true;
}

bool oneInOneOut(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "missing operand or result";
    return false;
  }
  if (ctx.inputs[0].shape.size() > kMaxRank || ctx.outputs[0].shape.size() > kMaxRank) {
    error = "rank above " + std::to_string(kMaxRank);
    return false;
  }
  return sameType(ctx, ctx.inputs[0], ctx.outputs[0], error);
}

std::unique_ptr<Kernel> stridedKernel(ThreadPool &pool, StridedCopy sc, TensorArg x, TensorArg y,
                                      bool zeroFirst = false, bool reverse = false) {
  sc.simplify(); // at most the rank, which oneInOneOut bounds
  return std::make_unique<LambdaKernel>([sc, x, y, &pool, zeroFirst, reverse] {
    if (zeroFirst)
      std::memset(y.data, 0, y.numel * elemBytes(y.type));
    sc.run(pool, x.data, y.data, reverse);
  });
}

//===----------------------------------------------------------------------===//
// Transpose, Expand, Slice, Tile
//===----------------------------------------------------------------------===//

std::unique_ptr<Kernel> createTranspose(const StepContext &ctx, std::string &error) {
  if (!oneInOneOut(ctx, error))
    return nullptr;
  const TensorArg &x = ctx.inputs[0], &y = ctx.outputs[0];
  int64_t rank = x.rank();
  std::vector<int64_t> perm = ctx.attrInts("perm");
  if (perm.empty())
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  // A corrupt plan can give the result another rank: y.shape[d] below would
  // read past it (found by fuzzing).
  if (static_cast<int64_t>(perm.size()) != rank || y.rank() != rank) {
    error = "perm does not match the rank";
    return nullptr;
  }
  // Input 0 read in place of a Split's result from the Split's operand
  // (SplitSource.h), or as stored.
  bool gathered = !ctx.gatheredStrides.empty();
  if (gathered && (ctx.gatheredStrides.size() != static_cast<size_t>(rank) || !ctx.gathered.data ||
                   ctx.gathered.type != x.type)) {
    // The Split step is skipped: reading the input as stored would be wrong.
    error = "the Split operand to gather from does not match the input";
    return nullptr;
  }
  std::vector<int64_t> xs = gathered ? ctx.gatheredStrides : stridesOf(x.shape);
  StridedCopy sc;
  sc.es = elemBytes(x.type);
  sc.base = gathered ? ctx.gatheredOffset : 0;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t p = normalizeAxis(perm[d], rank);
    if (p < 0 || y.shape[d] != x.shape[p]) {
      error = "perm does not match the shapes";
      return nullptr;
    }
    sc.dims.push_back(y.shape[d]);
    sc.strides.push_back(xs[p]);
  }
  return stridedKernel(ctx.pool, sc, gathered ? ctx.gathered : x, y);
}

/// Strides (0 where broadcast) of `in` read as `out`'s shape.
bool broadcastStrides(const std::vector<int64_t> &in, const std::vector<int64_t> &out,
                      std::vector<int64_t> &strides) {
  if (in.size() > out.size())
    return false;
  strides.assign(out.size(), 0);
  size_t lead = out.size() - in.size();
  std::vector<int64_t> s = stridesOf(in);
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] != 1 && in[d] != out[lead + d])
      return false;
    strides[lead + d] = in[d] == 1 ? 0 : s[d];
  }
  return true;
}

std::unique_ptr<Kernel> createExpand(const StepContext &ctx, std::string &error) {
  if (!oneInOneOut(ctx, error))
    return nullptr;
  const TensorArg &x = ctx.inputs[0], &y = ctx.outputs[0];
  StridedCopy sc;
  sc.es = elemBytes(x.type);
  sc.dims = y.shape;
  if (!broadcastStrides(x.shape, y.shape, sc.strides)) {
    error = argString(x) + " does not broadcast to " + argString(y);
    return nullptr;
  }
  return stridedKernel(ctx.pool, sc, x, y);
}

/// Start and step of every axis of a Slice (or SliceGrad) over `shape`.
bool sliceParams(const StepContext &ctx, unsigned first, const std::vector<int64_t> &shape,
                 std::vector<int64_t> &begin, std::vector<int64_t> &step, std::string &error) {
  for (unsigned i = first; i < first + 4; ++i)
    if (ctx.has(i) && !isConstantInput(ctx, i)) {
      error = "Slice parameters must be constants";
      return false;
    }
  if (!ctx.has(first) || !ctx.has(first + 1)) {
    error = "Slice takes starts and ends";
    return false;
  }
  std::vector<int64_t> starts = readInts(ctx.inputs[first]);
  std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
  for (size_t i = 0; i < axes.size(); ++i)
    axes[i] = static_cast<int64_t>(i);
  if (ctx.has(first + 2))
    axes = readInts(ctx.inputs[first + 2]);
  if (ctx.has(first + 3))
    steps = readInts(ctx.inputs[first + 3]);
  int64_t rank = static_cast<int64_t>(shape.size());
  begin.assign(rank, 0);
  step.assign(rank, 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) {
    error = "starts, axes and steps differ in length";
    return false;
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalizeAxis(axes[i], rank);
    if (a < 0 || steps[i] == 0) {
      error = "bad Slice axis or step";
      return false;
    }
    int64_t dim = shape[a], s = steps[i];
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    b = s > 0 ? std::clamp<int64_t>(b, 0, dim) : std::clamp<int64_t>(b, 0, dim - 1);
    begin[a] = b;
    step[a] = s;
  }
  return true;
}

/// A slice of `sliced` shape read from (or scattered into) `full` with these
/// starts and steps stays inside `full`: a corrupt plan's shapes made the
/// strided copy read past its operand (found by ampc-fuzz-plan).
bool sliceFits(const std::vector<int64_t> &full, const std::vector<int64_t> &sliced,
               const std::vector<int64_t> &begin, const std::vector<int64_t> &step,
               std::string &error) {
  if (sliced.size() != full.size()) {
    error = "the slice's rank differs from its operand's";
    return false;
  }
  for (size_t d = 0; d < full.size(); ++d) {
    if (sliced[d] == 0)
      continue;
    // A corrupt plan's step or shape may overflow the last index itself.
    int64_t span = 0, last = 0;
    bool overflows = __builtin_mul_overflow(sliced[d] - 1, step[d], &span) ||
                     __builtin_add_overflow(begin[d], span, &last);
    if (overflows || begin[d] < 0 || begin[d] >= full[d] || last < 0 || last >= full[d]) {
      error = "the slice does not fit its operand on axis " + std::to_string(d);
      return false;
    }
  }
  return true;
}

/// The strided copy of a slice that sliceFits accepted. An axis of one
/// element never moves, so its step (which a corrupt plan may make huge) is
/// left out of the stride instead of overflowing it.
StridedCopy sliceCopy(const TensorArg &full, const std::vector<int64_t> &sliced,
                      const std::vector<int64_t> &begin, const std::vector<int64_t> &step) {
  StridedCopy sc;
  sc.es = elemBytes(full.type);
  std::vector<int64_t> fs = stridesOf(full.shape);
  sc.dims = sliced;
  for (size_t d = 0; d < fs.size(); ++d) {
    sc.base += begin[d] * fs[d];
    sc.strides.push_back((sliced[d] > 1 ? step[d] : 1) * fs[d]);
  }
  return sc;
}

std::unique_ptr<Kernel> createSlice(const StepContext &ctx, std::string &error) {
  if (!oneInOneOut(ctx, error))
    return nullptr;
  const TensorArg &x = ctx.inputs[0], &y = ctx.outputs[0];
  std::vector<int64_t> begin, step;
  if (!sliceParams(ctx, 1, x.shape, begin, step, error))
    return nullptr;
  if (y.numel == 0)
    return std::make_unique<LambdaKernel>([] {});
  if (!sliceFits(x.shape, y.shape, begin, step, error))
    return nullptr;
  return stridedKernel(ctx.pool, sliceCopy(x, y.shape, begin, step), x, y);
}

std::unique_ptr<Kernel> createSliceGrad(const StepContext &ctx, std::string &error) {
  if (!oneInOneOut(ctx, error))
    return nullptr;
  const TensorArg &dy = ctx.inputs[0], &dx = ctx.outputs[0];
  std::vector<int64_t> begin, step;
  if (!sliceParams(ctx, 1, dx.shape, begin, step, error))
    return nullptr;
  if (dy.numel != 0 && !sliceFits(dx.shape, dy.shape, begin, step, error))
    return nullptr;
  if (dy.numel == 0)
    return std::make_unique<LambdaKernel>(
        [dx] { std::memset(dx.data, 0, dx.numel * elemBytes(dx.type)); });
  // Slices never overlap themselves: a scatter of dY into zeros.
  return stridedKernel(ctx.pool, sliceCopy(dx, dy.shape, begin, step), dy, dx,
                       /*zeroFirst=*/true, /*reverse=*/true);
}

std::unique_ptr<Kernel> createTile(const StepContext &ctx, std::string &error) {
  if (!oneInOneOut(ctx, error))
    return nullptr;
  TensorArg x = ctx.inputs[0], y = ctx.outputs[0];
  if (x.rank() != y.rank()) {
    error = "Tile keeps the rank";
    return nullptr;
  }
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (x.shape[d] == 0 ? y.shape[d] != 0 : y.shape[d] % x.shape[d] != 0) {
      error = "result is not a tiling of the input";
      return nullptr;
    }
  if (y.numel == 0)
    return std::make_unique<LambdaKernel>([] {});
  if (x.rank() == 0)
    return std::make_unique<LambdaKernel>([x, y] { std::memcpy(y.data, x.data, elemBytes(x.type)); });
  size_t es = elemBytes(x.type);
  int64_t xl = x.shape.back(), yl = y.shape.back();
  int64_t rows = y.numel / yl;
  std::vector<int64_t> xs = stridesOf(x.shape);
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(rows, 64, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t rem = r, src = 0;
        for (size_t d = y.shape.size() - 1; d-- > 0;) {
          src += (rem % y.shape[d]) % x.shape[d] * xs[d];
          rem /= y.shape[d];
        }
        const uint8_t *in = static_cast<const uint8_t *>(x.data) + src * es;
        uint8_t *out = static_cast<uint8_t *>(y.data) + r * yl * es;
        for (int64_t k = 0; k < yl; k += xl)
          std::memcpy(out + k * es, in, xl * es);
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// Concat, Split
//===----------------------------------------------------------------------===//

/// a and b have one rank and the same dims except along `axis`: the copies
/// of Concat and Split move whole runs of the other dims.
bool sameExceptAxis(const TensorArg &a, const TensorArg &b, int64_t axis) {
  if (a.rank() != b.rank())
    return false;
  for (int64_t d = 0; d < a.rank(); ++d)
    if (d != axis && a.shape[d] != b.shape[d])
      return false;
  return true;
}

std::unique_ptr<Kernel> createConcat(const StepContext &ctx, std::string &error) {
  if (ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "missing result";
    return nullptr;
  }
  TensorArg y = ctx.outputs[0];
  int64_t axis = normalizeAxis(ctx.attrInt("axis", 0), y.rank());
  if (axis < 0) {
    error = "axis out of range";
    return nullptr;
  }
  std::vector<TensorArg> xs;
  int64_t total = 0;
  for (unsigned i = 0; i < ctx.inputs.size(); ++i) {
    if (!ctx.has(i) || !sameType(ctx, ctx.inputs[i], y, error))
      return nullptr;
    if (!sameExceptAxis(ctx.inputs[i], y, axis)) {
      error = "operand " + std::to_string(i) + " " + argString(ctx.inputs[i]) +
              " does not match the result " + argString(y) + " off the axis";
      return nullptr;
    }
    total += ctx.inputs[i].shape[axis];
    xs.push_back(ctx.inputs[i]);
  }
  if (total != y.shape[axis]) {
    error = "the operands do not cover the result's axis";
    return nullptr;
  }
  int64_t outer = product(y.shape, 0, axis), inner = product(y.shape, axis + 1);
  size_t es = elemBytes(y.type);
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(outer, 16, [&](int64_t o0, int64_t o1, int) {
      for (int64_t o = o0; o < o1; ++o) {
        uint8_t *out = static_cast<uint8_t *>(y.data) + o * y.shape[axis] * inner * es;
        for (const TensorArg &x : xs) {
          int64_t n = x.shape[axis] * inner * es;
          std::memcpy(out, static_cast<const uint8_t *>(x.data) + o * n, n);
          out += n;
        }
      }
    });
  });
}

std::unique_ptr<Kernel> createSplit(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0)) {
    error = "missing operand";
    return nullptr;
  }
  TensorArg x = ctx.inputs[0];
  int64_t axis = normalizeAxis(ctx.attrInt("axis", 0), x.rank());
  if (axis < 0) {
    error = "axis out of range";
    return nullptr;
  }
  // Sizes come from the results' shapes (the split input or attribute
  // produced them); omitted results still take their share of the axis.
  std::vector<TensorArg> ys = ctx.outputs;
  int64_t total = 0;
  for (const TensorArg &y : ys) {
    if (y.data && !sameType(ctx, x, y, error))
      return nullptr;
    if (y.rank() != x.rank()) {
      error = "every result of Split must be typed";
      return nullptr;
    }
    if (!sameExceptAxis(x, y, axis)) {
      error = "result " + argString(y) + " does not match the operand " + argString(x) +
              " off the axis";
      return nullptr;
    }
    total += y.shape[axis];
  }
  if (total != x.shape[axis]) {
    error = "the results do not cover the split axis";
    return nullptr;
  }
  int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis + 1);
  size_t es = elemBytes(x.type);
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(outer, 16, [&](int64_t o0, int64_t o1, int) {
      for (int64_t o = o0; o < o1; ++o) {
        const uint8_t *in = static_cast<const uint8_t *>(x.data) + o * x.shape[axis] * inner * es;
        for (const TensorArg &y : ys) {
          int64_t n = y.shape[axis] * inner * es;
          if (y.data)
            std::memcpy(static_cast<uint8_t *>(y.data) + o * n, in, n);
          in += n;
        }
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// Gather, GatherElements, GatherGrad
//===----------------------------------------------------------------------===//

std::unique_ptr<Kernel> createGather(const StepContext &ctx, std::string &error) {
  if (!oneInOneOut(ctx, error))
    return nullptr;
  if (!ctx.has(1) || !isIndexType(ctx.inputs[1].type)) {
    error = "indices must be int64 or int32";
    return nullptr;
  }
  TensorArg x = ctx.inputs[0], ind = ctx.inputs[1], y = ctx.outputs[0];
  int64_t axis = normalizeAxis(ctx.attrInt("axis", 0), x.rank());
  if (axis < 0) {
    error = "axis out of range";
    return nullptr;
  }
  int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis + 1);
  int64_t dim = x.shape[axis], n = ind.numel;
  if (y.numel != outer * n * inner) {
    error = "result does not match the indices";
    return nullptr;
  }
  size_t es = elemBytes(x.type);
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(outer * n, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)),
                     [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t o = r / n, j = r % n;
        int64_t k = loadInt(ind, j);
        if (k < 0)
          k += dim;
        uint8_t *out = static_cast<uint8_t *>(y.data) + r * inner * es;
        if (k < 0 || k >= dim)
          std::memset(out, 0, inner * es);
        else
          std::memcpy(out, static_cast<const uint8_t *>(x.data) + (o * dim + k) * inner * es,
                      inner * es);
      }
    });
  });
}

std::unique_ptr<Kernel> createGatherElements(const StepContext &ctx, std::string &error) {
  if (!oneInOneOut(ctx, error))
    return nullptr;
  if (!ctx.has(1) || !isIndexType(ctx.inputs[1].type)) {
    error = "indices must be int64 or int32";
    return nullptr;
  }
  TensorArg x = ctx.inputs[0], ind = ctx.inputs[1], y = ctx.outputs[0];
  int64_t rank = x.rank();
  int64_t axis = normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (axis < 0 || ind.shape != y.shape || ind.rank() != rank) {
    error = "axis out of range or indices not shaped like the result";
    return nullptr;
  }
  // Off the axis, a result coordinate is a data coordinate.
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && ind.shape[d] > x.shape[d]) {
      error = "the indices reach beyond the data off the gathered axis";
      return nullptr;
    }
  std::vector<int64_t> xs = stridesOf(x.shape);
  size_t es = elemBytes(x.type);
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(y.numel, 4096, [&](int64_t f0, int64_t f1, int) {
      int64_t idx[kMaxRank] = {0};
      for (int64_t f = f0; f < f1; ++f) {
        int64_t rem = f;
        for (int64_t d = rank; d-- > 0;) {
          idx[d] = rem % y.shape[d];
          rem /= y.shape[d];
        }
        int64_t k = loadInt(ind, f);
        if (k < 0)
          k += x.shape[axis];
        uint8_t *out = static_cast<uint8_t *>(y.data) + f * es;
        if (k < 0 || k >= x.shape[axis]) {
          std::memset(out, 0, es);
          continue;
        }
        idx[axis] = k;
        int64_t src = 0;
        for (int64_t d = 0; d < rank; ++d)
          src += idx[d] * xs[d];
        std::memcpy(out, static_cast<const uint8_t *>(x.data) + src * es, es);
      }
    });
  });
}

std::unique_ptr<Kernel> createGatherGrad(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || !ctx.has(1) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "GatherGrad takes dY and indices";
    return nullptr;
  }
  if (!requireFloat(ctx, {0}, {0}, error))
    return nullptr;
  TensorArg dy = ctx.inputs[0], ind = ctx.inputs[1], dx = ctx.outputs[0];
  if (!isIndexType(ind.type)) {
    error = "indices must be int64 or int32";
    return nullptr;
  }
  int64_t axis = normalizeAxis(ctx.attrInt("axis", 0), dx.rank());
  if (axis < 0) {
    error = "axis out of range";
    return nullptr;
  }
  int64_t outer = product(dx.shape, 0, axis), inner = product(dx.shape, axis + 1);
  int64_t dim = dx.shape[axis], n = ind.numel;
  if (dy.numel != outer * n * inner) {
    error = "dY does not match the indices and shape";
    return nullptr;
  }
  // Work items: (outer slice, chunk of `inner` columns); each accumulates all
  // of its indices in order, so repeated indices add up deterministically.
  int64_t chunk = 256, chunks = (inner + chunk - 1) / chunk;
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  bool f32 = dx.type == plan::F32;
  size_t offAcc = layout.add<float>(f32 ? 0 : dx.numel);
  size_t offRow = layout.add<float>((chunk + 16) * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    float *acc = f32 ? dx.as<float>() : at<float>(scratch->data(), offAcc);
    pool.parallelFor(outer * chunks, 1, [&](int64_t w0, int64_t w1, int range) {
      float *row = at<float>(scratch->data(), offRow) + range * (chunk + 16);
      for (int64_t w = w0; w < w1; ++w) {
        int64_t o = w / chunks, c0 = (w % chunks) * chunk, cn = std::min(chunk, inner - c0);
        for (int64_t k = 0; k < dim; ++k)
          std::memset(acc + (o * dim + k) * inner + c0, 0, cn * sizeof(float));
        for (int64_t j = 0; j < n; ++j) {
          int64_t k = loadInt(ind, j);
          if (k < 0)
            k += dim;
          if (k < 0 || k >= dim)
            continue;
          const float *g = rowIn(dy, (o * n + j) * inner + c0, cn, row);
          float *a = acc + (o * dim + k) * inner + c0;
          for (int64_t i = 0; i < cn; ++i)
            a[i] += g[i];
        }
        if (!f32)
          for (int64_t k = 0; k < dim; ++k)
            storeFloats(dx, (o * dim + k) * inner + c0, cn, acc + (o * dim + k) * inner + c0);
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// Pad
//===----------------------------------------------------------------------===//

std::unique_ptr<Kernel> createPad(const StepContext &ctx, std::string &error) {
  if (!oneInOneOut(ctx, error))
    return nullptr;
  TensorArg x = ctx.inputs[0], y = ctx.outputs[0];
  int64_t rank = x.rank();
  std::vector<int64_t> pads;
  if (ctx.has(1)) {
    if (!isConstantInput(ctx, 1)) {
      error = "pads must be a constant";
      return nullptr;
    }
    pads = readInts(ctx.inputs[1]);
  } else {
    pads = ctx.attrInts("pads");
  }
  std::vector<int64_t> axes(rank);
  for (int64_t i = 0; i < rank; ++i)
    axes[i] = i;
  if (ctx.has(3)) {
    if (!isConstantInput(ctx, 3)) {
      error = "axes must be a constant";
      return nullptr;
    }
    axes = readInts(ctx.inputs[3]);
  }
  if (pads.size() != 2 * axes.size()) {
    error = "pads do not match the axes";
    return nullptr;
  }
  std::vector<int64_t> before(rank, 0), after(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalizeAxis(axes[i], rank);
    if (a < 0) {
      error = "axis out of range";
      return nullptr;
    }
    before[a] = pads[i];
    after[a] = pads[i + axes.size()];
  }
  // The result's shape is the plan's: it must be the padded operand's (a
  // corrupt plan's would index past the per-axis tables below).
  if (y.rank() != rank) {
    error =
        "the result has rank " + std::to_string(y.rank()) + ", the operand " + std::to_string(rank);
    return nullptr;
  }
  for (int64_t d = 0; d < rank; ++d) {
    int64_t padded = 0;
    if (__builtin_add_overflow(x.shape[d], before[d], &padded) ||
        __builtin_add_overflow(padded, after[d], &padded) || y.shape[d] != padded) {
      error = "the result's axis " + std::to_string(d) + " has " + std::to_string(y.shape[d]) +
              " elements, not the padded operand's";
      return nullptr;
    }
  }
  math::PadMode mode = math::PadMode::Constant; // set by padModeByName
  if (!math::padModeByName(ctx.attrString("mode", "constant"), mode)) {
    error = "unknown mode '" + ctx.attrString("mode", "constant") + "'";
    return nullptr;
  }
  // Per axis: the source index of every result index (-1: the pad value).
  std::vector<std::vector<int64_t>> src(rank);
  for (int64_t d = 0; d < rank; ++d)
    for (int64_t o = 0; o < y.shape[d]; ++o)
      src[d].push_back(math::padSource(mode, o - before[d], x.shape[d]));
  TensorArg value = ctx.has(2) ? ctx.inputs[2] : TensorArg();
  double attrValue = ctx.attrFloat("value", 0.0);
  size_t es = elemBytes(x.type);
  std::vector<int64_t> xs = stridesOf(x.shape);
  ThreadPool &pool = ctx.pool;
  if (y.numel == 0)
    return std::make_unique<LambdaKernel>([] {});
  if (rank == 0)
    return std::make_unique<LambdaKernel>([x, y, es] { std::memcpy(y.data, x.data, es); });
  int64_t yl = y.shape.back(), rows = y.numel / yl;
  return std::make_unique<LambdaKernel>([=, &pool] {
    // The pad value in the element type.
    uint8_t pv[8] = {0};
    TensorArg pva;
    pva.data = pv;
    pva.type = y.type;
    if (value.data && value.numel > 0) {
      if (isFloatType(y.type) || y.type == plan::F64)
        storeFloat(pva, 0, static_cast<float>(readScalar(value)));
      else
        std::memcpy(pv, value.data, es);
    } else if (isFloatType(y.type)) {
      storeFloat(pva, 0, static_cast<float>(attrValue));
    } else if (y.type == plan::F64) {
      *reinterpret_cast<double *>(pv) = attrValue;
    } else {
      storeFloat(pva, 0, static_cast<float>(attrValue));
    }
    pool.parallelFor(rows, 16, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t rem = r, off = 0;
        bool padRow = false;
        for (int64_t d = rank - 1; d-- > 0;) {
          int64_t s = src[d][rem % y.shape[d]];
          rem /= y.shape[d];
          padRow = padRow || s < 0;
          off += s * xs[d];
        }
        uint8_t *out = static_cast<uint8_t *>(y.data) + r * yl * es;
        // A pad row has no source: its offset may be negative, and even
        // forming that pointer is undefined (UBSan).
        const uint8_t *in = padRow ? nullptr : static_cast<const uint8_t *>(x.data) + off * es;
        const std::vector<int64_t> &last = src[rank - 1];
        for (int64_t k = 0; k < yl; ++k) {
          if (padRow || last[k] < 0)
            std::memcpy(out + k * es, pv, es);
          else
            std::memcpy(out + k * es, in + last[k] * es, es);
        }
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

/// Reads a scalar operand now if it is a constant, else at run time.
struct ScalarOperand {
  TensorArg t;
  bool present = false;
  double dflt = 0;
  double get() const { return present ? readScalar(t) : dflt; }
};

std::unique_ptr<Kernel> createDropout(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "missing operand or result";
    return nullptr;
  }
  if (!requireFloat(ctx, {0}, {0}, error))
    return nullptr;
  TensorArg x = ctx.inputs[0], y = ctx.outputs[0];
  TensorArg mask = ctx.outputs.size() > 1 ? ctx.outputs[1] : TensorArg();
  if (x.type != y.type || y.shape != x.shape || (mask.data && mask.numel != x.numel)) {
    error = "result shapes or types do not match";
    return nullptr;
  }
  ScalarOperand ratio{ctx.has(1) ? ctx.inputs[1] : TensorArg(), ctx.has(1), 0.5};
  ScalarOperand training{ctx.has(2) ? ctx.inputs[2] : TensorArg(), ctx.has(2), 0.0};
  uint64_t seed = static_cast<uint64_t>(ctx.attrInt("seed", 0));
  // The run counter: the int64 state the lowering gives as operand 3, which
  // checkpoints save (so a resumed run draws the masks the uninterrupted one
  // would), advanced here; without it, a counter of this kernel's own.
  TensorArg counterState = ctx.has(3) ? ctx.inputs[3] : TensorArg();
  if (counterState.data && (counterState.type != plan::I64 || counterState.numel != 1)) {
    error = "the run counter (operand 3) must be an int64 scalar";
    return nullptr;
  }
  auto counter = std::make_shared<std::atomic<uint64_t>>(0);
  ThreadPool &pool = ctx.pool;
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  size_t off = layout.add<float>(1024 * ctx.pool.size());
  scratch->reserve(layout.size());
  return std::make_unique<LambdaKernel>([=, &pool] {
    double r = ratio.get();
    bool train = training.get() != 0.0;
    bool copies = !train || r == 0.0;
    uint64_t run = counterState.data
                       ? static_cast<uint64_t>((*counterState.as<int64_t>())++)
                       : (*counter)++;
    uint64_t key = math::dropoutKey(seed, run);
    float scale = r < 1.0 ? static_cast<float>(1.0 / (1.0 - r)) : 0.0f;
    // keep when u >= ratio, u = top 24 bits / 2^24.
    uint32_t threshold = static_cast<uint32_t>(std::min(1.0, std::max(0.0, r)) * 16777216.0);
    pool.parallelFor(x.numel, 4096, [&](int64_t b, int64_t e, int range) {
      float *buf = at<float>(scratch->data(), off) + range * 1024;
      for (int64_t s = b; s < e; s += 512) {
        int64_t n = std::min<int64_t>(512, e - s);
        const float *xv = rowIn(x, s, n, buf);
        float *yv = rowOut(y, s, buf + 512);
        for (int64_t i = 0; i < n; ++i) {
          bool keep = copies || math::dropoutKeeps(key, s + i, threshold);
          yv[i] = copies ? xv[i] : (keep ? xv[i] * scale : 0.0f);
          if (mask.data)
            static_cast<uint8_t *>(mask.data)[s + i] = keep;
        }
        rowCommit(y, s, n, yv);
      }
    });
  });
}

std::unique_ptr<Kernel> createDropoutGrad(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || !ctx.has(1) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "DropoutGrad takes dY and the mask";
    return nullptr;
  }
  if (!requireFloat(ctx, {0}, {0}, error))
    return nullptr;
  TensorArg dy = ctx.inputs[0], mask = ctx.inputs[1], dx = ctx.outputs[0];
  if (mask.numel != dy.numel || dx.numel != dy.numel || elemBytes(mask.type) != 1) {
    error = "the mask must be bool shaped like dY";
    return nullptr;
  }
  ScalarOperand ratio{ctx.has(2) ? ctx.inputs[2] : TensorArg(), ctx.has(2), 0.5};
  ScalarOperand training{ctx.has(3) ? ctx.inputs[3] : TensorArg(), ctx.has(3), 0.0};
  ThreadPool &pool = ctx.pool;
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  size_t off = layout.add<float>(1024 * ctx.pool.size());
  scratch->reserve(layout.size());
  return std::make_unique<LambdaKernel>([=, &pool] {
    double r = ratio.get();
    bool copies = training.get() == 0.0 || r == 0.0;
    float scale = r < 1.0 ? static_cast<float>(1.0 / (1.0 - r)) : 0.0f;
    pool.parallelFor(dy.numel, 4096, [&](int64_t b, int64_t e, int range) {
      float *buf = at<float>(scratch->data(), off) + range * 1024;
      const uint8_t *m = static_cast<const uint8_t *>(mask.data);
      for (int64_t s = b; s < e; s += 512) {
        int64_t n = std::min<int64_t>(512, e - s);
        const float *g = rowIn(dy, s, n, buf);
        float *out = rowOut(dx, s, buf + 512);
        for (int64_t i = 0; i < n; ++i)
          out[i] = copies ? g[i] : (m[s + i] ? g[i] * scale : 0.0f);
        rowCommit(dx, s, n, out);
      }
    });
  });
}

} // namespace

void registerDataMovementKernels() {
  registerKernel("Transpose", createTranspose);
  registerKernel("Expand", createExpand);
  registerKernel("Slice", createSlice);
  registerKernel("Tile", createTile);
  registerKernel("Concat", createConcat);
  registerKernel("Split", createSplit);
  registerKernel("Gather", createGather);
  registerKernel("GatherElements", createGatherElements);
  registerKernel("Pad", createPad);
  registerKernel("Dropout", createDropout);
  registerKernel("ampc.GatherGrad", createGatherGrad);
  registerKernel("ampc.SliceGrad", createSliceGrad);
  registerKernel("ampc.DropoutGrad", createDropoutGrad);
}

} // namespace ampc::rt::cpu
