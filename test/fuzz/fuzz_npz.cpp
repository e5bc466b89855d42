//===- fuzz_npz.cpp - .npz parsing (--data, checkpoints) ------------------===//

#include "FuzzUtil.h"

#include "ampc/rt/Npy.h"

#include <map>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > ampc::fuzz::kMaxInput)
    return 0;
  std::map<std::string, ampc::rt::HostArray> arrays;
  std::string error;
  ampc::rt::parseNpz(std::string(reinterpret_cast<const char *>(data), size), "fuzz.npz", arrays,
                     error);
  return 0;
}
