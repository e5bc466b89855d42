//===- OpsetRules.cpp - One rule per (operator, version) newer than 17 ----===//
//
// Each rule says what the version changed and rewrites a node of that
// version into its opset-17 form. The version history below is ONNX's own
// (operators whose default-domain version changed in opsets 18 to 22); a
// version with no rule here is refused by name.
//
//===----------------------------------------------------------------------===//

#include "ampc/ONNX/OpsetAdapter.h"

#include "ampc/Support/Error.h"

#include <cmath>

namespace ampc {

namespace {

//===----------------------------------------------------------------------===//
// Attribute helpers
//===----------------------------------------------------------------------===//

const onnx::AttributeProto *findAttr(const onnx::NodeProto &n, const std::string &name) {
  for (const auto &a : n.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t intAttr(const onnx::NodeProto &n, const std::string &name, int64_t dflt) {
  const onnx::AttributeProto *a = findAttr(n, name);
  return a ? a->i() : dflt;
}

float floatAttr(const onnx::NodeProto &n, const std::string &name, float dflt) {
  const onnx::AttributeProto *a = findAttr(n, name);
  return a ? a->f() : dflt;
}

std::string stringAttr(const onnx::NodeProto &n, const std::string &name,
                       const std::string &dflt) {
  const onnx::AttributeProto *a = findAttr(n, name);
  return a ? a->s() : dflt;
}

void removeAttr(onnx::NodeProto &n, const std::string &name) {
  auto *attrs = n.mutable_attribute();
  for (int i = attrs->size() - 1; i >= 0; --i)
    if (attrs->Get(i).name() == name)
      attrs->DeleteSubrange(i, 1);
}

void setInts(onnx::NodeProto &n, const std::string &name, const std::vector<int64_t> &values) {
  removeAttr(n, name);
  onnx::AttributeProto *a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values)
    a->add_ints(v);
}

void setInt(onnx::NodeProto &n, const std::string &name, int64_t value) {
  removeAttr(n, name);
  onnx::AttributeProto *a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

bool hasInput(const onnx::NodeProto &n, int i) { return n.input_size() > i && !n.input(i).empty(); }

void keepInputs(onnx::NodeProto &n, int count) {
  while (n.input_size() > count)
    n.mutable_input()->RemoveLast();
  while (n.input_size() > 0 && n.input(n.input_size() - 1).empty())
    n.mutable_input()->RemoveLast();
}

/// A rewrite that keeps the node but drops an attribute which must hold its
/// default (the version added it for types or modes ampc does not run).
llvm::Error dropDefaultInt(const onnx::NodeProto &n, std::vector<onnx::NodeProto> &out,
                           const char *attr, int64_t dflt) {
  if (intAttr(n, attr, dflt) != dflt)
    return formatError("{0}={1} is not supported (only {2})", attr, intAttr(n, attr, dflt),
                       dflt);
  out.push_back(n);
  removeAttr(out.back(), attr);
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Rewrites
//===----------------------------------------------------------------------===//

/// Cast-19/21, CastLike-19/21: `saturate` only affects float8 targets.
llvm::Error dropSaturate(AdapterContext &, const onnx::NodeProto &n,
                         std::vector<onnx::NodeProto> &out) {
  out.push_back(n);
  removeAttr(out.back(), "saturate");
  return llvm::Error::success();
}

/// Reduce*-18: `axes` moved from an attribute to an optional input, with
/// `noop_with_empty_axes` (ReduceSum's form since 13).
llvm::Error axesInputToAttribute(AdapterContext &ctx, const onnx::NodeProto &n,
                                 std::vector<onnx::NodeProto> &out) {
  bool noop = intAttr(n, "noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> axes;
  if (hasInput(n, 1) && !ctx.constantInts(n.input(1), axes))
    return formatError("axes '{0}' must be a constant int64 list (an initializer or a Constant "
                       "node)",
                       n.input(1));
  if (axes.empty() && noop) {
    onnx::NodeProto &id = ctx.emit(out, "Identity", {n.input(0)}, {n.output(0)});
    id.set_name(n.name());
    return llvm::Error::success();
  }
  onnx::NodeProto r = n;
  keepInputs(r, 1);
  removeAttr(r, "noop_with_empty_axes");
  if (!axes.empty())
    setInts(r, "axes", axes);
  out.push_back(std::move(r));
  return llvm::Error::success();
}

/// Split-18: `num_outputs` names the number of equal parts; Split-13 splits
/// into as many equal parts as it has outputs when `split` is absent.
llvm::Error dropNumOutputs(AdapterContext &, const onnx::NodeProto &n,
                           std::vector<onnx::NodeProto> &out) {
  if (findAttr(n, "num_outputs") && intAttr(n, "num_outputs", 0) != n.output_size())
    return formatError("num_outputs={0} but the node has {1} outputs",
                       intAttr(n, "num_outputs", 0), n.output_size());
  out.push_back(n);
  removeAttr(out.back(), "num_outputs");
  return llvm::Error::success();
}

/// Pad-18: an optional `axes` input says which axes `pads` covers; Pad-13's
/// pads cover every axis. Pad-19 added the `wrap` mode, which ampc runs.
llvm::Error padAxes(AdapterContext &ctx, const onnx::NodeProto &n,
                    std::vector<onnx::NodeProto> &out) {
  if (!hasInput(n, 3)) {
    out.push_back(n);
    keepInputs(out.back(), 3);
    return llvm::Error::success();
  }
  std::vector<int64_t> axes, pads;
  if (!ctx.constantInts(n.input(3), axes) || !hasInput(n, 1) ||
      !ctx.constantInts(n.input(1), pads))
    return makeError("pads and axes must be constant int64 lists when axes is given");
  int rank = ctx.rank(n.input(0));
  if (rank < 0)
    return formatError("the model declares no rank for '{0}', which axes needs", n.input(0));
  if (pads.size() != 2 * axes.size())
    return formatError("{0} pads for {1} axes", pads.size(), axes.size());
  std::vector<int64_t> full(2 * rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank)
      return formatError("axis {0} is out of range for rank {1}", axes[i], rank);
    full[a] = pads[i];
    full[a + rank] = pads[i + axes.size()];
  }
  onnx::NodeProto r = n;
  keepInputs(r, 3);
  r.set_input(1, ctx.int64s(out, n.output(0) + "/pads", full));
  out.push_back(std::move(r));
  return llvm::Error::success();
}

/// Resize-18 added antialias, axes and keep_aspect_ratio_policy; Resize-19
/// the half_pixel_symmetric mapping. Their defaults are Resize-13.
llvm::Error resizeDefaults(AdapterContext &ctx, const onnx::NodeProto &n,
                           std::vector<onnx::NodeProto> &out) {
  if (intAttr(n, "antialias", 0) != 0)
    return makeError("antialias=1 is not supported");
  std::string policy = stringAttr(n, "keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch")
    return formatError("keep_aspect_ratio_policy '{0}' is not supported (only 'stretch')",
                       policy);
  if (stringAttr(n, "coordinate_transformation_mode", "") == "half_pixel_symmetric")
    return makeError("coordinate_transformation_mode 'half_pixel_symmetric' is not supported");
  if (const onnx::AttributeProto *axes = findAttr(n, "axes")) {
    int rank = ctx.rank(n.input(0));
    bool all = rank == axes->ints_size();
    for (int i = 0; all && i < rank; ++i)
      all = axes->ints(i) == i || axes->ints(i) == i - rank;
    if (!all)
      return makeError("axes covering only some axes are not supported");
  }
  out.push_back(n);
  for (const char *attr : {"antialias", "axes", "keep_aspect_ratio_policy"})
    removeAttr(out.back(), attr);
  return llvm::Error::success();
}

llvm::Error averagePoolDilations(AdapterContext &, const onnx::NodeProto &n,
                                 std::vector<onnx::NodeProto> &out) {
  if (const onnx::AttributeProto *d = findAttr(n, "dilations"))
    for (int64_t v : d->ints())
      if (v != 1)
        return makeError("dilations other than 1 are not supported");
  out.push_back(n);
  removeAttr(out.back(), "dilations");
  return llvm::Error::success();
}

llvm::Error lpPoolCeilMode(AdapterContext &, const onnx::NodeProto &n,
                           std::vector<onnx::NodeProto> &out) {
  return dropDefaultInt(n, out, "ceil_mode", 0);
}

llvm::Error scatterReduction(AdapterContext &, const onnx::NodeProto &n,
                             std::vector<onnx::NodeProto> &out) {
  std::string reduction = stringAttr(n, "reduction", "none");
  if (reduction == "max" || reduction == "min")
    return formatError("reduction '{0}' is not supported", reduction);
  out.push_back(n);
  return llvm::Error::success();
}

/// Gelu-20: 0.5 x (1 + erf(x / sqrt 2)), or with approximate="tanh"
/// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as PyTorch defines it.
llvm::Error gelu(AdapterContext &ctx, const onnx::NodeProto &n,
                 std::vector<onnx::NodeProto> &out) {
  std::string approximate = stringAttr(n, "approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    return formatError("approximate '{0}' is none of 'none' and 'tanh'", approximate);
  const std::string &x = n.input(0), &y = n.output(0);
  auto op = [&](const char *type, std::vector<std::string> in, const char *suffix) {
    std::string name = ctx.fresh(y + "/" + suffix);
    ctx.emit(out, type, in, {name});
    return name;
  };
  std::string inner;
  if (approximate == "none") {
    std::string scaled = op("Mul", {x, ctx.scalarLike(out, y + "/inv_sqrt2", M_SQRT1_2, x)}, "scaled");
    inner = op("Erf", {scaled}, "erf");
  } else {
    std::string x2 = op("Mul", {x, x}, "x2");
    std::string x3 = op("Mul", {x2, x}, "x3");
    std::string cubic = op("Mul", {x3, ctx.scalarLike(out, y + "/coeff", 0.044715f, x)}, "cubic");
    std::string sum = op("Add", {x, cubic}, "sum");
    float k = static_cast<float>(std::sqrt(2.0 / M_PI));
    std::string scaled = op("Mul", {sum, ctx.scalarLike(out, y + "/sqrt_2_over_pi", k, x)}, "scaled");
    inner = op("Tanh", {scaled}, "tanh");
  }
  std::string onePlus = op("Add", {inner, ctx.scalarLike(out, y + "/one", 1.0f, x)}, "one_plus");
  std::string product = op("Mul", {x, onePlus}, "product");
  onnx::NodeProto &last = ctx.emit(out, "Mul", {product, ctx.scalarLike(out, y + "/half", 0.5f, x)}, {y});
  last.set_name(n.name());
  return llvm::Error::success();
}

/// Mish-18: x tanh(softplus(x)).
llvm::Error mish(AdapterContext &ctx, const onnx::NodeProto &n,
                 std::vector<onnx::NodeProto> &out) {
  const std::string &x = n.input(0), &y = n.output(0);
  std::string sp = ctx.fresh(y + "/softplus"), th = ctx.fresh(y + "/tanh");
  ctx.emit(out, "Softplus", {x}, {sp});
  ctx.emit(out, "Tanh", {sp}, {th});
  ctx.emit(out, "Mul", {x, th}, {y}).set_name(n.name());
  return llvm::Error::success();
}

/// GroupNormalization-18 (scale and bias per group) and -21 (per channel):
/// X [N, C, ...] viewed as [N, G, C/G * ...], normalized over the last axis
/// (mean, population variance), then scaled and shifted, and viewed back.
llvm::Error groupNorm(AdapterContext &ctx, const onnx::NodeProto &n,
                      std::vector<onnx::NodeProto> &out, bool perChannel) {
  const onnx::AttributeProto *groups = findAttr(n, "num_groups");
  if (!groups || groups->i() <= 0)
    return makeError("num_groups must be given and positive");
  if (n.input_size() != 3 || !hasInput(n, 1) || !hasInput(n, 2))
    return makeError("expects X, scale and bias");
  const std::string &x = n.input(0), &y = n.output(0);
  auto op = [&](const char *type, std::vector<std::string> in, const char *suffix) -> onnx::NodeProto & {
    return ctx.emit(out, type, in, {ctx.fresh(y + "/" + suffix)});
  };
  auto reduceMean = [&](const std::string &in, const char *suffix) {
    onnx::NodeProto &r = op("ReduceMean", {in}, suffix);
    setInts(r, "axes", {2});
    setInt(r, "keepdims", 1);
    return r.output(0);
  };
  std::string grouped =
      op("Reshape", {x, ctx.int64s(out, y + "/group_shape", {0, groups->i(), -1})}, "grouped").output(0);
  std::string mean = reduceMean(grouped, "mean");
  std::string centered = op("Sub", {grouped, mean}, "centered").output(0);
  std::string squared = op("Mul", {centered, centered}, "squared").output(0);
  std::string var = reduceMean(squared, "var");
  std::string eps = ctx.scalarLike(out, y + "/epsilon", floatAttr(n, "epsilon", 1e-5f), x);
  std::string stddev = op("Sqrt", {op("Add", {var, eps}, "var_eps").output(0)}, "std").output(0);
  std::string normalized = op("Div", {centered, stddev}, "normalized").output(0);
  std::string shaped = normalized; // [N, G, L]: per-group scale broadcasts as [G, 1]
  if (perChannel) {
    onnx::NodeProto &channels = op("Shape", {x}, "channels");
    setInt(channels, "start", 1);
    setInt(channels, "end", 2);
    onnx::NodeProto &ncl = op("Concat", {ctx.int64s(out, y + "/batch_dim", {0}), channels.output(0),
                                         ctx.int64s(out, y + "/rest_dim", {-1})},
                              "ncl_shape");
    setInt(ncl, "axis", 0);
    shaped = op("Reshape", {normalized, ncl.output(0)}, "per_channel").output(0);
  }
  std::string column = ctx.int64s(out, y + "/column_axes", {1});
  std::string scale = op("Unsqueeze", {n.input(1), column}, "scale_column").output(0);
  std::string bias = op("Unsqueeze", {n.input(2), column}, "bias_column").output(0);
  std::string scaled = op("Mul", {shaped, scale}, "scaled").output(0);
  std::string shifted = op("Add", {scaled, bias}, "shifted").output(0);
  std::string shape = op("Shape", {x}, "shape").output(0);
  ctx.emit(out, "Reshape", {shifted, shape}, {y}).set_name(n.name());
  return llvm::Error::success();
}

llvm::Error groupNormPerGroup(AdapterContext &ctx, const onnx::NodeProto &n,
                              std::vector<onnx::NodeProto> &out) {
  return groupNorm(ctx, n, out, /*perChannel=*/false);
}

llvm::Error groupNormPerChannel(AdapterContext &ctx, const onnx::NodeProto &n,
                                std::vector<onnx::NodeProto> &out) {
  return groupNorm(ctx, n, out, /*perChannel=*/true);
}

constexpr const char *kTypes = "added element types (float8, int4, bfloat16...); kept as it is";

} // namespace

const std::vector<OpsetRule> &opsetRules() {
  static const std::vector<OpsetRule> rules = {
      // Element types only: the node is the same at opset 17.
      {"Acos", 22, kTypes, nullptr},
      {"Acosh", 22, kTypes, nullptr},
      {"Asin", 22, kTypes, nullptr},
      {"Asinh", 22, kTypes, nullptr},
      {"Atan", 22, kTypes, nullptr},
      {"Atanh", 22, kTypes, nullptr},
      {"Conv", 22, kTypes, nullptr},
      {"ConvTranspose", 22, kTypes, nullptr},
      {"Constant", 19, kTypes, nullptr},
      {"Constant", 21, kTypes, nullptr},
      {"ConstantOfShape", 20, kTypes, nullptr},
      {"ConstantOfShape", 21, kTypes, nullptr},
      {"Cos", 22, kTypes, nullptr},
      {"Cosh", 22, kTypes, nullptr},
      {"Dropout", 22, kTypes, nullptr},
      {"Elu", 22, kTypes, nullptr},
      {"Equal", 19, kTypes, nullptr},
      {"EyeLike", 22, kTypes, nullptr},
      {"Flatten", 21, kTypes, nullptr},
      {"GlobalAveragePool", 22, kTypes, nullptr},
      {"GlobalLpPool", 22, kTypes, nullptr},
      {"GlobalMaxPool", 22, kTypes, nullptr},
      {"HardSigmoid", 22, kTypes, nullptr},
      {"HardSwish", 22, kTypes, nullptr},
      {"Identity", 19, kTypes, nullptr},
      {"Identity", 21, kTypes, nullptr},
      {"InstanceNormalization", 22, kTypes, nullptr},
      {"IsInf", 20, kTypes, nullptr},
      {"IsNaN", 20, kTypes, nullptr},
      {"LpNormalization", 22, kTypes, nullptr},
      {"MaxPool", 22, kTypes, nullptr},
      {"NegativeLogLikelihoodLoss", 22, kTypes, nullptr},
      {"RandomNormal", 22, kTypes, nullptr},
      {"RandomNormalLike", 22, kTypes, nullptr},
      {"RandomUniform", 22, kTypes, nullptr},
      {"RandomUniformLike", 22, kTypes, nullptr},
      {"Reshape", 19, kTypes, nullptr},
      {"Reshape", 21, kTypes, nullptr},
      {"Round", 22, kTypes, nullptr},
      {"Selu", 22, kTypes, nullptr},
      {"Shape", 19, kTypes, nullptr},
      {"Shape", 21, kTypes, nullptr},
      {"Sin", 22, kTypes, nullptr},
      {"Sinh", 22, kTypes, nullptr},
      {"Size", 19, kTypes, nullptr},
      {"Size", 21, kTypes, nullptr},
      {"Softplus", 22, kTypes, nullptr},
      {"Softsign", 22, kTypes, nullptr},
      {"Squeeze", 21, kTypes, nullptr},
      {"Tan", 22, kTypes, nullptr},
      {"ThresholdedRelu", 22, kTypes, nullptr},
      {"Transpose", 21, kTypes, nullptr},
      {"Unsqueeze", 21, kTypes, nullptr},
      // Attributes that must hold their defaults.
      {"AveragePool", 19, "added dilations; dilations of 1 dropped", averagePoolDilations},
      {"AveragePool", 22, "added bfloat16; dilations of 1 dropped", averagePoolDilations},
      {"Cast", 19, "added saturate (float8 only); dropped", dropSaturate},
      {"Cast", 21, "added int4 types; saturate dropped", dropSaturate},
      {"CastLike", 19, "added saturate (float8 only); dropped", dropSaturate},
      {"CastLike", 21, "added int4 types; saturate dropped", dropSaturate},
      {"LpPool", 18, "added ceil_mode; 0 dropped", lpPoolCeilMode},
      {"LpPool", 22, "added bfloat16; ceil_mode 0 dropped", lpPoolCeilMode},
      {"Resize", 18, "added antialias, axes, keep_aspect_ratio_policy; defaults dropped",
       resizeDefaults},
      {"Resize", 19, "added half_pixel_symmetric; other mappings kept", resizeDefaults},
      {"ScatterElements", 18, "added max and min reductions; others kept", scatterReduction},
      {"ScatterND", 18, "added max and min reductions; others kept", scatterReduction},
      {"Split", 18, "added num_outputs; Split-13 splits equally by its outputs", dropNumOutputs},
      // Inputs that become attributes.
      {"Pad", 18, "added an axes input; expanded to pads over every axis", padAxes},
      {"Pad", 19, "added wrap mode (ampc runs it); axes expanded", padAxes},
      {"Pad", 21, "added int4 types; axes expanded", padAxes},
      {"ReduceL1", 18, "axes became an input; back to the attribute", axesInputToAttribute},
      {"ReduceL2", 18, "axes became an input; back to the attribute", axesInputToAttribute},
      {"ReduceLogSum", 18, "axes became an input; back to the attribute", axesInputToAttribute},
      {"ReduceLogSumExp", 18, "axes became an input; back to the attribute", axesInputToAttribute},
      {"ReduceMax", 18, "axes became an input; back to the attribute", axesInputToAttribute},
      {"ReduceMax", 20, "added bool; axes back to the attribute", axesInputToAttribute},
      {"ReduceMean", 18, "axes became an input; back to the attribute", axesInputToAttribute},
      {"ReduceMin", 18, "axes became an input; back to the attribute", axesInputToAttribute},
      {"ReduceMin", 20, "added bool; axes back to the attribute", axesInputToAttribute},
      {"ReduceProd", 18, "axes became an input; back to the attribute", axesInputToAttribute},
      {"ReduceSumSquare", 18, "axes became an input; back to the attribute", axesInputToAttribute},
      // New operators, expanded into opset-17 ones.
      {"Gelu", 20, "new; expanded with Erf (or Tanh for approximate='tanh')", gelu},
      {"GroupNormalization", 18, "new (scale per group); expanded with ReduceMean", groupNormPerGroup},
      {"GroupNormalization", 21, "scale per channel; expanded with ReduceMean", groupNormPerChannel},
      {"Mish", 18, "new; expanded as x tanh(softplus(x))", mish},
      {"Mish", 22, "added bfloat16; expanded as x tanh(softplus(x))", mish},
  };
  return rules;
}

const std::unordered_map<std::string, std::vector<int>> &newerOperatorVersions() {
  // ONNX's operator changelog, opsets 18 to 22, default domain.
  static const std::unordered_map<std::string, std::vector<int>> versions = {
      {"Acos", {22}}, {"Acosh", {22}}, {"AffineGrid", {20}}, {"Asin", {22}},
      {"Asinh", {22}}, {"Atan", {22}}, {"Atanh", {22}}, {"AveragePool", {19, 22}},
      {"Bernoulli", {22}}, {"BitwiseAnd", {18}}, {"BitwiseNot", {18}}, {"BitwiseOr", {18}},
      {"BitwiseXor", {18}}, {"Cast", {19, 21}}, {"CastLike", {19, 21}},
      {"CenterCropPad", {18}}, {"Col2Im", {18}}, {"Constant", {19, 21}},
      {"ConstantOfShape", {20, 21}}, {"Conv", {22}}, {"ConvTranspose", {22}}, {"Cos", {22}},
      {"Cosh", {22}}, {"DFT", {20}}, {"DeformConv", {19, 22}},
      {"DequantizeLinear", {19, 21}}, {"Det", {22}}, {"Dropout", {22}}, {"Elu", {22}},
      {"Equal", {19}}, {"EyeLike", {22}}, {"Flatten", {21}}, {"GRU", {22}}, {"Gelu", {20}},
      {"GlobalAveragePool", {22}}, {"GlobalLpPool", {22}}, {"GlobalMaxPool", {22}},
      {"GridSample", {20, 22}}, {"GroupNormalization", {18, 21}}, {"HardSigmoid", {22}},
      {"HardSwish", {22}}, {"Identity", {19, 21}}, {"If", {19, 21}}, {"ImageDecoder", {20}},
      {"InstanceNormalization", {22}}, {"IsInf", {20}}, {"IsNaN", {20}}, {"LSTM", {22}},
      {"Loop", {19, 21}}, {"LpNormalization", {22}}, {"LpPool", {18, 22}}, {"MaxPool", {22}},
      {"MaxRoiPool", {22}}, {"MaxUnpool", {22}}, {"Mish", {18, 22}}, {"Multinomial", {22}},
      {"NegativeLogLikelihoodLoss", {22}}, {"OptionalGetElement", {18}},
      {"OptionalHasElement", {18}}, {"Pad", {18, 19, 21}}, {"QLinearMatMul", {21}},
      {"QuantizeLinear", {19, 21}}, {"RNN", {22}}, {"RandomNormal", {22}},
      {"RandomNormalLike", {22}}, {"RandomUniform", {22}}, {"RandomUniformLike", {22}},
      {"ReduceL1", {18}}, {"ReduceL2", {18}}, {"ReduceLogSum", {18}}, {"ReduceLogSumExp", {18}},
      {"ReduceMax", {18, 20}}, {"ReduceMean", {18}}, {"ReduceMin", {18, 20}},
      {"ReduceProd", {18}}, {"ReduceSumSquare", {18}}, {"RegexFullMatch", {20}},
      {"Reshape", {19, 21}}, {"Resize", {18, 19}}, {"RoiAlign", {22}}, {"Round", {22}},
      {"Scan", {19, 21}}, {"ScatterElements", {18}}, {"ScatterND", {18}}, {"Selu", {22}},
      {"Shape", {19, 21}}, {"Sin", {22}}, {"Sinh", {22}}, {"Size", {19, 21}},
      {"Softplus", {22}}, {"Softsign", {22}}, {"Split", {18}}, {"Squeeze", {21}},
      {"StringConcat", {20}}, {"StringSplit", {20}}, {"Tan", {22}}, {"ThresholdedRelu", {22}},
      {"Transpose", {21}}, {"Unsqueeze", {21}},
  };
  return versions;
}

} // namespace ampc
