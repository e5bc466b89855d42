//===- CastStates.h - Low-precision state copies derived at load ----------===//

#pragma once

#include "ampc/IR/Graph.h"

#include "llvm/ADT/STLFunctionalExtras.h"

namespace ampc {
namespace plan {
class Plan;
}

/// Marks every fp16/bf16 state that the step keeps equal to the conversion of
/// an fp32 state (the parameter copies cast-cache makes: updated as a Cast of
/// the parameter's next value, initially its conversion) as `cast_of` that
/// state, so that the plan stores no value for it. The initial values are
/// compared element by element, unless the copy is a deferred cast of the
/// master's value (Tensor::deferredCast), which is the conversion by its
/// making; a state that differs keeps its value, and so does a deferred
/// cast of another value. The copy of a master that starts at zero is
/// zero_init too. `tensorOf` gives a value's plan tensor, or -1.
void markCastStates(const Graph &g, llvm::function_ref<int(const Value *)> tensorOf,
                    plan::Plan &p);

} // namespace ampc
