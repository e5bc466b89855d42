//===- optimizer/OptimizerKernels.h - AdamW and AllFinite -------*- C++ -*-===//
//
// The optimizer-step kernels of DeviceKernels.h: ampc.AllFinite (the loss
// scaler's overflow check) and ampc.AdamW.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../KernelCommon.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// ampc.AllFinite
//===----------------------------------------------------------------------===//

/// Phase 0 (Check): each input t gets ceil(n / chunk) threads; its thread l
/// checks elements l, l + threads, l + 2 threads, ... (a warp reads adjacent
/// elements) and writes flags[flagBase + firstChunk[t] + l] = 1 when all of
/// them are finite. Phase 1 (Combine): thread k ANDs flags[k span, (k + 1)
/// span) into out[k]; one launch folds the flags into one per 1024, a last
/// one-thread launch folds those into the bool result.
struct AllFiniteArgs {
  static constexpr int kMaxInputs = 32;
  static constexpr int64_t kChunk = 256, kSpan = 1024;
  enum Phase : uint8_t { Check, Combine };
  int count = 0;
  uint8_t phase = Check;
  const void *p[kMaxInputs] = {};
  uint8_t type[kMaxInputs] = {};
  int64_t n[kMaxInputs] = {};
  int64_t firstChunk[kMaxInputs + 1] = {}; ///< relative to flagBase
  int64_t flagBase = 0, totalFlags = 0, span = kSpan;
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
    if (a.phase == Combine) {
      int64_t begin = i * a.span;
      int64_t end = begin + a.span < a.totalFlags ? begin + a.span : a.totalFlags;
      uint8_t ok = 1;
      for (int64_t k = begin; k < end; ++k)
        ok &= a.flags[k];
      a.out[i] = ok;
      return;
    }
    int t = 0;
    while (t + 1 < a.count && a.firstChunk[t + 1] <= i)
      ++t;
    int64_t threads = a.firstChunk[t + 1] - a.firstChunk[t];
    uint8_t ok = 1;
    for (int64_t j = i - a.firstChunk[t]; j < a.n[t]; j += threads)
      ok &= finite(a.type[t], a.p[t], j) ? 1 : 0;
    a.flags[a.flagBase + i] = ok;
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

} // namespace ampc::rt::cuda
