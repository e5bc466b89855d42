//===- fuzz_onnx.cpp - amp-opt on binary ONNX models ----------------------===//
//
// Parses the input as a ModelProto, imports it (a dynamic batch bound to 2)
// and, when that succeeds, compiles the training step and lowers it. The
// importer's own reader (parseModelBytes, which cuts large raw_data out of
// what protobuf parses) must give protobuf's answer and message.
//
//===----------------------------------------------------------------------===//

#include "FuzzUtil.h"

#include "ampc/ONNX/ModelFile.h"
#include "ampc/ONNX/ProtoConversion.h"
#include "ampc/rt/PlanFile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool quiet = (ampc::rt::silenceProtobufLog(), true);
  (void)quiet;
  if (size > ampc::fuzz::kMaxInput)
    return 0;
  onnx::ModelProto model, read;
  bool parsed = model.ParseFromArray(data, static_cast<int>(size));
  // Every raw_data of 8 bytes or more is cut: the fuzzer's inputs are small.
  bool readOk = ampc::parseModelBytes(std::string_view(reinterpret_cast<const char *>(data), size),
                                      read, /*cutFrom=*/8);
  if (parsed != readOk || (parsed && read.SerializeAsString() != model.SerializeAsString()))
    __builtin_trap();
  if (!parsed)
    return 0;
  ampc::ImportOptions opts;
  opts.batch = 2;
  auto g = ampc::importModelProto(model, "fuzz.onnx", "/nonexistent", opts);
  if (!g) {
    llvm::consumeError(g.takeError());
    return 0;
  }
  ampc::fuzz::compileForTraining(**g, ampc::fuzz::precisionFor(size));
  return 0;
}
