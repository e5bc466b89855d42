//===- ElementwiseKernels.cpp - Elementwise ops the fused kernel does not take -===//
//
// The compiler fuses elementwise nodes on float and bool values (FusedKernel);
// these kernels cover the rest, with broadcasting:
// - Cast between any element types (int64 <-> float, float <-> float of an
//   integer source: through double, rounded once to nearest even);
// - Where on any element type (int64 data);
// - integer arithmetic, comparisons and logic (int64/int32 operands, as the
//   interpreter computes them in int64);
// - standalone versions of the fused gradient helpers ReluGrad,
//   LeakyReluGrad, SigmoidGrad and TanhGrad (plans fuse them; a plan may
//   still name one as a step of its own).
//
//===----------------------------------------------------------------------===//

#include "KernelHelpers.h"

#include <cmath>
#include <cstring>

namespace ampc::rt::cpu {

namespace {

constexpr size_t kMaxRank = 16;

/// Output rows of the result shape with, per operand, the offset of each row
/// and the stride along the last dim (0 when broadcast).
struct Broadcast {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides; // per operand, per dim
  int64_t inner = 1, rows = 0;

  bool init(const std::vector<TensorArg> &ins, const std::vector<int64_t> &out) {
    shape = out;
    if (shape.empty())
      shape = {1};
    if (shape.size() > kMaxRank)
      return false;
    for (const TensorArg &t : ins) {
      std::vector<int64_t> s(shape.size(), 0), own = stridesOf(t.shape);
      if (t.shape.size() > shape.size())
        return false;
      size_t lead = shape.size() - t.shape.size();
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (t.shape[d] != 1 && t.shape[d] != shape[lead + d])
          return false;
        s[lead + d] = t.shape[d] == 1 ? 0 : own[d];
      }
      strides.push_back(s);
    }
    inner = shape.back();
    rows = inner ? product(shape) / inner : 0;
    return true;
  }
  int64_t rowOffset(size_t operand, int64_t row) const {
    int64_t off = 0;
    for (size_t d = shape.size() - 1; d-- > 0;) {
      off += (row % shape[d]) * strides[operand][d];
      row /= shape[d];
    }
    return off;
  }
  int64_t innerStride(size_t operand) const { return strides[operand].back(); }
};

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

/// double -> float rounded to odd (then a second rounding to fp16/bf16 is
/// the correct single rounding of the double).
inline float toFloatOdd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || !std::isfinite(f) || d != d)
    return f;
  uint32_t u = math::floatBits(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d))
    --u; // truncate toward zero
  return math::bitsFloat(u | 1u);
}

void storeDouble(const TensorArg &t, int64_t i, double v) {
  switch (t.type) {
  case plan::F64:
    t.as<double>()[i] = v;
    return;
  case plan::F32:
    t.as<float>()[i] = static_cast<float>(v);
    return;
  case plan::F16:
    t.as<uint16_t>()[i] = math::floatToHalf(toFloatOdd(v));
    return;
  case plan::BF16:
    t.as<uint16_t>()[i] = math::floatToBFloat16(toFloatOdd(v));
    return;
  case plan::BOOL:
    t.as<uint8_t>()[i] = v != 0.0;
    return;
  default: {
    // Truncation toward zero (NaN and out-of-range values are undefined in
    // ONNX; they give 0 / the saturated value here).
    int64_t k = v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : static_cast<int64_t>(v);
    switch (t.type) {
    case plan::I64:
      t.as<int64_t>()[i] = k;
      return;
    case plan::I32:
      t.as<int32_t>()[i] = static_cast<int32_t>(k);
      return;
    case plan::I8:
      t.as<int8_t>()[i] = static_cast<int8_t>(k);
      return;
    default:
      t.as<uint8_t>()[i] = static_cast<uint8_t>(k);
      return;
    }
  }
  }
}

double loadDouble(const TensorArg &t, int64_t i) {
  if (t.type == plan::F64)
    return t.as<double>()[i];
  if (isFloatType(t.type))
    return loadFloat(t, i);
  return static_cast<double>(loadInt(t, i));
}

std::unique_ptr<Kernel> createCast(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || ctx.outputs.empty() || !ctx.outputs[0].data ||
      ctx.inputs[0].numel != ctx.outputs[0].numel) {
    error = "Cast takes one operand shaped like its result";
    return nullptr;
  }
  TensorArg x = ctx.inputs[0], y = ctx.outputs[0];
  ThreadPool &pool = ctx.pool;
  bool intToInt = !isFloatType(x.type) && x.type != plan::F64 && !isFloatType(y.type) &&
                  y.type != plan::F64 && y.type != plan::BOOL;
  if (x.type == y.type) {
    size_t bytes = x.numel * elemBytes(x.type);
    return std::make_unique<LambdaKernel>([x, y, bytes] { std::memmove(y.data, x.data, bytes); });
  }
  bool floatToFloat = isFloatType(x.type) && isFloatType(y.type);
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(x.numel, 4096, [&](int64_t b, int64_t e, int) {
      if (floatToFloat) {
        float buf[256];
        for (int64_t s = b; s < e; s += 256) {
          int64_t n = std::min<int64_t>(256, e - s);
          loadFloats(x, s, n, buf);
          storeFloats(y, s, n, buf);
        }
        return;
      }
      for (int64_t i = b; i < e; ++i) {
        if (intToInt) {
          int64_t v = loadInt(x, i);
          switch (y.type) {
          case plan::I64:
            y.as<int64_t>()[i] = v;
            break;
          case plan::I32:
            y.as<int32_t>()[i] = static_cast<int32_t>(v);
            break;
          case plan::I8:
            y.as<int8_t>()[i] = static_cast<int8_t>(v);
            break;
          default:
            y.as<uint8_t>()[i] = static_cast<uint8_t>(v);
          }
        } else {
          storeDouble(y, i, loadDouble(x, i));
        }
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// Where
//===----------------------------------------------------------------------===//

std::unique_ptr<Kernel> createWhere(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || !ctx.has(1) || !ctx.has(2) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "Where takes a condition and two values";
    return nullptr;
  }
  TensorArg c = ctx.inputs[0], a = ctx.inputs[1], b = ctx.inputs[2], y = ctx.outputs[0];
  if (a.type != y.type || b.type != y.type || elemBytes(c.type) != 1) {
    error = "X, Y and the result must share their type, the condition be bool";
    return nullptr;
  }
  Broadcast bc;
  if (!bc.init({c, a, b}, y.shape)) {
    error = "operands do not broadcast to the result";
    return nullptr;
  }
  size_t es = elemBytes(y.type);
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(bc.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(bc.inner, 1)),
                     [&](int64_t r0, int64_t r1, int) {
      int64_t sc = bc.innerStride(0), sa = bc.innerStride(1), sb = bc.innerStride(2);
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *cp = static_cast<const uint8_t *>(c.data) + bc.rowOffset(0, r);
        const uint8_t *ap = static_cast<const uint8_t *>(a.data) + bc.rowOffset(1, r) * es;
        const uint8_t *bp = static_cast<const uint8_t *>(b.data) + bc.rowOffset(2, r) * es;
        uint8_t *out = static_cast<uint8_t *>(y.data) + r * bc.inner * es;
        for (int64_t i = 0; i < bc.inner; ++i)
          std::memcpy(out + i * es, cp[i * sc] ? ap + i * sa * es : bp + i * sb * es, es);
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// Integer elementwise
//===----------------------------------------------------------------------===//

enum class IntOp {
  Add, Sub, Mul, Div, Mod, FMod, Max, Min, Equal, Less, LessOrEqual, Greater, GreaterOrEqual,
  And, Or, Xor, Neg, Abs, Sign, Not, Relu
};

inline int64_t applyInt(IntOp op, int64_t a, int64_t b) {
  switch (op) {
  case IntOp::Add:
    return a + b;
  case IntOp::Sub:
    return a - b;
  case IntOp::Mul:
    return a * b;
  case IntOp::Div:
    return b == 0 ? 0 : a / b;
  case IntOp::Mod:
  case IntOp::FMod: {
    if (b == 0)
      return 0;
    int64_t r = a % b;
    if (op == IntOp::Mod && r != 0 && ((r < 0) != (b < 0)))
      r += b;
    return r;
  }
  case IntOp::Max:
    return std::max(a, b);
  case IntOp::Min:
    return std::min(a, b);
  case IntOp::Equal:
    return a == b;
  case IntOp::Less:
    return a < b;
  case IntOp::LessOrEqual:
    return a <= b;
  case IntOp::Greater:
    return a > b;
  case IntOp::GreaterOrEqual:
    return a >= b;
  case IntOp::And:
    return a && b;
  case IntOp::Or:
    return a || b;
  case IntOp::Xor:
    return (a != 0) != (b != 0);
  case IntOp::Neg:
    return -a;
  case IntOp::Abs:
    return a < 0 ? -a : a;
  case IntOp::Sign:
    return (a > 0) - (a < 0);
  case IntOp::Not:
    return a == 0;
  case IntOp::Relu:
    return a > 0 ? a : 0;
  }
  return 0;
}

void storeInt(const TensorArg &t, int64_t i, int64_t v) {
  switch (t.type) {
  case plan::I64:
    t.as<int64_t>()[i] = v;
    return;
  case plan::I32:
    t.as<int32_t>()[i] = static_cast<int32_t>(v);
    return;
  case plan::I8:
    t.as<int8_t>()[i] = static_cast<int8_t>(v);
    return;
  case plan::BOOL:
    t.as<uint8_t>()[i] = v != 0;
    return;
  default:
    t.as<uint8_t>()[i] = static_cast<uint8_t>(v);
  }
}

std::unique_ptr<Kernel> createIntOp(const StepContext &ctx, std::string &error, IntOp op,
                                    bool unary) {
  unsigned n = unary ? 1 : 2;
  for (unsigned i = 0; i < n; ++i)
    if (!ctx.has(i) || isFloatType(ctx.inputs[i].type) || ctx.inputs[i].type == plan::F64) {
      error = "the CPU kernel of this op takes integer or bool operands (float ones are fused)";
      return nullptr;
    }
  if (ctx.outputs.empty() || !ctx.outputs[0].data || isFloatType(ctx.outputs[0].type)) {
    error = "missing or float result";
    return nullptr;
  }
  if (op == IntOp::Mod && ctx.attrInt("fmod", 0) != 0)
    op = IntOp::FMod;
  std::vector<TensorArg> ins(ctx.inputs.begin(), ctx.inputs.begin() + n);
  TensorArg y = ctx.outputs[0];
  Broadcast bc;
  if (!bc.init(ins, y.shape)) {
    error = "operands do not broadcast to the result";
    return nullptr;
  }
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(bc.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(bc.inner, 1)),
                     [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t oa = bc.rowOffset(0, r), sa = bc.innerStride(0);
        int64_t ob = unary ? 0 : bc.rowOffset(1, r), sb = unary ? 0 : bc.innerStride(1);
        for (int64_t i = 0; i < bc.inner; ++i) {
          int64_t a = loadInt(ins[0], oa + i * sa), b = unary ? 0 : loadInt(ins[1], ob + i * sb);
          storeInt(y, r * bc.inner + i, applyInt(op, a, b));
        }
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// Activation gradients
//===----------------------------------------------------------------------===//

enum class GradOp { Relu, LeakyRelu, Sigmoid, Tanh };

std::unique_ptr<Kernel> createActGrad(const StepContext &ctx, std::string &error, GradOp op) {
  if (!ctx.has(0) || !ctx.has(1) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "takes dY and the forward value";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, 1}, {0}, error))
    return nullptr;
  TensorArg dy = ctx.inputs[0], s = ctx.inputs[1], dx = ctx.outputs[0];
  if (dy.numel != s.numel || dx.numel != dy.numel) {
    error = "dY and the forward value differ in shape";
    return nullptr;
  }
  float alpha = static_cast<float>(ctx.attrFloat("alpha", 0.01));
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    pool.parallelFor(dy.numel, 4096, [&](int64_t b, int64_t e, int) {
      float gb[256], sb[256], ob[256];
      for (int64_t st = b; st < e; st += 256) {
        int64_t n = std::min<int64_t>(256, e - st);
        const float *g = rowIn(dy, st, n, gb), *v = rowIn(s, st, n, sb);
        float *o = rowOut(dx, st, ob);
        switch (op) {
        case GradOp::Relu:
          for (int64_t i = 0; i < n; ++i)
            o[i] = math::reluGrad(g[i], v[i]);
          break;
        case GradOp::LeakyRelu:
          for (int64_t i = 0; i < n; ++i)
            o[i] = v[i] > 0.0f ? g[i] : alpha * g[i];
          break;
        case GradOp::Sigmoid:
          for (int64_t i = 0; i < n; ++i)
            o[i] = math::sigmoidGrad(g[i], v[i]);
          break;
        case GradOp::Tanh:
          for (int64_t i = 0; i < n; ++i)
            o[i] = math::tanhGrad(g[i], v[i]);
          break;
        }
        rowCommit(dx, st, n, o);
      }
    });
  });
}

} // namespace

void registerElementwiseKernels() {
  registerKernel("Cast", createCast);
  registerKernel("Where", createWhere);
  struct E {
    const char *name;
    IntOp op;
    bool unary;
  };
  for (E e : {E{"Add", IntOp::Add, false}, E{"Sub", IntOp::Sub, false}, E{"Mul", IntOp::Mul, false},
              E{"Div", IntOp::Div, false}, E{"Mod", IntOp::Mod, false}, E{"Max", IntOp::Max, false},
              E{"Min", IntOp::Min, false}, E{"Equal", IntOp::Equal, false},
              E{"Less", IntOp::Less, false}, E{"LessOrEqual", IntOp::LessOrEqual, false},
              E{"Greater", IntOp::Greater, false}, E{"GreaterOrEqual", IntOp::GreaterOrEqual, false},
              E{"And", IntOp::And, false}, E{"Or", IntOp::Or, false}, E{"Xor", IntOp::Xor, false},
              E{"Neg", IntOp::Neg, true}, E{"Abs", IntOp::Abs, true}, E{"Sign", IntOp::Sign, true},
              E{"Not", IntOp::Not, true}, E{"Relu", IntOp::Relu, true}}) {
    E c = e;
    registerKernel(e.name, [c](const StepContext &ctx, std::string &err) {
      return createIntOp(ctx, err, c.op, c.unary);
    });
  }
  struct G {
    const char *name;
    GradOp op;
  };
  for (G g : {G{"ampc.ReluGrad", GradOp::Relu}, G{"ampc.LeakyReluGrad", GradOp::LeakyRelu},
              G{"ampc.SigmoidGrad", GradOp::Sigmoid}, G{"ampc.TanhGrad", GradOp::Tanh}}) {
    GradOp op = g.op;
    registerKernel(g.name, [op](const StepContext &ctx, std::string &err) {
      return createActGrad(ctx, err, op);
    });
  }
}

} // namespace ampc::rt::cpu
