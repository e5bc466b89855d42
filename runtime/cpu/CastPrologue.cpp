//===- CastPrologue.cpp - Steps reading the bf16 value a cast widened -----===//

#include "CastPrologue.h"

#include "NormEpilogue.h"

#include "ampc/rt/PlanFile.h"
#include "ampc/rt/PlanQueries.h"

#include <algorithm>

namespace ampc::rt::cpu {

namespace {

/// The prologue of step `r`, or none.
CastPrologue prologueOf(const plan::Plan &p, const plan::Program &prog, int r) {
  const plan::Step &reader = prog.steps(r);
  if (!readsInput0AsAnyFloat(reader) || reader.inputs_size() < 1 ||
      !planValidTensor(p, reader.inputs(0)))
    return {};
  int y = reader.inputs(0);
  int c = r - 1; // the step that writes Y
  while (c >= 0 && std::find(prog.steps(c).outputs().begin(), prog.steps(c).outputs().end(), y) ==
                       prog.steps(c).outputs().end())
    --c;
  if (c < 0 || !isCastStep(prog.steps(c), plan::F32))
    return {};
  int x = prog.steps(c).inputs(0);
  if (!planValidTensor(p, x))
    return {};
  const plan::Tensor &xt = p.tensors(x), &yt = p.tensors(y);
  if (xt.type() != plan::BF16 || yt.type() != plan::F32 ||
      planNumElements(xt) != planNumElements(yt) || planNumElements(yt) == 0)
    return {};
  // Y: read by this step alone (once), an arena tensor of its own bytes, so
  // that not writing it loses nothing.
  if (planTensorUses(p, y, -1) != 1 || yt.has_view_of() || yt.storage() != plan::ARENA)
    return {};
  // X keeps the Cast's values until the step has read them: no step from
  // the Cast on writes a byte of it.
  for (int s = c + 1; s <= r; ++s)
    if (planStepWrites(p, prog.steps(s), x))
      return {};
  return {x, c};
}

} // namespace

std::vector<CastPrologue> castPrologues(const plan::Plan &p, const plan::Program &prog) {
  std::vector<CastPrologue> out(prog.steps_size());
  if (cpuEpiloguesOff())
    return out;
  for (int r = 0; r < prog.steps_size(); ++r)
    out[r] = prologueOf(p, prog, r);
  return out;
}

} // namespace ampc::rt::cpu
