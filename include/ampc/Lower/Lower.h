//===- Lower.h - Lowering a graph to an executable plan ---------*- C++ -*-===//
//
// The last step of the compiler: every value gets a tensor (arena, state or
// constant storage), every node a step (chains of elementwise nodes become one
// fused step), and the memory planner places all arena tensors by liveness.
// The plan format belongs to the runtime (runtime/plan/plan.proto).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/Timer.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ampc {

namespace plan {
class Plan;
}

struct LowerOptions {
  /// Fuse chains of elementwise nodes into single steps.
  bool fuseElementwise = true;
  /// Initializer names of the model as imported: the state tensors that are
  /// model parameters (exported back to ONNX, dumped by --dump-params).
  std::vector<std::string> modelParameters;
  /// Shown by plan-text and amp-run (precision, optimizer...).
  std::vector<std::pair<std::string, std::string>> info;
  /// When set, each phase of the lowering is timed with the timer it returns
  /// for the phase's name (amp-opt --time-passes).
  std::function<llvm::Timer *(llvm::StringRef phase)> timerFor;
  /// When set, the values of initializers and state defaults of 256 bytes or
  /// more stay in the graph: the plan's tensor has no data and this list gets
  /// (tensor id, the graph's bytes), for rt::writePlanFile. The graph must
  /// outlive the writing.
  std::vector<std::pair<int, std::string_view>> *externalValues = nullptr;
};

/// Lowers a graph (typically a training step) to a plan.
llvm::Expected<plan::Plan> lowerToPlan(const Graph &g, const LowerOptions &opts = {});

/// Human-readable plan: programs, steps, launches and the memory summary line
/// "arena: A bytes, lower bound L bytes (peak live), unplanned N bytes (sum of
/// all buffers)".
void printPlanText(const plan::Plan &p, llvm::raw_ostream &os);

/// Serializes a plan with the runtime's file header.
llvm::Expected<std::string> serializePlanFile(plan::Plan &p);

} // namespace ampc
