//===- BatchStats.h - BatchNormalizationGrad reusing the forward's statistics -*- C++ -*-===//
//
// In training, BatchNormalizationGrad needs each channel's batch mean and
// 1/stddev, which the forward BatchNormalization of the same X computed:
// recomputing them costs a pass over X and dY. When the forward step of the
// same tensor ran before it in the same program and nothing since wrote X,
// the backend lets the forward kernel store its statistics in a buffer the
// grad kernel reads (StepContext::batchStatsOut / batchStatsIn). The forward
// computes them with the same sums in the same order as the grad did (the
// same bits), so the gradients do not change. Decided when the plan is
// loaded; the plan does not change; AMPC_CPU_EPILOGUES=off turns it off.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan.pb.h"

#include <vector>

namespace ampc::rt::cpu {

/// For each step of `prog`: the index of the BatchNormalization step whose
/// batch statistics it reads, or -1. A step gets one when it is a
/// BatchNormalizationGrad in training mode, an earlier step of the program
/// is a BatchNormalization in training mode of the same X tensor with the
/// same epsilon (the latest such step), and no step between the two writes
/// a byte of X.
std::vector<int> batchStatsSources(const plan::Plan &p, const plan::Program &prog);

} // namespace ampc::rt::cpu
