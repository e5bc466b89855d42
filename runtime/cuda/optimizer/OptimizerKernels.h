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
