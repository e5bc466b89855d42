//===- FixturePlans.h - The fixtures' training plans, for tests -*- C++ -*-===//
//
// A fixture's training step compiled as `amp-opt --train` compiles it (the
// pass pipeline spelled out, so a test can add accumulate or data-parallel),
// shared by the CUDA backend's tests; small text models lowered as they are.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan.pb.h"

#include <string>

namespace ampc::test {

/// The --train pipeline: precision fp32, fp16, bf16, or bf16conv (bf16 with
/// Conv and pooling in bf16 too); optimizer sgd or adamw (lr 0.01); fp16
/// with dynamic loss scaling from 1024, so that no early step overflows.
std::string trainingPipeline(const std::string &precision, const std::string &optimizer,
                             int accumulate = 1, bool dataParallel = false);

/// The fixture's model through trainingPipeline, lowered to a plan whose
/// parameters are the model's initializers. False after a test failure.
bool compileTrainingPlan(const std::string &fixture, const std::string &precision,
                         const std::string &optimizer, plan::Plan &out, int accumulate = 1,
                         bool dataParallel = false);

/// An ONNX text model lowered to a plan as it is, with or without the
/// elementwise fusion (load-time fusion tests). False after a test failure.
bool planFromText(const std::string &text, bool fuseElementwise, plan::Plan &out);

} // namespace ampc::test
