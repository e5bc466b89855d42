//===- KernelHelpers.h - Shared pieces of the CPU kernels -------*- C++ -*-===//
//
// Element types, block conversions between fp16/bf16 storage and fp32 (vector
// instructions chosen at run time where the CPU has them, portable code
// otherwise; bit-identical to ElementMath.h either way), per-row fp32 access,
// deterministic sums, operand checks and the scratch memory that the kernels
// of one backend share (they run one after another, so one buffer sized for
// the largest need serves all of them; it is sized at load time, never in
// run()).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Kernel.h"

#include "ampc/rt/PlanFile.h"

#include <algorithm>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ampc::rt::cpu {

/// Registration hooks of the kernel files (called by registerAllCpuKernels).
void registerGemmKernels();
void registerConvKernels();
void registerPoolKernels();
void registerNormKernels();
void registerBatchNormKernels();
void registerSoftmaxKernels();
void registerLossKernels();
void registerReduceKernels();
void registerDataMovementKernels();
void registerElementwiseKernels();
void registerGradientKernels();
void registerTrainingKernels();

//===----------------------------------------------------------------------===//
// Element types and shapes
//===----------------------------------------------------------------------===//

/// fp32, fp16 or bf16: the types the compute kernels accept.
inline bool isFloatType(plan::ElemType t) {
  return t == plan::F32 || t == plan::F16 || t == plan::BF16;
}
inline bool isIndexType(plan::ElemType t) { return t == plan::I64 || t == plan::I32; }
/// Storage bytes per element (1 for the unknown types validatePlan rejects).
inline size_t elemBytes(plan::ElemType t) { return std::max<size_t>(planElemSize(t), 1); }
inline const char *elemTypeName(plan::ElemType t) { return planElemTypeName(t); }
/// Whether the CPU kernels built for AVX-512 (the fused kernel, and the loops
/// run through runForThisCpu: AdamW, normalization rows, column sums) run:
/// the CPU has AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C, and AMPC_CPU_ISA is
/// not "baseline" (which forces the portable
/// builds; tests compare both).
bool useAvx512();

/// For functions and lambdas that must inline into both builds of
/// runForThisCpu (below), so that their loops are compiled for each.
#define AMPC_ALWAYS_INLINE __attribute__((always_inline))

/// Calls fn() from one of two builds of the same code, picked by useAvx512():
/// one compiled for AVX-512 (F/BW/VL/DQ), where fn and the AMPC_ALWAYS_INLINE
/// code it calls vectorize 16 lanes wide, and a baseline one. Both run the
/// source's operations in its order (no FMA contraction), so the same bits.
template <typename Fn> void runBaselineBuild(const Fn &fn) { fn(); }
#if defined(__x86_64__) && defined(__GNUC__)
template <typename Fn>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void runAvx512Build(const Fn &fn) {
  fn();
}
#endif
template <typename Fn> void runForThisCpu(const Fn &fn) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (useAvx512())
    return runAvx512Build(fn);
#endif
  runBaselineBuild(fn);
}

/// "float16[2,3]"
std::string argString(const TensorArg &t);
int64_t product(const std::vector<int64_t> &v, size_t begin = 0, size_t end = SIZE_MAX);
/// Axis in [0, rank) from a possibly negative axis; -1 when out of range.
inline int64_t normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < 0)
    axis += rank;
  return axis >= 0 && axis < rank ? axis : -1;
}
/// Row-major strides.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape);

/// True when input `i` is present and has CONSTANT storage (its value can be
/// read when the kernel is created).
bool isConstantInput(const StepContext &ctx, unsigned i);
/// The values of an integer (int64/int32/int8/uint8/bool) or float tensor.
std::vector<int64_t> readInts(const TensorArg &t);
double readScalar(const TensorArg &t);

/// One-line reasons for factories.
bool requireFloat(const StepContext &ctx, std::initializer_list<int> inputs,
                  std::initializer_list<int> outputs, std::string &error);

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

/// n elements of type t at src (element 0) to fp32 / from fp32 (round to
/// nearest even). F32, F16, BF16 use block paths; other types go element by
/// element through loadFloat/storeFloat.
void toFloat(plan::ElemType t, const void *src, float *dst, int64_t n);
void fromFloat(plan::ElemType t, const float *src, void *dst, int64_t n);

/// Elements [begin, begin + n) of a tensor as fp32.
inline void loadFloats(const TensorArg &t, int64_t begin, int64_t n, float *dst) {
  toFloat(t.type, static_cast<const uint8_t *>(t.data) + begin * elemBytes(t.type), dst, n);
}
inline void storeFloats(const TensorArg &t, int64_t begin, int64_t n, const float *src) {
  fromFloat(t.type, src, static_cast<uint8_t *>(t.data) + begin * elemBytes(t.type), n);
}

/// A contiguous run of a tensor as fp32: the tensor's own memory for F32,
/// otherwise `buf` after conversion.
inline const float *rowIn(const TensorArg &t, int64_t begin, int64_t n, float *buf) {
  if (t.type == plan::F32)
    return static_cast<const float *>(t.data) + begin;
  loadFloats(t, begin, n, buf);
  return buf;
}
/// Where to compute a contiguous run of results: the tensor's memory for F32,
/// otherwise `buf` (then rowCommit converts it into the tensor).
inline float *rowOut(const TensorArg &t, int64_t begin, float *buf) {
  return t.type == plan::F32 ? static_cast<float *>(t.data) + begin : buf;
}
inline void rowCommit(const TensorArg &t, int64_t begin, int64_t n, const float *vals) {
  if (t.type != plan::F32)
    storeFloats(t, begin, n, vals);
}

/// Whole-tensor conversions split over the pool (ranges depend only on n).
void parallelToFloat(ThreadPool &pool, const TensorArg &t, float *dst);
void parallelFromFloat(ThreadPool &pool, const float *src, const TensorArg &t);

//===----------------------------------------------------------------------===//
// Deterministic sums
//===----------------------------------------------------------------------===//

/// Sum of n floats with 16 independent partial sums combined pairwise: the
/// same bits for the same input, vectorizable, and more accurate than a
/// single running sum.
float sumFloats(const float *p, int64_t n);
/// The maximum of p[0..n), NaN ignored (as `x > max` does), in 16 lanes;
/// -inf for an empty or all-NaN row.
float maxFloats(const float *p, int64_t n);
/// Sum of p[i] * q[i].
float dotFloats(const float *p, const float *q, int64_t n);
/// Sum of (p[i] - c)^2.
float sumSquaredDiff(const float *p, float c, int64_t n);

//===----------------------------------------------------------------------===//
// Scratch memory shared by the kernels of one backend
//===----------------------------------------------------------------------===//

class SharedScratch {
public:
  /// The scratch of the backend that owns `pool`.
  static std::shared_ptr<SharedScratch> of(ThreadPool &pool);
  ~SharedScratch();
  /// Grows the buffer to at least `bytes` (kernel creation only).
  void reserve(size_t bytes);
  /// The buffer (64-byte aligned); valid after every reserve.
  uint8_t *data() const { return data_; }

private:
  uint8_t *data_ = nullptr;
  size_t size_ = 0;
};

/// Lays out sub-buffers of one scratch reservation (64-byte aligned each).
class ScratchLayout {
public:
  /// Returns the offset of a new sub-buffer of `count` elements of T.
  template <typename T> size_t add(int64_t count) {
    size_t off = size_;
    size_ += (static_cast<size_t>(std::max<int64_t>(count, 0)) * sizeof(T) + 63) / 64 * 64;
    return off;
  }
  size_t size() const { return size_; }

private:
  size_t size_ = 0;
};

template <typename T> T *at(uint8_t *base, size_t offset) {
  return reinterpret_cast<T *>(base + offset);
}

//===----------------------------------------------------------------------===//
// Sliding windows (Conv, pooling and their gradients)
//===----------------------------------------------------------------------===//

/// Window geometry resolved from a step's attributes exactly as the
/// interpreter resolves it (auto_pad included): kernel, strides, dilations,
/// leading pads, and the explicit pads (begin..., end...).
struct WindowGeometry {
  std::vector<int64_t> kernel, strides, dilations, padBegin, pads, inSp, outSp;
};
bool windowGeometry(const StepContext &ctx, const std::vector<int64_t> &inSp,
                    const std::vector<int64_t> &outSp, const std::vector<int64_t> &kernel,
                    WindowGeometry &w, std::string &error);

} // namespace ampc::rt::cpu
