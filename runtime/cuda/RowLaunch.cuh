//===- RowLaunch.cuh - The __global__ side of row kernels -------*- CUDA -*-===//
//
// One kernel for every row kernel of RowKernels.h: a block of kRowBlock
// threads runs kRowBlock / lanes rows at a time (eight warps, a row each, or
// one row across the block), reduces each pass with warp shuffles (and, in a
// block, through shared memory in warp order), then writes the row. The
// order of every operation is the one runRowOnHost reproduces on the CPU.
// A family's .cu instantiates launchRows for its Args (AMPC_ROW_LAUNCH).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "KernelLaunch.h"

namespace ampc::rt::cuda {

namespace rowdetail {

__device__ __forceinline__ RowAcc shuffleXor(RowAcc v, int offset) {
  RowAcc r;
  r.a = __shfl_xor_sync(0xffffffffu, v.a, offset);
  r.b = __shfl_xor_sync(0xffffffffu, v.b, offset);
  r.c = __shfl_xor_sync(0xffffffffu, v.c, offset);
  return r;
}

/// One pass's total: every thread of the row group returns the same value
/// as its host model. `shared` holds a partial per warp of the block.
template <typename A>
__device__ __forceinline__ RowAcc reducePass(const A &a, int pass, RowAcc v, RowAcc *shared) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2)
    v = A::rowCombine(a, pass, v, shuffleXor(v, off));
  if (a.lanes <= kWarp)
    return v;
  // A block per row: fold the warps' lane-0 values in warp order, as
  // runRowOnHost does; the barriers keep the next pass from overwriting
  // values still being read.
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0)
    shared[warp] = v;
  __syncthreads();
  RowAcc all = shared[0];
  for (int w = 1; w < a.lanes / kWarp; ++w)
    all = A::rowCombine(a, pass, all, shared[w]);
  __syncthreads();
  return all;
}

template <typename A>
__global__ void __launch_bounds__(kRowBlock) rowKernel(const __grid_constant__ A a, int64_t rows) {
  __shared__ RowAcc shared[kRowBlock / kWarp];
  const int lanes = a.lanes, groups = kRowBlock / lanes;
  const int t = threadIdx.x % lanes, group = threadIdx.x / lanes;
  const int64_t len = a.rowLength(), step = int64_t(lanes) * kRowChunk;
  // Every thread of a block runs the same number of iterations (rows are
  // taken a block at a time), so the barriers of reducePass are reached by
  // all of them; a group past the last row still takes part, with no row.
  for (int64_t first = int64_t(blockIdx.x) * groups; first < rows;
       first += int64_t(gridDim.x) * groups) {
    const int64_t row = first + group;
    const bool live = row < rows;
    RowAcc totals[kMaxRowPasses];
    // Bounded by a constant and unrolled, so that `totals` stays in registers.
#pragma unroll
    for (int pass = 0; pass < kMaxRowPasses && pass < A::rowPasses(a); ++pass) {
      RowAcc v = A::rowInit(a, pass);
      if (live)
        for (int64_t j0 = int64_t(t) * kRowChunk; j0 < len; j0 += step) {
          int n = len - j0 < kRowChunk ? static_cast<int>(len - j0) : kRowChunk;
          v = A::rowAccumulate(a, row, pass, j0, n, v, totals);
        }
      totals[pass] = reducePass(a, pass, v, shared);
    }
    if (!live)
      continue;
    for (int64_t j0 = int64_t(t) * kRowChunk; j0 < len; j0 += step) {
      int n = len - j0 < kRowChunk ? static_cast<int>(len - j0) : kRowChunk;
      A::rowFinish(a, row, j0, n, totals);
    }
    if (t == 0)
      A::rowDone(a, row, totals);
  }
}

} // namespace rowdetail

template <typename A> cudaError_t launchRows(const A &a, int64_t rows, cudaStream_t stream) {
  constexpr int64_t kMaxBlocks = int64_t(1) << 20;
  const int64_t groups = kRowBlock / a.lanes;
  int64_t blocks = (rows + groups - 1) / groups;
  if (blocks > kMaxBlocks)
    blocks = kMaxBlocks;
  rowdetail::rowKernel<A><<<static_cast<unsigned>(blocks), kRowBlock, 0, stream>>>(a, rows);
  return cudaGetLastError();
}

#define AMPC_ROW_LAUNCH(ARGS)                                                                      \
  template cudaError_t launchRows<ARGS>(const ARGS &, int64_t, cudaStream_t);

} // namespace ampc::rt::cuda
