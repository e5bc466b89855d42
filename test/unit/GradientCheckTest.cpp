//===- GradientCheckTest.cpp - Every gradient rule against finite differences ===//
//
// For each case: a small forward graph in double precision whose float
// inputs become parameters with random values; the loss is sum(Y * R) over
// its outputs with random constant R (so every result element carries a
// distinct weight). autodiff builds the gradients, the reference interpreter
// evaluates them, and central finite differences of the loss check them:
//   error = max |analytic - numeric| / max |numeric|   (per parameter).
// Every backward graph must also pass type verification and the ONNX
// checker. The suite prints a table: op, cases, largest relative error.
//
//===----------------------------------------------------------------------===//

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/ONNX/Export.h"
#include "ampc/ONNX/Import.h"
#include "ampc/ONNX/TypeInference.h"
#include "ampc/Passes/Autodiff.h"
#include "ampc/Passes/Passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

using namespace ampc;

namespace {

struct Case {
  std::string op;   ///< The row of the table.
  std::string name; ///< What the case exercises.
  /// Signature and body: "(double[3,4] x, ...) => (double[?,?] y) <inits> { ... }".
  std::string graph;
  /// Range of the random values of every parameter, and per-parameter overrides.
  std::map<std::string, std::pair<double, double>> ranges = {};
  int64_t opset = 17;
  /// Finite-difference step and the tolerated relative error.
  double step = 1e-6;
  double tolerance = 1e-6;
};

// Values near 0 are moved away from it so that kinks (Relu, Abs, pooling
// ties) are never within a step of a sample.
constexpr double kMinMagnitude = 0.05;
constexpr double kDefaultLo = -1.0, kDefaultHi = 1.0;

/// The saved statistics of LayerNormalization are float32 by the ONNX schema
/// (stash_type allows float and bfloat16 only), so its double-precision
/// gradient carries fp32 rounding of the mean and inverse standard deviation.
constexpr double kFp32StatsTolerance = 1e-5;

std::vector<Case> cases() {
  const std::pair<double, double> positive{0.5, 2.0};
  return {
      // Gemm.
      {"Gemm", "A@B+C", "(double[3,4] a, double[4,5] b, double[5] c) => (double[?,?] y) { y = Gemm (a, b, c) }"},
      {"Gemm", "transA, alpha", "(double[4,3] a, double[4,5] b, double[3,5] c) => (double[?,?] y) { y = Gemm <transA = 1, alpha = 0.5> (a, b, c) }"},
      {"Gemm", "transB, beta, C[3,1]", "(double[3,4] a, double[5,4] b, double[3,1] c) => (double[?,?] y) { y = Gemm <transB = 1, beta = 2.0> (a, b, c) }"},
      {"Gemm", "transA+transB, scalar C", "(double[4,3] a, double[5,4] b, double c) => (double[?,?] y) { y = Gemm <transA = 1, transB = 1, alpha = 1.5, beta = -0.5> (a, b, c) }"},
      {"Gemm", "no C", "(double[3,4] a, double[4,2] b) => (double[?,?] y) { y = Gemm (a, b) }"},
      // MatMul.
      {"MatMul", "2-D", "(double[3,4] a, double[4,5] b) => (double[?,?] y) { y = MatMul (a, b) }"},
      {"MatMul", "batched", "(double[2,3,4] a, double[2,4,5] b) => (double[?,?,?] y) { y = MatMul (a, b) }"},
      {"MatMul", "broadcast batch", "(double[2,1,3,4] a, double[3,4,5] b) => (double[?,?,?,?] y) { y = MatMul (a, b) }"},
      {"MatMul", "batched @ weight", "(double[2,3,4] a, double[4,5] b) => (double[?,?,?] y) { y = MatMul (a, b) }"},
      {"MatMul", "matrix @ batched", "(double[3,4] a, double[2,4,5] b) => (double[?,?,?] y) { y = MatMul (a, b) }"},
      {"MatMul", "1-D @ batched", "(double[4] a, double[2,4,5] b) => (double[?,?] y) { y = MatMul (a, b) }"},
      {"MatMul", "batched @ 1-D", "(double[2,3,4] a, double[4] b) => (double[?,?] y) { y = MatMul (a, b) }"},
      {"MatMul", "1-D @ 1-D", "(double[4] a, double[4] b) => (double y) { y = MatMul (a, b) }"},
      // Elementwise binary ops, with broadcasting.
      {"Add", "same shape", "(double[2,3] a, double[2,3] b) => (double[?,?] y) { y = Add (a, b) }"},
      {"Add", "[2,3,4] + [3,1]", "(double[2,3,4] a, double[3,1] b) => (double[?,?,?] y) { y = Add (a, b) }"},
      {"Add", "[1,4] + [3,1]", "(double[1,4] a, double[3,1] b) => (double[?,?] y) { y = Add (a, b) }"},
      {"Sub", "[2,3,4] - [4]", "(double[2,3,4] a, double[4] b) => (double[?,?,?] y) { y = Sub (a, b) }"},
      {"Sub", "scalar - [2,3]", "(double a, double[2,3] b) => (double[?,?] y) { y = Sub (a, b) }"},
      {"Mul", "same shape", "(double[2,3] a, double[2,3] b) => (double[?,?] y) { y = Mul (a, b) }"},
      {"Mul", "[2,3,4] * [1,3,1]", "(double[2,3,4] a, double[1,3,1] b) => (double[?,?,?] y) { y = Mul (a, b) }"},
      {"Mul", "x * x (one Sum of partials)", "(double[2,3] x) => (double[?,?] y) { y = Mul (x, x) }"},
      {"Sum", "three operands, broadcast", "(double[2,3] a, double[3] b, double[2,1] c) => (double[?,?] y) { y = Sum (a, b, c) }"},
      {"Div", "same shape", "(double[2,3] a, double[2,3] b) => (double[?,?] y) { y = Div (a, b) }", {{"b", positive}}},
      {"Div", "[2,3,4] / [4]", "(double[2,3,4] a, double[4] b) => (double[?,?,?] y) { y = Div (a, b) }", {{"b", positive}}},
      {"Div", "[3] / [2,3]", "(double[3] a, double[2,3] b) => (double[?,?] y) { y = Div (a, b) }", {{"b", {-2.0, -0.5}}}},
      {"Pow", "x^2, constant", "(double[2,3] x) => (double[?,?] y) { e = Constant <value = double {2.0}> () y = Pow (x, e) }"},
      {"Pow", "x^3, float exponent", "(double[2,3] x) => (double[?,?] y) { e = Constant <value = float {3.0}> () y = Pow (x, e) }"},
      {"Pow", "x^0.5", "(double[2,3] x) => (double[?,?] y) { e = Constant <value = double {0.5}> () y = Pow (x, e) }", {{"x", positive}}},
      {"Pow", "per-column exponents", "(double[2,3] x) => (double[?,?] y) { e = Constant <value = double[3] {-1.5, 2.5, 0.7}> () y = Pow (x, e) }", {{"x", positive}}},
      {"Pow", "variable exponent", "(double[2,3] x, double[3] e) => (double[?,?] y) { y = Pow (x, e) }", {{"x", positive}, {"e", positive}}},
      // Elementwise unary ops.
      {"Neg", "", "(double[2,3] x) => (double[?,?] y) { y = Neg (x) }"},
      {"Sqrt", "", "(double[2,3] x) => (double[?,?] y) { y = Sqrt (x) }", {{"x", positive}}},
      {"Exp", "", "(double[2,3] x) => (double[?,?] y) { y = Exp (x) }"},
      {"Log", "", "(double[2,3] x) => (double[?,?] y) { y = Log (x) }", {{"x", positive}}},
      {"Reciprocal", "positive", "(double[2,3] x) => (double[?,?] y) { y = Reciprocal (x) }", {{"x", positive}}},
      {"Reciprocal", "negative", "(double[2,3] x) => (double[?,?] y) { y = Reciprocal (x) }", {{"x", {-2.0, -0.5}}}},
      {"Abs", "", "(double[3,4] x) => (double[?,?] y) { y = Abs (x) }"},
      {"Relu", "", "(double[3,4] x) => (double[?,?] y) { y = Relu (x) }"},
      {"LeakyRelu", "alpha 0.1 (from Y)", "(double[3,4] x) => (double[?,?] y) { y = LeakyRelu <alpha = 0.1> (x) }"},
      {"LeakyRelu", "alpha -0.5 (from X)", "(double[3,4] x) => (double[?,?] y) { y = LeakyRelu <alpha = -0.5> (x) }"},
      {"Sigmoid", "", "(double[3,4] x) => (double[?,?] y) { y = Sigmoid (x) }", {{"x", {-3.0, 3.0}}}},
      {"Tanh", "", "(double[3,4] x) => (double[?,?] y) { y = Tanh (x) }", {{"x", {-2.0, 2.0}}}},
      {"Erf", "", "(double[3,4] x) => (double[?,?] y) { y = Erf (x) }", {{"x", {-2.0, 2.0}}}},
      {"Clip", "min and max", "(double[3,4] x) => (double[?,?] y) { lo = Constant <value = double {-0.5}> () hi = Constant <value = double {0.4}> () y = Clip (x, lo, hi) }"},
      {"Clip", "max only", "(double[3,4] x) => (double[?,?] y) { hi = Constant <value = double {0.3}> () y = Clip (x, \"\", hi) }"},
      {"Clip", "min only", "(double[3,4] x) => (double[?,?] y) { lo = Constant <value = double {-0.3}> () y = Clip (x, lo) }"},
      {"Max", "broadcast", "(double[2,3] a, double[3] b) => (double[?,?] y) { y = Max (a, b) }"},
      {"Max", "one operand", "(double[3] x) => (double[?] y) { y = Max (x) }"},
      {"Max", "tie: max(x, x), halves", "(double[3] x) => (double[?] y) { y = Max (x, x) }"},
      {"Min", "broadcast", "(double[2,3] a, double[2,1] b) => (double[?,?] y) { y = Min (a, b) }"},
      {"Softplus", "", "(double[3,4] x) => (double[?,?] y) { y = Softplus (x) }", {{"x", {-3.0, 3.0}}}},
      {"Softsign", "", "(double[3,4] x) => (double[?,?] y) { y = Softsign (x) }", {{"x", {-3.0, 3.0}}}},
      {"Elu", "alpha 0.7", "(double[3,4] x) => (double[?,?] y) { y = Elu <alpha = 0.7> (x) }", {{"x", {-2.0, 2.0}}}},
      {"Selu", "defaults", "(double[3,4] x) => (double[?,?] y) { y = Selu (x) }", {{"x", {-2.0, 2.0}}}},
      {"HardSwish", "", "(double[3,4] x) => (double[?,?] y) { y = HardSwish (x) }", {{"x", {-5.0, 5.0}}}},
      {"HardSigmoid", "defaults", "(double[3,4] x) => (double[?,?] y) { y = HardSigmoid (x) }", {{"x", {-4.0, 4.0}}}},
      {"PRelu", "per-channel slope", "(double[2,3,4] x, double[3,1] s) => (double[?,?,?] y) { y = PRelu (x, s) }"},
      {"Sin", "", "(double[3,4] x) => (double[?,?] y) { y = Sin (x) }", {{"x", {-3.0, 3.0}}}},
      {"Cos", "", "(double[3,4] x) => (double[?,?] y) { y = Cos (x) }", {{"x", {-3.0, 3.0}}}},
      // Softmax family.
      {"Softmax", "last axis", "(double[3,5] x) => (double[?,?] y) { y = Softmax (x) }", {{"x", {-2.0, 2.0}}}},
      {"Softmax", "axis 1 of 3", "(double[2,3,4] x) => (double[?,?,?] y) { y = Softmax <axis = 1> (x) }", {{"x", {-2.0, 2.0}}}},
      {"LogSoftmax", "last axis", "(double[3,5] x) => (double[?,?] y) { y = LogSoftmax (x) }", {{"x", {-2.0, 2.0}}}},
      {"LogSoftmax", "axis 1 of 3", "(double[2,3,4] x) => (double[?,?,?] y) { y = LogSoftmax <axis = 1> (x) }", {{"x", {-2.0, 2.0}}}},
      // Normalization.
      {"LayerNormalization", "last axis", "(double[2,3,8] x, double[8] s, double[8] b) => (double[?,?,?] y) { y = LayerNormalization (x, s, b) }", {}, 17, 1e-6, kFp32StatsTolerance},
      {"LayerNormalization", "axis 1, no bias", "(double[2,3,4] x, double[3,4] s) => (double[?,?,?] y) { y = LayerNormalization <axis = 1> (x, s) }", {}, 17, 1e-6, kFp32StatsTolerance},
      {"LayerNormalization", "broadcast scale and bias", "(double[2,3,4] x, double[4] s, double[1,4] b) => (double[?,?,?] y) { y = LayerNormalization <axis = 1, epsilon = 0.01> (x, s, b) }", {}, 17, 1e-6, kFp32StatsTolerance},
      {"BatchNormalization", "opset 15 training_mode", "(double[4,3,2,2] x, double[3] s, double[3] b) => (double[?,?,?,?] y) <double[3] rm = {0.1, -0.2, 0.3}, double[3] rv = {1.0, 0.5, 2.0}> { y, m, v = BatchNormalization <training_mode = 1, momentum = 0.9> (x, s, b, rm, rv) }", {}, 15},
      {"BatchNormalization", "opset 13, 5 results", "(double[4,3,2,2] x, double[3] s, double[3] b) => (double[?,?,?,?] y) <double[3] rm = {0.1, -0.2, 0.3}, double[3] rv = {1.0, 0.5, 2.0}> { y, m, v, sm, sv = BatchNormalization <momentum = 0.9> (x, s, b, rm, rv) }", {}, 13},
      {"BatchNormalization", "2-D input", "(double[6,3] x, double[3] s, double[3] b) => (double[?,?] y) <double[3] rm = {0.1, -0.2, 0.3}, double[3] rv = {1.0, 0.5, 2.0}> { y, m, v = BatchNormalization <training_mode = 1> (x, s, b, rm, rv) }", {}, 15},
      {"BatchNormalization", "inference mode", "(double[2,3,2,2] x, double[3] s, double[3] b) => (double[?,?,?,?] y) <double[3] rm = {0.1, -0.2, 0.3}, double[3] rv = {1.0, 0.5, 2.0}> { y = BatchNormalization (x, s, b, rm, rv) }", {}, 15},
      {"Dropout", "training, ratio 0.3", "(double[4,5] x) => (double[?,?] y) { r = Constant <value = double {0.3}> () t = Constant <value = bool {1}> () y = Dropout <seed = 7> (x, r, t) }"},
      {"Dropout", "mask requested by the model", "(double[4,5] x) => (double[?,?] y) { r = Constant <value = float {0.5}> () t = Constant <value = bool {1}> () y, m = Dropout <seed = 3> (x, r, t) }"},
      {"Dropout", "inference", "(double[4,5] x) => (double[?,?] y) { y = Dropout (x) }"},
      // Convolution and pooling.
      {"Conv", "2-D, pads, bias", "(double[2,3,5,5] x, double[4,3,3,3] w, double[4] b) => (double[?,?,?,?] y) { y = Conv <pads = [1, 1, 1, 1]> (x, w, b) }"},
      {"Conv", "strides, dilations, asymmetric pads", "(double[1,2,7,6] x, double[3,2,2,3] w) => (double[?,?,?,?] y) { y = Conv <strides = [2, 2], dilations = [2, 1], pads = [1, 0, 2, 1]> (x, w) }"},
      {"Conv", "2 groups, stride 2", "(double[1,4,5,5] x, double[6,2,3,3] w, double[6] b) => (double[?,?,?,?] y) { y = Conv <group = 2, strides = [2, 2]> (x, w, b) }"},
      {"Conv", "depthwise", "(double[2,3,4,4] x, double[3,1,3,3] w) => (double[?,?,?,?] y) { y = Conv <group = 3, pads = [1, 1, 1, 1]> (x, w) }"},
      {"Conv", "1-D, stride 2", "(double[2,3,7] x, double[2,3,3] w, double[2] b) => (double[?,?,?] y) { y = Conv <strides = [2], pads = [1, 1]> (x, w, b) }"},
      {"Conv", "auto_pad SAME_UPPER", "(double[1,2,5,5] x, double[2,2,2,2] w) => (double[?,?,?,?] y) { y = Conv <auto_pad = \"SAME_UPPER\", strides = [2, 2]> (x, w) }"},
      {"MaxPool", "2x2 stride 2", "(double[1,2,4,4] x) => (double[?,?,?,?] y) { y = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (x) }"},
      {"MaxPool", "3x3 overlapping, pads", "(double[1,2,5,5] x) => (double[?,?,?,?] y) { y = MaxPool <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (x) }"},
      {"MaxPool", "ceil_mode", "(double[1,2,5,5] x) => (double[?,?,?,?] y) { y = MaxPool <kernel_shape = [2, 2], strides = [2, 2], ceil_mode = 1> (x) }"},
      {"MaxPool", "1-D dilated", "(double[2,2,9] x) => (double[?,?,?] y) { y = MaxPool <kernel_shape = [3], dilations = [2], strides = [2]> (x) }"},
      {"MaxPool", "indices requested by the model", "(double[1,2,4,4] x) => (double[?,?,?,?] y) { y, i = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (x) }"},
      {"AveragePool", "2x2 stride 2", "(double[1,2,4,4] x) => (double[?,?,?,?] y) { y = AveragePool <kernel_shape = [2, 2], strides = [2, 2]> (x) }"},
      {"AveragePool", "pads, count_include_pad 0", "(double[1,2,5,5] x) => (double[?,?,?,?] y) { y = AveragePool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]> (x) }"},
      {"AveragePool", "pads, count_include_pad 1", "(double[1,2,5,5] x) => (double[?,?,?,?] y) { y = AveragePool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1], count_include_pad = 1> (x) }"},
      {"AveragePool", "ceil_mode", "(double[1,2,5,5] x) => (double[?,?,?,?] y) { y = AveragePool <kernel_shape = [2, 2], strides = [2, 2], ceil_mode = 1> (x) }"},
      {"AveragePool", "ceil_mode, pads, count_include_pad", "(double[1,1,6,6] x) => (double[?,?,?,?] y) { y = AveragePool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1], ceil_mode = 1, count_include_pad = 1> (x) }"},
      {"AveragePool", "1-D", "(double[2,3,7] x) => (double[?,?,?] y) { y = AveragePool <kernel_shape = [3], strides = [2]> (x) }"},
      {"GlobalAveragePool", "2-D", "(double[2,3,4,5] x) => (double[?,?,?,?] y) { y = GlobalAveragePool (x) }"},
      {"GlobalAveragePool", "1-D", "(double[2,3,5] x) => (double[?,?,?] y) { y = GlobalAveragePool (x) }"},
      // Shape and data movement.
      {"Flatten", "axis 1", "(double[2,3,4] x) => (double[?,?] y) { y = Flatten (x) }"},
      {"Flatten", "axis 2", "(double[2,3,4] x) => (double[?,?] y) { y = Flatten <axis = 2> (x) }"},
      {"Reshape", "with 0 and -1", "(double[2,3,4] x) => (double[?,?,?] y) { s = Constant <value = int64[3] {0, -1, 2}> () y = Reshape (x, s) }"},
      {"Transpose", "perm [2,0,1]", "(double[2,3,4] x) => (double[?,?,?] y) { y = Transpose <perm = [2, 0, 1]> (x) }"},
      {"Transpose", "default perm", "(double[2,3,4] x) => (double[?,?,?] y) { y = Transpose (x) }"},
      {"Squeeze", "axis 1", "(double[3,1,4] x) => (double[?,?] y) { a = Constant <value = int64[1] {1}> () y = Squeeze (x, a) }"},
      {"Unsqueeze", "axes 0 and 3", "(double[3,4] x) => (double[?,?,?,?] y) { a = Constant <value = int64[2] {0, 3}> () y = Unsqueeze (x, a) }"},
      {"Concat", "three operands", "(double[2,3] a, double[2,2] b, double[2,1] c) => (double[?,?] y) { y = Concat <axis = 1> (a, b, c) }"},
      {"Concat", "with a constant", "(double[2,3] a) => (double[?,?] y) { k = Constant <value = double[1,3] {1, 2, 3}> () y = Concat <axis = 0> (k, a) }"},
      {"Split", "sizes, a piece unused", "(double[2,6] x) => (double[?,?] y0, double[?,?] y2) { s = Constant <value = int64[3] {1, 2, 3}> () y0, y1, y2 = Split <axis = 1> (x, s) }"},
      {"Split", "equal halves", "(double[4,3] x) => (double[?,?] y0, double[?,?] y1) { y0, y1 = Split (x) }"},
      {"Slice", "steps", "(double[5,6] x) => (double[?,?] y) { st = Constant <value = int64[2] {1, 0}> () en = Constant <value = int64[2] {4, 6}> () ax = Constant <value = int64[2] {0, 1}> () sp = Constant <value = int64[2] {1, 2}> () y = Slice (x, st, en, ax, sp) }"},
      {"Slice", "negative step", "(double[5,6] x) => (double[?,?] y) { st = Constant <value = int64[1] {-1}> () en = Constant <value = int64[1] {-7}> () ax = Constant <value = int64[1] {1}> () sp = Constant <value = int64[1] {-2}> () y = Slice (x, st, en, ax, sp) }"},
      {"Slice", "starts and ends only", "(double[5,6] x) => (double[?,?] y) { st = Constant <value = int64[2] {1, -4}> () en = Constant <value = int64[2] {3, 100}> () y = Slice (x, st, en) }"},
      {"Gather", "embedding, repeated indices", "(double[5,3] x) => (double[?,?,?] y) <int64[2,3] idx = {0, 2, 0, 4, 2, 0}> { y = Gather (x, idx) }"},
      {"Gather", "axis 1, negative index", "(double[2,4,3] x) => (double[?,?,?] y) <int64[3] idx = {-1, 1, -1}> { y = Gather <axis = 1> (x, idx) }"},
      {"Gather", "scalar index", "(double[4,3] x) => (double[?] y) <int64 idx = {2}> { y = Gather (x, idx) }"},
      {"ReduceMax", "axis 1, keepdims", "(double[3,4] x) => (double[?,?] y) { y = ReduceMax <axes = [1]> (x) }"},
      {"ReduceMax", "all axes, ties split", "(double[2,3] x) => (double y) { c = Concat <axis = 1> (x, x) y = ReduceMax <keepdims = 0> (c) }"},
      {"ReduceMin", "axis 0, no keepdims", "(double[3,4] x) => (double[?] y) { y = ReduceMin <axes = [0], keepdims = 0> (x) }"},
      {"ReduceSumSquare", "axis -1", "(double[3,4] x) => (double[?,?] y) { y = ReduceSumSquare <axes = [-1]> (x) }"},
      {"ReduceL1", "axis 1", "(double[3,4] x) => (double[?,?] y) { y = ReduceL1 <axes = [1]> (x) }"},
      {"ReduceL2", "axis 1", "(double[3,4] x) => (double[?,?] y) { y = ReduceL2 <axes = [1]> (x) }"},
      {"ReduceLogSumExp", "axis 0", "(double[3,4] x) => (double[?,?] y) { y = ReduceLogSumExp <axes = [0]> (x) }"},
      {"Tile", "[2,3] x [2,3]", "(double[2,3] x) => (double[?,?] y) { r = Constant <value = int64[2] {2, 3}> () y = Tile (x, r) }"},
      {"Pad", "constant, both sides", "(double[2,3] x) => (double[?,?] y) { p = Constant <value = int64[4] {1, 0, 0, 2}> () v = Constant <value = double {0.5}> () y = Pad (x, p, v) }"},
      {"Expand", "[3,1] to [2,3,4]", "(double[3,1] x) => (double[?,?,?] y) { s = Constant <value = int64[3] {2, 3, 4}> () y = Expand (x, s) }"},
      {"Expand", "[4] to [3,4]", "(double[4] x) => (double[?,?] y) { s = Constant <value = int64[2] {3, 1}> () y = Expand (x, s) }"},
      {"Where", "broadcast condition and operands", "(double[3,4] a, double[4] b) => (double[?,?] y) <bool[3,1] c = {1, 0, 1}> { y = Where (c, a, b) }"},
      // Cast through float32: the numeric derivative sees fp32 rounding, so
      // the step and tolerance are those of fp32.
      {"Cast", "double -> float -> double", "(double[2,3] x) => (double[?,?] y) { f = Cast <to = 1> (x) d = Cast <to = 11> (f) y = Mul (d, d) }", {}, 17, 1e-2, 1e-4},
      {"Identity", "", "(double[2,3] x) => (double[?,?] y) { y = Identity (x) }"},
      // Reductions.
      {"ReduceSum", "axis 1, keepdims", "(double[2,3,4] x) => (double[?,?,?] y) { a = Constant <value = int64[1] {1}> () y = ReduceSum (x, a) }"},
      {"ReduceSum", "axes 0 and -1, no keepdims", "(double[2,3,4] x) => (double[?] y) { a = Constant <value = int64[2] {0, -1}> () y = ReduceSum <keepdims = 0> (x, a) }"},
      {"ReduceSum", "all axes", "(double[2,3] x) => (double y) { y = ReduceSum <keepdims = 0> (x) }"},
      {"ReduceSum", "noop_with_empty_axes", "(double[2,3] x) => (double[?,?] y) { y = ReduceSum <noop_with_empty_axes = 1> (x) }"},
      {"ReduceMean", "axis 1, no keepdims", "(double[2,3,4] x) => (double[?,?] y) { y = ReduceMean <axes = [1], keepdims = 0> (x) }"},
      {"ReduceMean", "all axes, keepdims", "(double[2,3,4] x) => (double[?,?,?] y) { y = ReduceMean (x) }"},
      // Losses.
      {"SoftmaxCrossEntropyLoss", "mean", "(double[4,5] s) => (double y) <int64[4] t = {1, 0, 4, 2}> { y = SoftmaxCrossEntropyLoss (s, t) }", {{"s", {-2.0, 2.0}}}},
      {"SoftmaxCrossEntropyLoss", "sum, weights", "(double[4,5] s) => (double y) <int64[4] t = {1, 0, 4, 1}, double[5] w = {0.5, 1.0, 2.0, 1.5, 0.25}> { y = SoftmaxCrossEntropyLoss <reduction = \"sum\"> (s, t, w) }", {{"s", {-2.0, 2.0}}}},
      {"SoftmaxCrossEntropyLoss", "none, [N,C,D]", "(double[2,3,4] s) => (double[?,?] y) <int64[2,4] t = {0, 2, 1, 1, 2, 0, 0, 1}> { y = SoftmaxCrossEntropyLoss <reduction = \"none\"> (s, t) }", {{"s", {-2.0, 2.0}}}},
      {"SoftmaxCrossEntropyLoss", "mean, weights, ignore_index", "(double[5,4] s) => (double y) <int64[5] t = {1, 3, 3, 0, 2}, double[4] w = {0.5, 1.0, 2.0, 1.5}> { y = SoftmaxCrossEntropyLoss <ignore_index = 3> (s, t, w) }", {{"s", {-2.0, 2.0}}}},
      {"SoftmaxCrossEntropyLoss", "log_prob used too", "(double[4,5] s) => (double y, double[?,?] lp) <int64[4] t = {1, 0, 4, 2}> { y, lp = SoftmaxCrossEntropyLoss (s, t) }", {{"s", {-2.0, 2.0}}}},
      {"NegativeLogLikelihoodLoss", "mean", "(double[4,5] x) => (double y) <int64[4] t = {1, 0, 4, 2}> { y = NegativeLogLikelihoodLoss (x, t) }"},
      {"NegativeLogLikelihoodLoss", "sum, weights", "(double[4,5] x) => (double y) <int64[4] t = {1, 0, 4, 1}, double[5] w = {0.5, 1.0, 2.0, 1.5, 0.25}> { y = NegativeLogLikelihoodLoss <reduction = \"sum\"> (x, t, w) }"},
      {"NegativeLogLikelihoodLoss", "none, [N,C,D], ignore_index", "(double[2,3,4] x) => (double[?,?] y) <int64[2,4] t = {0, 2, 1, 1, 2, 0, 0, 1}> { y = NegativeLogLikelihoodLoss <reduction = \"none\", ignore_index = 1> (x, t) }"},
      {"NegativeLogLikelihoodLoss", "mean, weights, ignore_index", "(double[5,4] x) => (double y) <int64[5] t = {1, 3, 3, 0, 2}, double[4] w = {0.5, 1.0, 2.0, 1.5}> { y = NegativeLogLikelihoodLoss <ignore_index = 3> (x, t, w) }"},
  };
}

/// Every forward operator issue 4 lists.
const std::vector<std::string> kRequiredOps = {
    "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Neg", "Pow", "Sqrt", "Exp", "Log",
    "Reciprocal", "Abs", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Softmax", "LogSoftmax",
    "LayerNormalization", "BatchNormalization", "Dropout", "Conv", "MaxPool", "AveragePool",
    "GlobalAveragePool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat",
    "Split", "Slice", "Gather", "Expand", "Where", "Cast", "Identity", "ReduceSum", "ReduceMean",
    "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"};

Tensor randomTensor(const TensorType &type, std::pair<double, double> range, std::mt19937_64 &rng) {
  std::uniform_real_distribution<double> uni(range.first, range.second);
  std::vector<double> values(type.numElements());
  for (double &v : values) {
    do
      v = uni(rng);
    while (std::abs(v) < kMinMagnitude);
  }
  return Tensor::fromDoubles(type, values);
}

/// Adds L = sum over the float graph outputs Y of sum(Y * R) and returns it.
Value *addWeightedSumLoss(Graph &g, std::mt19937_64 &rng) {
  std::vector<Value *> terms;
  std::vector<Value *> outputs = g.outputs();
  for (Value *y : outputs) {
    if (!isFloat(y->dtype()))
      continue;
    Tensor r = randomTensor(y->type(), {-1.5, 1.5}, rng);
    Value *weights = g.addInitializer(g.uniqueName(y->name() + "_R"), std::move(r), true);
    auto prod = createInferredNode(g, "Mul", {y, weights});
    auto sum = createInferredNode(g, "ReduceSum", {(*prod)->output()},
                                  {{"keepdims", Attribute::ofInt(0)}});
    terms.push_back((*sum)->output());
  }
  if (terms.size() == 1)
    return terms[0];
  return (*createInferredNode(g, "Sum", terms))->output();
}

struct CaseResult {
  bool ok = false;
  double error = 0;
};

/// The loss of g with `param` replaced by `data`.
double lossWith(const Graph &g, const Value *loss, const std::string &param, const Tensor &data) {
  Interpreter interp(g);
  auto out = interp.run({{param, data}});
  if (!out) {
    ADD_FAILURE() << llvm::toString(out.takeError());
    return NAN;
  }
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (g.outputs()[i] == loss)
      return (*out)[i].getDouble(0);
  return NAN;
}

CaseResult checkCase(const Case &c, unsigned seed) {
  CaseResult result;
  std::string text = "<ir_version: 8, opset_import: [\"\" : " + std::to_string(c.opset) +
                     "]>\ncheck " + c.graph;
  auto parsed = importModelText(text, c.op + " " + c.name);
  if (!parsed) {
    ADD_FAILURE() << llvm::toString(parsed.takeError());
    return result;
  }
  Graph &g = **parsed;
  auto folded = foldConstants(g); // Constant nodes become constant initializers
  if (!folded) {
    ADD_FAILURE() << llvm::toString(folded.takeError());
    return result;
  }

  std::mt19937_64 rng(seed);
  std::vector<std::string> params;
  for (Value *in : std::vector<Value *>(g.inputs())) {
    if (!isFloat(in->dtype()))
      continue;
    auto range = std::make_pair(kDefaultLo, kDefaultHi);
    if (auto it = c.ranges.find(in->name()); it != c.ranges.end())
      range = it->second;
    params.push_back(in->name());
    g.convertToInitializer(in, randomTensor(in->type(), range, rng));
  }
  Value *loss = addWeightedSumLoss(g, rng);
  g.renameValue(loss, "L");
  g.addOutput(loss);

  AutodiffOptions opts;
  opts.loss = "L";
  auto ad = differentiate(g, opts);
  if (!ad) {
    ADD_FAILURE() << llvm::toString(ad.takeError());
    return result;
  }
  EXPECT_EQ(ad->gradients.size(), params.size()) << "one gradient per parameter";
  if (auto err = verifyGraphAndTypes(g)) {
    ADD_FAILURE() << "verify: " << llvm::toString(std::move(err));
    return result;
  }
  auto bytes = serializeModel(g, ModelFormat::Binary);
  if (!bytes) {
    ADD_FAILURE() << "checker: " << llvm::toString(bytes.takeError());
    return result;
  }

  Interpreter interp(g, {.keepAll = true});
  auto out = interp.run({});
  if (!out) {
    ADD_FAILURE() << llvm::toString(out.takeError());
    return result;
  }
  for (const auto &[param, gradValue] : ad->gradients) {
    const Tensor &analytic = *interp.valueOf(gradValue);
    Tensor base = *param->data();
    int64_t n = base.size();
    // Every element of small tensors, an even sample of larger ones.
    int64_t stride = std::max<int64_t>(1, n / 64);
    double maxDiff = 0, maxNumeric = 0;
    for (int64_t i = 0; i < n; i += stride) {
      double x = base.getDouble(i);
      Tensor plus = base, minus = base;
      plus.setDouble(i, x + c.step);
      minus.setDouble(i, x - c.step);
      double numeric = (lossWith(g, loss, param->name(), plus) -
                        lossWith(g, loss, param->name(), minus)) /
                       (2 * c.step);
      maxDiff = std::max(maxDiff, std::abs(analytic.getDouble(i) - numeric));
      maxNumeric = std::max(maxNumeric, std::abs(numeric));
    }
    double err = maxDiff / std::max(maxNumeric, 1e-12);
    EXPECT_LE(err, c.tolerance) << "gradient of '" << param->name() << "'";
    result.error = std::max(result.error, err);
  }
  result.ok = true;
  return result;
}

} // namespace

/// Every rule against central finite differences, one table row per op.
TEST(GradientCheck, EveryOpAgainstFiniteDifferences) {
  registerAllPasses();
  struct Row {
    int cases = 0;
    double worst = 0;
  };
  std::map<std::string, Row> table;
  std::vector<std::string> order;
  unsigned seed = 1;
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.op + " (" + c.name + ")");
    CaseResult r = checkCase(c, seed++);
    if (!table.count(c.op))
      order.push_back(c.op);
    Row &row = table[c.op];
    row.cases += r.ok;
    row.worst = std::max(row.worst, r.error);
  }
  std::printf("\n%-26s %6s  %s\n", "op", "cases", "largest relative error");
  for (const std::string &op : order)
    std::printf("%-26s %6d  %.2e\n", op.c_str(), table[op].cases, table[op].worst);
  std::printf("\n");
  for (const std::string &op : kRequiredOps)
    EXPECT_GT(table[op].cases, 0) << "no passing gradient check for " << op;
}

/// The registry has a rule for every required op.
TEST(GradientCheck, RegistryCoversTheIssueList) {
  std::vector<std::string> ops = GradientRegistry::get().ops();
  for (const std::string &op : kRequiredOps)
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
}
