//===- DeviceKernels.h - The CUDA backend's kernels, one thread at a time -*- C++ -*-===//
//
// Every CUDA kernel of the backend is `Args::run(args, i)` called for each
// thread index i in [0, n): runtime/cuda/Kernels.cu wraps each in a
// grid-stride __global__ function, and runtime/cuda/HostEmulator.cpp calls the
// very same functions in a loop on the CPU, which is how the unit tests check
// these kernels without a GPU (test/unit/CudaEmulationTest.cpp).
//
// So that a loop is a faithful model of the GPU, threads never cooperate: no
// shared memory, no atomics, no ordering between threads of one launch. Long
// reductions run in two launches (per-chunk partials, then one thread per
// result combining them in a fixed order), which also makes every result
// bitwise reproducible. The exception is row launches (RowKernels.h: a warp
// or a block per row, for Softmax, LayerNorm, reductions over the last axes
// and cross-entropy), whose cooperation has a fixed order that the emulator
// reproduces lane by lane. Element math is fp32 (fp64 for fused fp64 programs),
// storage is converted with ElementMath.h / FusedEval.h exactly as the CPU
// backend does; each kernel's formulas follow its CPU counterpart in
// runtime/cpu/*Kernels.cpp.
//
// Args are passed to kernels by value (kernel parameter space, 4 KiB), so
// they hold fixed-size arrays and raw device pointers only.
//
// The kernels live by op family, next to their lowering
// (runtime/cuda/<family>/<Family>Kernels.h); this header includes them all
// and keeps the one list of kernels the launcher and the emulator switch on.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "KernelCommon.h"
#include "conv/ConvKernels.h"
#include "datamovement/DataMovementKernels.h"
#include "elementwise/ElementwiseKernels.h"
#include "losses/LossKernels.h"
#include "norms/NormKernels.h"
#include "optimizer/OptimizerKernels.h"
#include "reductions/ReduceKernels.h"
#include "softmax/SoftmaxKernels.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// The kernel list
//===----------------------------------------------------------------------===//

#define AMPC_CUDA_KERNELS(X)                                                                       \
  X(Fused, FusedArgs)                                                                              \
  X(Copy, CopyArgs)                                                                                \
  X(Gather, GatherArgs)                                                                            \
  X(GatherElements, GatherElementsArgs)                                                            \
  X(Pad, PadArgs)                                                                                  \
  X(GatherGrad, GatherGradArgs)                                                                    \
  X(Reduce, ReduceArgs)                                                                            \
  X(Softmax, SoftmaxArgs)                                                                          \
  X(LayerNorm, LayerNormArgs)                                                                      \
  X(BatchNorm, BatchNormArgs)                                                                      \
  X(Loss, LossArgs)                                                                                \
  X(Pool, PoolArgs)                                                                                \
  X(Conv, ConvArgs)                                                                                \
  X(AllFinite, AllFiniteArgs)                                                                      \
  X(Dropout, DropoutArgs)                                                                          \
  X(AdamW, AdamWArgs)

enum class KernelKind : uint8_t {
#define AMPC_KERNEL_ENUM(NAME, ARGS) NAME,
  AMPC_CUDA_KERNELS(AMPC_KERNEL_ENUM)
#undef AMPC_KERNEL_ENUM
};

} // namespace ampc::rt::cuda
