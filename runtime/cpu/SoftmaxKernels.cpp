//===- SoftmaxKernels.cpp - Softmax, LogSoftmax, Hardmax and gradients -----===//
//
// One axis (opset 13). The tensor is viewed as [outer, len, inner]; each
// outer slice [len, inner] is converted to fp32 once, and the per-column
// maximum, sums and results run as loops over `inner` (vectorizable). With
// inner = 1 (the last axis: attention, a vocabulary) a slice is one
// contiguous row, which runs as row loops instead: 16-way partial sums
// (sumFloats, dotFloats) and the exponentials 16 lanes at a time
// (expShifted). Work is split by outer slices. On AVX-512, fp32 rows of a
// multiple of 16 values (attention's) run the same operations in vector
// registers (softmaxRowsAvx512, softmaxGradRowsAvx512: the same bits).
//
//===----------------------------------------------------------------------===//

#include "FusedKernel.h"
#include "KernelHelpers.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ampc::rt::cpu {

namespace {

enum class SoftOp { Softmax, LogSoftmax, Hardmax, SoftmaxGrad, LogSoftmaxGrad };

/// One contiguous row of a softmax-family op (inner = 1). `x` is the
/// forward's input or the gradient's dY, `yv` the forward's result (the
/// gradients), `tmp` a row of scratch.
void softRow(SoftOp op, const float *x, const float *yv, float *out, float *tmp, int64_t n) {
  switch (op) {
  case SoftOp::Softmax: {
    float m = maxFloats(x, n);
    expShifted(x, m, out, n);
    float inv = 1.0f / sumFloats(out, n);
    for (int64_t i = 0; i < n; ++i)
      out[i] *= inv;
    return;
  }
  case SoftOp::LogSoftmax: {
    float m = maxFloats(x, n);
    expShifted(x, m, tmp, n);
    float lse = std::log(sumFloats(tmp, n));
    for (int64_t i = 0; i < n; ++i)
      out[i] = (x[i] - m) - lse;
    return;
  }
  case SoftOp::SoftmaxGrad: {
    // dx = y (dy - sum(dy y))
    float s = dotFloats(x, yv, n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = yv[i] * (x[i] - s);
    return;
  }
  case SoftOp::LogSoftmaxGrad: {
    // dx = dy - exp(y) sum(dy)
    float s = sumFloats(x, n);
    expShifted(yv, 0.0f, tmp, n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = x[i] - tmp[i] * s;
    return;
  }
  case SoftOp::Hardmax:
    break;
  }
}

/// Rows [o0, o1) of an fp32 Softmax (and its bf16 cast) or SoftmaxGrad (dY
/// fp32 or bf16; dX where y has data, bf16(dX / divisor) where z has)
/// through the AVX-512 row kernels; false when not built.
bool rowsAvx512(SoftOp op, const TensorArg &a, const TensorArg &b, const TensorArg &y,
                const TensorArg &z, float divisor, int64_t o0, int64_t o1, int64_t len) {
  float *out = y.data ? static_cast<float *>(y.data) + o0 * len : nullptr;
  uint16_t *cast = z.data ? static_cast<uint16_t *>(z.data) + o0 * len : nullptr;
  if (op == SoftOp::SoftmaxGrad) {
    bool bf16 = a.type == plan::BF16;
    const void *dy = static_cast<const uint8_t *>(a.data) + o0 * len * (bf16 ? 2 : 4);
    return softmaxGradRowsAvx512(dy, bf16, static_cast<const float *>(b.data) + o0 * len, out,
                                 o1 - o0, len, cast, divisor);
  }
  return softmaxRowsAvx512(static_cast<const float *>(a.data) + o0 * len, out, cast, o1 - o0, len);
}

struct Slices {
  int64_t outer = 0, len = 0, inner = 0;
};

bool slicesOf(const StepContext &ctx, const TensorArg &t, Slices &s, std::string &error) {
  int64_t axis = normalizeAxis(ctx.attrInt("axis", -1), t.rank());
  if (axis < 0) {
    error = "axis out of range for " + argString(t);
    return false;
  }
  s.len = t.shape[axis];
  s.inner = product(t.shape, axis + 1);
  s.outer = s.len * s.inner != 0 ? t.numel / (s.len * s.inner) : 0;
  return true;
}

std::unique_ptr<Kernel> createSoft(const StepContext &ctx, std::string &error, SoftOp op) {
  bool grad = op == SoftOp::SoftmaxGrad || op == SoftOp::LogSoftmaxGrad;
  unsigned numIn = grad ? 2 : 1;
  for (unsigned i = 0; i < numIn; ++i)
    if (!ctx.has(i)) {
      error = "missing operand " + std::to_string(i);
      return nullptr;
    }
  if (ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "missing result";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, 1}, {0}, error))
    return nullptr;
  // Forward: x. Gradients: dY (input 0) and Y (input 1).
  TensorArg a = ctx.inputs[0], b = grad ? ctx.inputs[1] : TensorArg(), y = ctx.outputs[0];
  if (y.shape != a.shape || (grad && b.shape != a.shape)) {
    error = "operands and result must share their shape";
    return nullptr;
  }
  Slices s;
  if (!slicesOf(ctx, a, s, error))
    return nullptr;
  // The Cast to bf16 after a Softmax, written with Y; or after a SoftmaxGrad,
  // bf16(dX / divisor), with dX or instead of it (NormEpilogue.h). Rows of
  // the last axis only.
  TensorArg z = ctx.castOutput, divisor = ctx.castDivisor;
  const bool scaledCast = z.data && op == SoftOp::SoftmaxGrad && divisor.data;
  const bool castOnly = scaledCast && ctx.castOnly;
  if (z.data && (!(op == SoftOp::Softmax && !ctx.castOnly) && !scaledCast)) {
    error = "a bf16 cast is written only by a Softmax with its result or a SoftmaxGrad";
    return nullptr;
  }
  if (z.data && (z.numel != y.numel || z.type != plan::BF16 ||
                 (scaledCast && (divisor.numel != 1 || s.inner != 1)))) {
    error = "a bf16 cast written with the result must be shaped like it";
    return nullptr;
  }
  int64_t slice = s.len * s.inner;
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  // colB holds int64 for Hardmax: every block starts at an even float
  // offset, so it is 8-byte aligned (UBSan found it misaligned).
  // Then a row of scratch for softRow (inner = 1).
  int64_t colsEnd = (3 * slice + 4 * s.inner + 32 + 1) & ~int64_t(1);
  int64_t perRange = colsEnd + (s.inner == 1 ? slice : 0);
  size_t off = layout.add<float>(perRange * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  int64_t minSlices = std::max<int64_t>(1, 4096 / std::max<int64_t>(slice, 1));
  // fp32 rows of a multiple of 16 values on AVX-512 (attention): the row
  // loops below in vector registers, one call per range (the same bits).
  // SoftmaxGrad's dY may be bf16 (a CastPrologue: the Cast before it skipped).
  bool fastRows = s.inner == 1 && s.len % 16 == 0 && useAvx512() &&
                  (a.type == plan::F32 || (op == SoftOp::SoftmaxGrad && a.type == plan::BF16)) &&
                  y.type == plan::F32 && (!grad || b.type == plan::F32) &&
                  (!z.data || z.type == plan::BF16) &&
                  (op == SoftOp::Softmax || op == SoftOp::SoftmaxGrad);
  return std::make_unique<LambdaKernel>([=, &pool] {
    const float div = scaledCast ? loadFloat(divisor, 0) : 1.0f;
    pool.parallelFor(s.outer, minSlices, [&](int64_t o0, int64_t o1, int range) {
      if (fastRows && rowsAvx512(op, a, b, castOnly ? TensorArg() : y, z, div, o0, o1, s.len))
        return;
      float *buf = at<float>(scratch->data(), off) + range * perRange;
      float *aBuf = buf, *bBuf = buf + slice, *yBuf = buf + 2 * slice;
      float *colA = buf + ((3 * slice + 1) & ~int64_t(1));
      float *colB = colA + ((s.inner + 1) & ~int64_t(1));
      const int64_t L = s.len, I = s.inner;
      for (int64_t o = o0; o < o1; ++o) {
        const float *x = rowIn(a, o * slice, slice, aBuf);
        const float *yv = grad ? rowIn(b, o * slice, slice, bBuf) : nullptr;
        float *out = castOnly ? yBuf : rowOut(y, o * slice, yBuf);
        if (I == 1 && op != SoftOp::Hardmax) {
          float *tmp = buf + colsEnd;
          softRow(op, x, yv, out, tmp, L);
          if (!castOnly)
            rowCommit(y, o * slice, slice, out);
          if (scaledCast) {
            for (int64_t i = 0; i < L; ++i)
              tmp[i] = out[i] / div;
            storeFloats(z, o * slice, slice, tmp);
          } else if (z.data) {
            storeFloats(z, o * slice, slice, out);
          }
          continue;
        }
        switch (op) {
        case SoftOp::Softmax:
        case SoftOp::LogSoftmax: {
          // colA: max (NaN ignored like the interpreter's `x > max`), colB: sum.
          for (int64_t i = 0; i < I; ++i)
            colA[i] = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < L; ++j)
            for (int64_t i = 0; i < I; ++i)
              colA[i] = x[j * I + i] > colA[i] ? x[j * I + i] : colA[i];
          std::memset(colB, 0, I * sizeof(float));
          if (op == SoftOp::Softmax) {
            for (int64_t j = 0; j < L; ++j)
              for (int64_t i = 0; i < I; ++i) {
                float e = std::exp(x[j * I + i] - colA[i]);
                out[j * I + i] = e;
                colB[i] += e;
              }
            for (int64_t i = 0; i < I; ++i)
              colB[i] = 1.0f / colB[i];
            for (int64_t j = 0; j < L; ++j)
              for (int64_t i = 0; i < I; ++i)
                out[j * I + i] *= colB[i];
          } else {
            for (int64_t j = 0; j < L; ++j)
              for (int64_t i = 0; i < I; ++i)
                colB[i] += std::exp(x[j * I + i] - colA[i]);
            for (int64_t i = 0; i < I; ++i)
              colB[i] = std::log(colB[i]);
            for (int64_t j = 0; j < L; ++j)
              for (int64_t i = 0; i < I; ++i)
                out[j * I + i] = (x[j * I + i] - colA[i]) - colB[i];
          }
          break;
        }
        case SoftOp::Hardmax: {
          // First index of the maximum.
          int64_t *arg = reinterpret_cast<int64_t *>(colB);
          for (int64_t i = 0; i < I; ++i) {
            colA[i] = -std::numeric_limits<float>::infinity();
            arg[i] = 0;
          }
          for (int64_t j = 0; j < L; ++j)
            for (int64_t i = 0; i < I; ++i)
              if (x[j * I + i] > colA[i]) {
                colA[i] = x[j * I + i];
                arg[i] = j;
              }
          for (int64_t j = 0; j < L; ++j)
            for (int64_t i = 0; i < I; ++i)
              out[j * I + i] = arg[i] == j ? 1.0f : 0.0f;
          break;
        }
        case SoftOp::SoftmaxGrad:
        case SoftOp::LogSoftmaxGrad: {
          // Softmax: dx = y (dy - sum(dy y)); LogSoftmax: dx = dy - exp(y) sum(dy).
          bool isLog = op == SoftOp::LogSoftmaxGrad;
          std::memset(colA, 0, I * sizeof(float));
          for (int64_t j = 0; j < L; ++j)
            for (int64_t i = 0; i < I; ++i)
              colA[i] += isLog ? x[j * I + i] : x[j * I + i] * yv[j * I + i];
          for (int64_t j = 0; j < L; ++j)
            for (int64_t i = 0; i < I; ++i) {
              int64_t k = j * I + i;
              out[k] = isLog ? x[k] - std::exp(yv[k]) * colA[i] : yv[k] * (x[k] - colA[i]);
            }
          break;
        }
        }
        rowCommit(y, o * slice, slice, out);
        if (z.data)
          storeFloats(z, o * slice, slice, out);
      }
    });
  });
}

} // namespace

void registerSoftmaxKernels() {
  auto reg = [](const char *name, SoftOp op) {
    registerKernel(name, [op](const StepContext &c, std::string &e) { return createSoft(c, e, op); });
  };
  reg("Softmax", SoftOp::Softmax);
  reg("LogSoftmax", SoftOp::LogSoftmax);
  reg("Hardmax", SoftOp::Hardmax);
  reg("ampc.SoftmaxGrad", SoftOp::SoftmaxGrad);
  reg("ampc.LogSoftmaxGrad", SoftOp::LogSoftmaxGrad);
}

} // namespace ampc::rt::cpu
