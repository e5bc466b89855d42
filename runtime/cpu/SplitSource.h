//===- SplitSource.h - Transposes reading a Split's operand -----*- C++ -*-===//
//
// Attention splits the Q/K/V projection, [batch, rows, 3 x heads x cols],
// into its three parts along the last axis (a Split step: a copy of the
// whole projection) and then moves the heads outward in each part (three
// Transpose steps: another copy). A Transpose is a strided gather, so the
// backend has each of them gather its part straight from the Split's
// operand, and the Split step does nothing: the same values, one copy fewer.
// Decided when the plan is loaded; the plan does not change;
// AMPC_CPU_EPILOGUES=off turns it off with the epilogues. (The memory plan
// leaves the operand alone until the Transposes have run in the bench GPT
// and the test fixture as it is: the lowering needs no change for them.)
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan.pb.h"

#include <cstdint>
#include <vector>

namespace ampc::rt::cpu {

/// For a Transpose step: the tensor it reads instead of its input (-1:
/// none), the element offset where its part starts there, and the strides
/// there of each axis of its input; `splitStep` is the Split skipped.
struct SplitSource {
  int source = -1;
  int64_t offset = 0;
  std::vector<int64_t> strides;
  int splitStep = -1;
};

/// For each step of `prog`: its SplitSource. A Transpose step gets one when
/// it reads (directly or through one view) a result of a Split along the
/// operand's last axis, and the same holds for every result of that Split:
/// each is read once, by such a Transpose, its view splitting no axis of
/// the part across the part's rows, and no step from the Split to that
/// Transpose, the Transpose included, writes a byte of the operand.
std::vector<SplitSource> splitSources(const plan::Plan &p, const plan::Program &prog);

} // namespace ampc::rt::cpu
