//===- gemm/GemmPlan.h - GEMM records: epilogues, cuBLASLt layouts -*- C++ -*-===//
//
// The host side of the CUDA backend's GEMMs, plain C++ so that the tests
// check it without a GPU (test/unit/CudaGemmTest.cpp):
//   - which Relu steps run as the epilogue of the GEMM before them;
//   - the cuBLASLt description of a GemmCall (layouts, batch strides,
//     alignments, reduction schemes), or why it stays on
//     cublasGemmStridedBatchedEx;
//   - the rewriting of an epilogue into plain launches where cuBLASLt cannot
//     take a call (no library, no algorithm);
//   - the cuBLASLt workspace's size.
// runtime/cuda/CublasLt.cpp turns the descriptions into cuBLASLt calls.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../Lowering.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ampc::rt::cuda {

/// For every step s of `prog`: the step t whose Relu runs as the epilogue of
/// step s's GEMM (MatMul or Gemm), writing t's result directly, or -1. Taken
/// only when nothing else can tell: t comes right after s, is a Relu (a plain
/// step or a one-instruction ampc.Fused) of s's result, which nothing else
/// reads (no other step, binding, state update or view; the product may be
/// a view of the result: a Relu in place); the result has the GEMM's type
/// and size, does not share bytes with the GEMM's operands, and no operand
/// is empty. Rounding then Relu equals Relu then rounding (the
/// rounding is monotone and keeps signs), so the values are the plan's.
std::vector<int> reluEpilogueSteps(const plan::Plan &p, const plan::Program &prog);

/// One matrix as cuBLASLt sees it (column-major).
struct LtMatrix {
  uint8_t type = 0;            ///< FusedElem::F32, F16 or BF16
  uint64_t rows = 0, cols = 0; ///< as stored (before the transposition)
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;  ///< elements between batches
  uint32_t align = 0;  ///< bytes every batch's first element is aligned to (<= 256)
};

/// A GemmCall as one cublasLtMatmul: D = C in place, CUBLAS_COMPUTE_32F with
/// fp32 scales (no TF32).
struct LtGemm {
  bool transA = false, transB = false;
  LtMatrix a, b, c;
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void *bias = nullptr; ///< the heuristic reads its alignment from the descriptor
  /// Split-K partial sums may be reduced in the output type (cuBLASLt's
  /// INPLACE and OUTPUT_TYPE schemes) only for fp32 results: for fp16/bf16
  /// that would round every partial sum, not the result once.
  bool outputTypeReduction = false;
};

/// Largest power of two, at most 256, dividing the address of every batch's
/// first element (`stride` elements of `elemBytes` apart).
uint32_t batchAlignment(const void *p, int64_t stride, size_t elemBytes, int64_t batch);

/// The cuBLASLt call for `g`; false (with why) when it stays on
/// cublasGemmStridedBatchedEx: a batch broadcast through a zero stride (a
/// layout no GPU has confirmed yet), or dimensions past 32 bits.
bool describeLtGemm(const GemmCall &g, LtGemm &out, std::string &why);

/// `l` (a GEMM with an epilogue) as launches without one: a bias becomes a
/// copy kernel broadcasting it into C and the GEMM's beta = 1 (one rounding,
/// as before), a Relu a fused kernel over C in place after the GEMM (exact on
/// the rounded values). False when the call has no such form (a bias with
/// beta != 0, a Relu on a non-contiguous C).
bool expandGemmEpilogue(const Launch &l, std::vector<Launch> &out, std::string &error);

/// Gives every GEMM of `launches` its cuBLASLt plan, `planLt(call)` (-1: no
/// plan), and rewrites the epilogues of those left without one
/// (expandGemmEpilogue). Errors name the launch's step.
bool resolveGemms(std::vector<Launch> &launches,
                  const std::function<int32_t(const GemmCall &)> &planLt, std::string &error);

/// cuBLASLt's workspace, one block for every GEMM (they run one after
/// another on the compute stream): NVIDIA's recommendation of 32 MiB from
/// Hopper (sm_90) on, 4 MiB before.
size_t ltWorkspaceBytes(int smMajor);

} // namespace ampc::rt::cuda
