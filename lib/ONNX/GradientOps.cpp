//===- GradientOps.cpp - Schemas of ampc's gradient operators --------------===//
//
// Operators that autodiff emits where a composition of ONNX operators would
// waste memory or time (see passes/GradientRules*.cpp for their use, and
// lib/Interpreter/GradientKernels.cpp for their reference definitions). Each
// infers its results' types and shapes so that the checker and strict shape
// inference accept every backward graph.
//
//===----------------------------------------------------------------------===//

#include "AmpcOps.h"

#include "onnx/defs/shape_inference.h"

namespace ampc {

namespace {

using onnx::AttributeProto;
using onnx::InferenceContext;
using onnx::OpSchema;

const std::vector<std::string> &floatTypes() {
  static const std::vector<std::string> types{"tensor(float16)", "tensor(bfloat16)",
                                              "tensor(float)", "tensor(double)"};
  return types;
}

const std::vector<std::string> &indexTypes() {
  static const std::vector<std::string> types{"tensor(int32)", "tensor(int64)"};
  return types;
}

bool hasOutput(InferenceContext &ctx, size_t i) { return i < ctx.getNumOutputs(); }

/// Result `out` has the element type of input `in` and the shape in the
/// `shape` attribute (the shape of the forward operand).
void typeFromInputShapeFromAttr(InferenceContext &ctx, size_t in, size_t out) {
  onnx::propagateElemTypeFromInputToOutput(ctx, in, out);
  onnx::propagateShapeFromAttributeToOutput(ctx, "shape", out);
}

/// dX = f(dY, Y or X): elementwise, typed like dY.
OpSchema elementwiseGrad(const char *name, const char *doc, const char *second) {
  OpSchema s = AMPC_SCHEMA(name, doc);
  s.Input(0, "dY", "Gradient of the forward result", "T")
      .Input(1, second, "The forward result (Y) or operand (X)", "T")
      .Output(0, "dX", "Gradient of the forward operand", "T")
      .TypeConstraint("T", floatTypes(), "Float tensors")
      .TypeAndShapeInferenceFunction([](InferenceContext &ctx) { propagateTypeAndShape(ctx, 0, 0); });
  return s;
}

OpSchema softmaxGrad(const char *name, const char *doc) {
  OpSchema s = elementwiseGrad(name, doc, "Y");
  s.Attr("axis", "The forward op's axis", AttributeProto::INT, static_cast<int64_t>(-1));
  return s;
}

/// Attributes of a sliding window, as the forward Conv / pooling op has them.
void windowAttrs(OpSchema &s) {
  s.Attr("auto_pad", "As the forward op", AttributeProto::STRING, std::string("NOTSET"))
      .Attr("dilations", "As the forward op", AttributeProto::INTS, onnx::OPTIONAL_VALUE)
      .Attr("kernel_shape", "As the forward op", AttributeProto::INTS, onnx::OPTIONAL_VALUE)
      .Attr("pads", "As the forward op", AttributeProto::INTS, onnx::OPTIONAL_VALUE)
      .Attr("strides", "As the forward op", AttributeProto::INTS, onnx::OPTIONAL_VALUE);
}

OpSchema layerNormGrad() {
  OpSchema s = AMPC_SCHEMA(
      "LayerNormalizationGrad",
      "Gradients of LayerNormalization from the saved Mean and InvStdDev. dScale and dBias "
      "have the normalized shape X.shape[axis:]; a Scale or B that broadcasts is summed by the "
      "caller.");
  s.Input(0, "dY", "Gradient of Y", "T")
      .Input(1, "X", "The forward operand", "T")
      .Input(2, "Scale", "The forward scale", "T")
      .Input(3, "Mean", "The forward op's Mean result", "U")
      .Input(4, "InvStdDev", "The forward op's InvStdDev result", "U")
      .Output(0, "dX", "Gradient of X", "T", OpSchema::Optional)
      .Output(1, "dScale", "Gradient of the scale (normalized shape)", "T", OpSchema::Optional)
      .Output(2, "dBias", "Gradient of the bias (normalized shape)", "T", OpSchema::Optional)
      .Attr("axis", "The forward op's axis", AttributeProto::INT, static_cast<int64_t>(-1))
      .TypeConstraint("T", floatTypes(), "Float tensors")
      .TypeConstraint("U", floatTypes(), "Type of the saved statistics")
      .TypeAndShapeInferenceFunction([](InferenceContext &ctx) {
        for (size_t i = 0; i < 3 && hasOutput(ctx, i); ++i)
          onnx::propagateElemTypeFromInputToOutput(ctx, 1, i);
        if (!onnx::hasInputShape(ctx, 1))
          return;
        const auto &xs = onnx::getInputShape(ctx, 1);
        int64_t rank = xs.dim_size();
        int64_t axis = onnx::getAttribute(ctx, "axis", -1);
        if (axis < 0)
          axis += rank;
        if (axis < 0 || axis >= rank)
          fail_shape_inference("axis ", axis, " is out of range for rank ", rank);
        if (hasOutput(ctx, 0))
          onnx::propagateShapeFromInputToOutput(ctx, 1, 0);
        onnx::TensorShapeProto normalized;
        for (int64_t d = axis; d < rank; ++d)
          *normalized.add_dim() = xs.dim(static_cast<int>(d));
        for (size_t i = 1; i < 3 && hasOutput(ctx, i); ++i)
          onnx::updateOutputShape(ctx, i, normalized);
      });
  return s;
}

OpSchema batchNormGrad() {
  OpSchema s = AMPC_SCHEMA(
      "BatchNormalizationGrad",
      "Gradients of BatchNormalization. In training mode the batch statistics are recomputed "
      "from X (Mean and Var are not used); otherwise Mean and Var (the running statistics) "
      "normalize.");
  s.Input(0, "dY", "Gradient of Y", "T")
      .Input(1, "X", "The forward operand [N, C, ...]", "T")
      .Input(2, "Scale", "The forward scale [C]", "T1")
      .Input(3, "Mean", "Running mean (inference mode)", "T2", OpSchema::Optional)
      .Input(4, "Var", "Running variance (inference mode)", "T2", OpSchema::Optional)
      .Output(0, "dX", "Gradient of X", "T", OpSchema::Optional)
      .Output(1, "dScale", "Gradient of the scale", "T1", OpSchema::Optional)
      .Output(2, "dBias", "Gradient of the bias", "T1", OpSchema::Optional)
      .Attr("epsilon", "As the forward op", AttributeProto::FLOAT, 1e-5f)
      .Attr("training_mode", "1: batch statistics, 0: Mean and Var", AttributeProto::INT,
            static_cast<int64_t>(1))
      .TypeConstraint("T", floatTypes(), "Float tensors")
      .TypeConstraint("T1", floatTypes(), "Type of the scale and bias")
      .TypeConstraint("T2", floatTypes(), "Type of the running statistics")
      .TypeAndShapeInferenceFunction([](InferenceContext &ctx) {
        if (hasOutput(ctx, 0))
          propagateTypeAndShape(ctx, 1, 0);
        for (size_t i = 1; i < 3 && hasOutput(ctx, i); ++i)
          propagateTypeAndShape(ctx, 2, i);
      });
  return s;
}

OpSchema convGrad() {
  OpSchema s = AMPC_SCHEMA("ConvGrad",
                           "Gradients of Conv: dX (transposed convolution of dY), dW "
                           "(correlation of X with dY) and dB (dY summed over all axes but 1).");
  s.Input(0, "dY", "Gradient of Y [N, M, ...]", "T")
      .Input(1, "X", "The forward input [N, C, ...]", "T")
      .Input(2, "W", "The forward weights [M, C/group, k...]", "T")
      .Output(0, "dX", "Gradient of X", "T", OpSchema::Optional)
      .Output(1, "dW", "Gradient of W", "T", OpSchema::Optional)
      .Output(2, "dB", "Gradient of the bias [M]", "T", OpSchema::Optional)
      .Attr("group", "As the forward op", AttributeProto::INT, static_cast<int64_t>(1))
      .TypeConstraint("T", floatTypes(), "Float tensors")
      .TypeAndShapeInferenceFunction([](InferenceContext &ctx) {
        if (hasOutput(ctx, 0))
          propagateTypeAndShape(ctx, 1, 0);
        if (hasOutput(ctx, 1))
          propagateTypeAndShape(ctx, 2, 1);
        if (!hasOutput(ctx, 2))
          return;
        onnx::propagateElemTypeFromInputToOutput(ctx, 2, 2);
        if (onnx::hasInputShape(ctx, 2))
          onnx::updateOutputShape(ctx, 2, {onnx::getInputShape(ctx, 2).dim(0)});
      });
  windowAttrs(s);
  return s;
}

/// A gradient op whose result has dY's type and the forward operand's shape
/// (the `shape` attribute).
OpSchema shapedGrad(const char *name, const char *doc) {
  OpSchema s = AMPC_SCHEMA(name, doc);
  s.Output(0, "dX", "Gradient of the forward operand", "T")
      .Attr("shape", "Shape of the forward operand", AttributeProto::INTS)
      .TypeConstraint("T", floatTypes(), "Float tensors")
      .TypeAndShapeInferenceFunction(
          [](InferenceContext &ctx) { typeFromInputShapeFromAttr(ctx, 0, 0); });
  return s;
}

OpSchema maxPoolGrad() {
  OpSchema s = shapedGrad("MaxPoolGrad",
                          "Gradient of MaxPool from its operand: each dY element is added at the "
                          "position of its window's maximum in X, found as MaxPool finds it (the "
                          "first maximum in window order), so no Indices need to be kept.");
  s.Input(0, "dY", "Gradient of Y", "T")
      .Input(1, "X", "The forward operand", "T")
      .Attr("ceil_mode", "As the forward op", AttributeProto::INT, static_cast<int64_t>(0));
  windowAttrs(s);
  return s;
}

OpSchema averagePoolGrad() {
  OpSchema s = shapedGrad("AveragePoolGrad",
                          "Gradient of AveragePool: each dY element is spread evenly over its "
                          "window, counted as the forward op counts it.");
  s.Input(0, "dY", "Gradient of Y", "T")
      .Attr("ceil_mode", "As the forward op", AttributeProto::INT, static_cast<int64_t>(0))
      .Attr("count_include_pad", "As the forward op", AttributeProto::INT, static_cast<int64_t>(0));
  windowAttrs(s);
  return s;
}

OpSchema gatherGrad() {
  OpSchema s = shapedGrad("GatherGrad",
                          "Gradient of Gather: zeros with dY added at the gathered positions; "
                          "repeated indices accumulate.");
  s.Input(0, "dY", "Gradient of Y", "T")
      .Input(1, "Indices", "The forward op's indices", "Tind")
      .Attr("axis", "As the forward op", AttributeProto::INT, static_cast<int64_t>(0))
      .TypeConstraint("Tind", indexTypes(), "Indices");
  return s;
}

OpSchema sliceGrad() {
  OpSchema s = shapedGrad("SliceGrad",
                          "Gradient of Slice: zeros with dY written at the sliced positions.");
  s.Input(0, "dY", "Gradient of Y", "T")
      .Input(1, "starts", "As the forward op", "Tind")
      .Input(2, "ends", "As the forward op", "Tind")
      .Input(3, "axes", "As the forward op", "Tind", OpSchema::Optional)
      .Input(4, "steps", "As the forward op", "Tind", OpSchema::Optional)
      .TypeConstraint("Tind", indexTypes(), "Indices");
  return s;
}

OpSchema dropoutGrad() {
  OpSchema s = AMPC_SCHEMA("DropoutGrad",
                           "Gradient of Dropout: dY * mask / (1 - ratio) in training mode, dY "
                           "otherwise.");
  s.Input(0, "dY", "Gradient of Y", "T")
      .Input(1, "mask", "The forward op's mask", "B")
      .Input(2, "ratio", "As the forward op (default 0.5)", "T1", OpSchema::Optional)
      .Input(3, "training_mode", "As the forward op (default false)", "B", OpSchema::Optional)
      .Output(0, "dX", "Gradient of X", "T")
      .TypeConstraint("T", floatTypes(), "Float tensors")
      .TypeConstraint("T1", floatTypes(), "Ratio")
      .TypeConstraint("B", {"tensor(bool)"}, "Mask")
      .TypeAndShapeInferenceFunction([](InferenceContext &ctx) { propagateTypeAndShape(ctx, 0, 0); });
  return s;
}

void lossAttrs(OpSchema &s) {
  s.Attr("reduction", "As the forward op", AttributeProto::STRING, std::string("mean"))
      .Attr("ignore_index", "As the forward op", AttributeProto::INT, onnx::OPTIONAL_VALUE);
}

OpSchema softmaxCrossEntropyGrad() {
  OpSchema s = AMPC_SCHEMA("SoftmaxCrossEntropyLossGrad",
                           "Gradient of SoftmaxCrossEntropyLoss with respect to the scores, from "
                           "the forward op's log_prob result.");
  s.Input(0, "dLoss", "Gradient of the loss", "T")
      .Input(1, "log_prob", "The forward op's log_prob result [N, C, ...]", "T")
      .Input(2, "labels", "The forward op's labels", "Tind")
      .Input(3, "weights", "The forward op's class weights", "T", OpSchema::Optional)
      .Output(0, "dScores", "Gradient of the scores", "T")
      .TypeConstraint("T", floatTypes(), "Float tensors")
      .TypeConstraint("Tind", indexTypes(), "Labels")
      .TypeAndShapeInferenceFunction([](InferenceContext &ctx) { propagateTypeAndShape(ctx, 1, 0); });
  lossAttrs(s);
  return s;
}

OpSchema nllGrad() {
  OpSchema s = shapedGrad("NegativeLogLikelihoodLossGrad",
                          "Gradient of NegativeLogLikelihoodLoss with respect to its input.");
  s.Input(0, "dLoss", "Gradient of the loss", "T")
      .Input(1, "target", "The forward op's targets", "Tind")
      .Input(2, "weight", "The forward op's class weights", "T", OpSchema::Optional)
      .TypeConstraint("Tind", indexTypes(), "Targets");
  lossAttrs(s);
  return s;
}

} // namespace

void appendGradientSchemas(std::vector<onnx::OpSchema> &schemas) {
  schemas.push_back(elementwiseGrad("ReluGrad", "dX = dY where Y > 0, else 0.", "Y"));
  OpSchema leaky = elementwiseGrad(
      "LeakyReluGrad", "dX = dY where S > 0, else alpha * dY; S is X, or Y when alpha > 0.", "S");
  leaky.Attr("alpha", "As the forward op", AttributeProto::FLOAT, 0.01f);
  schemas.push_back(std::move(leaky));
  schemas.push_back(elementwiseGrad("SigmoidGrad", "dX = dY * Y * (1 - Y).", "Y"));
  schemas.push_back(elementwiseGrad("TanhGrad", "dX = dY * (1 - Y * Y).", "Y"));
  schemas.push_back(softmaxGrad("SoftmaxGrad", "dX = Y * (dY - sum(dY * Y, axis))."));
  schemas.push_back(softmaxGrad("LogSoftmaxGrad", "dX = dY - exp(Y) * sum(dY, axis)."));
  schemas.push_back(layerNormGrad());
  schemas.push_back(batchNormGrad());
  schemas.push_back(convGrad());
  schemas.push_back(maxPoolGrad());
  schemas.push_back(averagePoolGrad());
  schemas.push_back(gatherGrad());
  schemas.push_back(sliceGrad());
  schemas.push_back(dropoutGrad());
  schemas.push_back(softmaxCrossEntropyGrad());
  schemas.push_back(nllGrad());
}

} // namespace ampc
