//===- elementwise/FusedCodegen.h - Fused programs as CUDA C source -*- C++ -*-===//
//
// Every ampc.Fused program (and every one-instruction program of an unfused
// elementwise op) is lowered to a FusedArgs launch, which the interpreted
// kernel runs with a switch per instruction and element. At plan load the
// CUDA backend turns each distinct program into the source of a kernel of
// its own (fusedKernelSource: straight-line calls into FusedEval.h, so the
// same math, bit for bit), compiles it with NVRTC (FusedCompiler.h) and
// replaces the program's launches by CompiledFused launches
// (FusedKernelTable::use). The host emulator runs CompiledFused launches too
// (runCompiledFusedOnHost), over the compiled launch's own arguments.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../Lowering.h"
#include "FusedKernel.h"

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ampc::rt::cuda {

/// Bytes of one element of a FusedElem type.
int fusedElemBytes(uint8_t type);

/// Elements a thread of the program's compiled kernel takes when its
/// operands are aligned: 16 bytes of its narrowest contiguous operand (8
/// fp16 / bf16 elements, 4 fp32), at most 8; 1 when an input is strided
/// (broadcast along some dimensions), which has no vector path.
int fusedKernelWidth(const FusedArgs &program);

/// The CUDA C source of the kernel of `program` (its instructions, operand
/// types and kinds, outputs; not its addresses or shape, which are the
/// launch's arguments). Deterministic: the same program gives the same
/// text, which is the cache key (with the architecture and NVRTC's version).
std::string fusedKernelSource(const FusedArgs &program);

/// 64-bit FNV-1a of `text`, as 16 hex digits.
std::string fusedHash(const std::string &text);

/// The compiled kernel's arguments for launch `f` (the interpreter's, same
/// addresses) and its thread count: groups of fusedKernelWidth elements when
/// every contiguous operand is aligned to its group's bytes (up to 16), else
/// one element per thread.
FusedKernelArgs fusedKernelArgs(const FusedArgs &f, int64_t elements, int64_t &threads);

/// Thread t of a CompiledFused launch on the host: the interpreter's
/// element function over the compiled launch's arguments and grouping.
void runCompiledFusedOnHost(const FusedArgs &program, int width, const FusedKernelArgs &k,
                            int64_t t);

/// One distinct program of a plan and its compiled kernel.
struct CompiledFusedKernel {
  std::string source; ///< fusedKernelSource
  FusedArgs program;  ///< the first launch's arguments (its addresses unused)
  int width = 1;
  bool ok = false;        ///< compiled (and, on a GPU, loaded)
  void *handle = nullptr; ///< the backend's kernel handle (cudaKernel_t)
  std::string binary;     ///< the cubin (kept while the plan is loaded)
};

/// A plan's compiled fused kernels, one per distinct source.
class FusedKernelTable {
public:
  /// Compiles (and loads) one kernel; false leaves its launches interpreted.
  using Compile = std::function<bool(CompiledFusedKernel &)>;

  /// Every Fused kernel launch of `launches` whose program compiles becomes
  /// a CompiledFused launch; `compile` runs once per distinct source.
  /// Returns how many launches now run compiled kernels.
  int use(std::vector<Launch> &launches, const Compile &compile);

  const std::deque<CompiledFusedKernel> &kernels() const { return kernels_; }

private:
  std::deque<CompiledFusedKernel> kernels_; // stable addresses (Launch::compiled)
  std::map<std::string, size_t> bySource_;
};

} // namespace ampc::rt::cuda
