//===- CastPrologue.h - Steps reading the bf16 value a cast widened -*- C++ -*-===//
//
// In a bf16 transformer's backward pass, the gradient a GEMM writes in bf16
// is widened to fp32 by a Cast step and read, only there, by the
// LayerNormalizationGrad or SoftmaxGrad after it. Those kernels read their
// dY rows widened exactly as the Cast does (rowIn; the AVX-512 softmax rows
// widen bf16 in registers), so the backend gives them the bf16 tensor and
// skips the Cast: the same values, one pass
// over the gradient fewer (written in fp32, read back). Decided when the
// plan is loaded; the plan does not change; AMPC_CPU_EPILOGUES=off turns it
// off with the epilogues.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan.pb.h"

#include <vector>

namespace ampc::rt::cpu {

/// A step's prologue: it reads tensor `source` (bf16) as its input 0, and
/// step `castStep`, the Cast of `source` to fp32 whose result only this
/// step reads (as its dY), is skipped.
struct CastPrologue {
  int source = -1;
  int castStep = -1;
};

/// For each step of `prog`: its prologue, or source -1. A step gets one when
/// it is a LayerNormalizationGrad or a SoftmaxGrad whose dY is such a Cast's result, that
/// result lives in the arena on bytes of its own, and neither the step nor
/// any step between the Cast and it writes a byte of the source.
std::vector<CastPrologue> castPrologues(const plan::Plan &p, const plan::Program &prog);

} // namespace ampc::rt::cpu
