//===- fuzz_onnxtxt.cpp - amp-opt on ONNX text ----------------------------===//

#include "FuzzUtil.h"

#include "ampc/ONNX/Import.h"

#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > ampc::fuzz::kMaxInput)
    return 0;
  ampc::ImportOptions opts;
  opts.batch = 2;
  auto g = ampc::importModelText(std::string_view(reinterpret_cast<const char *>(data), size),
                                 "fuzz.onnxtxt", opts);
  if (!g) {
    llvm::consumeError(g.takeError());
    return 0;
  }
  ampc::fuzz::compileForTraining(**g, ampc::fuzz::precisionFor(size));
  return 0;
}
