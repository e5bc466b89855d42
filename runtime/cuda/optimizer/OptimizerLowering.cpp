//===- optimizer/OptimizerLowering.cpp - AdamW and AllFinite --------------===//
//
// Lowers ampc.AllFinite and ampc.AdamW to optimizer/OptimizerKernels.h.
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Optimizer steps
//===----------------------------------------------------------------------===//

bool StepLowering::lowerAllFinite(std::string &error) {
  Operand out = output(0);
  if (outs_.size() != 1 || !out.present() || out.type != FusedElem::BOOL) {
    error = "AllFinite produces one bool";
    return false;
  }
  std::vector<Operand> inputs;
  for (const Operand &t : in_) {
    if (!t.present())
      continue;
    if (!isFloat(t.type) && t.type != FusedElem::F64) {
      error = "AllFinite checks float tensors";
      return false;
    }
    if (t.numel > 0)
      inputs.push_back(t);
  }
  AllFiniteArgs a;
  auto threadsFor = [](int64_t n) {
    return (n + AllFiniteArgs::kChunk - 1) / AllFiniteArgs::kChunk;
  };
  int64_t total = 0;
  for (const Operand &t : inputs)
    total += threadsFor(t.numel);
  a.flags = ws_.alloc<uint8_t>(total);
  int64_t base = 0;
  for (size_t first = 0; first < inputs.size(); first += AllFiniteArgs::kMaxInputs) {
    AllFiniteArgs part = a;
    part.flagBase = base;
    part.count = static_cast<int>(std::min<size_t>(AllFiniteArgs::kMaxInputs, inputs.size() - first));
    int64_t chunks = 0;
    for (int k = 0; k < part.count; ++k) {
      const Operand &t = inputs[first + k];
      part.p[k] = t.p;
      part.type[k] = t.type;
      part.n[k] = t.numel;
      part.firstChunk[k] = chunks;
      chunks += threadsFor(t.numel);
    }
    part.firstChunk[part.count] = chunks;
    kernel(KernelKind::AllFinite, part, chunks);
    base += chunks;
  }
  // Fold the flags a span at a time until one launch of one thread writes the result.
  AllFiniteArgs fold;
  fold.phase = AllFiniteArgs::Combine;
  fold.flags = a.flags;
  fold.totalFlags = total;
  while (fold.totalFlags > AllFiniteArgs::kSpan) {
    int64_t partials = (fold.totalFlags + AllFiniteArgs::kSpan - 1) / AllFiniteArgs::kSpan;
    fold.out = ws_.alloc<uint8_t>(partials);
    kernel(KernelKind::AllFinite, fold, partials);
    fold.flags = fold.out;
    fold.totalFlags = partials;
  }
  fold.span = std::max<int64_t>(fold.totalFlags, 1);
  fold.out = static_cast<uint8_t *>(out.p);
  kernel(KernelKind::AllFinite, fold, 1);
  return true;
}

bool StepLowering::lowerAdamW(std::string &error) {
  Operand p = input(0), g = input(1), m = input(2), v = input(3), lr = input(4), t = input(5),
          found = input(6);
  bool operandsOk = p.present() && g.present() && m.present() && v.present() && lr.present() &&
                    t.present() && (outs_.size() == 3 || outs_.size() == 4);
  for (const Operand &o : {p, m, v, lr, t, output(0), output(1), output(2)})
    operandsOk = operandsOk && o.present() && o.type == FusedElem::F32;
  operandsOk = operandsOk && isFloat(g.type) &&
               (!found.present() || (found.type == FusedElem::BOOL && found.numel == 1));
  for (const Operand &o : {g, m, v, output(0), output(1), output(2)})
    operandsOk = operandsOk && o.numel == p.numel;
  Operand copy = output(3);
  if (copy.present())
    operandsOk = operandsOk && copy.numel == p.numel &&
                 (copy.type == FusedElem::F16 || copy.type == FusedElem::BF16);
  if (!operandsOk || lr.numel != 1 || t.numel != 1) {
    error = "AdamW takes fp32 param, moments, scalar lr and step, a float gradient of the "
            "parameter's size and an optional bool found_inf, and produces 3 fp32 results and an "
            "optional fp16/bf16 copy of the parameter";
    return false;
  }
  AdamWArgs a;
  double beta1 = attrFloat("beta1", 0.9), beta2 = attrFloat("beta2", 0.999);
  a.c = math::adamwConstants(beta1, attrFloat("one_minus_beta1", 1 - beta1), beta2,
                             attrFloat("one_minus_beta2", 1 - beta2), attrFloat("epsilon", 1e-8),
                             attrFloat("weight_decay", 0.0));
  a.p = static_cast<const float *>(p.p);
  a.m = static_cast<const float *>(m.p);
  a.v = static_cast<const float *>(v.p);
  a.lr = static_cast<const float *>(lr.p);
  a.t = static_cast<const float *>(t.p);
  a.g = g.p;
  a.gType = g.type;
  a.found = found.present() ? static_cast<const uint8_t *>(found.p) : nullptr;
  a.pOut = static_cast<float *>(output(0).p);
  a.mOut = static_cast<float *>(output(1).p);
  a.vOut = static_cast<float *>(output(2).p);
  a.copy = copy.present() ? copy.p : nullptr;
  a.copyType = copy.type;
  kernel(KernelKind::AdamW, a, p.numel);
  return true;
}

} // namespace ampc::rt::cuda
