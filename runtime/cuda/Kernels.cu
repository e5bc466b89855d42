//===- Kernels.cu - The CUDA backend's kernels -----------------------------===//
//
// One grid-stride __global__ function per Args type of DeviceKernels.h; each
// thread calls Args::run for its indices. Row launches (RowKernels.h) go to
// the row kernels their family's .cu instantiates. Arguments are passed by value as
// __grid_constant__ parameters, so threads read them from the parameter
// space without copying them.
//
//===----------------------------------------------------------------------===//

#include "KernelLaunch.h"

namespace ampc::rt::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

template <typename A>
__global__ void __launch_bounds__(kBlock) gridKernel(const __grid_constant__ A args, int64_t n) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    A::run(args, i);
}

template <typename A> cudaError_t launch(const void *args, int64_t n, cudaStream_t stream) {
  if constexpr (kIsRowKernel<A>) {
    const A &a = *static_cast<const A *>(args);
    if (a.lanes)
      return launchRows<A>(a, n, stream);
  }
  int64_t blocks = (n + kBlock - 1) / kBlock;
  if (blocks > kMaxBlocks)
    blocks = kMaxBlocks;
  gridKernel<A><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      *static_cast<const A *>(args), n);
  return cudaGetLastError();
}

} // namespace

cudaError_t launchKernel(KernelKind kind, const void *args, int64_t threads, cudaStream_t stream) {
  if (threads <= 0)
    return cudaSuccess;
  switch (kind) {
#define AMPC_LAUNCH(NAME, ARGS)                                                                    \
  case KernelKind::NAME:                                                                           \
    return launch<ARGS>(args, threads, stream);
    AMPC_CUDA_KERNELS(AMPC_LAUNCH)
#undef AMPC_LAUNCH
  }
  return cudaErrorInvalidValue;
}

} // namespace ampc::rt::cuda
