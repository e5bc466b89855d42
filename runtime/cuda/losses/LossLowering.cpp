//===- losses/LossLowering.cpp - Cross-entropy and NLL losses -------------===//
//
// Lowers SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and their
// gradients to losses/LossKernels.h.
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"

namespace ampc::rt::cuda {

/// The attributes and geometry both loss directions share: reduction,
/// ignore_index, N, C and D from the scores (or their gradient), and
/// targets of an integer type shaped [N, d...].
bool StepLowering::lossGeometry(const Operand &scores, const Operand &target, LossArgs &l,
                                std::string &error) {
  std::string r = attrString("reduction", "mean");
  if (r == "none")
    l.reduction = LossArgs::None;
  else if (r == "sum")
    l.reduction = LossArgs::Sum;
  else if (r == "mean")
    l.reduction = LossArgs::Mean;
  else {
    error = "unknown reduction '" + r + "'";
    return false;
  }
  l.hasIgnore = attr("ignore_index") != nullptr;
  l.ignore = attrInt("ignore_index", 0);
  if (scores.rank() < 2) {
    error = "scores must be [N, C, ...]";
    return false;
  }
  l.N = scores.shape[0];
  l.C = scores.shape[1];
  l.D = l.N * l.C != 0 ? scores.numel / (l.N * l.C) : 0;
  if ((target.type != FusedElem::I64 && target.type != FusedElem::I32) ||
      target.numel != l.N * l.D) {
    error = "targets must be int64/int32 shaped [N, d...]: " + argString(target);
    return false;
  }
  return true;
}

bool StepLowering::lowerLoss(bool softmax, std::string &error) {
  Operand x = input(0), target = input(1), weight = input(2), loss = output(0);
  Operand logProb = softmax ? output(1) : Operand();
  if (!x.present() || !target.present() || !loss.present()) {
    error = "the loss takes scores and targets";
    return false;
  }
  if (!requireFloat({0, 2}, {0, 1}, error))
    return false;
  LossArgs l;
  if (!lossGeometry(x, target, l, error))
    return false;
  if ((weight.present() && weight.numel != l.C) ||
      (logProb.present() && logProb.shape != x.shape) ||
      loss.numel != (l.reduction == LossArgs::None ? l.N * l.D : 1)) {
    error = "weights, loss or log_prob shapes do not match";
    return false;
  }
  l.softmax = softmax;
  l.x = x.p;
  l.xType = x.type;
  l.target = target.p;
  l.targetType = target.type;
  l.weight = weight.p;
  l.weightType = weight.type;
  l.loss = loss.p;
  l.lossType = loss.type;
  l.logProb = logProb.p;
  l.logProbType = logProb.type;
  int64_t samples = l.N * l.D;
  l.ws = ws_.alloc<float>(samples + 1);
  l.phase = LossArgs::PerSample;
  // Scores [N, C]: a row launch reading each sample's row once (softmax
  // only; NLL reads one score per sample).
  l.lanes = softmax && l.D == 1 ? rowLanes(l.C) : 0;
  kernel(KernelKind::Loss, l, samples);
  if (l.reduction != LossArgs::None) {
    l.phase = LossArgs::Reduce;
    l.lanes = rowLanes(samples);
    kernel(KernelKind::Loss, l, 1);
  }
  return true;
}

bool StepLowering::lowerLossGrad(bool softmax, std::string &error) {
  size_t targetIn = softmax ? 2 : 1, weightIn = softmax ? 3 : 2;
  Operand dLoss = input(0), target = input(targetIn), weight = input(weightIn), dx = output(0);
  Operand logp = softmax ? input(1) : Operand();
  if (!dLoss.present() || !target.present() || (softmax && !logp.present()) || !dx.present()) {
    error = "missing operands";
    return false;
  }
  if (!requireFloat({0, static_cast<int>(weightIn)}, {0}, error) ||
      (softmax && !requireFloat({1}, {}, error)))
    return false;
  LossArgs l;
  if (!lossGeometry(dx, target, l, error))
    return false;
  if ((softmax && logp.shape != dx.shape) || (weight.present() && weight.numel != l.C) ||
      dLoss.numel != (l.reduction == LossArgs::None ? l.N * l.D : 1)) {
    error = "dLoss, log_prob or weight shapes do not match";
    return false;
  }
  l.softmax = softmax;
  l.x = logp.p;
  l.xType = logp.type;
  l.target = target.p;
  l.targetType = target.type;
  l.weight = weight.p;
  l.weightType = weight.type;
  l.dLoss = dLoss.p;
  l.dLossType = dLoss.type;
  l.dx = dx.p;
  l.dxType = dx.type;
  l.ws = ws_.alloc<float>(1);
  l.phase = LossArgs::GradScale;
  l.lanes = rowLanes(l.N * l.D);
  kernel(KernelKind::Loss, l, 1);
  l.phase = LossArgs::Grad;
  l.lanes = l.D == 1 ? rowLanes(l.C) : 0; // rows of dX written by warps
  kernel(KernelKind::Loss, l, l.N * l.D);
  return true;
}

} // namespace ampc::rt::cuda
