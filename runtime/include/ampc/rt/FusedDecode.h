//===- FusedDecode.h - Reading a fused step's instructions -------*- C++ -*-===//
//
// The checks and defaults every backend applies to one instruction of a plan's
// FusedProgram before running it: a known op, operands that name registers
// defined before it, and the op's ONNX attribute defaults overridden by the
// instruction's attributes. Host code only (it reads the plan's protobuf).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/rt/FusedEval.h"
#include "ampc/rt/FusedOps.h"

#include <string>

namespace ampc::plan {
class Instruction;
}

namespace ampc::rt {

struct DecodedInstruction {
  FusedOp op = FusedOp::Count;
  int args[3] = {0, 0, 0}; ///< registers; unused operands read register 0
  fused::FusedParams params;
};

/// Decodes `pi`, the instruction that defines register `definedRegs` (the
/// registers below it are the inputs and earlier results). False with a
/// one-line `error` for an unknown op or an operand not yet defined.
bool decodeFusedInstruction(const plan::Instruction &pi, int definedRegs, DecodedInstruction &out,
                            std::string &error);

} // namespace ampc::rt
