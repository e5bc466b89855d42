//===- Kernels.h - Interpreter kernel interface and helpers -----*- C++ -*-===//
//
// Internal to lib/Interpreter. A kernel reads its operands through
// KernelContext, computes in double and writes results into tensors of the
// node's recorded result types (which rounds every stored value).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/Support/Error.h"

#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <string>
#include <vector>

namespace ampc::interp {

struct KernelContext {
  const Node &node;
  const std::vector<const Tensor *> &inputs;
  const InterpreterOptions &opts;

  unsigned numInputs() const { return static_cast<unsigned>(inputs.size()); }
  /// Operand i, or nullptr when omitted.
  const Tensor *in(unsigned i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  /// A zero-filled result tensor of result i's recorded type.
  Tensor out(unsigned i = 0) const;
  const TensorType &outType(unsigned i = 0) const;
  unsigned numOutputs() const { return node.numOutputs(); }
  bool wantsOutput(unsigned i) const { return node.output(i) != nullptr; }
  /// "node 'n' (Op): msg"
  llvm::Error error(const llvm::Twine &msg) const;
};

using KernelResult = llvm::Expected<std::vector<Tensor>>;
using KernelFn = KernelResult (*)(const KernelContext &);

/// Registers kernels by qualified op name ("Add", "ampc.ReluGrad").
class KernelTable {
public:
  void add(const std::string &name, KernelFn fn) { kernels_[name] = fn; }
  /// Looked up by every constant-folding attempt (a StringMap: no string is
  /// built for a lookup).
  KernelFn lookup(llvm::StringRef name) const { return kernels_.lookup(name); }
  /// The names, sorted.
  std::vector<std::string> names() const;

private:
  llvm::StringMap<KernelFn> kernels_;
};

const KernelTable &kernelTable();

// One registration function per kernel file.
void registerElementwiseKernels(KernelTable &t);
void registerTensorKernels(KernelTable &t);
void registerReductionKernels(KernelTable &t);
void registerNNKernels(KernelTable &t);
void registerLossKernels(KernelTable &t);
void registerAmpcKernels(KernelTable &t);
void registerGradientKernels(KernelTable &t);
void registerTrainingKernels(KernelTable &t);

//===----------------------------------------------------------------------===//
// Index helpers
//===----------------------------------------------------------------------===//

/// Row-major strides of a shape.
std::vector<int64_t> stridesOf(const Shape &shape);
/// Numpy-style broadcast of two shapes; false when incompatible.
bool broadcastShapes(const Shape &a, const Shape &b, Shape &out);
/// For every flat index of `dst`, the flat index of the element of a tensor of
/// shape `src` that broadcasting maps to it.
std::vector<int64_t> broadcastIndexMap(const Shape &src, const Shape &dst);
/// Axis in [0, rank) from a possibly negative axis; -1 when out of range.
int64_t normalizeAxis(int64_t axis, int64_t rank);
/// Splits a flat index into a multi-index.
void unravel(int64_t flat, const Shape &shape, std::vector<int64_t> &idx);
int64_t ravel(const std::vector<int64_t> &idx, const std::vector<int64_t> &strides);

/// Axes from an attribute or (opset 13+ style) an int64 operand; `fromInput`
/// is the operand index (or -1). Returns normalized, sorted axes.
llvm::Expected<std::vector<int64_t>> readAxes(const KernelContext &ctx, int fromInput,
                                              int64_t rank, bool &given);

} // namespace ampc::interp
