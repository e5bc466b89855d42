//===- NormEpilogue.h - Normalizations writing the step after them -*- C++ -*-===//
//
// In a CNN every BatchNormalization's result goes to a Relu, or to an Add
// with the residual and then a Relu, and nowhere else. The backend lets the
// normalization write that step's result instead (StepContext::reluOutput)
// and skips the step: one pass over the activation fewer (ResNet-20: 19 of
// its 21 normalizations in fp32, 18 in bf16). In a bf16 transformer, each
// LayerNormalization's result goes to a Cast to bf16 for the next GEMM, and
// each attention Softmax's too (its fp32 result is also kept for the
// backward pass): they write the cast as well (StepContext::castOutput),
// LayerNormalization instead of its fp32 result when only the cast reads
// that. Decided when the plan is loaded; the plan does not change.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan.pb.h"

#include <vector>

namespace ampc::rt::cpu {

/// AMPC_CPU_EPILOGUES=off: every load-time fusion of the CPU backend is off
/// (these epilogues, ColumnSumEpilogue.h, CastPrologue.h, BatchStats.h), so
/// that tests can compare the bits with and without.
bool cpuEpiloguesOff();

/// A normalization step's epilogue: the next step, a Relu or Relu(Y + R),
/// is done by the normalization.
struct NormEpilogue {
  bool fused = false;
  /// R's tensor id, or -1 for a plain Relu.
  int residual = -1;
  /// The next step is a Cast of Y to bf16 (not a Relu), and with
  /// `castOnly` Y itself need not be written.
  bool cast = false;
  bool castOnly = false;
  /// The cast divides Y by this scalar tensor first (a SoftmaxGrad's result
  /// scaled back by attention's 1/sqrt(d)), or -1.
  int divisor = -1;
};

/// For each step of `prog`: whether it is a BatchNormalization whose
/// result Y only the next step reads, that step a Relu of Y or an Add of Y
/// and R (same shape and type) then a Relu, or a LayerNormalization or a
/// Softmax over the last axis whose fp32 result Y the next step casts to
/// bf16 (or a SoftmaxGrad over the last axis whose result the next step
/// divides by a scalar, then casts to bf16), such that writing that step's result while the
/// normalization runs clobbers nothing it or a step in between reads. The same answer for a plan on
/// every machine. `input0[s]`, where given and not -1, is the tensor step s reads instead of its
/// input 0 (CastPrologue.h): the epilogue's result must not overlap that one, and may overlap the
/// input it replaces (never written nor read).
std::vector<NormEpilogue> normEpilogues(const plan::Plan &p, const plan::Program &prog,
                                        const std::vector<int> &input0 = {});

} // namespace ampc::rt::cpu
