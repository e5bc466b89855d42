//===- ModelFile.h - Reading a binary ONNX model file ---------------------===//
//
// A model's weights are most of its bytes. protobuf reads a bytes field of
// more than 50 MB by appending chunk after chunk to a growing string (GPT-2
// small's 154 MB embedding: copied three times, a 200 MB block for it); the
// reader here gives each large raw_data an allocation of its exact size,
// filled by the kernel straight from the file.
//
//===----------------------------------------------------------------------===//

#pragma once

#include "onnx/onnx_pb.h"

#include <string>
#include <string_view>

namespace ampc {

/// The raw_data fields of the main graph's initializers from this size on are
/// read into place rather than parsed.
constexpr uint64_t kReadInPlaceBytes = 64 * 1024;

/// Parses the binary model file at `path` into `model`, exactly as protobuf
/// would. False when the file cannot be read or is not a valid ModelProto.
bool parseModelFile(const std::string &path, onnx::ModelProto &model);

/// The same reader on bytes in memory, cutting raw_data fields from `cutFrom`
/// bytes on (the fuzzer compares it with protobuf's ParseFromArray, cutting
/// small fields too).
bool parseModelBytes(std::string_view bytes, onnx::ModelProto &model,
                     uint64_t cutFrom = kReadInPlaceBytes);

} // namespace ampc
