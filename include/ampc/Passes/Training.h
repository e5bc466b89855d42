//===- Training.h - The training-step passes and their contract -*- C++ -*-===//
//
// After autodiff, three passes turn the graph into one complete training step
// whose state is explicit (initializers with state bindings):
//   accumulate  sums the gradients of N micro-batches into fp32 buffers;
//   loss-scale  feeds the loss scale as the backward seed, checks every
//               gradient for inf/NaN, unscales, and updates the scale;
//   optimizer   clips, applies SGD or AdamW to the fp32 master parameters and
//               skips the update inside the graph when found_inf is set.
// They communicate through names, as ONNX Runtime's training graphs do:
// gradients are graph outputs `<param>_grad`, the backward seed is the graph
// input `<loss>_grad`, the overflow flag the output `found_inf`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Builder.h"
#include "ampc/IR/Graph.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace ampc {

void registerAccumulatePass();
void registerDataParallelPass();
void registerLossScalePass();
void registerOptimizerPass();
void registerRematerializePass();
void registerCastCachePass();

/// A trained parameter and its gradient output.
struct GradientOutput {
  Value *param;
  Value *grad;
  unsigned outputIndex = 0; ///< grad's position among the graph outputs
};

/// Graph outputs named `<p>_grad` where `<p>` is an initializer, in output order.
std::vector<GradientOutput> findGradients(const Graph &g);

/// The backward seed: a graph input `<loss>_grad` (with a default) where
/// `<loss>` is a graph output; nullptr if there is none.
Value *findSeed(const Graph &g);

/// Adds a state initializer (a parameter in the IR's sense: never folded)
/// holding `init`, and returns it.
Value *addState(Graph &g, const std::string &name, Tensor init);

/// Shortest readable form of an option value in reports and plan info:
/// 0.9, 1e-08, 65536.
std::string formatOptionValue(double v);

/// Makes `updated` a graph output named `<state>.next` and binds it to `state`.
void bindState(Graph &g, Value *state, Value *updated);

/// Replaces the graph output `old` by `replacement`, which takes over old's
/// name (old is renamed `<name>.<suffix>`).
void replaceOutput(Graph &g, Value *old, Value *replacement, const std::string &suffix);
/// The same for a gradient output, found by its index (no search of the
/// outputs: a graph with 10,000 gradients has as many outputs).
void replaceOutput(Graph &g, const GradientOutput &go, Value *replacement,
                   const std::string &suffix);

/// Names of the reported outputs (kInfoPrefix metadata records them too).
inline constexpr const char *kFoundInfName = "found_inf";
inline constexpr const char *kLossScaleOutput = "loss_scale";

} // namespace ampc
