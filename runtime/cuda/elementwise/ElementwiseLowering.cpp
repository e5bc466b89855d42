//===- elementwise/ElementwiseLowering.cpp - Fused programs and Dropout ---===//
//
// Lowers ampc.Fused steps, elementwise ops left unfused, Dropout and its
// gradient (elementwise/ElementwiseKernels.h).
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"
#include "ampc/rt/FusedDecode.h"
#include "ampc/rt/FusedOps.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Fused elementwise programs
//===----------------------------------------------------------------------===//

bool StepLowering::lowerFused(std::string &error) {
  const plan::FusedProgram &fp = step_.fused();
  if (outs_.empty() || fp.results_size() != static_cast<int>(outs_.size()) ||
      fp.num_inputs() != static_cast<int>(in_.size())) {
    error = "malformed fused program";
    return false;
  }
  const std::vector<int64_t> &shape = outs_.front().shape;
  for (const Operand &o : outs_)
    if (o.shape != shape) {
      error = "fused outputs differ in shape";
      return false;
    }
  if (static_cast<int>(in_.size()) > FusedArgs::kMaxInputs ||
      fp.instructions_size() > FusedArgs::kMaxInstrs ||
      static_cast<int>(outs_.size()) > FusedArgs::kMaxOutputs ||
      static_cast<int>(shape.size()) > FusedArgs::kRank) {
    error = "the fused step exceeds the CUDA kernel's limits (" +
            std::to_string(FusedArgs::kMaxInputs) + " inputs, " +
            std::to_string(FusedArgs::kMaxInstrs) + " instructions, " +
            std::to_string(FusedArgs::kMaxOutputs) + " outputs, rank " +
            std::to_string(FusedArgs::kRank) + ")";
    return false;
  }
  FusedArgs f;
  f.rank = static_cast<int>(shape.size());
  for (int d = 0; d < f.rank; ++d)
    f.shape[d] = shape[d];
  f.numInputs = static_cast<int>(in_.size());
  for (size_t i = 0; i < in_.size(); ++i) {
    const Operand &x = in_[i];
    if (!x.present() || x.shape.size() > shape.size()) {
      error = "input " + std::to_string(i) + " does not broadcast to the result";
      return false;
    }
    FusedArgs::Input &fi = f.in[i];
    fi.p = x.p;
    fi.type = x.type;
    f.wide = f.wide || x.type == FusedElem::F64;
    if (x.shape == shape) {
      fi.kind = FusedArgs::Contiguous;
    } else if (x.numel == 1) {
      fi.kind = FusedArgs::Scalar;
    } else {
      fi.kind = FusedArgs::Strided;
      for (int64_t &st : fi.strides)
        st = 0; // broadcast over the leading dims
      size_t lead = shape.size() - x.shape.size();
      int64_t stride = 1;
      for (size_t d = x.shape.size(); d-- > 0;) {
        if (x.shape[d] != 1 && x.shape[d] != shape[d + lead]) {
          error = "input " + std::to_string(i) + " does not broadcast to the result";
          return false;
        }
        fi.strides[d + lead] = x.shape[d] == 1 ? 0 : stride;
        stride *= x.shape[d];
      }
    }
  }
  int regs = fp.num_inputs();
  f.numInstrs = fp.instructions_size();
  for (int j = 0; j < fp.instructions_size(); ++j) {
    const plan::Instruction &pi = fp.instructions(j);
    FusedArgs::Instr &in = f.ins[j];
    DecodedInstruction d;
    if (!decodeFusedInstruction(pi, regs, d, error))
      return false;
    in.op = d.op;
    in.a = static_cast<uint8_t>(d.args[0]);
    in.b = static_cast<uint8_t>(d.args[1]);
    in.c = static_cast<uint8_t>(d.args[2]);
    in.type = static_cast<uint8_t>(pi.type());
    in.params = d.params;
    f.wide = f.wide || pi.type() == plan::F64;
    ++regs;
  }
  f.numOutputs = static_cast<int>(outs_.size());
  for (size_t o = 0; o < outs_.size(); ++o) {
    int r = fp.results(static_cast<int>(o));
    if (r < 0 || r >= regs) {
      error = "fused result names an undefined register";
      return false;
    }
    f.out[o] = {outs_[o].present() ? outs_[o].p : nullptr, outs_[o].type, static_cast<uint8_t>(r)};
  }
  kernel(KernelKind::Fused, f, outs_.front().numel);
  return true;
}

/// An elementwise op left unfused (Cast, Where, Clip, ...): a fused program
/// of one instruction. Integer arithmetic would go through fp32 registers, so
/// only float and bool operands are taken, and Cast between a float type and
/// an integer type (exactly what the CPU's conversions do).
bool StepLowering::lowerElementwise(FusedOp op, std::string &error) {
  Operand y = output(0);
  if (!y.present() || outs_.size() != 1) {
    error = "expects one result";
    return false;
  }
  auto isInt = [](uint8_t t) { return t != FusedElem::BOOL && !isFloat(t) && t != FusedElem::F64; };
  bool intIn = false;
  for (const Operand &x : in_)
    intIn = intIn || (x.present() && isInt(x.type));
  if ((op == FusedOp::Cast && intIn && isInt(y.type)) ||
      (op != FusedOp::Cast && (intIn || isInt(y.type)))) {
    error = "integer elementwise steps are not supported by the CUDA backend";
    return false;
  }
  FusedArgs f;
  if (y.rank() > FusedArgs::kRank || in_.size() > 3) {
    error = "rank above " + std::to_string(FusedArgs::kRank);
    return false;
  }
  f.rank = y.rank();
  for (int d = 0; d < f.rank; ++d)
    f.shape[d] = y.shape[d];
  uint8_t args[3] = {0, 0, 0};
  for (size_t i = 0; i < in_.size(); ++i) {
    const Operand &x = in_[i];
    if (!x.present())
      continue;
    if (x.shape.size() > y.shape.size()) {
      error = "operand " + std::to_string(i) + " does not broadcast to the result";
      return false;
    }
    FusedArgs::Input &fi = f.in[f.numInputs];
    fi.p = x.p;
    fi.type = x.type;
    f.wide = f.wide || x.type == FusedElem::F64;
    if (x.shape == y.shape) {
      fi.kind = FusedArgs::Contiguous;
    } else if (x.numel == 1) {
      fi.kind = FusedArgs::Scalar;
    } else {
      fi.kind = FusedArgs::Strided;
      size_t lead = y.shape.size() - x.shape.size();
      int64_t stride = 1;
      for (size_t d = x.shape.size(); d-- > 0;) {
        if (x.shape[d] != 1 && x.shape[d] != y.shape[d + lead]) {
          error = "operand " + std::to_string(i) + " does not broadcast to the result";
          return false;
        }
        fi.strides[d + lead] = x.shape[d] == 1 ? 0 : stride;
        stride *= x.shape[d];
      }
    }
    args[i] = static_cast<uint8_t>(f.numInputs++);
  }
  if (f.numInputs == 0) {
    error = "missing operands";
    return false;
  }
  FusedArgs::Instr &in = f.ins[0];
  f.numInstrs = 1;
  in.op = op;
  in.type = y.type;
  in.a = args[0];
  in.b = args[1];
  in.c = args[2];
  f.wide = f.wide || y.type == FusedElem::F64;
  in.params = fused::fusedDefaults(op);
  in.params.alpha = static_cast<float>(attrFloat("alpha", in.params.alpha));
  in.params.beta = static_cast<float>(attrFloat("beta", in.params.beta));
  in.params.gamma = static_cast<float>(attrFloat("gamma", in.params.gamma));
  in.params.detectPos = attrInt("detect_positive", 1) != 0;
  in.params.detectNeg = attrInt("detect_negative", 1) != 0;
  in.params.hasMin = has(1);
  in.params.hasMax = has(2);
  f.numOutputs = 1;
  f.out[0] = {y.p, y.type, static_cast<uint8_t>(f.numInputs)};
  kernel(KernelKind::Fused, f, y.numel);
  return true;
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

/// Whether operand i is absent or a constant of the plan (seen through a view).
bool StepLowering::isConstantOperand(size_t i) const {
  if (!has(i))
    return true;
  const plan::Tensor *t = &p_.tensors(in_[i].id);
  if (t->has_view_of())
    t = &p_.tensors(t->view_of());
  return t->storage() == plan::CONSTANT;
}

/// A scalar operand that must be a constant (the kernel takes it as an
/// argument); `dflt` when absent.
bool StepLowering::constantScalar(size_t i, double dflt, double &v, std::string &error) const {
  if (!has(i)) {
    v = dflt;
    return true;
  }
  const plan::Tensor *t = &p_.tensors(in_[i].id);
  if (t->has_view_of())
    t = &p_.tensors(t->view_of());
  if (t->storage() != plan::CONSTANT || in_[i].numel != 1) {
    error = "operand " + std::to_string(i) + " must be a constant scalar on the CUDA backend";
    return false;
  }
  if (t->data().size() < planElemSize(t->type())) {
    error = "operand " + std::to_string(i) + " has no data";
    return false;
  }
  v = fused::fusedLoad<double>(in_[i].type, t->data().data(), 0);
  return true;
}

/// The ratio and training operands of a Dropout or DropoutGrad step,
/// `ratioAt` and `ratioAt + 1`: constants are passed as values, other
/// scalars (fed or computed at run time) are read by the kernel.
bool StepLowering::dropoutParams(size_t ratioAt, DropoutArgs &a, std::string &error) const {
  auto scalar = [&](size_t i, double dflt, double &value, const void *&at, uint8_t &type) {
    if (isConstantOperand(i))
      return constantScalar(i, dflt, value, error);
    if (in_[i].numel != 1 || in_[i].type == FusedElem::F64 ||
        (!isFloat(in_[i].type) && in_[i].type != FusedElem::BOOL)) {
      error = "operand " + std::to_string(i) + " must be a float or bool scalar";
      return false;
    }
    at = in_[i].p;
    type = in_[i].type;
    return true;
  };
  double training = 0.0;
  if (!scalar(ratioAt, 0.5, a.ratio, a.ratioAt, a.ratioType) ||
      !scalar(ratioAt + 1, 0.0, training, a.trainingAt, a.trainingType))
    return false;
  a.training = training != 0.0;
  return true;
}

bool StepLowering::lowerDropout(std::string &error) {
  Operand x = input(0), y = output(0), mask = output(1);
  if (!x.present() || !y.present() || x.type != y.type || x.numel != y.numel ||
      (mask.present() && mask.numel != x.numel)) {
    error = "Dropout takes X and gives Y of its type (and a mask of its shape)";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  DropoutArgs a;
  if (!dropoutParams(1, a, error))
    return false;
  Operand counter = input(3);
  if (!counter.present() || counter.type != FusedElem::I64 || counter.numel != 1) {
    error = "Dropout needs its run counter (an int64 state, operand 3; recompile the model)";
    return false;
  }
  a.mode = DropoutArgs::Forward;
  a.x = x.p;
  a.xType = x.type;
  a.y = y.p;
  a.yType = y.type;
  a.mask = static_cast<uint8_t *>(mask.p);
  a.counter = static_cast<int64_t *>(counter.p);
  a.seed = static_cast<uint64_t>(attrInt("seed", 0));
  kernel(KernelKind::Dropout, a, x.numel);
  DropoutArgs advance = a;
  advance.mode = DropoutArgs::Advance;
  kernel(KernelKind::Dropout, advance, 1);
  return true;
}

bool StepLowering::lowerDropoutGrad(std::string &error) {
  Operand dy = input(0), mask = input(1), dx = output(0);
  if (!dy.present() || !mask.present() || !dx.present() || mask.numel != dy.numel ||
      dx.numel != dy.numel || mask.elemBytes() != 1) {
    error = "DropoutGrad takes dY and a bool mask of its shape";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  DropoutArgs a;
  if (!dropoutParams(2, a, error))
    return false;
  a.mode = DropoutArgs::Grad;
  a.x = dy.p;
  a.xType = dy.type;
  a.y = dx.p;
  a.yType = dx.type;
  a.mask = static_cast<uint8_t *>(mask.p);
  kernel(KernelKind::Dropout, a, dy.numel);
  return true;
}

} // namespace ampc::rt::cuda
