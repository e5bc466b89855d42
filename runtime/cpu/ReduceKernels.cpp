//===- ReduceKernels.cpp - Reduce* over any set of axes --------------------===//
//
// ReduceSum (axes as an operand), ReduceMean, ReduceMax, ReduceMin,
// ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum and
// ReduceLogSumExp (axes attribute), float types in fp32 and ReduceSum / Max /
// Min / Prod on int64/int32 in int64. The axes are fixed when the kernel is
// created; dims of size 1 are dropped and neighbouring dims of the same kind
// merged, which leaves one of two shapes of work:
//   A. the innermost dim is reduced: every result reduces contiguous runs;
//   B. the innermost dim is kept: runs of I contiguous results accumulate
//      contiguous input runs (column sums, vectorizable).
// Results (A) or column tiles (B) are split over the threads; each result is
// accumulated by one thread in a fixed order, so results are bitwise
// reproducible, and independent of the thread count.
//
//===----------------------------------------------------------------------===//

#include "KernelHelpers.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace ampc::rt::cpu {

namespace {

enum class Red { Sum, Mean, SumSquare, L1, L2, LogSum, LogSumExp, Max, Min, Prod };

struct ReducePlan {
  bool innerKept = false;             ///< shape B
  int64_t inner = 1;                  ///< run length (reduced in A, kept in B)
  std::vector<int64_t> outDims, outStrides; ///< kept dims (B: without the inner one)
  std::vector<int64_t> roffs;         ///< input offsets of the other reduced positions
  int64_t count = 1;                  ///< elements reduced into each result
  int64_t rows = 1;                   ///< A: results; B: result rows of `inner`

  int64_t baseOf(int64_t r) const {
    int64_t off = 0;
    for (size_t d = outDims.size(); d-- > 0;) {
      off += (r % outDims[d]) * outStrides[d];
      r /= outDims[d];
    }
    return off;
  }
};

bool buildPlan(const std::vector<int64_t> &shape, const std::vector<bool> &reduced,
               ReducePlan &p) {
  // Collapse: (size, stride, reduced) without size-1 dims, same kinds merged.
  std::vector<int64_t> strides = stridesOf(shape);
  struct G {
    int64_t size, stride;
    bool red;
  };
  std::vector<G> g;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (!g.empty() && g.back().red == reduced[d]) {
      g.back().size *= shape[d];
      g.back().stride = strides[d];
    } else {
      g.push_back({shape[d], strides[d], reduced[d]});
    }
  }
  p.count = 1;
  for (const G &x : g)
    if (x.red)
      p.count *= x.size;
  p.innerKept = g.empty() || !g.back().red;
  p.inner = g.empty() ? 1 : g.back().size;
  size_t lastOuter = g.empty() ? 0 : g.size() - 1;
  std::vector<int64_t> rdims, rstr;
  for (size_t i = 0; i < lastOuter; ++i) {
    if (g[i].red) {
      rdims.push_back(g[i].size);
      rstr.push_back(g[i].stride);
    } else {
      p.outDims.push_back(g[i].size);
      p.outStrides.push_back(g[i].stride);
    }
  }
  int64_t combos = product(rdims);
  if (combos > (int64_t(1) << 28))
    return false;
  p.roffs.resize(combos);
  for (int64_t c = 0; c < combos; ++c) {
    int64_t rem = c, off = 0;
    for (size_t d = rdims.size(); d-- > 0;) {
      off += (rem % rdims[d]) * rstr[d];
      rem /= rdims[d];
    }
    p.roffs[c] = off;
  }
  p.rows = product(p.outDims);
  return true;
}

template <Red R> struct Op {
  static float init() {
    if constexpr (R == Red::Max)
      return -std::numeric_limits<float>::infinity();
    else if constexpr (R == Red::Min)
      return std::numeric_limits<float>::infinity();
    else if constexpr (R == Red::Prod)
      return 1.0f;
    else
      return 0.0f;
  }
  static float step(float a, float v) {
    if constexpr (R == Red::SumSquare || R == Red::L2)
      return a + v * v;
    else if constexpr (R == Red::L1)
      return a + std::fabs(v);
    else if constexpr (R == Red::Max)
      return (v != v || a != a) ? std::numeric_limits<float>::quiet_NaN() : (v > a ? v : a);
    else if constexpr (R == Red::Min)
      return (v != v || a != a) ? std::numeric_limits<float>::quiet_NaN() : (v < a ? v : a);
    else if constexpr (R == Red::Prod)
      return a * v;
    else
      return a + v; // Sum, Mean, LogSum; LogSumExp adds exp(v - max) (shifted first)
  }
  static float finish(float a, int64_t count, float shift) {
    if constexpr (R == Red::Mean)
      return count ? a / static_cast<float>(count) : std::numeric_limits<float>::quiet_NaN();
    else if constexpr (R == Red::L2)
      return std::sqrt(a);
    else if constexpr (R == Red::LogSum)
      return std::log(a);
    else if constexpr (R == Red::LogSumExp)
      return count ? shift + std::log(a) : -std::numeric_limits<float>::infinity();
    else
      return a;
  }
};

/// Reduces a contiguous run (16 partial results for the additive ops).
template <Red R> float reduceRun(const float *v, int64_t n, float shift) {
  if constexpr (R == Red::Sum || R == Red::Mean || R == Red::LogSum) {
    return sumFloats(v, n);
  } else if constexpr (R == Red::SumSquare || R == Red::L2) {
    return dotFloats(v, v, n);
  } else if constexpr (R == Red::LogSumExp) {
    float a = 0;
    for (int64_t i = 0; i < n; ++i)
      a += std::exp(v[i] - shift);
    return a;
  } else {
    float a = Op<R>::init();
    for (int64_t i = 0; i < n; ++i)
      a = Op<R>::step(a, v[i]);
    return a;
  }
}

template <Red R> float combine(float a, float part) {
  if constexpr (R == Red::Max || R == Red::Min || R == Red::Prod)
    return Op<R>::step(a, part);
  else
    return a + part;
}

/// Shape B over fp32 or bf16 storage: acc[i] = step(acc[i], x[base + ro + i])
/// for each reduced offset ro of roffs[0, count) in order, read in place
/// (bf16 widened as it is read, exactly), so each column adds its rows in the
/// order the portable loop does: the same bits. In runForThisCpu's two
/// builds: the AVX-512 one vectorizes the columns 16 wide.
template <Red R, typename T>
inline AMPC_ALWAYS_INLINE void accumulateRows(float *acc, const T *x, const int64_t *roffs,
                                              int64_t count, int64_t n) {
  for (int64_t k = 0; k < count; ++k) {
    const T *v = x + roffs[k];
    for (int64_t i = 0; i < n; ++i) {
      float f;
      if constexpr (std::is_same_v<T, uint16_t>) {
        uint32_t u = static_cast<uint32_t>(v[i]) << 16;
        std::memcpy(&f, &u, 4);
      } else {
        f = v[i];
      }
      acc[i] = Op<R>::step(acc[i], f);
    }
  }
}
template <Red R>
void accumulateColumns(float *acc, const TensorArg &x, int64_t base, const int64_t *roffs,
                       int64_t count, int64_t n) {
  runForThisCpu([&]() AMPC_ALWAYS_INLINE {
    if (x.type == plan::BF16)
      accumulateRows<R>(acc, static_cast<const uint16_t *>(x.data) + base, roffs, count, n);
    else
      accumulateRows<R>(acc, static_cast<const float *>(x.data) + base, roffs, count, n);
  });
}

/// The reductions that add (each row's term, then the rows): their column
/// sums add blocks of kColumnSumBlockRows rows, then the blocks (Kernel.h).
template <Red R>
constexpr bool kAdds = R == Red::Sum || R == Red::Mean || R == Red::SumSquare || R == Red::L1 ||
                       R == Red::L2 || R == Red::LogSum;

constexpr int64_t kTile = 256;

/// Shape B: acc[0, n) = the column tile's reduction (before finish) of the
/// inputs at base + roffs[0, count), in fp32; `buf` holds kTile floats and
/// `part` kTile more.
template <Red R>
void reduceTile(float *acc, const TensorArg &x, int64_t base, const int64_t *roffs, int64_t count,
                int64_t n, float *buf, float *part) {
  if constexpr (kAdds<R>) {
    if (count > kColumnSumBlockRows) {
      reduceTile<R>(acc, x, base, roffs, kColumnSumBlockRows, n, buf, nullptr);
      for (int64_t b = kColumnSumBlockRows; b < count; b += kColumnSumBlockRows) {
        reduceTile<R>(part, x, base, roffs + b, std::min(kColumnSumBlockRows, count - b), n, buf,
                      nullptr);
        for (int64_t i = 0; i < n; ++i)
          acc[i] += part[i];
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    acc[i] = Op<R>::init();
  if (x.type == plan::F32 || x.type == plan::BF16) {
    accumulateColumns<R>(acc, x, base, roffs, count, n);
    return;
  }
  for (int64_t k = 0; k < count; ++k) {
    const float *v = rowIn(x, base + roffs[k], n, buf);
    for (int64_t i = 0; i < n; ++i)
      acc[i] = Op<R>::step(acc[i], v[i]);
  }
}

/// Blocks of kColumnSumBlockRows reduced positions in a shape B reduction
/// that adds, when there is more than one and their partial column sums fit
/// in kMaxColumnPartials floats; 0 otherwise.
constexpr int64_t kMaxColumnPartials = int64_t(1) << 20;
template <Red R> int64_t columnBlocks(const ReducePlan &p) {
  int64_t count = static_cast<int64_t>(p.roffs.size());
  if (!kAdds<R> || !p.innerKept || count <= kColumnSumBlockRows)
    return 0;
  int64_t blocks = (count + kColumnSumBlockRows - 1) / kColumnSumBlockRows;
  return p.rows * blocks * p.inner <= kMaxColumnPartials ? blocks : 0;
}

/// Shape B with `blocks` blocks (columnBlocks): every block's column sums in
/// parallel (a column tile's rows are few when the columns are: 1152 columns
/// made five tiles, three for one thread and two for the other), then each
/// column adds its blocks in order, as reduceTile does: the same bits.
template <Red R>
void reduceColumnBlocks(ThreadPool &pool, const ReducePlan &p, const TensorArg &x,
                        const TensorArg &y, float *scratch, int64_t perRange, int64_t blocks,
                        float *partials) {
  int64_t tiles = (p.inner + kTile - 1) / kTile;
  pool.parallelFor(p.rows * blocks * tiles, 1, [&](int64_t w0, int64_t w1, int range) {
    float *buf = scratch + range * perRange;
    for (int64_t w = w0; w < w1; ++w) {
      int64_t t = w % tiles, b = w / tiles % blocks, r = w / tiles / blocks;
      int64_t c0 = t * kTile, n = std::min(kTile, p.inner - c0);
      int64_t k0 = b * kColumnSumBlockRows;
      int64_t k = std::min(kColumnSumBlockRows, static_cast<int64_t>(p.roffs.size()) - k0);
      reduceTile<R>(partials + (r * blocks + b) * p.inner + c0, x, p.baseOf(r) + c0,
                    p.roffs.data() + k0, k, n, buf, nullptr);
    }
  });
  pool.parallelFor(p.rows * tiles, 1, [&](int64_t w0, int64_t w1, int range) {
    float *acc = scratch + range * perRange + kTile;
    for (int64_t w = w0; w < w1; ++w) {
      int64_t r = w / tiles, c0 = (w % tiles) * kTile, n = std::min(kTile, p.inner - c0);
      const float *block = partials + r * blocks * p.inner + c0;
      std::copy(block, block + n, acc);
      for (int64_t b = 1; b < blocks; ++b)
        for (int64_t i = 0; i < n; ++i)
          acc[i] += block[b * p.inner + i];
      for (int64_t i = 0; i < n; ++i)
        acc[i] = Op<R>::finish(acc[i], p.count, 0.0f);
      storeFloats(y, r * p.inner + c0, n, acc);
    }
  });
}

/// The fp32 reduction; `shift` (LogSumExp) holds each result's maximum.
template <Red R>
void reduceFloat(ThreadPool &pool, const ReducePlan &p, const TensorArg &x, const TensorArg &y,
                 float *scratch, int64_t perRange, const float *shift, float *outF32) {
  if (!p.innerKept) {
    pool.parallelFor(p.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(p.count, 1)),
                     [&](int64_t r0, int64_t r1, int range) {
      float *buf = scratch + range * perRange;
      for (int64_t r = r0; r < r1; ++r) {
        int64_t base = p.baseOf(r);
        float s = shift ? shift[r] : 0.0f;
        float a = R == Red::LogSumExp ? 0.0f : Op<R>::init();
        for (int64_t ro : p.roffs)
          a = combine<R>(a, reduceRun<R>(rowIn(x, base + ro, p.inner, buf), p.inner, s));
        float v = Op<R>::finish(a, p.count, s);
        if (outF32)
          outF32[r] = v;
        else
          storeFloat(y, r, v);
      }
    });
    return;
  }
  int64_t tiles = (p.inner + kTile - 1) / kTile;
  pool.parallelFor(p.rows * tiles, std::max<int64_t>(1, 16384 / std::max<int64_t>(p.count * kTile, 1)),
                   [&](int64_t w0, int64_t w1, int range) {
    float *buf = scratch + range * perRange, *acc = buf + kTile;
    for (int64_t w = w0; w < w1; ++w) {
      int64_t r = w / tiles, c0 = (w % tiles) * kTile, n = std::min(kTile, p.inner - c0);
      int64_t base = p.baseOf(r) + c0, o = r * p.inner + c0;
      if constexpr (R == Red::LogSumExp) {
        std::fill(acc, acc + n, 0.0f);
        for (int64_t ro : p.roffs) {
          const float *v = rowIn(x, base + ro, n, buf);
          for (int64_t i = 0; i < n; ++i)
            acc[i] += std::exp(v[i] - shift[o + i]);
        }
      } else {
        reduceTile<R>(acc, x, base, p.roffs.data(), static_cast<int64_t>(p.roffs.size()), n, buf,
                      acc + kTile);
      }
      for (int64_t i = 0; i < n; ++i) {
        float v = Op<R>::finish(acc[i], p.count, shift ? shift[o + i] : 0.0f);
        if (outF32)
          outF32[o + i] = v;
        else
          acc[i] = v;
      }
      if (!outF32)
        storeFloats(y, o, n, acc);
    }
  });
}

template <Red R>
void reduceInt(ThreadPool &pool, const ReducePlan &p, const TensorArg &x, const TensorArg &y) {
  int64_t outs = p.rows * (p.innerKept ? p.inner : 1);
  pool.parallelFor(outs, 1024, [&](int64_t o0, int64_t o1, int) {
    for (int64_t o = o0; o < o1; ++o) {
      int64_t base = p.innerKept ? p.baseOf(o / p.inner) + o % p.inner : p.baseOf(o);
      int64_t a = R == Red::Max   ? std::numeric_limits<int64_t>::min()
                  : R == Red::Min ? std::numeric_limits<int64_t>::max()
                  : R == Red::Prod ? 1
                                   : 0;
      int64_t run = p.innerKept ? 1 : p.inner;
      for (int64_t ro : p.roffs)
        for (int64_t i = 0; i < run; ++i) {
          int64_t v = loadInt(x, base + ro + i);
          if constexpr (R == Red::Max)
            a = std::max(a, v);
          else if constexpr (R == Red::Min)
            a = std::min(a, v);
          else if constexpr (R == Red::Prod)
            a *= v;
          else
            a += v;
        }
      if (y.type == plan::I64)
        y.as<int64_t>()[o] = a;
      else
        y.as<int32_t>()[o] = static_cast<int32_t>(a);
    }
  });
}

std::unique_ptr<Kernel> createReduce(const StepContext &ctx, std::string &error, Red red) {
  if (!ctx.has(0) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "missing operand or result";
    return nullptr;
  }
  TensorArg x = ctx.inputs[0], y = ctx.outputs[0];
  bool isInt = isIndexType(x.type);
  if (isInt) {
    if (red != Red::Sum && red != Red::Max && red != Red::Min && red != Red::Prod) {
      error = "integer operands are supported by ReduceSum/Max/Min/Prod only";
      return nullptr;
    }
    if (!isIndexType(y.type)) {
      error = "integer reductions give integers";
      return nullptr;
    }
  } else if (!requireFloat(ctx, {0}, {0}, error)) {
    return nullptr;
  }
  int64_t rank = x.rank();
  std::vector<int64_t> axes;
  bool given = false;
  if (ctx.has(1)) {
    if (!isConstantInput(ctx, 1)) {
      error = "axes must be a constant";
      return nullptr;
    }
    axes = readInts(ctx.inputs[1]);
    given = true;
  } else if (ctx.attr("axes")) {
    axes = ctx.attrInts("axes");
    given = true;
  }
  (void)given;
  bool noop = ctx.attrInt("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(a, rank);
    if (n < 0) {
      error = "axis out of range";
      return nullptr;
    }
    reduced[n] = true;
  }
  if (axes.empty() && noop) {
    if (y.numel != x.numel || y.type != x.type) {
      error = "noop reduction must keep the shape";
      return nullptr;
    }
    size_t bytes = x.numel * elemBytes(x.type);
    return std::make_unique<LambdaKernel>([x, y, bytes] { std::memmove(y.data, x.data, bytes); });
  }
  ReducePlan p;
  if (!buildPlan(x.shape, reduced, p)) {
    error = "too many reduced positions";
    return nullptr;
  }
  if (y.numel != p.rows * (p.innerKept ? p.inner : 1)) {
    error = "result " + argString(y) + " does not match the reduction of " + argString(x);
    return nullptr;
  }
  ThreadPool &pool = ctx.pool;
  if (isInt) {
    switch (red) {
    case Red::Max:
      return std::make_unique<LambdaKernel>([=, &pool] { reduceInt<Red::Max>(pool, p, x, y); });
    case Red::Min:
      return std::make_unique<LambdaKernel>([=, &pool] { reduceInt<Red::Min>(pool, p, x, y); });
    case Red::Prod:
      return std::make_unique<LambdaKernel>([=, &pool] { reduceInt<Red::Prod>(pool, p, x, y); });
    default:
      return std::make_unique<LambdaKernel>([=, &pool] { reduceInt<Red::Sum>(pool, p, x, y); });
    }
  }
  auto scratch = SharedScratch::of(pool);
  ScratchLayout layout;
  // Shape B: a row, the tile's results and a block's (reduceTile).
  int64_t perRange = (p.innerKept ? 3 * kTile : std::max<int64_t>(p.inner, 512)) + 64;
  size_t offRange = layout.add<float>(perRange * pool.size());
  size_t offShift = layout.add<float>(red == Red::LogSumExp ? y.numel : 0);
  // The column blocks' partial sums (any adding reduction has Sum's blocks).
  int64_t blocks = columnBlocks<Red::Sum>(p);
  size_t offPartials = layout.add<float>(blocks * p.rows * p.inner);
  scratch->reserve(layout.size());
#define AMPC_REDUCE(R)                                                                             \
  case R:                                                                                          \
    return std::make_unique<LambdaKernel>([=, &pool] {                                             \
      float *buf = at<float>(scratch->data(), offRange);                                           \
      if (int64_t n = columnBlocks<R>(p); n > 0)                                                   \
        reduceColumnBlocks<R>(pool, p, x, y, buf, perRange, n,                                     \
                              at<float>(scratch->data(), offPartials));                            \
      else                                                                                         \
        reduceFloat<R>(pool, p, x, y, buf, perRange, nullptr, nullptr);                            \
    });
  switch (red) {
    AMPC_REDUCE(Red::Sum)
    AMPC_REDUCE(Red::Mean)
    AMPC_REDUCE(Red::SumSquare)
    AMPC_REDUCE(Red::L1)
    AMPC_REDUCE(Red::L2)
    AMPC_REDUCE(Red::LogSum)
    AMPC_REDUCE(Red::Max)
    AMPC_REDUCE(Red::Min)
    AMPC_REDUCE(Red::Prod)
  case Red::LogSumExp:
    return std::make_unique<LambdaKernel>([=, &pool] {
      float *buf = at<float>(scratch->data(), offRange), *shift = at<float>(scratch->data(), offShift);
      reduceFloat<Red::Max>(pool, p, x, y, buf, perRange, nullptr, shift);
      for (int64_t i = 0; i < y.numel; ++i) // an all -inf / inf group: no shift
        if (!std::isfinite(shift[i]))
          shift[i] = 0.0f;
      reduceFloat<Red::LogSumExp>(pool, p, x, y, buf, perRange, shift, nullptr);
    });
  }
#undef AMPC_REDUCE
  return nullptr;
}

} // namespace

void registerReduceKernels() {
  struct E {
    const char *name;
    Red red;
  };
  for (E e : {E{"ReduceSum", Red::Sum}, E{"ReduceMean", Red::Mean},
              E{"ReduceSumSquare", Red::SumSquare}, E{"ReduceL1", Red::L1}, E{"ReduceL2", Red::L2},
              E{"ReduceLogSum", Red::LogSum}, E{"ReduceLogSumExp", Red::LogSumExp},
              E{"ReduceMax", Red::Max}, E{"ReduceMin", Red::Min}, E{"ReduceProd", Red::Prod}}) {
    Red red = e.red;
    registerKernel(e.name, [red](const StepContext &c, std::string &err) {
      return createReduce(c, err, red);
    });
  }
}

} // namespace ampc::rt::cpu
