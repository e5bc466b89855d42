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
}

} // namespace ampc
