//===- elementwise/FusedModules.cpp - Compiled fused kernels on the GPU ---===//
//
// Loading NVRTC's cubins with the CUDA runtime's library API
// (cudaLibraryLoadData / cudaLibraryGetKernel, CUDA 12+, in the static
// cudart) and launching them with cudaLaunchKernel, which takes the
// cudaKernel_t as its function. Built only with CUDA (CudaBackend.cpp uses
// it); the libraries stay loaded for the life of the process, as modules of
// the backend's own kernels do.
//
//===----------------------------------------------------------------------===//

#include "FusedModules.h"

namespace ampc::rt::cuda {

namespace {
constexpr int kBlock = 256; // the kernel's __launch_bounds__ (FusedKernel.h)
constexpr int64_t kMaxBlocks = int64_t(1) << 20;
} // namespace

bool loadFusedKernel(const std::string &cubin, void *&kernel, std::string &error) {
  cudaLibrary_t lib = nullptr;
  cudaError_t e =
      cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e != cudaSuccess) {
    error = std::string("cudaLibraryLoadData: ") + cudaGetErrorString(e);
    (void)cudaGetLastError();
    return false;
  }
  cudaKernel_t k = nullptr;
  e = cudaLibraryGetKernel(&k, lib, "ampc_fused_kernel");
  if (e != cudaSuccess) {
    error = std::string("cudaLibraryGetKernel: ") + cudaGetErrorString(e);
    (void)cudaGetLastError();
    cudaLibraryUnload(lib);
    return false;
  }
  kernel = reinterpret_cast<void *>(k);
  return true;
}

cudaError_t launchFusedKernel(void *kernel, const FusedKernelArgs &args, int64_t threads,
                              cudaStream_t stream) {
  if (threads <= 0)
    return cudaSuccess;
  int64_t blocks = (threads + kBlock - 1) / kBlock;
  if (blocks > kMaxBlocks)
    blocks = kMaxBlocks;
  long long n = threads;
  void *params[] = {const_cast<FusedKernelArgs *>(&args), &n};
  return cudaLaunchKernel(static_cast<const void *>(kernel), dim3(static_cast<unsigned>(blocks)),
                          dim3(kBlock), params, 0, stream);
}

} // namespace ampc::rt::cuda
