//===- GradientRulesNN.cpp - Gradients of MatMul, Gemm, Conv, pooling, norms -===//
//
// Matrix products compose standard ops (MatMul, Gemm, Transpose). Ops whose
// gradient would take many nodes and temporaries as a composition use an ampc
// gradient op instead: ConvGrad, MaxPoolGrad, AveragePoolGrad, SoftmaxGrad,
// LogSoftmaxGrad, LayerNormalizationGrad, BatchNormalizationGrad, DropoutGrad
// (schemas in lib/ONNX/GradientOps.cpp, kernels in
// lib/Interpreter/GradientKernels.cpp).
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Autodiff.h"

namespace ampc {

namespace {

using B = GradientBuilder;

/// Y = A @ B with numpy semantics: batched and broadcast leading axes, and 1-D
/// operands promoted to matrices ([K] -> [1,K] for A, [K,1] for B) whose added
/// axis the result drops.
///   dA = dY @ B^T and dB = A^T @ dY, each summed over its broadcast axes.
void matMulGrad(B &b) {
  Value *a = b.x(0), *w = b.x(1);
  int64_t ra = a->type().rank(), rb = w->type().rank();
  int64_t k = a->shape().back();
  // Restore the axes the result dropped for 1-D operands.
  Shape dyShape = b.dY()->shape();
  if (rb == 1)
    dyShape.push_back(1);
  if (ra == 1)
    dyShape.insert(dyShape.end() - 1, 1);
  Value *dy = b.reshape(b.dY(), dyShape);
  int64_t n = dyShape.back();

  if (b.wantsGrad(0)) {
    Value *w2 = rb == 1 ? b.reshape(w, {k, 1}) : w;
    // [batch.., M, N] @ [.., N, K]: numpy broadcasting maps straight back to A.
    b.setGrad(0, b.sumToShape(b.op("MatMul", {dy, b.transposeLast2(w2)}), a->shape()));
  }
  if (!b.wantsGrad(1))
    return;
  if (rb == 2 && ra >= 2) {
    // A weight shared by every batch entry: one [K, rows] @ [rows, N] product
    // sums over the batch without a [batch, K, N] temporary.
    int64_t rows = a->type().numElements() / k;
    Value *af = b.reshape(a, {rows, k});
    Value *dyf = b.reshape(dy, {rows, n});
    b.setGrad(1, b.op("MatMul", {b.transposeLast2(af), dyf}));
    return;
  }
  Value *a2 = ra == 1 ? b.reshape(a, {1, k}) : a;
  Value *dw = b.op("MatMul", {b.transposeLast2(a2), dy});
  Shape w2Shape = rb == 1 ? Shape{k, 1} : w->shape();
  b.setGrad(1, b.reshape(b.sumToShape(dw, w2Shape), w->shape()));
}

/// Y = alpha * A' @ B' + beta * C, with A' = transA ? A^T : A (B' likewise).
///   dA' = alpha dY B'^T,  dB' = alpha A'^T dY,  dC = beta dY (summed to C);
/// each transposed product is one Gemm with the transposes chosen to match.
void gemmGrad(B &b) {
  Value *a = b.x(0), *w = b.x(1), *c = b.x(2), *dy = b.dY();
  bool ta = b.node().getInt("transA", 0) != 0, tb = b.node().getInt("transB", 0) != 0;
  double alpha = b.node().getFloat("alpha", 1.0), beta = b.node().getFloat("beta", 1.0);
  auto gemm = [&](Value *p, Value *q, bool tp, bool tq) {
    B::Attrs attrs;
    if (alpha != 1.0)
      attrs["alpha"] = Attribute::ofFloat(alpha);
    if (tp)
      attrs["transA"] = Attribute::ofInt(1);
    if (tq)
      attrs["transB"] = Attribute::ofInt(1);
    return b.op("Gemm", {p, q}, std::move(attrs));
  };
  if (b.wantsGrad(0))
    b.setGrad(0, ta ? gemm(w, dy, tb, true) : gemm(dy, w, false, !tb));
  if (b.wantsGrad(1))
    b.setGrad(1, tb ? gemm(dy, a, true, ta) : gemm(a, dy, !ta, false));
  if (c && b.wantsGrad(2))
    b.setGrad(2, b.sumToShape(b.scale(dy, beta), c->shape()));
}

/// Sets the gradients of the wanted operands from the results of a
/// multi-result gradient op (result i is operand i's gradient).
void setGrads(B &b, const std::vector<Value *> &grads, const std::vector<bool> &wanted) {
  for (unsigned i = 0; i < wanted.size(); ++i)
    if (wanted[i])
      b.setGrad(i, grads[i]);
}

std::vector<bool> wantedGrads(B &b, unsigned count) {
  std::vector<bool> wanted(count);
  for (unsigned i = 0; i < count; ++i)
    wanted[i] = b.wantsGrad(i) && b.x(i);
  return wanted;
}

/// Y = conv(X, W) + bias.  ConvGrad gives dX (the transposed convolution of
/// dY), dW (the correlation of X with dY) and dB (dY summed over all axes but
/// the channel), computing only the results asked for.
void convGrad(B &b) {
  std::vector<bool> wanted = wantedGrads(b, 3);
  auto attrs = b.forwardAttrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  setGrads(b, b.ops("ConvGrad", {b.dY(), b.x(0), b.x(1)}, attrs, wanted, "ampc"), wanted);
}

/// MaxPool routes each dY element to the input position that won its window.
/// MaxPoolGrad finds that position again from X (as cuDNN's pooling backward
/// does) instead of reading int64 Indices: X is usually kept for the backward
/// pass anyway, while Indices would be kept only for this and are 4x the
/// bytes of an fp16 Y.
void maxPoolGrad(B &b) {
  auto attrs = b.forwardAttrs({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                               "strides"});
  attrs["shape"] = Attribute::ofInts(b.x(0)->shape());
  b.setGrad(0, b.ampc("MaxPoolGrad", {b.dY(), b.x(0)}, std::move(attrs)));
}

/// AveragePool spreads each dY element evenly over its window (with the
/// forward op's count_include_pad and ceil_mode window geometry).
void averagePoolGrad(B &b) {
  auto attrs = b.forwardAttrs({"auto_pad", "ceil_mode", "count_include_pad", "dilations",
                               "kernel_shape", "pads", "strides"});
  attrs["shape"] = Attribute::ofInts(b.x(0)->shape());
  b.setGrad(0, b.ampc("AveragePoolGrad", {b.dY()}, std::move(attrs)));
}

/// Y[n,c] = mean of X[n,c,...].  dX = dY / pixels, broadcast over the window.
void globalAveragePoolGrad(B &b) {
  const Shape &xs = b.x(0)->shape();
  int64_t pixels = 1;
  for (size_t d = 2; d < xs.size(); ++d)
    pixels *= xs[d];
  b.setGrad(0, b.expand(b.scale(b.dY(), 1.0 / double(pixels)), xs));
}

/// Y = (X - mean) * invStdDev * scale + bias over the axes from `axis` on.
/// LayerNormalizationGrad works from the saved Mean and InvStdDev results
/// (requested on the forward node), so statistics are not recomputed:
///   xhat = (X - mean) * inv,  g = dY * scale,
///   dX = inv * (g - mean(g) - xhat * mean(g * xhat)),
///   dScale = sum over rows of dY * xhat,  dBias = sum over rows of dY.
void layerNormGrad(B &b) {
  if (b.dY(1) || b.dY(2)) {
    b.fail("a gradient reaches the Mean or InvStdDev result, which the rule does not support");
    return;
  }
  Value *mean = b.savedOutput(1, "Mean");
  Value *invStd = b.savedOutput(2, "InvStdDev");
  if (!mean || !invStd)
    return;
  std::vector<bool> wanted = wantedGrads(b, 3);
  auto outs = b.ops("LayerNormalizationGrad", {b.dY(), b.x(0), b.x(1), mean, invStd},
                    b.forwardAttrs({"axis"}), wanted, "ampc");
  // dScale and dBias come in the normalized shape; a scale or bias that
  // broadcasts to it takes the sum.
  if (wanted[0])
    b.setGrad(0, outs[0]);
  for (unsigned i : {1u, 2u})
    if (wanted[i])
      b.setGrad(i, b.sumToShape(outs[i], b.x(i)->shape()));
}

/// BatchNormalization: training mode (opset 14+ training_mode=1, or the
/// 5-result opset-9 form) normalizes with the batch statistics, which
/// BatchNormalizationGrad recomputes from X (opset 15 has no saved-statistics
/// results, and opset 9's saved variance means different things to different
/// runtimes):
///   dX = inv/M * (M g - sum(g) - xhat sum(g xhat)),  g = dY * scale;
/// in inference mode the running statistics are constants: dX = dY scale inv.
/// dScale = sum dY * xhat, dBias = sum dY (over all axes but the channel).
void batchNormGrad(B &b) {
  const Node &n = b.node();
  for (unsigned i = 1; i < n.numOutputs(); ++i)
    if (b.dY(i)) {
      b.fail("a gradient reaches statistics result " + llvm::Twine(i) +
             ", which the rule does not support");
      return;
    }
  bool training = b.graph().opsetVersion() >= 14 ? n.getInt("training_mode", 0) != 0
                                                 : n.numOutputs() > 1;
  std::vector<bool> wanted = wantedGrads(b, 3);
  auto attrs = b.forwardAttrs({"epsilon"});
  attrs["training_mode"] = Attribute::ofInt(training ? 1 : 0);
  std::vector<Value *> inputs{b.dY(), b.x(0), b.x(1)};
  if (!training) {
    inputs.push_back(b.x(3));
    inputs.push_back(b.x(4));
  }
  setGrads(b, b.ops("BatchNormalizationGrad", inputs, std::move(attrs), wanted, "ampc"), wanted);
}

/// Y = X * mask / (1 - ratio) in training mode, X otherwise. DropoutGrad
/// applies the forward node's mask (requested when omitted) to dY.
void dropoutGrad(B &b) {
  Value *training = b.x(2);
  const Tensor *mode = B::constantData(training);
  bool inference = !training || (mode && mode->getInt(0) == 0);
  if (inference) {
    b.setGrad(0, b.dY());
    return;
  }
  Value *mask = b.savedOutput(1, "mask");
  if (!mask)
    return;
  b.setGrad(0, b.ampc("DropoutGrad", {b.dY(), mask, b.x(1), training}));
}

} // namespace

void registerNNGradients(GradientRegistry &r) {
  r.add("MatMul", {0, 1}, matMulGrad);
  r.add("Gemm", {0, 1, 2}, gemmGrad);
  r.add("Conv", {0, 1, 2}, convGrad);
  r.add("MaxPool", {0}, maxPoolGrad);
  r.add("AveragePool", {0}, averagePoolGrad);
  r.add("GlobalAveragePool", {0}, globalAveragePoolGrad);

  /// Y = softmax(X) on `axis`.  dX = Y * (dY - sum(dY * Y)), from the result.
  r.add("Softmax", {0}, [](B &b) {
    b.setGrad(0, b.ampc("SoftmaxGrad", {b.dY(), b.y()}, b.forwardAttrs({"axis"})));
  });
  /// Y = log(softmax(X)).  dX = dY - exp(Y) * sum(dY), from the result.
  r.add("LogSoftmax", {0}, [](B &b) {
    b.setGrad(0, b.ampc("LogSoftmaxGrad", {b.dY(), b.y()}, b.forwardAttrs({"axis"})));
  });

  r.add("LayerNormalization", {0, 1, 2}, layerNormGrad);
  // Operands 3 and 4 (running mean and variance) are state, not trained.
  r.add("BatchNormalization", {0, 1, 2}, batchNormGrad);
  // Operand 1 (ratio) and 2 (training_mode) are hyperparameters.
  r.add("Dropout", {0}, dropoutGrad);
}

} // namespace ampc
