//===- KernelLaunch.h - Launching DeviceKernels.h kernels -------*- C++ -*-===//
//
// The one entry point from host code into Kernels.cu.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "DeviceKernels.h"

#include <cuda_runtime.h>

namespace ampc::rt::cuda {

/// Enqueues kernel `kind` over thread indices [0, threads) on `stream`;
/// `args` points to its Args struct. Returns the launch's error status.
cudaError_t launchKernel(KernelKind kind, const void *args, int64_t threads, cudaStream_t stream);

/// Enqueues a row launch (RowKernels.h, args.lanes > 0) over `rows` rows;
/// instantiated by the family's .cu (RowLaunch.cuh).
template <typename A> cudaError_t launchRows(const A &args, int64_t rows, cudaStream_t stream);

} // namespace ampc::rt::cuda
