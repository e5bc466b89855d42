//===- GradientRulesElementwise.cpp - Gradients of elementwise operators ---===//
//
// One rule per operator: the differentiable operands, then the math. X, Y and
// dY are the operand, the result and the result's gradient; broadcasting is
// undone with sumToShape. Activations use the memory-saving forms that need
// only the result (Relu, Sigmoid, Tanh, Sqrt, Exp), so X can be freed after
// the forward pass.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Autodiff.h"

#include <cmath>
#include <optional>

namespace ampc {

namespace {

using B = GradientBuilder;

/// The value of a constant whose elements are all equal, if it is one.
std::optional<double> uniformConstant(const Value *v) {
  const Tensor *t = B::constantData(v);
  if (!t || t->size() == 0)
    return std::nullopt;
  double first = t->getDouble(0);
  for (int64_t i = 1; i < t->size(); ++i)
    if (t->getDouble(i) != first)
      return std::nullopt;
  return first;
}

/// Pow: Y = X^E.  dX = dY * E * X^(E-1);  dE = dY * Y * ln(X).
void powGrad(B &b) {
  Value *x = b.x(0), *e = b.x(1), *dy = b.dY();
  if (b.wantsGrad(0)) {
    Value *local;
    std::optional<double> c = uniformConstant(e);
    if (c && *c == 1.0)
      local = nullptr;
    else if (c && *c == 2.0)
      local = b.scale(x, 2.0);
    else if (c && *c == 0.5)
      local = b.div(b.scalarLike(0.5, x), b.y()); // 0.5 / sqrt(X), from the result
    else if (c)
      local = b.scale(b.op("Pow", {x, b.scalarLike(*c - 1.0, x)}), *c);
    else {
      Value *ex = b.cast(e, x->dtype());
      local = b.mul(ex, b.op("Pow", {x, b.sub(ex, b.scalarLike(1.0, ex))}));
    }
    Value *dx = local ? b.mul(dy, local) : dy;
    b.setGrad(0, b.sumToShape(dx, x->shape()));
  }
  if (b.wantsGrad(1)) {
    Value *de = b.mul(b.mul(dy, b.y()), b.op("Log", {x}));
    b.setGrad(1, b.cast(b.sumToShape(de, e->shape()), e->dtype()));
  }
}

/// Y = max(A, B) (Min alike), two operands.  dA = dY where A wins, dB = dY
/// where B wins, and a tie gives each half of dY (torch.maximum / minimum).
void maxMinGrad(B &b, bool isMax) {
  if (b.node().numInputs() == 1) { // the identity
    b.setGrad(0, b.dY());
    return;
  }
  if (b.node().numInputs() != 2) {
    b.fail("the gradient of " + b.node().opType() + " is defined for two operands, not " +
           std::to_string(b.node().numInputs()));
    return;
  }
  Value *x0 = b.x(0), *x1 = b.x(1), *dy = b.dY();
  Value *zero = b.scalarLike(0.0, dy);
  Value *onTie = b.op("Where", {b.op("Equal", {x0, x1}), b.scale(dy, 0.5), zero});
  auto share = [&](unsigned i, const char *wins) {
    if (!b.wantsGrad(i))
      return;
    Value *g = b.op("Where", {b.op(wins, {x0, x1}), dy, onTie});
    b.setGrad(i, b.sumToShape(g, b.x(i)->shape()));
  };
  share(0, isMax ? "Greater" : "Less");
  share(1, isMax ? "Less" : "Greater");
}

/// Where(X > 0, dY, negative): the gradient of activations that are the
/// identity for positive X.
Value *positivePassThrough(B &b, Value *negative) {
  return b.op("Where", {b.op("Greater", {b.x(0), b.scalarLike(0.0, b.x(0))}), b.dY(), negative});
}

} // namespace

void registerElementwiseGradients(GradientRegistry &r) {
  /// Y = clip(X, min, max).  dX = dY where min <= X <= max (as torch.clamp:
  /// a value at a bound passes the gradient); the bounds get none.
  r.add("Clip", {0}, [](B &b) {
    Value *x = b.x(0), *outside = nullptr;
    if (b.node().numInputs() > 1 && b.x(1))
      outside = b.op("Less", {x, b.x(1)});
    if (b.node().numInputs() > 2 && b.x(2)) {
      Value *above = b.op("Greater", {x, b.x(2)});
      outside = outside ? b.op("Or", {outside, above}) : above;
    }
    b.setGrad(0, outside ? b.op("Where", {outside, b.scalarLike(0.0, b.dY()), b.dY()}) : b.dY());
  });

  r.add("Max", {0, 1}, [](B &b) { maxMinGrad(b, /*isMax=*/true); });
  r.add("Min", {0, 1}, [](B &b) { maxMinGrad(b, /*isMax=*/false); });

  /// Y = ln(1 + exp(X)).  dX = dY * sigmoid(X).
  r.add("Softplus", {0}, [](B &b) { b.setGrad(0, b.mul(b.dY(), b.op("Sigmoid", {b.x(0)}))); });

  /// Y = X / (1 + |X|).  dX = dY / (1 + |X|)^2.
  r.add("Softsign", {0}, [](B &b) {
    Value *d = b.add(b.scalarLike(1.0, b.x(0)), b.op("Abs", {b.x(0)}));
    b.setGrad(0, b.div(b.dY(), b.mul(d, d)));
  });

  /// Y = X if X > 0 else alpha (exp(X) - 1).  dX = dY if X > 0 else
  /// dY (Y + alpha).
  r.add("Elu", {0}, [](B &b) {
    double alpha = b.node().getFloat("alpha", 1.0);
    b.setGrad(0, positivePassThrough(b, b.mul(b.dY(), b.add(b.y(), b.scalarLike(alpha, b.y())))));
  });

  /// Y = gamma X if X > 0 else gamma alpha (exp(X) - 1).  dX = gamma dY if
  /// X > 0 else dY (Y + gamma alpha).
  r.add("Selu", {0}, [](B &b) {
    double alpha = b.node().getFloat("alpha", 1.67326319217681884765625);
    double gamma = b.node().getFloat("gamma", 1.05070102214813232421875);
    Value *x = b.x(0);
    Value *negative = b.mul(b.dY(), b.add(b.y(), b.scalarLike(alpha * gamma, b.y())));
    b.setGrad(0, b.op("Where", {b.op("Greater", {x, b.scalarLike(0.0, x)}), b.scale(b.dY(), gamma),
                                negative}));
  });

  /// Y = clip(alpha X + beta, 0, 1).  dX = alpha dY where 0 < Y < 1.
  r.add("HardSigmoid", {0}, [](B &b) {
    double alpha = b.node().getFloat("alpha", 0.2);
    Value *y = b.y();
    Value *inside = b.op("And", {b.op("Greater", {y, b.scalarLike(0.0, y)}),
                                 b.op("Less", {y, b.scalarLike(1.0, y)})});
    b.setGrad(0, b.op("Where", {inside, b.scale(b.dY(), alpha), b.scalarLike(0.0, b.dY())}));
  });

  /// Y = X hardSigmoid(X) (alpha 1/6, beta 0.5).  dX = 0 where X < -3, dY
  /// where X > 3, and dY (X/3 + 1/2) between (torch.nn.Hardswish).
  r.add("HardSwish", {0}, [](B &b) {
    Value *x = b.x(0);
    Value *middle = b.add(b.scale(x, 1.0 / 3.0), b.scalarLike(0.5, x));
    Value *local = b.op("Where", {b.op("Greater", {x, b.scalarLike(3.0, x)}),
                                  b.scalarLike(1.0, x), middle});
    local = b.op("Where", {b.op("Less", {x, b.scalarLike(-3.0, x)}), b.scalarLike(0.0, x), local});
    b.setGrad(0, b.mul(b.dY(), local));
  });

  /// Y = X if X > 0 else slope X.  dX = dY if X > 0 else slope dY;
  /// dSlope = dY X where X <= 0, summed to the slope's shape (torch.prelu).
  r.add("PRelu", {0, 1}, [](B &b) {
    Value *x = b.x(0), *slope = b.x(1);
    if (b.wantsGrad(0))
      b.setGrad(0, positivePassThrough(b, b.mul(b.dY(), slope)));
    if (b.wantsGrad(1)) {
      Value *positive = b.op("Greater", {x, b.scalarLike(0.0, x)});
      Value *ds = b.op("Where", {positive, b.scalarLike(0.0, b.dY()), b.mul(b.dY(), x)});
      b.setGrad(1, b.sumToShape(ds, slope->shape()));
    }
  });

  /// Y = sin(X).  dX = dY cos(X);  Y = cos(X).  dX = -dY sin(X).
  r.add("Sin", {0}, [](B &b) { b.setGrad(0, b.mul(b.dY(), b.op("Cos", {b.x(0)}))); });
  r.add("Cos", {0}, [](B &b) { b.setGrad(0, b.neg(b.mul(b.dY(), b.op("Sin", {b.x(0)})))); });

  /// Y = A + B.  dA = dY, dB = dY (summed over broadcast axes).
  r.add("Add", {0, 1}, [](B &b) {
    for (unsigned i : {0u, 1u})
      if (b.wantsGrad(i))
        b.setGrad(i, b.sumToShape(b.dY(), b.x(i)->shape()));
  });

  /// Y = X0 + X1 + ...  dXi = dY (summed over Xi's broadcast axes).
  r.add("Sum", {GradientRule::kAllOperands}, [](B &b) {
    for (unsigned i = 0; i < b.node().numInputs(); ++i)
      if (b.wantsGrad(i))
        b.setGrad(i, b.sumToShape(b.dY(), b.x(i)->shape()));
  });

  /// Y = A - B.  dA = dY, dB = -dY.
  r.add("Sub", {0, 1}, [](B &b) {
    if (b.wantsGrad(0))
      b.setGrad(0, b.sumToShape(b.dY(), b.x(0)->shape()));
    if (b.wantsGrad(1))
      b.setGrad(1, b.neg(b.sumToShape(b.dY(), b.x(1)->shape())));
  });

  /// Y = A * B.  dA = dY * B, dB = dY * A.
  r.add("Mul", {0, 1}, [](B &b) {
    for (unsigned i : {0u, 1u})
      if (b.wantsGrad(i))
        b.setGrad(i, b.sumToShape(b.mul(b.dY(), b.x(1 - i)), b.x(i)->shape()));
  });

  /// Y = A / B.  dA = dY / B, dB = -dY * A / B^2 = -dY * Y / B.
  r.add("Div", {0, 1}, [](B &b) {
    if (b.wantsGrad(0))
      b.setGrad(0, b.sumToShape(b.div(b.dY(), b.x(1)), b.x(0)->shape()));
    if (b.wantsGrad(1)) {
      Value *db = b.neg(b.div(b.mul(b.dY(), b.y()), b.x(1)));
      b.setGrad(1, b.sumToShape(db, b.x(1)->shape()));
    }
  });

  r.add("Pow", {0, 1}, powGrad);

  /// Y = -X.  dX = -dY.
  r.add("Neg", {0}, [](B &b) { b.setGrad(0, b.neg(b.dY())); });

  /// Y = sqrt(X).  dX = dY * 0.5 / Y.
  r.add("Sqrt", {0}, [](B &b) { b.setGrad(0, b.div(b.scale(b.dY(), 0.5), b.y())); });

  /// Y = exp(X).  dX = dY * Y.
  r.add("Exp", {0}, [](B &b) { b.setGrad(0, b.mul(b.dY(), b.y())); });

  /// Y = ln(X).  dX = dY / X.
  r.add("Log", {0}, [](B &b) { b.setGrad(0, b.div(b.dY(), b.x(0))); });

  /// Y = 1 / X.  dX = -dY / X^2 = -dY * Y^2.
  r.add("Reciprocal", {0}, [](B &b) {
    b.setGrad(0, b.neg(b.mul(b.dY(), b.mul(b.y(), b.y()))));
  });

  /// Y = |X|.  dX = dY * sign(X).
  r.add("Abs", {0}, [](B &b) { b.setGrad(0, b.mul(b.dY(), b.op("Sign", {b.x(0)}))); });

  /// Y = max(X, 0).  dX = dY where Y > 0: from the result, X can be freed.
  r.add("Relu", {0}, [](B &b) { b.setGrad(0, b.ampc("ReluGrad", {b.dY(), b.y()})); });

  /// Y = X if X > 0 else alpha X.  dX = dY if X > 0 else alpha dY. For
  /// alpha > 0 the result has the operand's sign, so Y serves and X can be freed.
  r.add("LeakyRelu", {0}, [](B &b) {
    double alpha = b.node().getFloat("alpha", 0.01);
    Value *sign = alpha > 0 ? b.y() : b.x(0);
    b.setGrad(0, b.ampc("LeakyReluGrad", {b.dY(), sign}, {{"alpha", Attribute::ofFloat(alpha)}}));
  });

  /// Y = 1 / (1 + exp(-X)).  dX = dY * Y * (1 - Y).
  r.add("Sigmoid", {0}, [](B &b) { b.setGrad(0, b.ampc("SigmoidGrad", {b.dY(), b.y()})); });

  /// Y = tanh(X).  dX = dY * (1 - Y^2).
  r.add("Tanh", {0}, [](B &b) { b.setGrad(0, b.ampc("TanhGrad", {b.dY(), b.y()})); });

  /// Y = erf(X).  dX = dY * 2/sqrt(pi) * exp(-X^2).
  r.add("Erf", {0}, [](B &b) {
    Value *x = b.x(0);
    Value *gauss = b.op("Exp", {b.neg(b.mul(x, x))});
    b.setGrad(0, b.mul(b.dY(), b.scale(gauss, 2.0 / std::sqrt(M_PI))));
  });

  /// Y = X.  dX = dY.
  r.add("Identity", {0}, [](B &b) { b.setGrad(0, b.dY()); });

  /// Y = cast(X).  dX = cast(dY) back to X's type: a low-precision region
  /// yields low-precision gradients and an fp32 parameter an fp32 gradient.
  r.add("Cast", {0}, [](B &b) { b.setGrad(0, b.cast(b.dY(), b.x(0)->dtype())); });

  /// Y = where(C, A, B).  dA = dY where C, dB = dY where not C.
  r.add("Where", {1, 2}, [](B &b) {
    Value *zero = b.scalarLike(0.0, b.dY());
    if (b.wantsGrad(1))
      b.setGrad(1, b.sumToShape(b.op("Where", {b.x(0), b.dY(), zero}), b.x(1)->shape()));
    if (b.wantsGrad(2))
      b.setGrad(2, b.sumToShape(b.op("Where", {b.x(0), zero, b.dY()}), b.x(2)->shape()));
  });
}

} // namespace ampc
