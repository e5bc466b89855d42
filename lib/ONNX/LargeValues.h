//===- LargeValues.h - Initializer values kept out of the ModelProto ------===//
//
// A model's weights are most of its bytes. ONNX's checker, shape inference,
// version converter and ampc's partial evaluator copy the ModelProto they
// work on, and protobuf cannot hold more than 2 GiB in one message: the
// importer takes large floating-point values out of the proto first (moving
// raw data, reading external data straight into tensors) and the checks see
// their names, types and dims only.
//
//===----------------------------------------------------------------------===//

#pragma once

#include "ampc/IR/Tensor.h"

#include "onnx/onnx_pb.h"

#include "llvm/Support/Error.h"

#include <string>
#include <unordered_map>

namespace ampc {

/// Values taken out of a model, by initializer name.
using TakenValues = std::unordered_map<std::string, Tensor>;

/// Floating-point initializers of at least this many bytes are taken.
constexpr int64_t kTakenValueBytes = 64 * 1024;

/// Takes the values of large floating-point initializers out of `model`
/// (their TensorProto keeps name, type and dims) and inlines the other
/// initializers that have external data. `baseDir` locates external data;
/// errors name the initializer.
llvm::Error takeLargeValues(onnx::ModelProto &model, const std::string &baseDir,
                            TakenValues &taken);

/// Whether an initializer carries no value (one that was taken, or a plan's
/// snapshot of a trained parameter).
bool hasNoValue(const onnx::TensorProto &t);

/// onnx::checker::check_model, with initializers that have no value standing
/// in as one element of their type for the call (the checker demands a value;
/// what it checks beyond that is their type). Throws what the checker throws.
void checkModelWithStandIns(onnx::ModelProto &model);

} // namespace ampc
