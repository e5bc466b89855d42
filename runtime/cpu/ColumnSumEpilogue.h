//===- ColumnSumEpilogue.h - Fused steps summing their columns -*- C++ -*-===//
//
// A bias's gradient is a ReduceSum of the gradient reaching the biased
// GEMM's result over every axis but the last: the column sums of a
// [rows, columns] matrix. In a transformer's MLP that gradient comes out of
// the exact GELU's backward program (one fused step, FusedGeluKernels.inc),
// whose fp32 result is written only for the ReduceSum right after it to read
// back (bench GPT, bf16: 6 MB a layer, 0.15 ms of ReduceSum). The backend
// offers that ReduceSum to the fused step: a kernel that can sums the
// columns while it computes them, in the ReduceSum kernel's order (blocks of
// kColumnSumBlockRows rows, Kernel.h), so the sums are the same bits, and
// then the ReduceSum step does nothing. When only that ReduceSum reads the
// result, the result need not be written at all. Measured on the bench GPT
// in bf16: the four ReduceSums' 0.6 ms go, the backward GELU steps take
// about 0.05 ms longer each.
// Decided when the plan is loaded; the plan does not change.
// AMPC_CPU_EPILOGUES=off turns it off with the normalizations' epilogues.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Kernel.h"

#include "plan.pb.h"

#include <functional>
#include <vector>

namespace ampc::rt::cpu {

/// The ReduceSum after an ampc.Fused step, as an offer to that step.
struct ColumnSumEpilogue {
  /// The fused step's output (index) the ReduceSum reduces; -1: no offer.
  int result = -1;
  /// The ReduceSum's result tensor id.
  int sums = -1;
  /// Only that ReduceSum reads the result: the fused step need not write it.
  bool sumsOnly = false;
};

/// For each step of `prog`: an offer when it is an ampc.Fused step whose fp32
/// result of rank 2 or more only the next step reads or more steps do, that
/// step a ReduceSum of it (axes a constant operand read through `constant`)
/// over exactly the axes before the last into fp32, and the sums share no
/// byte with the fused step's results. The same answer for a plan on every
/// machine.
std::vector<ColumnSumEpilogue> columnSumEpilogues(const plan::Plan &p, const plan::Program &prog,
                                                  const std::function<TensorArg(int)> &constant);

} // namespace ampc::rt::cpu
