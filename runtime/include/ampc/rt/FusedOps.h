//===- FusedOps.h - The elementwise operations of fused steps ---*- C++ -*-===//
//
// The instruction set of "ampc.Fused" steps (plan.proto FusedProgram): ONNX
// elementwise operators, with ONNX semantics, computed per element in fp32
// (fp64 when an instruction's type is fp64) and rounded to each instruction's
// element type. The compiler fuses only these; every backend implements all of
// them (per-element math in ElementMath.h, shared by CPU and CUDA).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#ifndef __CUDACC_RTC__ // NVRTC (generated fused kernels) has no string_view
#include <string_view>
#include <unordered_set>
#endif

namespace ampc::rt {

enum class FusedOp : uint8_t {
  // Unary.
  Identity, Neg, Abs, Exp, Log, Sqrt, Reciprocal, Relu, Sigmoid, Tanh, Erf, Floor, Ceil, Round,
  Sign, Sin, Cos, Softplus, Softsign, LeakyRelu, Elu, Selu, HardSigmoid, HardSwish, Cast, Not, IsNaN,
  IsInf,
  // Binary.
  Add, Sub, Mul, Div, Pow, Max, Min, PRelu, Equal, Less, LessOrEqual, Greater, GreaterOrEqual,
  And, Or, Xor,
  // Ternary.
  Where, Clip,
  // ampc gradient helpers that are elementwise.
  ReluGrad,      ///< (dy, y) -> dy * (y > 0)
  LeakyReluGrad, ///< (dy, s) -> s > 0 ? dy : alpha * dy
  SigmoidGrad,   ///< (dy, y) -> dy * y * (1 - y)
  TanhGrad,      ///< (dy, y) -> dy * (1 - y * y)
  Count
};

struct FusedOpInfo {
  FusedOp op;
  const char *name; ///< the plan's instruction name ("Add", "ampc.ReluGrad")
  int arity;        ///< operands (Clip: 1 to 3)
};

inline constexpr FusedOpInfo kFusedOps[] = {
    {FusedOp::Identity, "Identity", 1},     {FusedOp::Neg, "Neg", 1},
    {FusedOp::Abs, "Abs", 1},               {FusedOp::Exp, "Exp", 1},
    {FusedOp::Log, "Log", 1},               {FusedOp::Sqrt, "Sqrt", 1},
    {FusedOp::Reciprocal, "Reciprocal", 1}, {FusedOp::Relu, "Relu", 1},
    {FusedOp::Sigmoid, "Sigmoid", 1},       {FusedOp::Tanh, "Tanh", 1},
    {FusedOp::Erf, "Erf", 1},               {FusedOp::Floor, "Floor", 1},
    {FusedOp::Ceil, "Ceil", 1},             {FusedOp::Round, "Round", 1},
    {FusedOp::Sign, "Sign", 1},             {FusedOp::Sin, "Sin", 1},
    {FusedOp::Cos, "Cos", 1},               {FusedOp::Softplus, "Softplus", 1},
    {FusedOp::Softsign, "Softsign", 1},     {FusedOp::LeakyRelu, "LeakyRelu", 1},
    {FusedOp::Elu, "Elu", 1},               {FusedOp::Selu, "Selu", 1},
    {FusedOp::HardSigmoid, "HardSigmoid", 1}, {FusedOp::HardSwish, "HardSwish", 1},
    {FusedOp::Cast, "Cast", 1},
    {FusedOp::Not, "Not", 1},               {FusedOp::IsNaN, "IsNaN", 1},
    {FusedOp::IsInf, "IsInf", 1},           {FusedOp::Add, "Add", 2},
    {FusedOp::Sub, "Sub", 2},               {FusedOp::Mul, "Mul", 2},
    {FusedOp::Div, "Div", 2},               {FusedOp::Pow, "Pow", 2},
    {FusedOp::Max, "Max", 2},               {FusedOp::Min, "Min", 2},
    {FusedOp::PRelu, "PRelu", 2},           {FusedOp::Equal, "Equal", 2},
    {FusedOp::Less, "Less", 2},             {FusedOp::LessOrEqual, "LessOrEqual", 2},
    {FusedOp::Greater, "Greater", 2},       {FusedOp::GreaterOrEqual, "GreaterOrEqual", 2},
    {FusedOp::And, "And", 2},               {FusedOp::Or, "Or", 2},
    {FusedOp::Xor, "Xor", 2},               {FusedOp::Where, "Where", 3},
    {FusedOp::Clip, "Clip", 3},             {FusedOp::ReluGrad, "ampc.ReluGrad", 2},
    {FusedOp::LeakyReluGrad, "ampc.LeakyReluGrad", 2},
    {FusedOp::SigmoidGrad, "ampc.SigmoidGrad", 2}, {FusedOp::TanhGrad, "ampc.TanhGrad", 2},
};

#ifndef __CUDACC_RTC__
/// The fused op of a plan instruction name, or FusedOp::Count when unknown.
inline FusedOp fusedOpByName(std::string_view name) {
  for (const FusedOpInfo &info : kFusedOps)
    if (name == info.name)
      return info.op;
  return FusedOp::Count;
}

/// Whether `name` is an op of the fused kernel: a hashed lookup, for the
/// compiler, which asks it of every node of a graph (fusion, rematerializing
/// into kernels) where the scan above compared against every name.
inline bool isFusedOpName(std::string_view name) {
  static const std::unordered_set<std::string_view> names = [] {
    std::unordered_set<std::string_view> set;
    for (const FusedOpInfo &info : kFusedOps)
      set.insert(info.name);
    return set;
  }();
  return names.count(name) != 0;
}
#endif

} // namespace ampc::rt
