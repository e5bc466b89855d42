//===- RowKernels.h - Kernels that give a row to a warp or a block -*- C++ -*-===//
//
// Softmax, LayerNorm, reductions over the last axis and cross-entropy read
// whole rows. A row launch gives each row `lanes` threads (a warp of 32, or
// a block of 256 for long rows); the row is cut into chunks of kRowChunk
// consecutive elements (16 bytes of fp16 / bf16, so that a lane loads a
// chunk at once and a warp's loads are contiguous), lane t handling chunks
// t, t + lanes, t + 2 lanes, ... in that order. A row kernel's Args says how,
// through static members (see SoftmaxArgs for an example):
//
//   int lanes;                                   0: the per-index `run` form
//   int64_t rowLength() const;
//   static int rowPasses(const A &);             reductions before the writes
//   static RowAcc rowInit(const A &, int pass);
//   static RowAcc rowAccumulate(const A &, int64_t row, int pass, int64_t j0,
//                               int n, RowAcc acc, const RowAcc *totals);
//   static RowAcc rowCombine(const A &, int pass, RowAcc a, RowAcc b);
//   static void rowFinish(const A &, int64_t row, int64_t j0, int n,
//                         const RowAcc *totals);  // writes a chunk
//   static void rowDone(const A &, int64_t row, const RowAcc *totals);
//
// A pass reduces every lane's partial across the warp with an XOR butterfly
// (lane l takes combine(own, lane l ^ offset) for offsets 16, 8, 4, 2, 1,
// what __shfl_xor_sync gives), then, in a block, folds the warps' lane-0
// results in warp order. runRowOnHost below does exactly that on the CPU, lane
// by lane, so the host emulator computes the GPU's summation order bit for
// bit (up to the last bits of exp and log), and the tests that compare the
// emulator with the CPU backend check the row kernels' arithmetic.
// The __global__ side is runtime/cuda/RowLaunch.cuh.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "KernelCommon.h"

#include <type_traits>

namespace ampc::rt::cuda {

inline constexpr int kWarp = 32;
inline constexpr int kRowBlock = 256;
inline constexpr int kRowChunk = 8;

/// Rows shorter than this run one thread per row (a warp would leave most
/// lanes idle); rows longer than kBlockRowLength get a block, so that a
/// vocabulary-sized row is not left to 32 threads.
inline constexpr int64_t kMinRowLength = 32;
inline constexpr int64_t kBlockRowLength = 4096;

/// Threads per row for rows of `len` elements: 0 (thread per row), a warp or
/// a block.
AMPC_HD int rowLanes(int64_t len) {
  if (len < kMinRowLength)
    return 0;
  return len <= kBlockRowLength ? kWarp : kRowBlock;
}

/// Column reductions (each of `outputs` results sums `count` elements that
/// are not contiguous) run a thread per (chunk, result) and combine the
/// chunks' partials in chunk order: the chunk length that gives about
/// kFillThreads threads (a GPU's worth: 132 SMs of 2048 threads is 270k)
/// with chunks of at least kMinColumnChunk elements and at most
/// kMaxColumnChunks chunks (the combine is serial). The length depends only
/// on the shape, so the order of the sums, and so the bits, do too.
inline constexpr int64_t kFillThreads = int64_t(1) << 17;
inline constexpr int64_t kMinColumnChunk = 32;
inline constexpr int64_t kMaxColumnChunks = 1024;
inline int64_t columnChunk(int64_t outputs, int64_t count) {
  if (count < 2 * kMinColumnChunk || outputs < 1 || outputs >= kFillThreads)
    return count < 1 ? 1 : count;
  int64_t chunks = (kFillThreads + outputs - 1) / outputs;
  if (chunks > count / kMinColumnChunk)
    chunks = count / kMinColumnChunk;
  if (chunks > kMaxColumnChunks)
    chunks = kMaxColumnChunks;
  return (count + chunks - 1) / chunks;
}

/// Before a loop over a chunk's elements, which is written with the constant
/// bound kRowChunk as well as n: nvcc then unrolls it fully and keeps the
/// chunk's values in registers (a loop bounded by n alone leaves its arrays
/// in local memory).
#ifdef __CUDA_ARCH__
#define AMPC_UNROLL _Pragma("unroll")
#else
#define AMPC_UNROLL
#endif

/// A pass's partial result: up to three running values (a sum, a running
/// maximum and its rescaled sum, ...), as each kernel defines them.
struct RowAcc {
  float a = 0, b = 0, c = 0;
};

inline constexpr int kMaxRowPasses = 2;

/// Loads elements [off, off + n) (n <= kRowChunk) of a float array of
/// `type` as fp32. On the device a full, 16-byte aligned chunk is read with
/// 16-byte loads; the values are the same either way.
AMPC_HD void loadChunk(uint8_t type, const void *p, int64_t off, int n, float *v) {
#ifdef __CUDA_ARCH__
  size_t bytes = type == FusedElem::F32 ? 4 : 2;
  const uint8_t *at = static_cast<const uint8_t *>(p) + off * static_cast<int64_t>(bytes);
  if (n == kRowChunk && (reinterpret_cast<uintptr_t>(at) & 15) == 0 &&
      (type == FusedElem::F32 || type == FusedElem::F16 || type == FusedElem::BF16)) {
    uint4 raw[2];
    raw[0] = reinterpret_cast<const uint4 *>(at)[0];
    if (bytes == 4)
      raw[1] = reinterpret_cast<const uint4 *>(at)[1];
#pragma unroll
    for (int k = 0; k < kRowChunk; ++k)
      v[k] = loadAsFloat(type, raw, k);
    return;
  }
#endif
  AMPC_UNROLL
  for (int k = 0; k < kRowChunk && k < n; ++k)
    v[k] = loadAsFloat(type, p, off + k);
}

/// Stores v[0, n) into elements [off, off + n), rounded to `type` as
/// storeFromFloat rounds (nearest even); 16-byte stores for a full aligned
/// chunk on the device.
AMPC_HD void storeChunk(uint8_t type, void *p, int64_t off, int n, const float *v) {
#ifdef __CUDA_ARCH__
  size_t bytes = type == FusedElem::F32 ? 4 : 2;
  uint8_t *at = static_cast<uint8_t *>(p) + off * static_cast<int64_t>(bytes);
  if (n == kRowChunk && (reinterpret_cast<uintptr_t>(at) & 15) == 0 &&
      (type == FusedElem::F32 || type == FusedElem::F16 || type == FusedElem::BF16)) {
    uint4 raw[2];
#pragma unroll
    for (int k = 0; k < kRowChunk; ++k)
      storeFromFloat(type, raw, k, v[k]);
    reinterpret_cast<uint4 *>(at)[0] = raw[0];
    if (bytes == 4)
      reinterpret_cast<uint4 *>(at)[1] = raw[1];
    return;
  }
#endif
  AMPC_UNROLL
  for (int k = 0; k < kRowChunk && k < n; ++k)
    storeFromFloat(type, p, off + k, v[k]);
}

/// Online softmax (a running maximum m in `a`, the sum of exp(v - m) in
/// `b`): one read of the row instead of a pass for the maximum and one for
/// the sum. Adds v to the running pair.
AMPC_HD RowAcc softmaxAdd(RowAcc acc, float v) {
  // exp(-inf - m) is 0 for any finite maximum, so -inf adds nothing; taking
  // it would make -inf - -inf = NaN while no finite value has come yet (a
  // masked attention row's leading -inf). A row of nothing but -inf keeps
  // m = -inf, and every result then reads x - m = NaN, as the two-pass
  // reference gives.
  if (v == -infinityF())
    return acc;
  float m = v > acc.a ? v : acc.a; // NaN never becomes the maximum
  // The old sum rescaled to the new maximum; m == acc.a keeps it exactly
  // (and keeps exp(inf - inf) out when the maximum is +inf).
  float rescale = m == acc.a ? 1.0f : std::exp(acc.a - m);
  acc.b = acc.b * rescale + std::exp(v - m);
  acc.a = m;
  return acc;
}

/// The pair of two lanes, rescaled to their common maximum; symmetric in x
/// and y, as the butterfly needs.
AMPC_HD RowAcc softmaxMerge(RowAcc x, RowAcc y) {
  float m = x.a > y.a ? x.a : y.a;
  float fx = x.a == m ? 1.0f : std::exp(x.a - m), fy = y.a == m ? 1.0f : std::exp(y.a - m);
  RowAcc r;
  r.a = m;
  r.b = x.b * fx + y.b * fy;
  return r;
}

AMPC_HD RowAcc softmaxInit() {
  RowAcc r;
  r.a = -infinityF();
  return r;
}

/// Whether A is a row kernel (has rowFinish).
template <typename A, typename = void> struct IsRowKernel : std::false_type {};
template <typename A>
struct IsRowKernel<A, std::void_t<decltype(&A::rowFinish)>> : std::true_type {};
template <typename A> inline constexpr bool kIsRowKernel = IsRowKernel<A>::value;

#ifndef __CUDACC__
/// Row `row` of a row launch on the CPU, lane by lane, in the GPU's order
/// (see the file comment): what the host emulator runs for row launches.
template <typename A> void runRowOnHost(const A &a, int64_t row) {
  const int lanes = a.lanes;
  const int64_t len = a.rowLength();
  RowAcc totals[kRowBlock][kMaxRowPasses];
  for (int pass = 0; pass < A::rowPasses(a); ++pass) {
    RowAcc part[kRowBlock];
    for (int t = 0; t < lanes; ++t) {
      part[t] = A::rowInit(a, pass);
      for (int64_t j0 = int64_t(t) * kRowChunk; j0 < len; j0 += int64_t(lanes) * kRowChunk) {
        int n = len - j0 < kRowChunk ? static_cast<int>(len - j0) : kRowChunk;
        part[t] = A::rowAccumulate(a, row, pass, j0, n, part[t], totals[t]);
      }
    }
    // The XOR butterfly within each warp: every lane reads its partner's
    // value from before the step, as a shuffle does.
    for (int off = kWarp / 2; off > 0; off /= 2) {
      RowAcc next[kRowBlock];
      for (int t = 0; t < lanes; ++t)
        next[t] = A::rowCombine(a, pass, part[t], part[t ^ off]);
      for (int t = 0; t < lanes; ++t)
        part[t] = next[t];
    }
    if (lanes > kWarp) {
      RowAcc all = part[0];
      for (int w = 1; w < lanes / kWarp; ++w)
        all = A::rowCombine(a, pass, all, part[w * kWarp]);
      for (int t = 0; t < lanes; ++t)
        part[t] = all;
    }
    for (int t = 0; t < lanes; ++t)
      totals[t][pass] = part[t];
  }
  for (int t = 0; t < lanes; ++t)
    for (int64_t j0 = int64_t(t) * kRowChunk; j0 < len; j0 += int64_t(lanes) * kRowChunk) {
      int n = len - j0 < kRowChunk ? static_cast<int>(len - j0) : kRowChunk;
      A::rowFinish(a, row, j0, n, totals[t]);
    }
  A::rowDone(a, row, totals[0]);
}
#endif

} // namespace ampc::rt::cuda
