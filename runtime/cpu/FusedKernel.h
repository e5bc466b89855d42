//===- FusedKernel.h - Fused elementwise steps: shared declarations -*- C++ -*-===//
//
// The fused kernel is compiled twice from FusedKernelImpl.inc: for the
// baseline x86-64 ISA and for AVX-512 (with FMA contraction off, so both give
// the same bits); FusedKernel.cpp parses the step once and picks the variant
// the CPU supports.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Kernel.h"

#include "ampc/rt/FusedEval.h"
#include "ampc/rt/FusedOps.h"

#include <memory>
#include <vector>

namespace ampc::rt::cpu {

/// How an input maps output element indices to its own.
struct InputMap {
  enum Kind { Contiguous, Scalar, Strided } kind = Contiguous;
  std::vector<int64_t> strides; ///< per output dimension (0 where broadcast)
};

struct Instr {
  FusedOp op;
  int a = 0, b = 0, c = 0;
  plan::ElemType type;
  fused::FusedParams params;
};


/// A parsed fused step, ready for either variant.
struct FusedSpec {
  std::vector<TensorArg> inputs, outputs;
  std::vector<InputMap> maps;
  std::vector<Instr> instrs;
  std::vector<int> results;
  bool wide = false; ///< some value is fp64: registers are double
};

/// The ReduceSum after a fused step offered to it (ColumnSumEpilogue.h): a
/// kernel that can write the column sums of result `result` into `sums`
/// (without writing that result when `sumsOnly`) sets `taken`.
struct ColumnSumRequest {
  int result = -1;
  TensorArg sums;
  bool sumsOnly = false;
  bool taken = false;
};

/// `sums` may be null (no offer).
std::unique_ptr<Kernel> makeFusedKernelBaseline(const FusedSpec &spec, ThreadPool &pool,
                                                ColumnSumRequest *sums = nullptr);
std::unique_ptr<Kernel> makeFusedKernelAvx512(const FusedSpec &spec, ThreadPool &pool,
                                              ColumnSumRequest *sums = nullptr);

/// out[i] = exp(x[i] - shift) for a row (the softmax family's exponentials):
/// SLEEF's AVX-512 u10 exp, 16 lanes at a time, on a CPU with AVX-512 when
/// SLEEF was found, otherwise std::exp. Both are within 1 ULP of the exact
/// result; the choice depends on the CPU only (not on AMPC_CPU_ISA, which
/// picks the fused kernel's build), so results are the same bits on one
/// machine whatever the fused kernel runs. `out` may be `x`.
void expShifted(const float *x, float shift, float *out, int64_t n);
/// The AVX-512 build of expShifted; false (and nothing written) without SLEEF.
bool expShiftedAvx512(const float *x, float shift, float *out, int64_t n);

/// Softmax over `rows` contiguous fp32 rows of n values, n a multiple of 16
/// (attention's rows), AVX-512 with SLEEF: y = exp(x - max) / sum, and, when
/// `z` is given, y rounded to bf16 (nearest even) into z. The same operations
/// in the same order as the portable row loop (maxFloats, expShifted,
/// sumFloats' 16 lane sums and their pairwise combination, one division, a
/// multiplication per element), hence its bits. False (nothing written)
/// without SLEEF.
bool softmaxRowsAvx512(const float *x, float *y, uint16_t *z, int64_t rows, int64_t n);
/// dx = y (dy - sum(dy y)) over `rows` contiguous fp32 rows of n values, n a
/// multiple of 16: the portable loop's bits (dotFloats' order). dY is fp32,
/// or bf16 when `dyBf16` (widened exactly, as rowIn does).
/// With `z`, also bf16(dx / divisor) into z (the scaled cast after it), and
/// dx itself only where `dx` is not null.
bool softmaxGradRowsAvx512(const void *dy, bool dyBf16, const float *y, float *dx, int64_t rows,
                           int64_t n, uint16_t *z = nullptr, float divisor = 1.0f);

} // namespace ampc::rt::cpu
