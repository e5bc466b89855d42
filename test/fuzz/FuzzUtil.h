//===- FuzzUtil.h - Shared pieces of the libFuzzer targets ------*- C++ -*-===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ampc {
class Graph;
}

namespace ampc::fuzz {

/// Inputs larger than this are skipped: the targets look for crashes in the
/// checks, and large inputs only slow the search.
inline constexpr size_t kMaxInput = 1 << 20;

/// Runs the training pipeline of amp-opt --train (canonicalize, decompose,
/// autocast to bf16 or fp16 unless `precision` is fp32, autodiff, loss-scale,
/// AdamW, canonicalize, cast-cache after autocast, remat,
/// split-matmul-transposes, fold-matmul-bias) on an imported graph and lowers
/// it to a plan, ignoring errors: bad models must fail with an llvm::Error,
/// never a crash.
enum class Precision { FP32, BF16, FP16 };
void compileForTraining(Graph &g, Precision precision = Precision::FP32);

/// The precision an input is compiled in: chosen by its size, so that every
/// input always takes the same one and the corpus covers all three.
inline Precision precisionFor(size_t size) { return static_cast<Precision>(size % 3); }

/// A directory of its own for file-based targets (checkpoints), made once.
const std::string &scratchDir();

} // namespace ampc::fuzz
