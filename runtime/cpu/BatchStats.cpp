//===- BatchStats.cpp - BatchNormalizationGrad reusing the forward's statistics ===//

#include "BatchStats.h"

#include "NormEpilogue.h"

#include "ampc/rt/PlanQueries.h"

namespace ampc::rt::cpu {

namespace {

/// Training mode as the kernels read it: BatchNormalization's attribute
/// (opset 14+) or its opset-9 statistics outputs; the grad's attribute,
/// training by default.
bool forwardTraining(const plan::Step &s) {
  if (planStepAttr(s, "training_mode"))
    return planStepAttrInt(s, "training_mode", 0) != 0;
  return s.outputs_size() > 1;
}

bool gradTraining(const plan::Step &s) { return planStepAttrInt(s, "training_mode", 1) != 0; }

/// Both steps' epsilon attributes alike (absent in both, or the same value).
bool sameEpsilon(const plan::Step &a, const plan::Step &b) {
  const plan::Attribute *x = planStepAttr(a, "epsilon"), *y = planStepAttr(b, "epsilon");
  if (!x || !y)
    return !x && !y;
  return x->SerializeAsString() == y->SerializeAsString();
}

int sourceOf(const plan::Plan &p, const plan::Program &prog, int g) {
  const plan::Step &grad = prog.steps(g);
  if (grad.op() != "ampc.BatchNormalizationGrad" || grad.inputs_size() < 3 || !gradTraining(grad))
    return -1;
  int x = grad.inputs(1);
  if (!planValidTensor(p, x))
    return -1;
  for (int f = g - 1; f >= 0; --f) {
    const plan::Step &s = prog.steps(f);
    if (s.op() == "BatchNormalization" && s.inputs_size() >= 1 && s.inputs(0) == x)
      return forwardTraining(s) && sameEpsilon(s, grad) ? f : -1;
    // X must keep the values the forward step read.
    for (int out : s.outputs())
      if (out >= 0 && (!planValidTensor(p, out) || planTensorsMayOverlap(p, out, x)))
        return -1;
  }
  return -1;
}

} // namespace

std::vector<int> batchStatsSources(const plan::Plan &p, const plan::Program &prog) {
  std::vector<int> out(prog.steps_size(), -1);
  if (cpuEpiloguesOff())
    return out;
  for (int g = 0; g < prog.steps_size(); ++g)
    out[g] = sourceOf(p, prog, g);
  return out;
}

} // namespace ampc::rt::cpu
