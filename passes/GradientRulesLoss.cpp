//===- GradientRulesLoss.cpp - Gradients of the cross-entropy losses -------===//
//
// With log-probabilities p (the softmax's logarithm) over the classes on axis
// 1, targets t and class weights w (1 without weights), sample i's loss is
// -w[t_i] p[i, t_i], zero where t_i == ignore_index; reduction "mean" divides
// the sum by the total weight of the samples not ignored.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Autodiff.h"

namespace ampc {

namespace {

using B = GradientBuilder;

/// SoftmaxCrossEntropyLoss: d scores[i, c] = dL_i w[t_i] (softmax[i, c] - [c == t_i])
/// (over the total weight for "mean"). SoftmaxCrossEntropyLossGrad works from
/// the saved log-probabilities (result 1, requested when omitted) instead of
/// recomputing the softmax. A gradient reaching result 1 itself goes through
/// LogSoftmaxGrad on axis 1.
void softmaxCrossEntropyGrad(B &b) {
  Value *logProb = b.savedOutput(1, "log_prob");
  if (!logProb)
    return;
  if (Value *dLoss = b.dY(0)) {
    std::vector<Value *> inputs{dLoss, logProb, b.x(1)};
    if (b.x(2))
      inputs.push_back(b.x(2));
    b.setGrad(0, b.ampc("SoftmaxCrossEntropyLossGrad", inputs,
                        b.forwardAttrs({"ignore_index", "reduction"})));
  }
  if (Value *dLogProb = b.dY(1))
    b.setGrad(0, b.ampc("LogSoftmaxGrad", {dLogProb, logProb}, {{"axis", Attribute::ofInt(1)}}));
}

/// NegativeLogLikelihoodLoss on log-probabilities: d input[i, c] =
/// -dL_i w[t_i] [c == t_i] (over the total weight for "mean").
void nllGrad(B &b) {
  std::vector<Value *> inputs{b.dY(), b.x(1)};
  if (b.x(2))
    inputs.push_back(b.x(2));
  B::Attrs attrs = b.forwardAttrs({"ignore_index", "reduction"});
  attrs["shape"] = Attribute::ofInts(b.x(0)->shape());
  b.setGrad(0, b.ampc("NegativeLogLikelihoodLossGrad", inputs, std::move(attrs)));
}

} // namespace

void registerLossGradients(GradientRegistry &r) {
  // Operand 1 (targets) is integer; operand 2 (class weights) is not trained.
  r.add("SoftmaxCrossEntropyLoss", {0}, softmaxCrossEntropyGrad);
  r.add("NegativeLogLikelihoodLoss", {0}, nllGrad);
}

} // namespace ampc
