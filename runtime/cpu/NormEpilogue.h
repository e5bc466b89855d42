//===- NormEpilogue.h - BatchNormalization writing the Relu after it -*- C++ -*-===//
//
// In a CNN every BatchNormalization's result goes to a Relu, or to an Add
// with the residual and then a Relu, and nowhere else. The backend lets the
// normalization write that step's result instead (StepContext::reluOutput)
// and skips the step: one pass over the activation fewer (ResNet-20: 19 of
// its 21 normalizations in fp32, 18 in bf16). Decided when the
// plan is loaded; the plan does not change.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan.pb.h"

#include <vector>

namespace ampc::rt::cpu {

/// A normalization step's epilogue: the next step, a Relu or Relu(Y + R),
/// is done by the normalization.
struct NormEpilogue {
  bool fused = false;
  /// R's tensor id, or -1 for a plain Relu.
  int residual = -1;
};

/// For each step of `prog`: whether it is a BatchNormalization whose
/// result Y only the next step reads, that step a Relu of Y or an Add of Y
/// and R (same shape and type) then a Relu, such that writing that step's
/// result while the normalization runs clobbers nothing it or a step in
/// between reads. The same answer for a plan on every machine.
std::vector<NormEpilogue> normEpilogues(const plan::Plan &p, const plan::Program &prog);

} // namespace ampc::rt::cpu
