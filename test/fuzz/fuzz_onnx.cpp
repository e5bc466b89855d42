//===- fuzz_onnx.cpp - amp-opt on binary ONNX models ----------------------===//
//
// Parses the input as a ModelProto, imports it (a dynamic batch bound to 2)
// and, when that succeeds, compiles the training step and lowers it.
//
//===----------------------------------------------------------------------===//

#include "FuzzUtil.h"

#include "ampc/ONNX/ProtoConversion.h"
#include "ampc/rt/PlanFile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool quiet = (ampc::rt::silenceProtobufLog(), true);
  (void)quiet;
  if (size > ampc::fuzz::kMaxInput)
    return 0;
  onnx::ModelProto model;
  if (!model.ParseFromArray(data, static_cast<int>(size)))
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
