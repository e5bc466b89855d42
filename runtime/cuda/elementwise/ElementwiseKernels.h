//===- elementwise/ElementwiseKernels.h - Fused programs, copies, Dropout --*- C++ -*-===//
//
// Elementwise kernels of DeviceKernels.h: fused elementwise programs, strided
// copies (what Transpose, Concat, Slice... lower to) and Dropout; one thread
// per element.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../KernelCommon.h"

namespace ampc::rt::cuda {

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

/// A strided copy of raw elements: thread i copies element i of the
/// row-major iteration space `shape` from `src` to `dst` (element strides).
struct CopyArgs {
  const void *src = nullptr;
  void *dst = nullptr;
  int elemBytes = 4, rank = 0;
  int64_t shape[kMaxRank] = {}, srcStrides[kMaxRank] = {}, dstStrides[kMaxRank] = {};

  static AMPC_HD void run(const CopyArgs &a, int64_t i) {
    int64_t s = 0, d = 0;
    for (int k = a.rank - 1; k >= 0; --k) {
      int64_t x;
      i = math::indexDivMod(i, a.shape[k], x);
      s += x * a.srcStrides[k];
      d += x * a.dstStrides[k];
    }
    copyElement(a.elemBytes, a.src, s, a.dst, d, true);
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

} // namespace ampc::rt::cuda
