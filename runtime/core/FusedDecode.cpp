//===- FusedDecode.cpp - Reading a fused step's instructions ---------------===//

#include "ampc/rt/FusedDecode.h"

#include "plan.pb.h"

namespace ampc::rt {

bool decodeFusedInstruction(const plan::Instruction &pi, int definedRegs, DecodedInstruction &out,
                            std::string &error) {
  out = DecodedInstruction();
  out.op = fusedOpByName(pi.op());
  if (out.op == FusedOp::Count) {
    error = "unknown fused instruction '" + pi.op() + "'";
    return false;
  }
  for (int k = 0; k < pi.args_size() && k < 3; ++k) {
    if (pi.args(k) < 0 || pi.args(k) >= definedRegs) {
      error = "fused instruction reads an undefined register";
      return false;
    }
    out.args[k] = pi.args(k);
  }
  out.params = fused::fusedDefaults(out.op);
  for (const plan::Attribute &a : pi.attrs()) {
    if (a.name() == "alpha")
      out.params.alpha = static_cast<float>(a.f());
    else if (a.name() == "beta")
      out.params.beta = static_cast<float>(a.f());
    else if (a.name() == "gamma")
      out.params.gamma = static_cast<float>(a.f());
    else if (a.name() == "has_min")
      out.params.hasMin = a.i() != 0;
    else if (a.name() == "has_max")
      out.params.hasMax = a.i() != 0;
    else if (a.name() == "detect_positive")
      out.params.detectPos = a.i() != 0;
    else if (a.name() == "detect_negative")
      out.params.detectNeg = a.i() != 0;
  }
  return true;
}

} // namespace ampc::rt
