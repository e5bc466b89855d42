//===- Interpreter.h - The reference interpreter ----------------*- C++ -*-===//
//
// Executes the IR with simple loops. Every kernel computes in double and every
// stored value is rounded to its declared element type (round to nearest
// even), so fp16 and bf16 values behave as they do on a device that stores
// them. It folds constants for the compiler and is the oracle of every test.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace ampc {

struct InterpreterOptions {
  /// Seed of the random numbers of Dropout (a node's own `seed` attribute wins).
  uint64_t seed = 0;
  /// Keep every intermediate value (for valueOf); otherwise values are freed
  /// after their last use.
  bool keepAll = false;
};

/// Evaluates one node on operand tensors (nullptr for omitted optional
/// operands). Results take the node's recorded result types.
llvm::Expected<std::vector<Tensor>> evaluateNode(const Node &n,
                                                 const std::vector<const Tensor *> &inputs,
                                                 const InterpreterOptions &opts = {});

/// True if the interpreter has a kernel for the node's operator.
bool hasKernel(const Node &n);
bool hasKernel(const std::string &domain, const std::string &opType);
/// "Op" and "ampc.Op" names of every operator with a kernel, sorted.
std::vector<std::string> interpretedOps();

class Interpreter {
public:
  explicit Interpreter(const Graph &g, InterpreterOptions opts = {}) : g_(g), opts_(opts) {}

  /// Runs the graph. Feeds are by graph-input name (initializers may be
  /// overridden too); the result holds the graph outputs in order.
  llvm::Expected<std::vector<Tensor>> run(const std::map<std::string, Tensor> &feeds);

  /// Runs only the nodes needed for `wanted` and returns their values, in
  /// order (a program of a training step, for instance). Only the inputs those
  /// nodes read need feeds.
  llvm::Expected<std::vector<Tensor>> runFor(const std::map<std::string, Tensor> &feeds,
                                             const std::vector<const Value *> &wanted);

  /// After run() with keepAll: the value computed for v (nullptr if none).
  const Tensor *valueOf(const Value *v) const;

private:
  llvm::Expected<std::vector<Tensor>> execute(const std::map<std::string, Tensor> &feeds,
                                              const std::vector<const Value *> &wanted,
                                              bool onlyNeeded);
  const Graph &g_;
  InterpreterOptions opts_;
  std::unordered_map<const Value *, Tensor> env_;
};

} // namespace ampc
