//===- CastStates.cpp - Low-precision state copies derived at load --------===//
//
// A bf16 plan of GPT-2 small stored the bf16 copy of every parameter next to
// its fp32 master: a third more file, and a third more to read, for values
// the runtime can compute from the masters while loading.
//
//===----------------------------------------------------------------------===//

#include "CastStates.h"

#include "ampc/IR/IdMap.h"
#include "ampc/rt/ElementMath.h"

#include "plan.pb.h"

namespace ampc {

namespace {

/// Whether `copy` holds the runtime's conversion of `master`, bit for bit.
bool isConversionOf(const Tensor &copy, const Tensor &master) {
  if (master.dtype() != DType::F32 || master.size() != copy.size())
    return false;
  bool half = copy.dtype() == DType::F16;
  if (!half && copy.dtype() != DType::BF16)
    return false;
  // Not computed yet: converted from `master` when first read.
  if (copy.pendingCastSource() == &master)
    return true;
  const float *in = reinterpret_cast<const float *>(master.data());
  const uint16_t *out = reinterpret_cast<const uint16_t *>(copy.data());
  for (int64_t k = 0; k < master.size(); ++k) {
    uint16_t bits = half ? rt::math::floatToHalf(in[k]) : rt::math::floatToBFloat16(in[k]);
    if (bits != out[k])
      return false;
  }
  return true;
}

/// The value `updated` is the rounding of: a Cast's input, or the updated
/// parameter of an ampc.AdamW that also writes its copy (result 3).
const Value *roundingOf(const Value *updated) {
  const Node *n = updated->producer();
  if (!n)
    return nullptr;
  if (n->is("Cast") && n->numInputs() == 1)
    return n->input(0);
  if (n->isAmpc("AdamW") && n->numOutputs() == 4 && n->output(3) == updated)
    return n->output(0);
  return nullptr;
}

} // namespace

void markCastStates(const Graph &g, llvm::function_ref<int(const Value *)> tensorOf,
                    plan::Plan &p) {
  ValueIdMap<const Value *> stateUpdatedTo(nullptr);
  for (const StateBinding &b : g.stateBindings)
    stateUpdatedTo[b.updated] = b.state;
  for (const StateBinding &b : g.stateBindings) {
    const Value *rounded = roundingOf(b.updated);
    if (!rounded || !b.state->data())
      continue;
    const Value *master = stateUpdatedTo.lookup(rounded);
    if (!master || !master->data())
      continue;
    int copyId = tensorOf(b.state), masterId = tensorOf(master);
    if (copyId < 0 || masterId < 0)
      continue;
    plan::Tensor &t = *p.mutable_tensors(copyId);
    if (t.zero_init() || !isConversionOf(*b.state->data(), *master->data()))
      continue;
    t.clear_data();
    // Zeros convert to zeros: the copy of a master stored as zero_init is
    // zero_init too, as it would be had its bytes been computed.
    if (p.tensors(masterId).zero_init())
      t.set_zero_init(true);
    else
      t.set_cast_of(masterId);
  }
}

} // namespace ampc
