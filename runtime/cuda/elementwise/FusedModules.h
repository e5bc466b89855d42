//===- elementwise/FusedModules.h - Compiled fused kernels on the GPU -*- C++ -*-===//
//
// The CUDA side of compiled fused kernels (FusedCodegen.h, FusedCompiler.h):
// a cubin loaded as a CUDA library, its kernel launched. Only with CUDA.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "FusedKernel.h"

#include <cuda_runtime.h>

#include <string>

namespace ampc::rt::cuda {

/// Loads `cubin` and finds its `ampc_fused_kernel`; `kernel` is the
/// cudaKernel_t. False with the CUDA error.
bool loadFusedKernel(const std::string &cubin, void *&kernel, std::string &error);

/// Enqueues compiled kernel `kernel` over thread indices [0, threads).
cudaError_t launchFusedKernel(void *kernel, const FusedKernelArgs &args, int64_t threads,
                              cudaStream_t stream);

} // namespace ampc::rt::cuda
