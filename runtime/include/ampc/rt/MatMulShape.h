//===- MatMulShape.h - ONNX MatMul shape rules for the backends --*- C++ -*-===//
//
// numpy matmul semantics as every backend applies them before choosing its
// GEMM calls: 1-D operands promoted (a row for A, a column for B), the inner
// dimensions equal, the batch dimensions broadcast. Host code only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::rt {

struct MatMulShape {
  int64_t M = 0, K = 0, N = 0;
  /// Batch dimensions of A and B, left-padded with 1 to the same rank, and
  /// their broadcast (the result's batch).
  std::vector<int64_t> batchA, batchB, batch;
};

/// Fills `out` for operands of shapes `a` and `b` and a result of
/// `resultNumel` elements; false with a one-line `error` naming the operands
/// by `aText`, `bText` and `yText` (such as "float[2,3]").
bool matMulShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b,
                 int64_t resultNumel, const std::string &aText, const std::string &bText,
                 const std::string &yText, MatMulShape &out, std::string &error);

} // namespace ampc::rt
