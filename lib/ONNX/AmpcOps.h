//===- AmpcOps.h - Declarations of ampc's operator schemas ------*- C++ -*-===//
//
// The `ampc` domain's schemas are declared by area, each in its own file:
// gradient operators (GradientOps.cpp, used by autodiff) and training-step
// operators (TrainingOps.cpp, used by loss scaling and the optimizers).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "onnx/defs/schema.h"

#include <vector>

namespace ampc {

inline constexpr const char *kAmpcDomainName = "ampc";

/// The schemas of every operator of the `ampc` domain (version 1).
std::vector<onnx::OpSchema> ampcOpSchemas();

void appendGradientSchemas(std::vector<onnx::OpSchema> &schemas);
void appendTrainingSchemas(std::vector<onnx::OpSchema> &schemas);

/// A schema of the ampc domain, version 1, with a doc string.
onnx::OpSchema makeAmpcSchema(const char *name, const char *doc, const char *file, int line);
#define AMPC_SCHEMA(name, doc) ::ampc::makeAmpcSchema(name, doc, __FILE__, __LINE__)

/// Result `out` has the element type and shape of input `in`.
void propagateTypeAndShape(onnx::InferenceContext &ctx, size_t in, size_t out);

} // namespace ampc
