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

/// The byte ranges of the storage under `x` and `y`: false when either is
/// not a tensor; `same` when it is one storage; otherwise the arena ranges
/// in [x0, x1) and [y0, y1), `arena` false when either is not in the arena.
struct Storage {
  bool same = false, arena = false;
  uint64_t x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};

bool storageOf(const plan::Plan &p, int x, int y, Storage &s) {
  x = planBaseTensor(p, x);
  y = planBaseTensor(p, y);
  if (x < 0 || y < 0 || x >= p.tensors_size() || y >= p.tensors_size())
    return false;
  s.same = x == y;
  const plan::Tensor &a = p.tensors(x), &b = p.tensors(y);
  s.arena = a.storage() == plan::ARENA && b.storage() == plan::ARENA;
  s.x0 = a.offset();
  s.x1 = s.x0 + planTensorBytes(a);
  s.y0 = b.offset();
  s.y1 = s.y0 + planTensorBytes(b);
  return true;
}

} // namespace

bool planTensorsMayOverlap(const plan::Plan &p, int x, int y) {
  Storage s;
  if (!storageOf(p, x, y, s))
    return false;
  return s.same || (s.arena && s.x0 < s.y1 && s.y0 < s.x1);
}

bool planTensorsStartTogether(const plan::Plan &p, int x, int y) {
  Storage s;
  if (!storageOf(p, x, y, s))
    return false;
  return s.same || (s.arena && s.x0 == s.y0);
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

bool checkStepOperandsApart(const plan::Plan &p, std::string &error) {
  for (const plan::Program &prog : p.programs())
    for (int s = 0; s < prog.steps_size(); ++s) {
      const plan::Step &step = prog.steps(s);
      if (planStepMayComputeInPlace(step.op()))
        continue;
      for (int out : step.outputs())
        for (int in : step.inputs()) {
          if (out < 0 || in < 0 || out >= p.tensors_size() || in >= p.tensors_size() ||
              !planTensorsMayOverlap(p, out, in))
            continue;
          error = "program '" + prog.name() + "' step " + std::to_string(s) + " (" + step.op() +
                  " '" + step.name() + "'): its result tensor " + std::to_string(out) +
                  " shares bytes with its operand tensor " + std::to_string(in);
          return false;
        }
    }
  return true;
}

const plan::Attribute *planStepAttr(const plan::Step &step, const std::string &name) {
  for (const plan::Attribute &a : step.attrs())
    if (a.name() == name)
      return &a;
  return nullptr;
}

bool planValidTensor(const plan::Plan &p, int id) { return id >= 0 && id < p.tensors_size(); }

bool planStepWrites(const plan::Plan &p, const plan::Step &s, int x) {
  for (int out : s.outputs())
    if (out >= 0 && (!planValidTensor(p, out) || planTensorsMayOverlap(p, out, x)))
      return true;
  return false;
}

std::vector<int> planSoleReaders(const plan::Plan &p, const plan::Program &prog) {
  std::vector<int> reader(p.tensors_size(), -1);
  for (int s = 0; s < prog.steps_size(); ++s)
    for (int id : prog.steps(s).inputs())
      if (planValidTensor(p, id))
        reader[id] = reader[id] == -1 ? s : -2;
  return reader;
}

std::vector<int64_t> planLastAxisKeptPerm(const plan::Step &t, int64_t rank) {
  const plan::Attribute *a = planStepAttr(t, "perm");
  if (!a || a->ints().values_size() != rank || rank < 1 ||
      a->ints().values(static_cast<int>(rank) - 1) != rank - 1)
    return {};
  std::vector<int64_t> perm(a->ints().values().begin(), a->ints().values().end());
  std::vector<char> seen(rank, 0);
  for (int64_t axis : perm)
    if (axis < 0 || axis >= rank || seen[axis]++)
      return {};
  return perm;
}

int planTransposeOfMatMulResult(const plan::Plan &p, const plan::Program &prog, int m,
                                const std::vector<int> &soleReaders) {
  const plan::Step &mm = prog.steps(m);
  if (mm.op() != "MatMul" || mm.outputs_size() != 1 || !planValidTensor(p, mm.outputs(0)))
    return -1;
  int y = mm.outputs(0);
  const plan::Tensor &yt = p.tensors(y);
  int t = soleReaders[y];
  if (yt.shape_size() < 3 || yt.has_view_of() || t <= m)
    return -1;
  const plan::Step &tr = prog.steps(t);
  if (tr.op() != "Transpose" || tr.inputs_size() != 1 || tr.outputs_size() != 1 ||
      !planValidTensor(p, tr.outputs(0)) || planLastAxisKeptPerm(tr, yt.shape_size()).empty())
    return -1;
  return t;
}

int64_t planStepAttrInt(const plan::Step &step, const std::string &name, int64_t dflt) {
  const plan::Attribute *a = planStepAttr(step, name);
  return a && a->value_case() == plan::Attribute::kI ? a->i() : dflt;
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

bool isCastStep(const plan::Step &t, plan::ElemType to) {
  if (t.op() != "ampc.Fused" || t.inputs_size() != 1 || t.outputs_size() != 1)
    return false;
  const plan::FusedProgram &f = t.fused();
  return f.num_inputs() == 1 && f.instructions_size() == 1 && f.results_size() == 1 &&
         f.results(0) == 1 && f.instructions(0).op() == "Cast" &&
         f.instructions(0).args_size() == 1 && f.instructions(0).args(0) == 0 &&
         f.instructions(0).type() == to;
}

bool isCastToBf16Step(const plan::Step &t) { return isCastStep(t, plan::BF16); }

bool readsInput0AsAnyFloat(const plan::Step &t) {
  return t.op() == "ampc.LayerNormalizationGrad" || t.op() == "ampc.SoftmaxGrad";
}

const plan::FusedProgram *twoInstructionProgram(const plan::Step &t) {
  if (t.op() != "ampc.Fused" || t.inputs_size() != 2 || t.outputs_size() != 1)
    return nullptr;
  const plan::FusedProgram &f = t.fused();
  if (f.num_inputs() != 2 || f.instructions_size() != 2 || f.results_size() != 1 ||
      f.results(0) != 3)
    return nullptr;
  return &f;
}

bool isAddReluStep(const plan::Step &t) {
  const plan::FusedProgram *f = twoInstructionProgram(t);
  if (!f)
    return false;
  const plan::Instruction &add = f->instructions(0), &relu = f->instructions(1);
  return add.op() == "Add" && add.args_size() == 2 && add.attrs_size() == 0 &&
         ((add.args(0) == 0 && add.args(1) == 1) || (add.args(0) == 1 && add.args(1) == 0)) &&
         relu.op() == "Relu" && relu.args_size() == 1 && relu.args(0) == 2 &&
         relu.attrs_size() == 0 && relu.type() == add.type();
}

} // namespace ampc::rt
