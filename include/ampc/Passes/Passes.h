//===- Passes.h - ampc's transformations ------------------------*- C++ -*-===//
//
// Every pass lives in its own file under passes/ and registers itself through
// a register<Name>Pass() function listed here. The transformations are also
// callable directly (tests, composite passes).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"
#include "ampc/Pass/Pass.h"

#include "llvm/Support/Error.h"

namespace ampc {

/// Registers every pass below with the PassRegistry (idempotent).
void registerAllPasses();

// Canonicalization.
void registerConstantFoldPass();
void registerDeadCodeEliminationPass();
void registerCSEPass();
void registerSimplifyPass();
void registerCanonicalizePass();
// Ops rewritten into ops with kernels and gradient rules (passes/Decompose.cpp).
void registerDecomposePass();
// Training (ampc/Passes/Autodiff.h).
void registerAutodiffPass();
// Mixed precision (ampc/Passes/Autocast.h).
void registerAutocastPass();
// Layout of the copies around MatMuls, before lowering.
void registerSplitMatMulTransposesPass();
void registerFoldMatMulBiasPass();

/// Evaluates nodes whose operands are all constants (and Shape/Size of any
/// static value) with the reference interpreter, replacing their results by
/// constant initializers. Constant nodes become initializers.
llvm::Expected<bool> foldConstants(Graph &g, int64_t maxElements = int64_t(1) << 20);
/// Removes nodes whose results are unused and unused initializers.
bool eliminateDeadCode(Graph &g);
/// Merges nodes that compute the same thing, and equal small constants.
bool eliminateCommonSubexpressions(Graph &g);
/// Removes Identity nodes and no-op Cast, Reshape, Dropout and similar nodes.
bool simplifyNoOps(Graph &g);
/// Runs the four above to a fixed point.
llvm::Error canonicalize(Graph &g);
/// Splits each Transpose read only by MatMuls, or reading only a MatMul's
/// result, whose permutation moves the innermost axis into a copy that
/// keeps rows and a swap of the last two axes (which the lowering folds
/// into the MatMul). Returns whether anything changed.
bool splitMatMulTransposes(Graph &g);
/// Makes each MatMul read only by an Add of a bias vector of its type, whose
/// sum only data movement reads, one Gemm with the bias as C (on x's rows,
/// through Reshapes). Returns whether anything changed.
bool foldMatMulBias(Graph &g);

} // namespace ampc
