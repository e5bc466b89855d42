//===- NormEpilogue.cpp - Normalizations writing the step after them ------===//

#include "NormEpilogue.h"

#include "ampc/rt/PlanFile.h"
#include "ampc/rt/PlanQueries.h"

#include <cstdlib>
#include <cstring>

namespace ampc::rt::cpu {

namespace {

/// Z, written while normalization `norm` reads its operands and writes its
/// other results (the statistics), shares no byte with them; `input0`, when
/// not -1, is what the step reads instead of its input 0 (a CastPrologue).
bool apartFromNormOperands(const plan::Plan &p, const plan::Step &norm, int z, int input0) {
  for (int i = 0; i < norm.inputs_size(); ++i) {
    int in = i == 0 && input0 >= 0 ? input0 : norm.inputs(i);
    if (in >= 0 && planTensorsMayOverlap(p, in, z))
      return false;
  }
  for (int i = 1; i < norm.outputs_size(); ++i)
    if (norm.outputs(i) >= 0 && planTensorsMayOverlap(p, norm.outputs(i), z))
      return false;
  return true;
}

/// Whether step `act` (right after normalization `bn`) can be done by it:
/// `residual` gets R's id, or -1.
bool fusable(const plan::Plan &p, const plan::Step &bn, const plan::Step &act, int &residual) {
  residual = -1;
  bool relu = isReluStep(act), addRelu = !relu && isAddReluStep(act);
  if (!relu && !addRelu)
    return false;
  if (bn.outputs_size() < 1 || !planValidTensor(p, bn.outputs(0)) ||
      !planValidTensor(p, act.outputs(0)))
    return false;
  int y = bn.outputs(0), z = act.outputs(0);
  if (addRelu) {
    if (act.inputs(0) == act.inputs(1))
      return false;
    residual = act.inputs(0) == y ? act.inputs(1) : act.inputs(0);
    if ((act.inputs(0) != y && act.inputs(1) != y) || !planValidTensor(p, residual))
      return false;
  } else if (act.inputs(0) != y) {
    return false;
  }
  const plan::Tensor &yt = p.tensors(y), &zt = p.tensors(z);
  int64_t n = planNumElements(yt);
  // Y, Z and R: one type and element count (no broadcast), and that type is
  // the Add's and the Relu's, so each rounds as the fused step would.
  if (n == 0 || zt.type() != yt.type() || planNumElements(zt) != n ||
      !(yt.type() == plan::F32 || yt.type() == plan::BF16))
    return false;
  if (act.op() == "ampc.Fused" && act.fused().instructions(0).type() != yt.type())
    return false;
  if (addRelu) {
    const plan::Tensor &rt = p.tensors(residual);
    if (rt.type() != yt.type() || planNumElements(rt) != n)
      return false;
  }
  // Y is read by that step alone (a view of Y other than Z counts as a read),
  // lives in the arena (not state the host sees), and its bytes are its own
  // or Z's (a Y on another tensor's bytes, an update in place, must be
  // written).
  if (planTensorUses(p, y, z) != 1 || p.tensors(planBaseTensor(p, y)).storage() != plan::ARENA ||
      (p.tensors(y).has_view_of() && planBaseTensor(p, y) != planBaseTensor(p, z)))
    return false;
  // Y's bytes are Z's to use (only the Relu reads Y); R may be Z's own bytes
  // from the same first byte (the Add in place), as each element of R is
  // read before Z's is written.
  if (!apartFromNormOperands(p, bn, z, -1))
    return false;
  if (residual >= 0 && planTensorsMayOverlap(p, residual, z) &&
      !planTensorsStartTogether(p, residual, z))
    return false;
  return true;
}

/// Step `t` is an ampc.Fused program bf16(in0 / in1), the Div in fp32, in1
/// an fp32 scalar: its id in `divisor`.
bool isDivThenCastToBf16Step(const plan::Plan &p, const plan::Step &t, int &divisor) {
  const plan::FusedProgram *f = twoInstructionProgram(t);
  if (!f)
    return false;
  const plan::Instruction &div = f->instructions(0), &cast = f->instructions(1);
  if (div.op() != "Div" || div.args_size() != 2 || div.args(0) != 0 || div.args(1) != 1 ||
      div.type() != plan::F32 || div.attrs_size() != 0 || cast.op() != "Cast" ||
      cast.args_size() != 1 || cast.args(0) != 2 || cast.type() != plan::BF16)
    return false;
  divisor = t.inputs(1);
  return planValidTensor(p, divisor) && p.tensors(divisor).type() == plan::F32 &&
         planNumElements(p.tensors(divisor)) == 1;
}

/// Whether the Cast to bf16 `cast` (right after `norm`, a LayerNormalization
/// or a last-axis Softmax), or the Div by a scalar then Cast to bf16 right
/// after a last-axis SoftmaxGrad, can be written by it; `castOnly` when Y
/// need not be written too; `divisor` the scalar's id, or -1.
bool castFusable(const plan::Plan &p, const plan::Step &norm, const plan::Step &cast, int input0,
                 bool &castOnly, int &divisor) {
  divisor = -1;
  bool grad = norm.op() == "ampc.SoftmaxGrad";
  bool castStep = grad ? isDivThenCastToBf16Step(p, cast, divisor) : isCastToBf16Step(cast);
  if (!castStep || norm.outputs_size() < 1 || !planValidTensor(p, norm.outputs(0)) ||
      !planValidTensor(p, cast.outputs(0)) || cast.inputs(0) != norm.outputs(0))
    return false;
  int y = norm.outputs(0), z = cast.outputs(0);
  const plan::Tensor &yt = p.tensors(y), &zt = p.tensors(z);
  int64_t n = planNumElements(yt);
  if (n == 0 || yt.type() != plan::F32 || zt.type() != plan::BF16 || planNumElements(zt) != n ||
      zt.has_view_of())
    return false;
  if (norm.op() == "Softmax" || grad) {
    // The axis as the Softmax kernel reads it (StepContext::attrInt).
    int64_t axis = planStepAttrInt(norm, "axis", -1), rank = yt.shape_size();
    if (axis != -1 && axis != rank - 1)
      return false;
  }
  // Y not written at all: only the cast reads it, in the arena, on its own
  // bytes or Z's. Otherwise Y is written too, and Z may share none of its bytes.
  castOnly = norm.op() != "Softmax" && planTensorUses(p, y, z) == 1 &&
             p.tensors(planBaseTensor(p, y)).storage() == plan::ARENA && !yt.has_view_of();
  if (!castOnly && planTensorsMayOverlap(p, y, z))
    return false;
  if (divisor >= 0 && planTensorsMayOverlap(p, divisor, z))
    return false;
  return apartFromNormOperands(p, norm, z, input0);
}

} // namespace

bool cpuEpiloguesOff() {
  const char *v = std::getenv("AMPC_CPU_EPILOGUES");
  return v && std::strcmp(v, "off") == 0;
}

std::vector<NormEpilogue> normEpilogues(const plan::Plan &p, const plan::Program &prog,
                                        const std::vector<int> &input0) {
  std::vector<NormEpilogue> out(prog.steps_size());
  if (cpuEpiloguesOff())
    return out;
  for (int s = 0; s + 1 < prog.steps_size(); ++s) {
    const plan::Step &bn = prog.steps(s);
    if (bn.op() == "LayerNormalization" || bn.op() == "Softmax" || bn.op() == "ampc.SoftmaxGrad") {
      bool castOnly = false;
      int divisor = -1;
      int in0 = s < static_cast<int>(input0.size()) ? input0[s] : -1;
      if (castFusable(p, bn, prog.steps(s + 1), in0, castOnly, divisor)) {
        out[s].fused = out[s].cast = true;
        out[s].castOnly = castOnly;
        out[s].divisor = divisor;
      }
      continue;
    }
    if (bn.op() != "BatchNormalization")
      continue;
    int residual = -1;
    if (!fusable(p, bn, prog.steps(s + 1), residual))
      continue;
    out[s].fused = true;
    out[s].residual = residual;
  }
  return out;
}

} // namespace ampc::rt::cpu
