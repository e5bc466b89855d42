//===- FixtureUtil.h - Loading torch fixtures in tests ----------*- C++ -*-===//
//
// Shared by the tests that compare ampc with PyTorch: loads a fixture's model,
// batch and saved arrays, and compares tensors with the error measure the
// issues use (largest absolute difference relative to the reference tensor's
// largest magnitude).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"
#include "ampc/rt/Npy.h"

#include <map>
#include <memory>
#include <string>

namespace ampc::test {

/// test/fixtures/<name>/...
std::string fixturePath(const std::string &name, const std::string &rel = "");

/// The fixture's model.onnx, imported.
std::unique_ptr<Graph> loadFixtureModel(const std::string &name);

/// A .npy file as an IR tensor (bfloat16 is not used by fixtures).
Tensor loadNpy(const std::string &path);
/// An IR tensor as the runtime's host array (for Session::feed), same bytes.
rt::HostArray toHostArray(const Tensor &t);
/// "fc1.weight" -> "fc1.weight" with characters outside [A-Za-z0-9._-] -> '_'.
std::string safeFileName(const std::string &name);
/// The fixture batch: {"input": ..., "target": ...}.
std::map<std::string, Tensor> loadFixtureInputs(const std::string &name,
                                                const std::string &sub = "inputs");
/// Arrays saved under test/fixtures/<name>/<dir>/, keyed by ONNX initializer
/// name (given the names, since file names are sanitized).
std::map<std::string, Tensor> loadFixtureArrays(const std::string &name, const std::string &dir,
                                                const std::vector<std::string> &keys);

/// max |a - b| / max |b| (0 when both are all zero); infinity on shape mismatch.
double relativeError(const Tensor &a, const Tensor &b);

/// The names in the fixture's meta.json: parameters, then BatchNormalization
/// running statistics.
std::vector<std::string> fixtureKeys(const std::string &name, const std::string &dir = "");

/// Per parameter, the elements whose torch gradient vanishes analytically and
/// is rounding noise (below 1e-6 of the model's largest gradient): a
/// convolution bias before BatchNormalization, the key bias of attention.
/// AdamW turns such noise into +-lr steps whose signs no two implementations
/// share (docs/training.md), so comparisons leave these elements out.
std::map<std::string, std::vector<bool>> noiseGradients(const std::string &name);

/// relativeError over the elements not marked in `skip` (empty: all).
double maskedRelativeError(const Tensor &a, const Tensor &b, const std::vector<bool> &skip);

} // namespace ampc::test
