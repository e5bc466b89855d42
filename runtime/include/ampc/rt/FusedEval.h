//===- FusedEval.h - One fused instruction on one element -------*- C++ -*-===//
//
// The per-element semantics of "ampc.Fused" steps, shared by the CPU fused
// kernel (runtime/cpu/FusedKernel.cpp, which runs these functions in loops
// over blocks) and the CUDA fused kernel (runtime/cuda/DeviceKernels.h, one
// thread per element). Everything here is __host__ __device__ under nvcc.
//
//   fusedScalar<Op, R>  the value of one instruction (R = float, or double
//                       when a program touches fp64)
//   fusedEval<R>        the same with the op chosen at run time
//   fusedRound<R>       rounds a register to what storage of its type holds
//   fusedLoad / fusedStore  storage <-> register, as the CPU kernel does it
//
// Element types are plan::ElemType values passed as uint8_t (this header must
// not include the protobuf headers; FusedElem mirrors the enum).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/rt/ElementMath.h"
#include "ampc/rt/FusedOps.h"

#include <cmath>
#include <cstdint>

namespace ampc::rt::fused {

/// plan::ElemType, by value (checked by static_asserts where both are seen).
enum FusedElem : uint8_t { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I64 = 4, I32 = 5, I8 = 6,
                           U8 = 7, BOOL = 8 };

/// Attributes of an instruction, ONNX defaults applied (fusedDefaults).
struct FusedParams {
  float alpha = 0, beta = 0, gamma = 0;
  bool hasMin = false, hasMax = false, detectPos = true, detectNeg = true;
};

/// ONNX defaults of the attribute-carrying operators; attributes present on
/// the instruction then override them.
inline FusedParams fusedDefaults(FusedOp op) {
  FusedParams p;
  switch (op) {
  case FusedOp::LeakyRelu:
  case FusedOp::LeakyReluGrad:
    p.alpha = 0.01f;
    break;
  case FusedOp::Elu:
    p.alpha = 1.0f;
    break;
  case FusedOp::Selu:
    p.alpha = 1.67326319217681884765625f;
    p.gamma = 1.05070102214813232421875f;
    break;
  case FusedOp::HardSigmoid:
    p.alpha = 0.2f;
    p.beta = 0.5f;
    break;
  default:
    break;
  }
  return p;
}

/// One instruction on one element: x, y, z are the operands (unused ones are
/// ignored). Comparisons and logic yield 1 or 0.
template <FusedOp Op, typename R>
AMPC_HD R fusedScalar(const FusedParams &p, R x, R y, R z) {
  using namespace math;
  if constexpr (Op == FusedOp::Identity || Op == FusedOp::Cast)
    return x;
  else if constexpr (Op == FusedOp::Neg)
    return -x;
  else if constexpr (Op == FusedOp::Abs)
    return std::fabs(x);
  else if constexpr (Op == FusedOp::Exp)
    return std::exp(x);
  else if constexpr (Op == FusedOp::Log)
    return std::log(x);
  else if constexpr (Op == FusedOp::Sqrt)
    return std::sqrt(x);
  else if constexpr (Op == FusedOp::Reciprocal)
    return R(1) / x;
  else if constexpr (Op == FusedOp::Relu)
    return relu(x);
  else if constexpr (Op == FusedOp::Sigmoid)
    return sigmoid(x);
  else if constexpr (Op == FusedOp::Tanh)
    return std::tanh(x);
  else if constexpr (Op == FusedOp::Erf)
    return std::erf(x);
  else if constexpr (Op == FusedOp::Floor)
    return std::floor(x);
  else if constexpr (Op == FusedOp::Ceil)
    return std::ceil(x);
  else if constexpr (Op == FusedOp::Round)
    return std::nearbyint(x);
  else if constexpr (Op == FusedOp::Sign)
    return math::sign(x);
  else if constexpr (Op == FusedOp::Sin)
    return std::sin(x);
  else if constexpr (Op == FusedOp::Cos)
    return std::cos(x);
  else if constexpr (Op == FusedOp::Softplus)
    return softplus(x);
  else if constexpr (Op == FusedOp::Softsign)
    return x / (R(1) + std::fabs(x));
  else if constexpr (Op == FusedOp::LeakyRelu)
    return leakyRelu(x, R(p.alpha));
  else if constexpr (Op == FusedOp::Elu)
    return elu(x, R(p.alpha));
  else if constexpr (Op == FusedOp::Selu)
    return selu(x, R(p.alpha), R(p.gamma));
  else if constexpr (Op == FusedOp::HardSigmoid)
    return hardSigmoid(x, R(p.alpha), R(p.beta));
  else if constexpr (Op == FusedOp::HardSwish)
    return hardSwish(x);
  else if constexpr (Op == FusedOp::Not)
    return x == R(0) ? R(1) : R(0);
  else if constexpr (Op == FusedOp::IsNaN)
    return x != x ? R(1) : R(0);
  else if constexpr (Op == FusedOp::IsInf)
    return (std::isinf(x) && ((x > 0 && p.detectPos) || (x < 0 && p.detectNeg))) ? R(1) : R(0);
  else if constexpr (Op == FusedOp::Add)
    return x + y;
  else if constexpr (Op == FusedOp::Sub)
    return x - y;
  else if constexpr (Op == FusedOp::Mul)
    return x * y;
  else if constexpr (Op == FusedOp::Div)
    return x / y;
  else if constexpr (Op == FusedOp::Pow)
    return std::pow(x, y);
  else if constexpr (Op == FusedOp::Max)
    return maxNaN(x, y);
  else if constexpr (Op == FusedOp::Min)
    return minNaN(x, y);
  else if constexpr (Op == FusedOp::PRelu)
    return x >= R(0) ? x : x * y;
  else if constexpr (Op == FusedOp::Equal)
    return x == y ? R(1) : R(0);
  else if constexpr (Op == FusedOp::Less)
    return x < y ? R(1) : R(0);
  else if constexpr (Op == FusedOp::LessOrEqual)
    return x <= y ? R(1) : R(0);
  else if constexpr (Op == FusedOp::Greater)
    return x > y ? R(1) : R(0);
  else if constexpr (Op == FusedOp::GreaterOrEqual)
    return x >= y ? R(1) : R(0);
  else if constexpr (Op == FusedOp::And)
    return (x != R(0) && y != R(0)) ? R(1) : R(0);
  else if constexpr (Op == FusedOp::Or)
    return (x != R(0) || y != R(0)) ? R(1) : R(0);
  else if constexpr (Op == FusedOp::Xor)
    return ((x != R(0)) != (y != R(0))) ? R(1) : R(0);
  else if constexpr (Op == FusedOp::ReluGrad)
    return reluGrad(x, y);
  else if constexpr (Op == FusedOp::LeakyReluGrad)
    return leakyReluGrad(x, y, R(p.alpha));
  else if constexpr (Op == FusedOp::SigmoidGrad)
    return sigmoidGrad(x, y);
  else if constexpr (Op == FusedOp::TanhGrad)
    return tanhGrad(x, y);
  else if constexpr (Op == FusedOp::Where)
    return x != R(0) ? y : z;
  else if constexpr (Op == FusedOp::Clip) {
    R v = x;
    if (p.hasMin && v < y)
      v = y;
    if (p.hasMax && v > z)
      v = z;
    return v;
  } else
    return R(0);
}

/// Every fused op, for switches over the op chosen at run time.
#define AMPC_FUSED_OPS(X)                                                                          \
  X(Identity) X(Neg) X(Abs) X(Exp) X(Log) X(Sqrt) X(Reciprocal) X(Relu) X(Sigmoid) X(Tanh)         \
  X(Erf) X(Floor) X(Ceil) X(Round) X(Sign) X(Sin) X(Cos) X(Softplus) X(Softsign) X(LeakyRelu)      \
  X(Elu) X(Selu) X(HardSigmoid) X(HardSwish) X(Cast) X(Not) X(IsNaN) X(IsInf) X(Add) X(Sub)       \
  X(Mul) X(Div) X(Pow) X(Max) X(Min) X(PRelu) X(Equal) X(Less) X(LessOrEqual) X(Greater)          \
  X(GreaterOrEqual) X(And) X(Or) X(Xor) X(Where) X(Clip) X(ReluGrad) X(LeakyReluGrad)          \
  X(SigmoidGrad) X(TanhGrad)

template <typename R>
AMPC_HD R fusedEval(FusedOp op, const FusedParams &p, R x, R y, R z) {
  switch (op) {
#define AMPC_FUSED_CASE(NAME)                                                                      \
  case FusedOp::NAME:                                                                              \
    return fusedScalar<FusedOp::NAME, R>(p, x, y, z);
    AMPC_FUSED_OPS(AMPC_FUSED_CASE)
#undef AMPC_FUSED_CASE
  default:
    return R(0);
  }
}

/// A register rounded to what storage of `type` holds: fp16/bf16 to nearest
/// even, fp32 (in double registers) to float, bool to 0/1; other types stay
/// as computed until they are stored.
template <typename R> AMPC_HD R fusedRound(uint8_t type, R v) {
  switch (type) {
  case F16:
    return static_cast<R>(math::roundToHalf(static_cast<float>(v)));
  case BF16:
    return static_cast<R>(math::roundToBFloat16(static_cast<float>(v)));
  case F32:
    if constexpr (sizeof(R) == 8)
      return static_cast<R>(static_cast<float>(v));
    return v;
  case BOOL:
    return v != R(0) ? R(1) : R(0);
  default:
    return v;
  }
}

/// Element i of storage of `type` as fp32 (integers and bools converted).
AMPC_HD float loadAsFloat(uint8_t type, const void *p, int64_t i) {
  switch (type) {
  case F32:
    return static_cast<const float *>(p)[i];
  case F16:
    return math::halfToFloat(static_cast<const uint16_t *>(p)[i]);
  case BF16:
    return math::bfloat16ToFloat(static_cast<const uint16_t *>(p)[i]);
  case F64:
    return static_cast<float>(static_cast<const double *>(p)[i]);
  case I64:
    return static_cast<float>(static_cast<const int64_t *>(p)[i]);
  case I32:
    return static_cast<float>(static_cast<const int32_t *>(p)[i]);
  case I8:
    return static_cast<const int8_t *>(p)[i];
  case U8:
  case BOOL:
    return static_cast<const uint8_t *>(p)[i];
  default:
    return 0.0f;
  }
}

/// Stores v into element i (fp16/bf16 rounded to nearest even, integers
/// truncated, bools v != 0).
AMPC_HD void storeFromFloat(uint8_t type, void *p, int64_t i, float v) {
  switch (type) {
  case F32:
    static_cast<float *>(p)[i] = v;
    return;
  case F16:
    static_cast<uint16_t *>(p)[i] = math::floatToHalf(v);
    return;
  case BF16:
    static_cast<uint16_t *>(p)[i] = math::floatToBFloat16(v);
    return;
  case F64:
    static_cast<double *>(p)[i] = v;
    return;
  case BOOL:
    static_cast<uint8_t *>(p)[i] = v != 0.0f;
    return;
  case I64:
    static_cast<int64_t *>(p)[i] = static_cast<int64_t>(v);
    return;
  case I32:
    static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v);
    return;
  case I8:
    static_cast<int8_t *>(p)[i] = static_cast<int8_t>(v);
    return;
  case U8:
    static_cast<uint8_t *>(p)[i] = static_cast<uint8_t>(v);
    return;
  default:
    return;
  }
}

/// A fused input element as a register: fp64 storage read as double, every
/// other type through fp32.
template <typename R> AMPC_HD R fusedLoad(uint8_t type, const void *p, int64_t i) {
  if (type == F64)
    return static_cast<R>(static_cast<const double *>(p)[i]);
  return static_cast<R>(loadAsFloat(type, p, i));
}

/// A register into a fused output element.
template <typename R> AMPC_HD void fusedStore(uint8_t type, void *p, int64_t i, R v) {
  if (type == F64)
    static_cast<double *>(p)[i] = static_cast<double>(v);
  else
    storeFromFloat(type, p, i, static_cast<float>(v));
}

} // namespace ampc::rt::fused
