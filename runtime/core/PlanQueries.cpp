//===- PlanQueries.cpp - What load-time fusions ask of a plan -------------===//

#include "ampc/rt/PlanQueries.h"

#include "ampc/rt/PlanFile.h"

namespace ampc::rt {

int planBaseTensor(const plan::Plan &p, int id) {
  while (id >= 0 && id < p.tensors_size() && p.tensors(id).has_view_of())
    id = p.tensors(id).view_of();
  return id;
}

namespace {

/// The arena byte range of base tensor `id`, or false when it is not in
/// the arena.
bool arenaRange(const plan::Plan &p, int id, uint64_t &begin, uint64_t &end) {
  const plan::Tensor &t = p.tensors(id);
  if (t.storage() != plan::ARENA)
    return false;
  begin = t.offset();
  end = begin + planTensorBytes(t);
  return true;
}

} // namespace

bool planTensorsMayOverlap(const plan::Plan &p, int x, int y) {
  x = planBaseTensor(p, x);
  y = planBaseTensor(p, y);
  if (x < 0 || y < 0 || x >= p.tensors_size() || y >= p.tensors_size())
    return false;
  if (x == y)
    return true;
  uint64_t a0, a1, b0, b1;
  if (!arenaRange(p, x, a0, a1) || !arenaRange(p, y, b0, b1))
    return false;
  return a0 < b1 && b0 < a1;
}

bool planTensorsStartTogether(const plan::Plan &p, int x, int y) {
  x = planBaseTensor(p, x);
  y = planBaseTensor(p, y);
  if (x < 0 || y < 0 || x >= p.tensors_size() || y >= p.tensors_size())
    return false;
  if (x == y)
    return true;
  uint64_t a0, a1, b0, b1;
  return arenaRange(p, x, a0, a1) && arenaRange(p, y, b0, b1) && a0 == b0;
}

int planTensorUses(const plan::Plan &p, int id, int exceptView) {
  int uses = 0;
  for (const plan::Program &prog : p.programs()) {
    for (const plan::Step &s : prog.steps())
      for (int in : s.inputs())
        uses += in == id;
    for (const plan::Binding &b : prog.inputs())
      uses += b.tensor() == id;
    for (const plan::Binding &b : prog.outputs())
      uses += b.tensor() == id;
    for (const plan::StateUpdate &u : prog.updates())
      uses += (u.state() == id) + (u.updated() == id);
  }
  for (int i = 0; i < p.tensors_size(); ++i)
    uses += i != exceptView && p.tensors(i).has_view_of() && p.tensors(i).view_of() == id;
  return uses;
}

bool isReluStep(const plan::Step &t) {
  if (t.inputs_size() != 1 || t.outputs_size() != 1)
    return false;
  if (t.op() == "Relu")
    return true;
  if (t.op() != "ampc.Fused")
    return false;
  const plan::FusedProgram &f = t.fused();
  return f.num_inputs() == 1 && f.instructions_size() == 1 && f.results_size() == 1 &&
         f.results(0) == 1 && f.instructions(0).op() == "Relu" &&
         f.instructions(0).args_size() == 1 && f.instructions(0).args(0) == 0 &&
         f.instructions(0).attrs_size() == 0;
}

bool isAddReluStep(const plan::Step &t) {
  if (t.op() != "ampc.Fused" || t.inputs_size() != 2 || t.outputs_size() != 1)
    return false;
  const plan::FusedProgram &f = t.fused();
  if (f.num_inputs() != 2 || f.instructions_size() != 2 || f.results_size() != 1 ||
      f.results(0) != 3)
    return false;
  const plan::Instruction &add = f.instructions(0), &relu = f.instructions(1);
  return add.op() == "Add" && add.args_size() == 2 && add.attrs_size() == 0 &&
         ((add.args(0) == 0 && add.args(1) == 1) || (add.args(0) == 1 && add.args(1) == 0)) &&
         relu.op() == "Relu" && relu.args_size() == 1 && relu.args(0) == 2 &&
         relu.attrs_size() == 0 && relu.type() == add.type();
}

} // namespace ampc::rt
