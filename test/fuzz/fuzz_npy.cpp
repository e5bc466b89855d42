//===- fuzz_npy.cpp - .npy parsing (--feed, dumps) ------------------------===//

#include "FuzzUtil.h"

#include "ampc/rt/Npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > ampc::fuzz::kMaxInput)
    return 0;
  ampc::rt::HostArray a;
  std::string error;
  ampc::rt::parseNpy(std::string(reinterpret_cast<const char *>(data), size), "fuzz.npy", a,
                     error);
  return 0;
}
