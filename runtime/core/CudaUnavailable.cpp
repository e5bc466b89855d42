//===- CudaUnavailable.cpp - The CUDA entry points of a CPU-only build -----===//
//
// Compiled when the CUDA backend is not built (no nvcc, or
// -DAMPC_ENABLE_CUDA=OFF): amp-run --backend=cuda then says why.
//
//===----------------------------------------------------------------------===//

#include "ampc/rt/Backend.h"

namespace ampc::rt {

bool cudaAvailable(std::string &why) {
  why = "this ampc was built without the CUDA backend";
  return false;
}

std::unique_ptr<Backend> createCudaBackend(const CudaOptions &, std::string &error) {
  error = "no CUDA device available (this ampc was built without the CUDA backend)";
  return nullptr;
}

} // namespace ampc::rt
