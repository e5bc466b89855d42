//===- TrainingOps.cpp - Schemas of ampc's training-step operators ---------===//
//
// Operators of loss scaling and the optimizers (passes/LossScale.cpp,
// passes/Optimizer.cpp). Everything else in the training step is standard ONNX.
//
//===----------------------------------------------------------------------===//

#include "AmpcOps.h"

#include "onnx/defs/shape_inference.h"

namespace ampc {

void appendTrainingSchemas(std::vector<onnx::OpSchema> &schemas) {
  // One check of every gradient for inf/NaN, like ONNX Runtime's IsAllFinite
  // and the found_inf flag of PyTorch's GradScaler.
  schemas.push_back(
      AMPC_SCHEMA("AllFinite",
                  "True when every element of every input is finite (neither inf nor NaN).")
          .Input(0, "X", "Tensors to check", "T", onnx::OpSchema::Variadic,
                 /*is_homogeneous=*/false)
          .Output(0, "all_finite", "A bool scalar", "tensor(bool)")
          .TypeConstraint("T",
                          {"tensor(float)", "tensor(float16)", "tensor(bfloat16)",
                           "tensor(double)"},
                          "Float tensors")
          .TypeAndShapeInferenceFunction([](onnx::InferenceContext &ctx) {
            ctx.getOutputType(0)->mutable_tensor_type()->set_elem_type(
                onnx::TensorProto::BOOL);
            ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape();
          }));

  // Data parallelism (passes/DataParallel.cpp): one bucket of gradients
  // averaged across the ranks, as DistributedDataParallel's buckets are.
  schemas.push_back(
      AMPC_SCHEMA("AllReduce",
                  "Result i is the mean of input i over the data-parallel ranks (fp32; in one "
                  "process, the input).")
          .Input(0, "X", "fp32 gradients of one bucket", "tensor(float)",
                 onnx::OpSchema::Variadic)
          .Output(0, "Y", "Their averages, in order", "tensor(float)", onnx::OpSchema::Variadic)
          .Attr("bucket", "The bucket's index, in the reverse order of the parameters",
                onnx::AttributeProto::INT, static_cast<int64_t>(0))
          .TypeAndShapeInferenceFunction([](onnx::InferenceContext &ctx) {
            for (size_t i = 0; i < ctx.getNumOutputs() && i < ctx.getNumInputs(); ++i)
              onnx::propagateElemTypeFromInputToOutput(ctx, i, i),
                  onnx::propagateShapeFromInputToOutput(ctx, i, i);
          }));

  // torch.optim.AdamW's update of one fp32 master parameter and its moments
  // in one pass (as torch's fused AdamW and ONNX Runtime's AdamWOptimizer):
  // one node per parameter instead of some twenty elementwise ones.
  schemas.push_back(
      AMPC_SCHEMA("AdamW",
                  "AdamW step t of one parameter (fp32 math, torch.optim.AdamW's formulas; "
                  "runtime/include/ampc/rt/OptimizerMath.h). When found_inf is true the "
                  "outputs are the inputs, bit for bit.")
          .Input(0, "param", "The fp32 master parameter", "T")
          .Input(1, "grad", "Its gradient, in any float type", "G")
          .Input(2, "exp_avg", "First moment", "T")
          .Input(3, "exp_avg_sq", "Second moment", "T")
          .Input(4, "lr", "Learning rate (scalar)", "T")
          .Input(5, "step", "Step count t, from 1 (scalar)", "T")
          .Input(6, "found_inf", "Skip the update (scalar)", "tensor(bool)",
                 onnx::OpSchema::Optional)
          .Output(0, "param_out", "Updated parameter", "T")
          .Output(1, "exp_avg_out", "Updated first moment", "T")
          .Output(2, "exp_avg_sq_out", "Updated second moment", "T")
          .Output(3, "param_copy", "The updated parameter rounded to fp16 or bf16 (cast-cache)",
                  "C", onnx::OpSchema::Optional)
          .Attr("beta1", "beta1", onnx::AttributeProto::FLOAT, 0.9f)
          .Attr("beta2", "beta2", onnx::AttributeProto::FLOAT, 0.999f)
          .Attr("one_minus_beta1", "1 - beta1 rounded once from double (default: from beta1)",
                onnx::AttributeProto::FLOAT, onnx::OPTIONAL_VALUE)
          .Attr("one_minus_beta2", "1 - beta2 rounded once from double (default: from beta2)",
                onnx::AttributeProto::FLOAT, onnx::OPTIONAL_VALUE)
          .Attr("epsilon", "eps", onnx::AttributeProto::FLOAT, 1e-8f)
          .Attr("weight_decay", "Decoupled weight decay", onnx::AttributeProto::FLOAT, 0.0f)
          .TypeConstraint("T", {"tensor(float)"}, "fp32")
          .TypeConstraint("G", {"tensor(float)", "tensor(float16)", "tensor(bfloat16)"},
                          "Gradient types")
          .TypeConstraint("C", {"tensor(float16)", "tensor(bfloat16)"}, "Copy types")
          .TypeAndShapeInferenceFunction([](onnx::InferenceContext &ctx) {
            propagateTypeAndShape(ctx, 0, 0);
            propagateTypeAndShape(ctx, 2, 1);
            propagateTypeAndShape(ctx, 3, 2);
            // The copy's type (fp16 or bf16) is not implied by the inputs:
            // it is the recorded one.
          }));
}

} // namespace ampc
