//===- KernelCommon.h - Shared helpers of the CUDA kernels ------*- C++ -*-===//
//
// What every family of DeviceKernels.h shares: element conversions, strided
// offsets, raw element copies.
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
    int64_t rem;
    i = math::indexDivMod(i, shape[d], rem);
    off += rem * strides[d];
  }
  return off;
}

AMPC_HD float infinityF() { return math::bitsFloat(0x7F800000u); }
AMPC_HD float nanF() { return math::bitsFloat(0x7FC00000u); }

/// Sixteen bytes moved as one (the widest load a GPU thread issues).
struct alignas(16) Bytes16 {
  uint64_t lo = 0, hi = 0;
};

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
  case 8:
    static_cast<uint64_t *>(y)[dst] = inside ? static_cast<const uint64_t *>(x)[src] : 0;
    return;
  default: // 16: a widened copy (copyKernel), one vector load and store
    static_cast<Bytes16 *>(y)[dst] = inside ? static_cast<const Bytes16 *>(x)[src] : Bytes16{};
    return;
  }
}

} // namespace ampc::rt::cuda
