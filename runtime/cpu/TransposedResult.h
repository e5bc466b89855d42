//===- TransposedResult.h - MatMuls writing the Transpose after them -*- C++ -*-===//
//
// Attention's MatMuls produce [batch, heads, rows, cols] and a Transpose then
// moves the heads inside ([batch, rows, heads, cols]) for the projection
// after it, in the forward pass (P V) and for each of dQ, dK and dV in the
// backward pass: a copy of the whole result each time. oneDNN writes a
// matmul's result through any strides at the same speed (measured: 0.037
// against 0.040 ms for the bench GPT's 16 x 6 heads of 64 x 64, bf16, AMX),
// so the backend has such a MatMul write its result where the Transpose
// would have put each element, and the Transpose step does nothing: the same
// values, one copy fewer. Decided when the plan is loaded; the plan does not
// change; AMPC_CPU_EPILOGUES=off turns it off with the epilogues.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan.pb.h"

#include <cstdint>
#include <vector>

namespace ampc::rt::cpu {

/// For a MatMul step: the Transpose step whose result it may write instead
/// of its own (-1: none), and the strides, in elements of that result, of
/// each axis of the MatMul's result.
struct TransposedResult {
  int transposeStep = -1;
  std::vector<int64_t> strides;
};

/// For each step of `prog`: its TransposedResult. A MatMul step gets one
/// when its fp32 or bf16 result of rank 3 or more lives in the arena on
/// bytes of its own and only a Transpose step reads it (directly), that
/// Transpose keeps the last axis last, and no step from the MatMul to the
/// Transpose, the MatMul's operands included, touches a byte of the
/// Transpose's result.
std::vector<TransposedResult> transposedResults(const plan::Plan &p, const plan::Program &prog);

} // namespace ampc::rt::cpu
