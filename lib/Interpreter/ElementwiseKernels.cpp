//===- ElementwiseKernels.cpp - Unary, binary and variadic math ------------===//
//
// Float math is computed in double; integer math in int64 (exact); results are
// rounded to the result type when stored.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <limits>

namespace ampc::interp {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

using UnaryFn = double (*)(double x, const Node &n);

double selu(double x, const Node &n) {
  double alpha = n.getFloat("alpha", 1.67326319217681884765625);
  double gamma = n.getFloat("gamma", 1.05070102214813232421875);
  return x > 0 ? gamma * x : gamma * (alpha * std::exp(x) - alpha);
}

double hardSigmoid(double x, const Node &n) {
  double alpha = n.getFloat("alpha", 0.2), beta = n.getFloat("beta", 0.5);
  return std::max(0.0, std::min(1.0, alpha * x + beta));
}

double softplus(double x, const Node &) {
  // log(1 + e^x) without overflow for large x.
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

double roundHalfEven(double x, const Node &) { return std::nearbyint(x); }

struct UnaryEntry {
  const char *name;
  UnaryFn fn;
};

const UnaryEntry kUnary[] = {
    {"Abs", [](double x, const Node &) { return std::fabs(x); }},
    {"Neg", [](double x, const Node &) { return -x; }},
    {"Exp", [](double x, const Node &) { return std::exp(x); }},
    {"Log", [](double x, const Node &) { return std::log(x); }},
    {"Sqrt", [](double x, const Node &) { return std::sqrt(x); }},
    {"Reciprocal", [](double x, const Node &) { return 1.0 / x; }},
    {"Relu", [](double x, const Node &) { return x < 0 ? 0.0 : x; }}, // NaN passes through
    {"Sigmoid", [](double x, const Node &) { return 1.0 / (1.0 + std::exp(-x)); }},
    {"Tanh", [](double x, const Node &) { return std::tanh(x); }},
    {"Erf", [](double x, const Node &) { return std::erf(x); }},
    {"Floor", [](double x, const Node &) { return std::floor(x); }},
    {"Ceil", [](double x, const Node &) { return std::ceil(x); }},
    {"Round", roundHalfEven},
    {"Sign", [](double x, const Node &) { return std::isnan(x) ? x : double((x > 0) - (x < 0)); }},
    {"Sin", [](double x, const Node &) { return std::sin(x); }},
    {"Cos", [](double x, const Node &) { return std::cos(x); }},
    {"Tan", [](double x, const Node &) { return std::tan(x); }},
    {"Asin", [](double x, const Node &) { return std::asin(x); }},
    {"Acos", [](double x, const Node &) { return std::acos(x); }},
    {"Atan", [](double x, const Node &) { return std::atan(x); }},
    {"Sinh", [](double x, const Node &) { return std::sinh(x); }},
    {"Cosh", [](double x, const Node &) { return std::cosh(x); }},
    {"Asinh", [](double x, const Node &) { return std::asinh(x); }},
    {"Acosh", [](double x, const Node &) { return std::acosh(x); }},
    {"Atanh", [](double x, const Node &) { return std::atanh(x); }},
    {"Softplus", softplus},
    {"Softsign", [](double x, const Node &) { return x / (1.0 + std::fabs(x)); }},
    {"LeakyRelu",
     [](double x, const Node &n) { return x >= 0 ? x : n.getFloat("alpha", 0.01) * x; }},
    {"Elu",
     [](double x, const Node &n) { return x >= 0 ? x : n.getFloat("alpha", 1.0) * std::expm1(x); }},
    {"Celu",
     [](double x, const Node &n) {
       double a = n.getFloat("alpha", 1.0);
       return std::max(0.0, x) + std::min(0.0, a * std::expm1(x / a));
     }},
    {"Selu", selu},
    {"HardSigmoid", hardSigmoid},
    {"HardSwish",
     [](double x, const Node &) { return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)); }},
    {"ThresholdedRelu",
     [](double x, const Node &n) { return x > n.getFloat("alpha", 1.0) ? x : 0.0; }},
    {"Mish", [](double x, const Node &n) { return x * std::tanh(softplus(x, n)); }},
};

KernelResult unaryKernel(const KernelContext &ctx) {
  UnaryFn fn = nullptr;
  for (const auto &e : kUnary)
    if (ctx.node.opType() == e.name)
      fn = e.fn;
  const Tensor &x = *ctx.in(0);
  Tensor y = ctx.out();
  bool intAbsNeg = isInteger(x.dtype()) &&
                   (ctx.node.is("Abs") || ctx.node.is("Neg") || ctx.node.is("Sign") ||
                    ctx.node.is("Relu"));
  for (int64_t i = 0; i < x.size(); ++i) {
    if (intAbsNeg) {
      int64_t v = x.getInt(i);
      int64_t r = ctx.node.is("Abs") ? (v < 0 ? -v : v)
                  : ctx.node.is("Neg") ? -v
                  : ctx.node.is("Sign") ? (v > 0) - (v < 0)
                                        : (v > 0 ? v : 0);
      y.setInt(i, r);
    } else {
      y.setDouble(i, fn(x.getDouble(i), ctx.node));
    }
  }
  return std::vector<Tensor>{std::move(y)};
}

KernelResult identityKernel(const KernelContext &ctx) {
  return std::vector<Tensor>{*ctx.in(0)};
}

KernelResult notKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  Tensor y = ctx.out();
  for (int64_t i = 0; i < x.size(); ++i)
    y.setInt(i, x.getInt(i) ? 0 : 1);
  return std::vector<Tensor>{std::move(y)};
}

KernelResult isNaNKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  Tensor y = ctx.out();
  for (int64_t i = 0; i < x.size(); ++i)
    y.setInt(i, std::isnan(x.getDouble(i)));
  return std::vector<Tensor>{std::move(y)};
}

KernelResult isInfKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  Tensor y = ctx.out();
  bool pos = ctx.node.getInt("detect_positive", 1), neg = ctx.node.getInt("detect_negative", 1);
  for (int64_t i = 0; i < x.size(); ++i) {
    double v = x.getDouble(i);
    y.setInt(i, std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg)));
  }
  return std::vector<Tensor>{std::move(y)};
}

//===----------------------------------------------------------------------===//
// Binary with broadcasting
//===----------------------------------------------------------------------===//

double floatBinary(const std::string &op, double a, double b, const Node &n) {
  if (op == "Add" || op == "Sum")
    return a + b;
  if (op == "Sub")
    return a - b;
  if (op == "Mul")
    return a * b;
  if (op == "Div")
    return a / b;
  if (op == "Pow")
    return std::pow(a, b);
  if (op == "Max")
    return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
  if (op == "Min")
    return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
  if (op == "Mod") {
    if (n.getInt("fmod", 0))
      return std::fmod(a, b);
    double r = std::fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  }
  if (op == "PRelu")
    return a >= 0 ? a : a * b;
  if (op == "Equal")
    return a == b;
  if (op == "Less")
    return a < b;
  if (op == "LessOrEqual")
    return a <= b;
  if (op == "Greater")
    return a > b;
  if (op == "GreaterOrEqual")
    return a >= b;
  if (op == "And")
    return (a != 0) && (b != 0);
  if (op == "Or")
    return (a != 0) || (b != 0);
  if (op == "Xor")
    return (a != 0) != (b != 0);
  return kNaN;
}

int64_t intBinary(const std::string &op, int64_t a, int64_t b, const Node &n) {
  if (op == "Add" || op == "Sum")
    return a + b;
  if (op == "Sub")
    return a - b;
  if (op == "Mul")
    return a * b;
  if (op == "Div")
    return b == 0 ? 0 : a / b;
  if (op == "Pow") {
    int64_t r = 1;
    for (int64_t i = 0; i < b; ++i)
      r *= a;
    return r;
  }
  if (op == "Max")
    return std::max(a, b);
  if (op == "Min")
    return std::min(a, b);
  if (op == "Mod") {
    if (b == 0)
      return 0;
    int64_t r = a % b;
    if (!n.getInt("fmod", 0) && r != 0 && ((r < 0) != (b < 0)))
      r += b;
    return r;
  }
  if (op == "PRelu")
    return a >= 0 ? a : a * b;
  if (op == "Equal")
    return a == b;
  if (op == "Less")
    return a < b;
  if (op == "LessOrEqual")
    return a <= b;
  if (op == "Greater")
    return a > b;
  if (op == "GreaterOrEqual")
    return a >= b;
  if (op == "And")
    return a && b;
  if (op == "Or")
    return a || b;
  if (op == "Xor")
    return (a != 0) != (b != 0);
  return 0;
}

/// Applies `op` to a and b (broadcast to the result shape).
llvm::Expected<Tensor> binary(const KernelContext &ctx, const std::string &op, const Tensor &a,
                              const Tensor &b, const TensorType &outType) {
  Shape shape;
  if (!broadcastShapes(a.shape(), b.shape(), shape))
    return ctx.error("cannot broadcast " + a.type().str() + " with " + b.type().str());
  Tensor y(TensorType(outType.dtype, shape));
  auto ia = broadcastIndexMap(a.shape(), shape);
  auto ib = broadcastIndexMap(b.shape(), shape);
  bool integerMath = !isFloat(a.dtype()) && !isFloat(b.dtype());
  for (int64_t i = 0; i < y.size(); ++i) {
    if (integerMath)
      y.setInt(i, intBinary(op, a.getInt(ia[i]), b.getInt(ib[i]), ctx.node));
    else
      y.setDouble(i, floatBinary(op, a.getDouble(ia[i]), b.getDouble(ib[i]), ctx.node));
  }
  return y;
}

KernelResult binaryKernel(const KernelContext &ctx) {
  auto y = binary(ctx, ctx.node.opType(), *ctx.in(0), *ctx.in(1), ctx.outType());
  if (!y)
    return y.takeError();
  return std::vector<Tensor>{std::move(*y)};
}

/// Sum, Mean, Max, Min over any number of operands. Intermediate results are
/// kept in double (F64) so that only the final value is rounded.
KernelResult variadicKernel(const KernelContext &ctx) {
  const std::string &op = ctx.node.opType();
  std::string step = op == "Mean" ? "Sum" : op;
  DType accType = isFloat(ctx.outType().dtype) ? DType::F64 : DType::I64;
  Tensor acc = ctx.in(0)->castTo(accType);
  for (unsigned i = 1; i < ctx.numInputs(); ++i) {
    auto next = binary(ctx, step, acc, *ctx.in(i), TensorType(accType, {}));
    if (!next)
      return next.takeError();
    acc = std::move(*next);
  }
  Tensor y = ctx.out();
  if (acc.shape() != y.shape())
    return ctx.error("result shape " + shapeStr(acc.shape()) + " differs from " +
                     y.type().str());
  double scale = op == "Mean" ? 1.0 / ctx.numInputs() : 1.0;
  for (int64_t i = 0; i < y.size(); ++i) {
    if (accType == DType::I64)
      y.setInt(i, acc.getInt(i));
    else
      y.setDouble(i, acc.getDouble(i) * scale);
  }
  return std::vector<Tensor>{std::move(y)};
}

KernelResult whereKernel(const KernelContext &ctx) {
  const Tensor &c = *ctx.in(0), &a = *ctx.in(1), &b = *ctx.in(2);
  Tensor y = ctx.out();
  auto ic = broadcastIndexMap(c.shape(), y.shape());
  auto ia = broadcastIndexMap(a.shape(), y.shape());
  auto ib = broadcastIndexMap(b.shape(), y.shape());
  bool isInt = !isFloat(y.dtype());
  for (int64_t i = 0; i < y.size(); ++i) {
    bool pick = c.getInt(ic[i]) != 0;
    if (isInt)
      y.setInt(i, pick ? a.getInt(ia[i]) : b.getInt(ib[i]));
    else
      y.setDouble(i, pick ? a.getDouble(ia[i]) : b.getDouble(ib[i]));
  }
  return std::vector<Tensor>{std::move(y)};
}

KernelResult clipKernel(const KernelContext &ctx) {
  const Tensor &x = *ctx.in(0);
  double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
  if (ctx.in(1))
    lo = ctx.in(1)->getDouble(0);
  if (ctx.in(2))
    hi = ctx.in(2)->getDouble(0);
  Tensor y = ctx.out();
  for (int64_t i = 0; i < x.size(); ++i) {
    if (isFloat(x.dtype()))
      y.setDouble(i, std::min(std::max(x.getDouble(i), lo), hi));
    else
      y.setInt(i, static_cast<int64_t>(std::min(std::max(double(x.getInt(i)), lo), hi)));
  }
  return std::vector<Tensor>{std::move(y)};
}

KernelResult castKernel(const KernelContext &ctx) {
  return std::vector<Tensor>{ctx.in(0)->castTo(ctx.outType().dtype)};
}

} // namespace

void registerElementwiseKernels(KernelTable &t) {
  for (const auto &e : kUnary)
    t.add(e.name, unaryKernel);
  t.add("Identity", identityKernel);
  t.add("Not", notKernel);
  t.add("IsNaN", isNaNKernel);
  t.add("IsInf", isInfKernel);
  for (const char *op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "Equal", "Less",
                         "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"})
    t.add(op, binaryKernel);
  for (const char *op : {"Sum", "Mean", "Max", "Min"})
    t.add(op, variadicKernel);
  t.add("Where", whereKernel);
  t.add("Clip", clipKernel);
  t.add("Cast", castKernel);
  t.add("CastLike", castKernel);
}

} // namespace ampc::interp
