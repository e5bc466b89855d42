//===- DeviceKernels.h - The CUDA backend's kernels, one thread at a time -*- C++ -*-===//
//
// Every CUDA kernel of the backend is `Args::run(args, i)` called for each
// thread index i in [0, n): runtime/cuda/Kernels.cu wraps each in a
// grid-stride __global__ function, and runtime/cuda/HostEmulator.cpp calls the
// very same functions in a loop on the CPU, which is how the unit tests check
// these kernels without a GPU (test/unit/CudaEmulationTest.cpp).
//
// So that a loop is a faithful model of the GPU, threads never cooperate: no
// shared memory, no atomics, no ordering between threads of one launch. Long
// reductions run in two launches (per-chunk partials, then one thread per
// result combining them in a fixed order), which also makes every result
// bitwise reproducible. Element math is fp32 (fp64 for fused fp64 programs),
// storage is converted with ElementMath.h / FusedEval.h exactly as the CPU
// backend does; each kernel's formulas follow its CPU counterpart in
// runtime/cpu/*Kernels.cpp.
//
// Args are passed to kernels by value (kernel parameter space, 4 KiB), so
// they hold fixed-size arrays and raw device pointers only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/rt/FusedEval.h"
#include "ampc/rt/OptimizerMath.h"

#include <cstdint>

namespace ampc::rt::cuda {

using fused::FusedElem;
using fused::loadAsFloat;
using fused::storeFromFloat;

inline constexpr int kMaxRank = 8;

/// Offset of linear index i of a row-major iteration space `shape` in a
/// tensor with `strides` (elements).
AMPC_HD int64_t stridedOffset(int rank, const int64_t *shape, const int64_t *strides, int64_t i) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    int64_t q = i / shape[d];
    off += (i - q * shape[d]) * strides[d];
    i = q;
  }
  return off;
}

AMPC_HD float infinityF() { return math::bitsFloat(0x7F800000u); }
AMPC_HD float nanF() { return math::bitsFloat(0x7FC00000u); }

//===----------------------------------------------------------------------===//
// Fused elementwise programs (one thread per result element)
//===----------------------------------------------------------------------===//

struct FusedArgs {
  static constexpr int kMaxInputs = 16, kMaxOutputs = 8, kMaxInstrs = 64, kRank = 6;
  enum : uint8_t { Contiguous = 0, Scalar = 1, Strided = 2 };
  struct Input {
    const void *p = nullptr;
    uint8_t type = 0, kind = Contiguous;
    int64_t strides[kRank] = {}; ///< per result dimension (Strided)
  };
  struct Instr {
    FusedOp op = FusedOp::Identity;
    uint8_t type = 0, a = 0, b = 0, c = 0;
    fused::FusedParams params;
  };
  struct Output {
    void *p = nullptr;
    uint8_t type = 0, reg = 0;
  };
  int rank = 0, numInputs = 0, numInstrs = 0, numOutputs = 0;
  bool wide = false; ///< fp64 registers
  int64_t shape[kRank] = {};
  Input in[kMaxInputs];
  Instr ins[kMaxInstrs];
  Output out[kMaxOutputs];

  template <typename R> static AMPC_HD void element(const FusedArgs &a, int64_t i) {
    R r[kMaxInputs + kMaxInstrs];
    for (int k = 0; k < a.numInputs; ++k) {
      const Input &in = a.in[k];
      int64_t off = in.kind == Contiguous ? i
                    : in.kind == Scalar   ? 0
                                          : stridedOffset(a.rank, a.shape, in.strides, i);
      r[k] = fused::fusedLoad<R>(in.type, in.p, off);
    }
    for (int j = 0; j < a.numInstrs; ++j) {
      const Instr &ins = a.ins[j];
      r[a.numInputs + j] =
          fused::fusedRound<R>(ins.type, fused::fusedEval<R>(ins.op, ins.params, r[ins.a],
                                                              r[ins.b], r[ins.c]));
    }
    for (int o = 0; o < a.numOutputs; ++o)
      if (a.out[o].p)
        fused::fusedStore<R>(a.out[o].type, a.out[o].p, i, r[a.out[o].reg]);
  }
  static AMPC_HD void run(const FusedArgs &a, int64_t i) {
    if (a.wide)
      element<double>(a, i);
    else
      element<float>(a, i);
  }
};

//===----------------------------------------------------------------------===//
// Data movement: strided copies (Transpose, Expand, Concat, Split, Slice,
// layout changes) and Gather
//===----------------------------------------------------------------------===//

/// Copies element `src` of x to element `dst` of y (raw bytes of any
/// element type), or writes zeros when the source index fell outside.
AMPC_HD void copyElement(int elemBytes, const void *x, int64_t src, void *y, int64_t dst,
                         bool inside) {
  switch (elemBytes) {
  case 1:
    static_cast<uint8_t *>(y)[dst] = inside ? static_cast<const uint8_t *>(x)[src] : 0;
    return;
  case 2:
    static_cast<uint16_t *>(y)[dst] = inside ? static_cast<const uint16_t *>(x)[src] : 0;
    return;
  case 4:
    static_cast<uint32_t *>(y)[dst] = inside ? static_cast<const uint32_t *>(x)[src] : 0;
    return;
  default:
    static_cast<uint64_t *>(y)[dst] = inside ? static_cast<const uint64_t *>(x)[src] : 0;
    return;
  }
}

AMPC_HD int64_t loadIndex(uint8_t indexType, const void *indices, int64_t j) {
  return indexType == FusedElem::I64 ? static_cast<const int64_t *>(indices)[j]
                                     : static_cast<const int32_t *>(indices)[j];
}

struct CopyArgs {
  const void *src = nullptr;
  void *dst = nullptr;
  int elemBytes = 4, rank = 0;
  int64_t shape[kMaxRank] = {}, srcStrides[kMaxRank] = {}, dstStrides[kMaxRank] = {};

  static AMPC_HD void run(const CopyArgs &a, int64_t i) {
    int64_t s = 0, d = 0;
    for (int k = a.rank - 1; k >= 0; --k) {
      int64_t q = i / a.shape[k], x = i - q * a.shape[k];
      s += x * a.srcStrides[k];
      d += x * a.dstStrides[k];
      i = q;
    }
    copyElement(a.elemBytes, a.src, s, a.dst, d, true);
  }
};

/// dX of Gather (an Embedding's gradient), in up to three launches: the
/// fp32 accumulator is zeroed (a memset); one thread per (outer slice,
/// column) adds dY over the indices in order, as the CPU kernel does, so
/// repeated indices add up deterministically and in the CPU's order
/// (out-of-range indices dropped); when dX is narrower than fp32, a
/// `convert` launch, one thread per element, rounds the sums into it.
struct GatherGradArgs {
  const void *dy = nullptr, *indices = nullptr;
  void *dx = nullptr;
  float *acc = nullptr; ///< dX itself when fp32
  uint8_t indexType = 0, dyType = 0, dxType = 0;
  bool convert = false;
  int64_t n = 0, dim = 0, inner = 1;

  static AMPC_HD void run(const GatherGradArgs &a, int64_t i) {
    if (a.convert) {
      storeFromFloat(a.dxType, a.dx, i, a.acc[i]);
      return;
    }
    int64_t o = i / a.inner, c = i - o * a.inner;
    for (int64_t j = 0; j < a.n; ++j) {
      int64_t k = loadIndex(a.indexType, a.indices, j);
      if (k < 0)
        k += a.dim;
      if (k < 0 || k >= a.dim)
        continue;
      a.acc[(o * a.dim + k) * a.inner + c] += loadAsFloat(a.dyType, a.dy, (o * a.n + j) * a.inner + c);
    }
  }
};

/// Pad in any mode (math::padSource, the CPU kernel's mapping), cropping
/// included: one thread per result element finds its source along every
/// axis, or writes the pad value (`value`, an element of the result's type,
/// or zeros when null).
struct PadArgs {
  const void *x = nullptr, *value = nullptr;
  void *y = nullptr;
  int elemBytes = 4, rank = 0;
  math::PadMode mode = math::PadMode::Constant;
  int64_t yShape[kMaxRank] = {}, xShape[kMaxRank] = {}, xStrides[kMaxRank] = {},
          before[kMaxRank] = {};

  static AMPC_HD void run(const PadArgs &a, int64_t i) {
    int64_t src = 0, rem = i;
    bool inside = true;
    for (int d = a.rank - 1; d >= 0; --d) {
      int64_t c = rem % a.yShape[d];
      rem /= a.yShape[d];
      int64_t s = math::padSource(a.mode, c - a.before[d], a.xShape[d]);
      inside = inside && s >= 0;
      src += (s < 0 ? 0 : s) * a.xStrides[d];
    }
    if (inside || !a.value)
      copyElement(a.elemBytes, a.x, src, a.y, i, inside);
    else
      copyElement(a.elemBytes, a.value, 0, a.y, i, true);
  }
};

/// Gather along one axis: X viewed as [outer, dim, inner], the result as
/// [outer, n, inner] for n indices; negative indices count from the end, an
/// index out of range yields zeros (as the CPU kernel).
struct GatherArgs {
  const void *x = nullptr, *indices = nullptr;
  void *y = nullptr;
  uint8_t indexType = 0;
  int elemBytes = 4;
  int64_t n = 0, dim = 0, inner = 1;

  static AMPC_HD void run(const GatherArgs &a, int64_t i) {
    int64_t r = i / a.inner, e = i - r * a.inner;
    int64_t o = r / a.n, j = r - o * a.n;
    int64_t k = loadIndex(a.indexType, a.indices, j);
    if (k < 0)
      k += a.dim;
    bool inside = k >= 0 && k < a.dim;
    copyElement(a.elemBytes, a.x, inside ? (o * a.dim + k) * a.inner + e : 0, a.y, i, inside);
  }
};

/// GatherElements: Y[i] = X[i with its `axis` coordinate replaced by
/// indices[i]]; one thread per result element; negative indices count from
/// the end, one out of range yields zeros (as the CPU kernel).
struct GatherElementsArgs {
  const void *x = nullptr, *indices = nullptr;
  void *y = nullptr;
  uint8_t indexType = 0;
  int elemBytes = 4, rank = 0, axis = 0;
  int64_t yShape[kMaxRank] = {}, xStrides[kMaxRank] = {};
  int64_t dim = 0;

  static AMPC_HD void run(const GatherElementsArgs &a, int64_t i) {
    int64_t k = loadIndex(a.indexType, a.indices, i);
    if (k < 0)
      k += a.dim;
    bool inside = k >= 0 && k < a.dim;
    int64_t src = 0, rem = i;
    for (int d = a.rank - 1; d >= 0; --d) {
      int64_t c = rem % a.yShape[d];
      rem /= a.yShape[d];
      src += (d == a.axis ? k : c) * a.xStrides[d];
    }
    copyElement(a.elemBytes, a.x, inside ? src : 0, a.y, i, inside);
  }
};

//===----------------------------------------------------------------------===//
// Reductions over any set of axes
//===----------------------------------------------------------------------===//

enum class ReduceOp : uint8_t { Sum, Mean, SumSquare, L1, L2, Max, Min, Prod, LogSum, LogSumExp };

/// Phase 0: thread (result o, chunk c) reduces its chunk of the reduced
/// elements (the final result when there is one chunk, else a partial);
/// phase 1: thread o combines the partials of result o in chunk order.
struct ReduceArgs {
  const void *src = nullptr;
  void *dst = nullptr;
  float *partial = nullptr;
  uint8_t srcType = 0, dstType = 0, phase = 0;
  ReduceOp op = ReduceOp::Sum;
  int keptRank = 0, redRank = 0;
  int64_t keptShape[kMaxRank] = {}, keptStrides[kMaxRank] = {};
  int64_t redShape[kMaxRank] = {}, redStrides[kMaxRank] = {};
  int64_t count = 1, chunk = 1, chunks = 1;
  /// LogSumExp: each result's maximum (a Max reduction run first), which
  /// every exponent is shifted by, as on the CPU.
  const float *shift = nullptr;

  static AMPC_HD float init(ReduceOp op) {
    switch (op) {
    case ReduceOp::Max:
      return -infinityF();
    case ReduceOp::Min:
      return infinityF();
    case ReduceOp::Prod:
      return 1.0f;
    default:
      return 0.0f;
    }
  }
  static AMPC_HD float combine(ReduceOp op, float acc, float v) {
    switch (op) {
    case ReduceOp::SumSquare:
    case ReduceOp::L2:
      return acc + v * v;
    case ReduceOp::L1:
      return acc + (v < 0 ? -v : v);
    case ReduceOp::Max:
      return (v > acc || v != v) ? v : acc;
    case ReduceOp::Min:
      return (v < acc || v != v) ? v : acc;
    case ReduceOp::Prod:
      return acc * v;
    case ReduceOp::LogSumExp:
      return acc + std::exp(v); // v is already shifted by the maximum
    default:
      return acc + v;
    }
  }
  /// Partials combine like values, except that squares are already squared.
  static AMPC_HD float merge(ReduceOp op, float acc, float p) {
    switch (op) {
    case ReduceOp::Max:
      return (p > acc || p != p) ? p : acc;
    case ReduceOp::Min:
      return (p < acc || p != p) ? p : acc;
    case ReduceOp::Prod:
      return acc * p;
    default:
      return acc + p;
    }
  }
  /// A group's maximum as LogSumExp's shift; none (0) when it is not finite,
  /// as on the CPU: an all -inf group gives -inf (masked attention rows), one
  /// holding +inf gives +inf, instead of inf - inf = NaN.
  static AMPC_HD float shiftOf(const ReduceArgs &a, int64_t o) {
    float m = a.shift[o];
    return m - m == 0.0f ? m : 0.0f; // finite
  }

  static AMPC_HD float finish(const ReduceArgs &a, float acc, int64_t o) {
    switch (a.op) {
    case ReduceOp::Mean:
      return acc / static_cast<float>(a.count);
    case ReduceOp::L2:
      return std::sqrt(acc);
    case ReduceOp::LogSum:
      return std::log(acc);
    case ReduceOp::LogSumExp:
      return shiftOf(a, o) + std::log(acc);
    default:
      return acc;
    }
  }

  static AMPC_HD void run(const ReduceArgs &a, int64_t i) {
    if (a.phase == 1) {
      float acc = init(a.op);
      for (int64_t c = 0; c < a.chunks; ++c)
        acc = merge(a.op, acc, a.partial[i * a.chunks + c]);
      storeFromFloat(a.dstType, a.dst, i, finish(a, acc, i));
      return;
    }
    int64_t o = i / a.chunks, c = i - o * a.chunks;
    int64_t base = stridedOffset(a.keptRank, a.keptShape, a.keptStrides, o);
    int64_t begin = c * a.chunk, end = begin + a.chunk < a.count ? begin + a.chunk : a.count;
    float shift = a.shift ? shiftOf(a, o) : 0.0f;
    float acc = init(a.op);
    for (int64_t j = begin; j < end; ++j)
      acc = combine(a.op, acc,
                    loadAsFloat(a.srcType, a.src,
                                base + stridedOffset(a.redRank, a.redShape, a.redStrides, j)) -
                        shift);
    if (a.chunks == 1)
      storeFromFloat(a.dstType, a.dst, o, finish(a, acc, o));
    else
      a.partial[i] = acc;
  }
};

//===----------------------------------------------------------------------===//
// Softmax, LogSoftmax, Hardmax and the gradients (one thread per slice column)
//===----------------------------------------------------------------------===//

enum class SoftOp : uint8_t { Softmax, LogSoftmax, Hardmax, SoftmaxGrad, LogSoftmaxGrad };

/// The tensor is [outer, len, inner]; thread i handles column (i / inner,
/// i % inner). Gradients: x = dY, y = Y.
struct SoftmaxArgs {
  const void *x = nullptr, *y = nullptr;
  void *out = nullptr;
  uint8_t xType = 0, yType = 0, outType = 0;
  SoftOp op = SoftOp::Softmax;
  int64_t len = 0, inner = 1;

  static AMPC_HD void run(const SoftmaxArgs &a, int64_t i) {
    int64_t o = i / a.inner, base = o * a.len * a.inner + (i - o * a.inner), st = a.inner;
    auto X = [&](int64_t j) { return loadAsFloat(a.xType, a.x, base + j * st); };
    switch (a.op) {
    case SoftOp::Softmax:
    case SoftOp::LogSoftmax: {
      float mx = -infinityF();
      for (int64_t j = 0; j < a.len; ++j) {
        float v = X(j);
        mx = v > mx ? v : mx;
      }
      float sum = 0;
      for (int64_t j = 0; j < a.len; ++j)
        sum += std::exp(X(j) - mx);
      if (a.op == SoftOp::Softmax) {
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < a.len; ++j)
          storeFromFloat(a.outType, a.out, base + j * st, std::exp(X(j) - mx) * inv);
      } else {
        float lse = std::log(sum);
        for (int64_t j = 0; j < a.len; ++j)
          storeFromFloat(a.outType, a.out, base + j * st, (X(j) - mx) - lse);
      }
      return;
    }
    case SoftOp::Hardmax: {
      float mx = -infinityF();
      int64_t arg = 0;
      for (int64_t j = 0; j < a.len; ++j) {
        float v = X(j);
        if (v > mx) {
          mx = v;
          arg = j;
        }
      }
      for (int64_t j = 0; j < a.len; ++j)
        storeFromFloat(a.outType, a.out, base + j * st, j == arg ? 1.0f : 0.0f);
      return;
    }
    case SoftOp::SoftmaxGrad:
    case SoftOp::LogSoftmaxGrad: {
      bool isLog = a.op == SoftOp::LogSoftmaxGrad;
      auto Y = [&](int64_t j) { return loadAsFloat(a.yType, a.y, base + j * st); };
      float s = 0;
      for (int64_t j = 0; j < a.len; ++j)
        s += isLog ? X(j) : X(j) * Y(j);
      for (int64_t j = 0; j < a.len; ++j) {
        float g = X(j), yv = Y(j);
        storeFromFloat(a.outType, a.out, base + j * st,
                       isLog ? g - std::exp(yv) * s : yv * (g - s));
      }
      return;
    }
    }
  }
};

//===----------------------------------------------------------------------===//
// LayerNormalization and its gradient
//===----------------------------------------------------------------------===//

/// Scale and bias broadcast to the normalized shape: element i of a row reads
/// offset i (contiguous) or its strided offset.
struct NormParam {
  const void *p = nullptr;
  uint8_t type = 0;
  bool contiguous = true;
  int rank = 0;
  int64_t shape[kMaxRank] = {}, strides[kMaxRank] = {};
  AMPC_HD float at(int64_t i) const {
    return loadAsFloat(type, p, contiguous ? i : stridedOffset(rank, shape, strides, i));
  }
};

/// Phase 0 (forward) and 1 (dX): one thread per row. Phase 2: one thread per
/// column i of the normalized shape sums dScale[i] and dBias[i] over rows.
struct LayerNormArgs {
  const void *x = nullptr, *dy = nullptr, *meanIn = nullptr, *invIn = nullptr;
  void *y = nullptr, *mean = nullptr, *inv = nullptr, *dScale = nullptr, *dBias = nullptr;
  uint8_t xType = 0, dyType = 0, meanInType = 0, invInType = 0, yType = 0, meanType = 0,
          invType = 0, dScaleType = 0, dBiasType = 0;
  NormParam scale, bias; ///< bias.p null: no bias
  int64_t rows = 0, inner = 0;
  float eps = 1e-5f;
  uint8_t phase = 0;

  static AMPC_HD void run(const LayerNormArgs &a, int64_t i) {
    if (a.phase == 2) {
      float ds = 0, db = 0;
      for (int64_t r = 0; r < a.rows; ++r) {
        int64_t k = r * a.inner + i;
        float g = loadAsFloat(a.dyType, a.dy, k);
        float xhat = (loadAsFloat(a.xType, a.x, k) - loadAsFloat(a.meanInType, a.meanIn, r)) *
                     loadAsFloat(a.invInType, a.invIn, r);
        ds += g * xhat;
        db += g;
      }
      if (a.dScale)
        storeFromFloat(a.dScaleType, a.dScale, i, ds);
      if (a.dBias)
        storeFromFloat(a.dBiasType, a.dBias, i, db);
      return;
    }
    int64_t base = i * a.inner, n = a.inner;
    auto X = [&](int64_t j) { return loadAsFloat(a.xType, a.x, base + j); };
    if (a.phase == 0) {
      float s = 0;
      for (int64_t j = 0; j < n; ++j)
        s += X(j);
      float mu = s / static_cast<float>(n);
      float ss = 0;
      for (int64_t j = 0; j < n; ++j) {
        float d = X(j) - mu;
        ss += d * d;
      }
      float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + a.eps);
      for (int64_t j = 0; j < n; ++j)
        storeFromFloat(a.yType, a.y, base + j,
                       (X(j) - mu) * inv * a.scale.at(j) + (a.bias.p ? a.bias.at(j) : 0.0f));
      if (a.mean)
        storeFromFloat(a.meanType, a.mean, i, mu);
      if (a.inv)
        storeFromFloat(a.invType, a.inv, i, inv);
      return;
    }
    // dX = inv * (g*scale - mean(g*scale) - xhat * mean(g*scale*xhat)).
    float mu = loadAsFloat(a.meanInType, a.meanIn, i), inv = loadAsFloat(a.invInType, a.invIn, i);
    auto G = [&](int64_t j) { return loadAsFloat(a.dyType, a.dy, base + j) * a.scale.at(j); };
    float mg = 0, mgx = 0;
    for (int64_t j = 0; j < n; ++j) {
      float gs = G(j);
      mg += gs;
      mgx += gs * ((X(j) - mu) * inv);
    }
    float invN = 1.0f / static_cast<float>(n);
    mg *= invN;
    mgx *= invN;
    for (int64_t j = 0; j < n; ++j)
      storeFromFloat(a.yType, a.y, base + j, inv * (G(j) - mg - ((X(j) - mu) * inv) * mgx));
  }
};

//===----------------------------------------------------------------------===//
// BatchNormalization (training and inference) and its gradient
//===----------------------------------------------------------------------===//

/// X is [N, C, pix]; channel c has count = N * pix elements, split into
/// `chunks` chunks of `chunk` for the partial sums. Workspace (fp32):
/// partA[C * chunks], partB[C * chunks], mu[C], inv[C], mg[C], mgx[C].
struct BatchNormArgs {
  enum Phase : uint8_t {
    SumX,        ///< (c, chunk): partial sums of x
    Mean,        ///< c: mu
    SumSqDiff,   ///< (c, chunk): partial sums of (x - mu)^2
    Variance,    ///< c: inv (and the forward's statistics outputs)
    Apply,       ///< element: y
    SumGrad,     ///< (c, chunk): partial sums of dy and dy * xhat
    CombineGrad, ///< c: dScale, dBias, mg, mgx
    ApplyGrad    ///< element: dx
  };
  const void *x = nullptr, *dy = nullptr, *scale = nullptr, *bias = nullptr,
             *runMean = nullptr, *runVar = nullptr;
  void *y = nullptr, *outMean = nullptr, *outVar = nullptr, *savedMean = nullptr,
       *savedInv = nullptr, *dScale = nullptr, *dBias = nullptr;
  uint8_t xType = 0, dyType = 0, scaleType = 0, biasType = 0, runMeanType = 0, runVarType = 0,
          yType = 0, outMeanType = 0, outVarType = 0, savedMeanType = 0, savedInvType = 0,
          dScaleType = 0, dBiasType = 0;
  float *ws = nullptr;
  int64_t N = 0, C = 0, pix = 0, chunk = 1, chunks = 1;
  float eps = 1e-5f, momentum = 0.9f;
  bool training = true;
  Phase phase = SumX;

  AMPC_HD float *partA() const { return ws; }
  AMPC_HD float *partB() const { return ws + C * chunks; }
  AMPC_HD float *mu() const { return ws + 2 * C * chunks; }
  AMPC_HD float *invs() const { return mu() + C; }
  AMPC_HD float *mg() const { return mu() + 2 * C; }
  AMPC_HD float *mgx() const { return mu() + 3 * C; }
  /// Element j of channel c (j in [0, N * pix)).
  AMPC_HD int64_t offset(int64_t c, int64_t j) const {
    int64_t n = j / pix;
    return (n * C + c) * pix + (j - n * pix);
  }

  static AMPC_HD void run(const BatchNormArgs &a, int64_t i) {
    float count = static_cast<float>(a.N * a.pix);
    switch (a.phase) {
    case SumX:
    case SumSqDiff:
    case SumGrad: {
      int64_t c = i / a.chunks, k = i - c * a.chunks;
      int64_t begin = k * a.chunk, total = a.N * a.pix;
      int64_t end = begin + a.chunk < total ? begin + a.chunk : total;
      float s = 0, t = 0, mu = a.phase == SumX ? 0.0f : a.mu()[c];
      float inv = a.phase == SumGrad ? a.invs()[c] : 0.0f;
      for (int64_t j = begin; j < end; ++j) {
        int64_t off = a.offset(c, j);
        float xv = loadAsFloat(a.xType, a.x, off);
        if (a.phase == SumX) {
          s += xv;
        } else if (a.phase == SumSqDiff) {
          float d = xv - mu;
          s += d * d;
        } else {
          float g = loadAsFloat(a.dyType, a.dy, off);
          s += g;
          t += g * ((xv - mu) * inv);
        }
      }
      a.partA()[i] = s;
      if (a.phase == SumGrad)
        a.partB()[i] = t;
      return;
    }
    case Mean: {
      float s = 0;
      for (int64_t k = 0; k < a.chunks; ++k)
        s += a.partA()[i * a.chunks + k];
      a.mu()[i] = s / count;
      return;
    }
    case Variance: {
      float mu, v;
      if (a.training) {
        float s = 0;
        for (int64_t k = 0; k < a.chunks; ++k)
          s += a.partA()[i * a.chunks + k];
        mu = a.mu()[i];
        v = s / count;
      } else {
        mu = loadAsFloat(a.runMeanType, a.runMean, i);
        v = loadAsFloat(a.runVarType, a.runVar, i);
        a.mu()[i] = mu;
      }
      float inv = 1.0f / std::sqrt(v + a.eps);
      a.invs()[i] = inv;
      if (!a.training)
        return;
      if (a.outMean)
        storeFromFloat(a.outMeanType, a.outMean, i,
                       loadAsFloat(a.runMeanType, a.runMean, i) * a.momentum +
                           mu * (1 - a.momentum));
      if (a.outVar)
        storeFromFloat(a.outVarType, a.outVar, i,
                       loadAsFloat(a.runVarType, a.runVar, i) * a.momentum + v * (1 - a.momentum));
      if (a.savedMean)
        storeFromFloat(a.savedMeanType, a.savedMean, i, mu);
      if (a.savedInv)
        storeFromFloat(a.savedInvType, a.savedInv, i, inv);
      return;
    }
    case Apply: {
      int64_t c = (i / a.pix) % a.C;
      float sc = a.invs()[c] * loadAsFloat(a.scaleType, a.scale, c);
      float b = loadAsFloat(a.biasType, a.bias, c);
      storeFromFloat(a.yType, a.y, i, (loadAsFloat(a.xType, a.x, i) - a.mu()[c]) * sc + b);
      return;
    }
    case CombineGrad: {
      float sumDy = 0, sumDyXhat = 0;
      for (int64_t k = 0; k < a.chunks; ++k) {
        sumDy += a.partA()[i * a.chunks + k];
        sumDyXhat += a.partB()[i * a.chunks + k];
      }
      if (a.dScale)
        storeFromFloat(a.dScaleType, a.dScale, i, sumDyXhat);
      if (a.dBias)
        storeFromFloat(a.dBiasType, a.dBias, i, sumDy);
      float sc = loadAsFloat(a.scaleType, a.scale, i);
      a.mg()[i] = sc * sumDy / count;
      a.mgx()[i] = sc * sumDyXhat / count;
      return;
    }
    case ApplyGrad: {
      int64_t c = (i / a.pix) % a.C;
      float inv = a.invs()[c], sc = loadAsFloat(a.scaleType, a.scale, c);
      float g = loadAsFloat(a.dyType, a.dy, i);
      float v = a.training ? inv * (g * sc - a.mg()[c] -
                                    (loadAsFloat(a.xType, a.x, i) - a.mu()[c]) * inv * a.mgx()[c])
                           : g * sc * inv;
      storeFromFloat(a.yType, a.y, i, v);
      return;
    }
    }
  }
};

//===----------------------------------------------------------------------===//
// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss and their gradients
//===----------------------------------------------------------------------===//

/// Scores [N, C, D...] (D = product of the trailing dims), targets [N, D...].
/// Workspace: losses[samples], then one float (weight sum or grad scale).
struct LossArgs {
  enum Phase : uint8_t {
    PerSample, ///< sample: log-probabilities, the sample's weighted loss
    Reduce,    ///< one thread: the reduced loss
    GradScale, ///< one thread: 1 / weight sum (mean) or 1
    Grad       ///< sample: its row of dX
  };
  enum Reduction : uint8_t { None, Sum, Mean };
  const void *x = nullptr, *target = nullptr, *weight = nullptr, *dLoss = nullptr;
  void *loss = nullptr, *logProb = nullptr, *dx = nullptr;
  uint8_t xType = 0, targetType = 0, weightType = 0, dLossType = 0, lossType = 0,
          logProbType = 0, dxType = 0;
  float *ws = nullptr;
  int64_t N = 0, C = 0, D = 1, ignore = 0;
  bool softmax = true, hasIgnore = false;
  Reduction reduction = Mean;
  Phase phase = PerSample;

  AMPC_HD int64_t targetAt(int64_t s) const {
    return targetType == FusedElem::I64 ? static_cast<const int64_t *>(target)[s]
                                        : static_cast<const int32_t *>(target)[s];
  }
  /// 0 when ignored, NaN when out of range, else the class weight (or 1).
  AMPC_HD float sampleWeight(int64_t t) const {
    if (hasIgnore && t == ignore)
      return 0.0f;
    if (t < 0 || t >= C)
      return nanF();
    return weight ? loadAsFloat(weightType, weight, t) : 1.0f;
  }
  AMPC_HD float weightSum() const {
    float s = 0;
    for (int64_t k = 0; k < N * D; ++k) {
      float w = sampleWeight(targetAt(k));
      s += w == w ? w : 0.0f;
    }
    return s;
  }

  static AMPC_HD void run(const LossArgs &a, int64_t i) {
    const int64_t C = a.C, D = a.D;
    switch (a.phase) {
    case PerSample: {
      int64_t n = i / D, d = i - n * D, base = n * C * D + d;
      auto X = [&](int64_t c) { return loadAsFloat(a.xType, a.x, base + c * D); };
      float lse = 0;
      if (a.softmax) {
        float mx = -infinityF();
        for (int64_t c = 0; c < C; ++c) {
          float v = X(c);
          mx = v > mx ? v : mx; // std::max(mx, v): NaN scores keep the maximum
        }
        float s = 0;
        for (int64_t c = 0; c < C; ++c)
          s += std::exp(X(c) - mx);
        lse = mx + std::log(s);
        if (a.logProb)
          for (int64_t c = 0; c < C; ++c)
            storeFromFloat(a.logProbType, a.logProb, base + c * D, X(c) - lse);
      }
      int64_t t = a.targetAt(i);
      float w = a.sampleWeight(t), l = 0.0f;
      if (w != w)
        l = nanF();
      else if (w != 0.0f)
        l = -(a.softmax ? X(t) - lse : X(t)) * w;
      if (a.reduction == None)
        storeFromFloat(a.lossType, a.loss, i, l);
      else
        a.ws[i] = l;
      return;
    }
    case Reduce: {
      float s = 0;
      for (int64_t k = 0; k < a.N * D; ++k)
        s += a.ws[k];
      storeFromFloat(a.lossType, a.loss, 0, a.reduction == Sum ? s : s / a.weightSum());
      return;
    }
    case GradScale:
      a.ws[0] = a.reduction == Mean ? 1.0f / a.weightSum() : 1.0f;
      return;
    case Grad: {
      int64_t n = i / D, d = i - n * D, base = n * C * D + d;
      int64_t t = a.targetAt(i);
      float w = a.sampleWeight(t);
      float dl = loadAsFloat(a.dLossType, a.dLoss, a.reduction == None ? i : 0);
      float coef = w * dl * a.ws[0];
      for (int64_t c = 0; c < C; ++c) {
        float v;
        if (a.softmax) {
          float p = std::exp(loadAsFloat(a.xType, a.x, base + c * D));
          v = (c == t && coef != 0.0f) ? coef * (p - 1.0f) : coef * p;
        } else {
          v = coef != coef ? nanF() : (c == t && coef != 0.0f ? -coef : 0.0f);
        }
        storeFromFloat(a.dxType, a.dx, base + c * D, v);
      }
      return;
    }
    }
  }
};

//===----------------------------------------------------------------------===//
// Sliding windows: pooling, im2col / col2im (up to 3 spatial axes; fewer are
// padded with leading axes of size 1)
//===----------------------------------------------------------------------===//

struct Window {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, stride[3] = {1, 1, 1},
          dil[3] = {1, 1, 1}, padBegin[3] = {0, 0, 0}, padEnd[3] = {0, 0, 0};
  AMPC_HD int64_t inPix() const { return in[0] * in[1] * in[2]; }
  AMPC_HD int64_t outPix() const { return out[0] * out[1] * out[2]; }
  AMPC_HD int64_t kernelSize() const { return k[0] * k[1] * k[2]; }
  /// Taps of output position o on axis d inside the input / the padded input.
  AMPC_HD int64_t taps(int d, int64_t o, bool padded) const {
    int64_t n = 0;
    for (int64_t t = 0; t < k[d]; ++t) {
      int64_t p = o * stride[d] - padBegin[d] + t * dil[d];
      n += padded ? (p >= -padBegin[d] && p < in[d] + padEnd[d]) : (p >= 0 && p < in[d]);
    }
    return n;
  }
  /// Calls f(offset) for every input position inside X that output
  /// position (o0, o1, o2)'s window reads, taps in order, the offset within
  /// one (n, c) plane (padding is skipped).
  template <typename F>
  AMPC_HD void forEachTap(int64_t o0, int64_t o1, int64_t o2, F &&f) const {
    for (int64_t k0 = 0; k0 < k[0]; ++k0) {
      int64_t p0 = o0 * stride[0] - padBegin[0] + k0 * dil[0];
      if (p0 < 0 || p0 >= in[0])
        continue;
      for (int64_t k1 = 0; k1 < k[1]; ++k1) {
        int64_t p1 = o1 * stride[1] - padBegin[1] + k1 * dil[1];
        if (p1 < 0 || p1 >= in[1])
          continue;
        for (int64_t k2 = 0; k2 < k[2]; ++k2) {
          int64_t p2 = o2 * stride[2] - padBegin[2] + k2 * dil[2];
          if (p2 >= 0 && p2 < in[2])
            f((p0 * in[1] + p1) * in[2] + p2);
        }
      }
    }
  }
  /// The output position whose tap t reads input position p on axis d, or -1.
  AMPC_HD int64_t outputOf(int d, int64_t p, int64_t t) const {
    int64_t q = p + padBegin[d] - t * dil[d];
    if (q < 0 || q % stride[d])
      return -1;
    q /= stride[d];
    return q < out[d] ? q : -1;
  }
};

struct PoolArgs {
  enum Mode : uint8_t {
    MaxPool,        ///< output element: max (and Indices)
    AveragePool,    ///< output element
    AveragePoolGrad,///< dX element: gathers dY / divisor in output order
    MaxPoolGrad     ///< (n, c) plane: adds dY at each window's maximum in X, in output order
  };
  const void *x = nullptr; ///< X, or dY for the gradients
  void *y = nullptr;       ///< Y, or dX
  int64_t *indices = nullptr; ///< MaxPool's Indices (optional)
  const void *fwdX = nullptr; ///< MaxPoolGrad: the forward operand X
  float *acc = nullptr;       ///< MaxPoolGrad: fp32 planes when dX is not fp32
  uint8_t xType = 0, yType = 0, fwdXType = 0;
  Mode mode = MaxPool;
  bool countPad = false, columnMajor = false;
  int64_t inPix = 0, outPix = 0; ///< per plane
  Window w;

  static AMPC_HD void run(const PoolArgs &a, int64_t i) {
    const Window &w = a.w;
    switch (a.mode) {
    case MaxPool: {
      int64_t p = i / a.outPix, o = i - p * a.outPix;
      int64_t o2 = o % w.out[2], o1 = (o / w.out[2]) % w.out[1], o0 = o / (w.out[2] * w.out[1]);
      const int64_t planeIn = p * a.inPix;
      float best;
      int64_t bestOff = argmax(w, a.x, a.xType, planeIn, o0, o1, o2, best);
      storeFromFloat(a.yType, a.y, i, best);
      if (a.indices) {
        int64_t flat = bestOff;
        if (a.columnMajor && bestOff >= 0) {
          int64_t q2 = bestOff % w.in[2], q1 = (bestOff / w.in[2]) % w.in[1],
                  q0 = bestOff / (w.in[2] * w.in[1]);
          flat = columnMajorFlat(w, q0, q1, q2);
        }
        a.indices[i] = bestOff < 0 ? -1 : planeIn + flat;
      }
      return;
    }
    case AveragePool: {
      int64_t p = i / a.outPix, o = i - p * a.outPix;
      int64_t o2 = o % w.out[2], o1 = (o / w.out[2]) % w.out[1], o0 = o / (w.out[2] * w.out[1]);
      const int64_t planeIn = p * a.inPix;
      float sum = 0;
      w.forEachTap(o0, o1, o2,
                   [&](int64_t off) { sum += loadAsFloat(a.xType, a.x, planeIn + off); });
      bool pad = a.countPad;
      int64_t div = w.taps(0, o0, pad) * w.taps(1, o1, pad) * w.taps(2, o2, pad);
      storeFromFloat(a.yType, a.y, i, sum / static_cast<float>(div));
      return;
    }
    case AveragePoolGrad: {
      int64_t p = i / a.inPix, q = i - p * a.inPix;
      int64_t q2 = q % w.in[2], q1 = (q / w.in[2]) % w.in[1], q0 = q / (w.in[2] * w.in[1]);
      float acc = 0;
      // Output positions in increasing order (taps in decreasing order), as
      // the CPU kernel adds them.
      for (int64_t k0 = w.k[0] - 1; k0 >= 0; --k0) {
        int64_t o0 = w.outputOf(0, q0, k0);
        if (o0 < 0)
          continue;
        for (int64_t k1 = w.k[1] - 1; k1 >= 0; --k1) {
          int64_t o1 = w.outputOf(1, q1, k1);
          if (o1 < 0)
            continue;
          for (int64_t k2 = w.k[2] - 1; k2 >= 0; --k2) {
            int64_t o2 = w.outputOf(2, q2, k2);
            if (o2 < 0)
              continue;
            bool pad = a.countPad;
            int64_t div = w.taps(0, o0, pad) * w.taps(1, o1, pad) * w.taps(2, o2, pad);
            if (div == 0)
              continue;
            int64_t o = (o0 * w.out[1] + o1) * w.out[2] + o2;
            acc += loadAsFloat(a.xType, a.x, p * a.outPix + o) / static_cast<float>(div);
          }
        }
      }
      storeFromFloat(a.yType, a.y, i, acc);
      return;
    }
    case MaxPoolGrad: {
      int64_t lo = i * a.inPix;
      float *acc = a.acc ? a.acc + lo : static_cast<float *>(a.y) + lo;
      for (int64_t k = 0; k < a.inPix; ++k)
        acc[k] = 0.0f;
      for (int64_t o = 0; o < a.outPix; ++o) {
        int64_t o2 = o % w.out[2], o1 = (o / w.out[2]) % w.out[1], o0 = o / (w.out[2] * w.out[1]);
        float best;
        int64_t at = argmax(w, a.fwdX, a.fwdXType, lo, o0, o1, o2, best);
        if (at >= 0)
          acc[at] += loadAsFloat(a.xType, a.x, i * a.outPix + o);
      }
      if (a.acc)
        for (int64_t k = 0; k < a.inPix; ++k)
          storeFromFloat(a.yType, a.y, lo + k, acc[k]);
      return;
    }
    }
  }

  /// The offset in plane `planeIn` of x of the first maximum of output
  /// position (o0, o1, o2)'s window, in window order, or -1 for an empty
  /// window. MaxPool and MaxPoolGrad both choose through this (and the CPU
  /// kernel's loop is the same), so they agree on ties and NaNs.
  static AMPC_HD int64_t argmax(const Window &w, const void *x, uint8_t type, int64_t planeIn,
                                int64_t o0, int64_t o1, int64_t o2, float &best) {
    best = -infinityF();
    int64_t bestOff = -1;
    w.forEachTap(o0, o1, o2, [&](int64_t off) {
      float v = loadAsFloat(type, x, planeIn + off);
      if (v > best || bestOff < 0) {
        best = v;
        bestOff = off;
      }
    });
    return bestOff;
  }

  /// MaxPool's Indices with storage_order = 1: column-major over the spatial
  /// axes, the first varying fastest (padded leading axes have size 1 and
  /// position 0, so they change nothing).
  static AMPC_HD int64_t columnMajorFlat(const Window &w, int64_t q0, int64_t q1, int64_t q2) {
    return q0 + q1 * w.in[0] + q2 * w.in[0] * w.in[1];
  }
};

/// Convolution through GEMMs: a chunk of `nb` samples starting at n0 is laid
/// out as col[g][cr * K + kk][nn][p] (cr: channel in the group, kk: kernel
/// position, p: output position), so that one strided-batched GEMM over the
/// groups computes the chunk.
///   Im2Col: thread per col element, reads X (zero in the padding);
///   Col2Im: thread per dX element of the chunk, sums dcol (fp32) over the
///           kernel positions that read it, in kernel order.
struct ConvArgs {
  enum Mode : uint8_t { Im2Col, Col2Im };
  const void *src = nullptr; ///< X (Im2Col) or dcol as fp32 (Col2Im)
  void *dst = nullptr;       ///< col (Im2Col) or dX (Col2Im)
  uint8_t type = 0;          ///< X's / col's element type, or dX's
  int elemBytes = 4;
  Mode mode = Im2Col;
  int64_t C = 0, Cg = 0, nb = 0, n0 = 0;
  Window w;

  static AMPC_HD void run(const ConvArgs &a, int64_t i) {
    const Window &w = a.w;
    const int64_t inPix = w.inPix(), outPix = w.outPix(), KK = w.kernelSize();
    if (a.mode == Im2Col) {
      int64_t p = i % outPix, t = i / outPix;
      int64_t nn = t % a.nb;
      t /= a.nb;
      int64_t r = t % (a.Cg * KK), g = t / (a.Cg * KK);
      int64_t cr = r / KK, kk = r - cr * KK;
      int64_t k2 = kk % w.k[2], k1 = (kk / w.k[2]) % w.k[1], k0 = kk / (w.k[2] * w.k[1]);
      int64_t o2 = p % w.out[2], o1 = (p / w.out[2]) % w.out[1], o0 = p / (w.out[2] * w.out[1]);
      int64_t p0 = o0 * w.stride[0] - w.padBegin[0] + k0 * w.dil[0];
      int64_t p1 = o1 * w.stride[1] - w.padBegin[1] + k1 * w.dil[1];
      int64_t p2 = o2 * w.stride[2] - w.padBegin[2] + k2 * w.dil[2];
      bool inside = p0 >= 0 && p0 < w.in[0] && p1 >= 0 && p1 < w.in[1] && p2 >= 0 && p2 < w.in[2];
      int64_t src = ((a.n0 + nn) * a.C + g * a.Cg + cr) * inPix + (p0 * w.in[1] + p1) * w.in[2] + p2;
      copyElement(a.elemBytes, a.src, src, a.dst, i, inside);
      return;
    }
    // Col2Im over the chunk's dX elements [nn][c][q].
    int64_t q = i % inPix, t = i / inPix;
    int64_t c = t % a.C, nn = t / a.C;
    int64_t g = c / a.Cg, cr = c - g * a.Cg;
    int64_t q2 = q % w.in[2], q1 = (q / w.in[2]) % w.in[1], q0 = q / (w.in[2] * w.in[1]);
    const float *dcol = static_cast<const float *>(a.src);
    float acc = 0;
    for (int64_t k0 = 0; k0 < w.k[0]; ++k0) {
      int64_t o0 = w.outputOf(0, q0, k0);
      if (o0 < 0)
        continue;
      for (int64_t k1 = 0; k1 < w.k[1]; ++k1) {
        int64_t o1 = w.outputOf(1, q1, k1);
        if (o1 < 0)
          continue;
        for (int64_t k2 = 0; k2 < w.k[2]; ++k2) {
          int64_t o2 = w.outputOf(2, q2, k2);
          if (o2 < 0)
            continue;
          int64_t kk = (k0 * w.k[1] + k1) * w.k[2] + k2;
          int64_t row = g * a.Cg * KK + cr * KK + kk;
          acc += dcol[(row * a.nb + nn) * outPix + (o0 * w.out[1] + o1) * w.out[2] + o2];
        }
      }
    }
    storeFromFloat(a.type, a.dst, ((a.n0 + nn) * a.C + c) * inPix + q, acc);
  }
};

//===----------------------------------------------------------------------===//
// ampc.AllFinite
//===----------------------------------------------------------------------===//

/// Phase 0: thread per chunk of every input (inputs laid end to end), writes
/// flags[first + chunk] = 1 when the chunk is finite. Phase 1: one thread
/// ANDs flags[0, total) into the bool result.
struct AllFiniteArgs {
  static constexpr int kMaxInputs = 32;
  int count = 0;
  uint8_t phase = 0;
  const void *p[kMaxInputs] = {};
  uint8_t type[kMaxInputs] = {};
  int64_t n[kMaxInputs] = {};
  int64_t firstChunk[kMaxInputs + 1] = {}; ///< relative to flagBase
  int64_t chunk = 1 << 14, flagBase = 0, totalFlags = 0;
  uint8_t *flags = nullptr, *out = nullptr;

  static AMPC_HD bool finite(uint8_t type, const void *p, int64_t i) {
    switch (type) {
    case FusedElem::F32:
      return (static_cast<const uint32_t *>(p)[i] & 0x7F800000u) != 0x7F800000u;
    case FusedElem::F16:
      return (static_cast<const uint16_t *>(p)[i] & 0x7C00u) != 0x7C00u;
    case FusedElem::BF16:
      return (static_cast<const uint16_t *>(p)[i] & 0x7F80u) != 0x7F80u;
    default: {
      double v = static_cast<const double *>(p)[i];
      return v - v == 0.0;
    }
    }
  }

  static AMPC_HD void run(const AllFiniteArgs &a, int64_t i) {
    if (a.phase == 1) {
      uint8_t ok = 1;
      for (int64_t k = 0; k < a.totalFlags; ++k)
        ok &= a.flags[k];
      *a.out = ok;
      return;
    }
    int t = 0;
    while (t + 1 < a.count && a.firstChunk[t + 1] <= i)
      ++t;
    int64_t begin = (i - a.firstChunk[t]) * a.chunk;
    int64_t end = begin + a.chunk < a.n[t] ? begin + a.chunk : a.n[t];
    uint8_t ok = 1;
    for (int64_t j = begin; j < end; ++j)
      ok &= finite(a.type[t], a.p[t], j) ? 1 : 0;
    a.flags[a.flagBase + i] = ok;
  }
};

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

/// Dropout with the CPU backend's generator (math::dropoutKeeps), so both
/// draw the same masks: Forward, one thread per element, reads the run
/// counter (int64 state) on the device; Advance, one thread, then increments
/// it (a CUDA graph replays both); Grad scales dY through the mask.
struct DropoutArgs {
  enum Mode : uint8_t { Forward, Advance, Grad };
  Mode mode = Forward;
  const void *x = nullptr; ///< X, or dY
  void *y = nullptr;       ///< Y, or dX
  uint8_t *mask = nullptr; ///< Forward: written when present; Grad: read
  int64_t *counter = nullptr;
  uint8_t xType = 0, yType = 0;
  uint64_t seed = 0;
  /// The ratio and the training flag: constants of the plan, or scalars
  /// read on the device when the plan computes or feeds them (`ratioAt`,
  /// `trainingAt`), as the CPU kernel reads them every run.
  double ratio = 0.5;
  bool training = false;
  const void *ratioAt = nullptr, *trainingAt = nullptr;
  uint8_t ratioType = 0, trainingType = 0;

  /// What the ratio and mode mean for this run: the CPU kernel's formulas.
  struct Rate {
    bool copies;        ///< inference or ratio 0: Y = X, the mask all true
    float scale;        ///< 1 / (1 - ratio) for kept elements
    uint32_t threshold; ///< ratio * 2^24, against the generator's 24 bits
  };
  AMPC_HD Rate rate() const {
    double r = ratioAt ? static_cast<double>(loadAsFloat(ratioType, ratioAt, 0)) : ratio;
    bool train = trainingAt ? loadAsFloat(trainingType, trainingAt, 0) != 0.0f : training;
    double atLeast0 = 0.0 < r ? r : 0.0; // std::min(1.0, std::max(0.0, r)), NaN included
    double clamped = atLeast0 < 1.0 ? atLeast0 : 1.0;
    return {!train || r == 0.0, r < 1.0 ? static_cast<float>(1.0 / (1.0 - r)) : 0.0f,
            static_cast<uint32_t>(clamped * 16777216.0)};
  }

  static AMPC_HD void run(const DropoutArgs &a, int64_t i) {
    switch (a.mode) {
    case Forward: {
      Rate rt = a.rate();
      bool keep = rt.copies ||
                  math::dropoutKeeps(math::dropoutKey(a.seed, static_cast<uint64_t>(*a.counter)),
                                     i, rt.threshold);
      float v = loadAsFloat(a.xType, a.x, i);
      storeFromFloat(a.yType, a.y, i, rt.copies ? v : (keep ? v * rt.scale : 0.0f));
      if (a.mask)
        a.mask[i] = keep;
      return;
    }
    case Advance:
      ++*a.counter;
      return;
    case Grad: {
      Rate rt = a.rate();
      float g = loadAsFloat(a.xType, a.x, i);
      storeFromFloat(a.yType, a.y, i, rt.copies ? g : (a.mask[i] ? g * rt.scale : 0.0f));
      return;
    }
    }
  }
};

//===----------------------------------------------------------------------===//
// ampc.AdamW
//===----------------------------------------------------------------------===//

/// One thread per element, in place or not (p, m, v may equal their
/// outputs); each thread derives the step's scalars from lr and t on the
/// device (a CUDA graph replays them) and skips the update on found_inf by
/// writing the inputs back, as the CPU kernel does.
struct AdamWArgs {
  math::AdamWConstants c;
  const float *p = nullptr, *m = nullptr, *v = nullptr, *lr = nullptr, *t = nullptr;
  const void *g = nullptr;
  uint8_t gType = 0;
  const uint8_t *found = nullptr;
  float *pOut = nullptr, *mOut = nullptr, *vOut = nullptr;
  void *copy = nullptr; ///< the updated parameter's fp16/bf16 copy, when asked for
  uint8_t copyType = 0;

  static AMPC_HD void run(const AdamWArgs &a, int64_t i) {
    float p = a.p[i], m = a.m[i], v = a.v[i];
    if (!(a.found && *a.found)) {
      math::AdamWStepScalars s = math::adamwStepScalars(a.c, *a.lr, *a.t);
      math::adamwUpdate(a.c, s, loadAsFloat(a.gType, a.g, i), p, m, v);
    }
    a.pOut[i] = p;
    a.mOut[i] = m;
    a.vOut[i] = v;
    if (a.copy)
      storeFromFloat(a.copyType, a.copy, i, p);
  }
};

//===----------------------------------------------------------------------===//
// The kernel list
//===----------------------------------------------------------------------===//

#define AMPC_CUDA_KERNELS(X)                                                                       \
  X(Fused, FusedArgs)                                                                              \
  X(Copy, CopyArgs)                                                                                \
  X(Gather, GatherArgs)                                                                            \
  X(GatherElements, GatherElementsArgs)                                                            \
  X(Pad, PadArgs)                                                                                  \
  X(GatherGrad, GatherGradArgs)                                                                    \
  X(Reduce, ReduceArgs)                                                                            \
  X(Softmax, SoftmaxArgs)                                                                          \
  X(LayerNorm, LayerNormArgs)                                                                      \
  X(BatchNorm, BatchNormArgs)                                                                      \
  X(Loss, LossArgs)                                                                                \
  X(Pool, PoolArgs)                                                                                \
  X(Conv, ConvArgs)                                                                                \
  X(AllFinite, AllFiniteArgs)                                                                      \
  X(Dropout, DropoutArgs)                                                                          \
  X(AdamW, AdamWArgs)

enum class KernelKind : uint8_t {
#define AMPC_KERNEL_ENUM(NAME, ARGS) NAME,
  AMPC_CUDA_KERNELS(AMPC_KERNEL_ENUM)
#undef AMPC_KERNEL_ENUM
};

} // namespace ampc::rt::cuda
