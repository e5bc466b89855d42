//===- Lowering.h - Plan steps as CUDA launches -----------------*- C++ -*-===//
//
// The CUDA backend turns every step of a program, once at load time, into a
// short list of launches against fixed device addresses: kernels of
// DeviceKernels.h (with their arguments by value), GEMMs in cuBLAS's terms,
// and device memsets / copies. The CUDA backend enqueues that list on its
// stream (and captures it as a CUDA graph); the host emulator executes the
// same list on the CPU. This file is plain C++ and builds without CUDA.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "DeviceKernels.h"
#include "conv/CudnnConv.h"

#include "ampc/rt/Backend.h"

#include "plan.pb.h"

#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace ampc::rt::cuda {

/// What a GEMM adds after the product, before its one rounding (cuBLASLt's
/// epilogues): Bias adds bias[i] to row i of every column of C (a row-major
/// result's row vector: Gemm's C of shape [N]); Relu, last, x < 0 ? 0 : x.
enum class GemmEpilogue : uint8_t { None, Bias, Relu, BiasRelu };

inline bool hasBias(GemmEpilogue e) {
  return e == GemmEpilogue::Bias || e == GemmEpilogue::BiasRelu;
}
inline bool hasRelu(GemmEpilogue e) {
  return e == GemmEpilogue::Relu || e == GemmEpilogue::BiasRelu;
}
struct CompiledFusedKernel; // elementwise/FusedCodegen.h

/// One GEMM with cuBLAS semantics (column-major, batched with strides):
///   C[b] = act(alpha * op(A[b]) * op(B[b]) + beta * C[b] + bias),  b < batch,
/// op(A) m x k, op(B) k x n, C m x n; A and B of type abType (F32, F16 or
/// BF16), C of cType (abType or F32); fp32 accumulation (CUBLAS_COMPUTE_32F),
/// the epilogue in fp32, one rounding to cType. beta = 0 never reads C.
/// Epilogues run through cuBLASLt; where it cannot take a call,
/// gemm/GemmPlan.h's resolveGemms rewrites the call without one.
struct GemmCall {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  const void *A = nullptr, *B = nullptr;
  void *C = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0, strideA = 0, strideB = 0, strideC = 0;
  uint8_t abType = 0, cType = 0;
  float alpha = 1, beta = 0;
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void *bias = nullptr; ///< Bias, BiasRelu: m packed elements of cType, every batch
  /// Set by the CUDA backend at load: its cuBLASLt plan for this call (an
  /// index), or -1 for cublasGemmStridedBatchedEx.
  int32_t lt = -1;
};

/// Row-major Y[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * Y, where A is
/// stored [M,K] (or [K,M] when transA) with leading dimension lda, and so on:
/// the column-major call computing Y^T = op(B)^T op(A)^T.
GemmCall rowMajorGemm(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, bool transA,
                      const void *B, int64_t ldb, bool transB, void *Y, int64_t ldy);

/// Largest argument block of any kernel.
inline constexpr size_t kMaxArgBytes = [] {
  size_t m = 0;
#define AMPC_KERNEL_SIZE(NAME, ARGS) m = m < sizeof(ARGS) ? sizeof(ARGS) : m;
  AMPC_CUDA_KERNELS(AMPC_KERNEL_SIZE)
#undef AMPC_KERNEL_SIZE
  return m;
}();
static_assert(kMaxArgBytes <= 4000, "kernel arguments must fit CUDA's 4 KiB parameter space");

struct Launch {
  /// AllReduce: the fp32 bucket packed at `dst` (`bytes` long, in the
  /// step's workspace) is copied to its own buffer `side` and averaged there
  /// across the data-parallel ranks (NCCL on a communication stream);
  /// AllReduceWait, moved to just before the first step that reads an
  /// average, waits for it and copies `side` back to `dst`, whence the
  /// averages are unpacked. Between the two the backward pass goes on.
  /// CudnnConv: one cuDNN convolution call (`conv`, conv/CudnnConv.h).
  /// CompiledFused: a fused program's own kernel (elementwise/FusedCodegen.h),
  /// `compiled`, with FusedKernelArgs; it replaces a Fused kernel launch at
  /// plan load when the program compiled.
  enum Kind : uint8_t {
    Kernel,
    Gemm,
    Memset,
    Memcpy,
    AllReduce,
    AllReduceWait,
    CudnnConv,
    CompiledFused
  };
  Kind kind = Kernel;
  KernelKind kernel = KernelKind::Fused;
  int64_t threads = 0; ///< Kernel: thread indices [0, threads)
  alignas(16) unsigned char args[kMaxArgBytes] = {};
  GemmCall gemm;
  CudnnConvCall conv;
  void *dst = nullptr; ///< Memset (to 0) / Memcpy
  const void *src = nullptr;
  size_t bytes = 0;
  int step = -1; ///< the step it belongs to (-1: state updates at the end)
  void *side = nullptr; ///< AllReduce(Wait): the bucket's own buffer (set by the backend)
  int bucket = -1;      ///< AllReduce(Wait): the pair's number within the program
  const CompiledFusedKernel *compiled = nullptr; ///< CompiledFused: the kernel

  template <typename A> static Launch kernelOf(KernelKind k, const A &a, int64_t threads) {
    static_assert(std::is_trivially_copyable_v<A> && sizeof(A) <= kMaxArgBytes);
    Launch l;
    l.kind = Kernel;
    l.kernel = k;
    l.threads = threads;
    std::memcpy(l.args, &a, sizeof(A));
    return l;
  }
  template <typename A> const A &as() const { return *reinterpret_cast<const A *>(args); }
};

/// Where the plan's tensors live: a device address per tensor id (nullptr
/// for VIRTUAL tensors), and the shared workspace of the steps (they run one
/// after another on one stream, so one workspace serves all of them).
struct DeviceMemory {
  std::function<void *(int)> tensor;
  uint8_t *workspace = nullptr;
  /// Convolutions through cuDNN when set: plans a call that cudnnConvFits
  /// (chooses its algorithm, sets algo, mathType, plan and the
  /// workspaceBytes it needs, which the lowering reserves in the step's
  /// workspace); false leaves that step to im2col + cuBLAS. Unset: im2col.
  std::function<bool(CudnnConvCall &)> cudnn;
};

/// Byte layout of a plan's device memory, as the CPU backend lays out host
/// memory: the arena (offsets from the plan), state tensors one after
/// another in one block, constants in another, 256-byte aligned; views share
/// their base tensor's bytes.
struct MemoryLayout {
  size_t arenaBytes = 0, stateBytes = 0, constantBytes = 0;
  std::vector<size_t> offset; ///< within the tensor's block (bases: not views)
  static MemoryLayout of(const plan::Plan &p);
  /// The address of tensor `id` given the three blocks (nullptr: VIRTUAL).
  void *address(const plan::Plan &p, int id, uint8_t *arena, uint8_t *state,
                uint8_t *constants) const;
};

/// Gives every AllReduce / AllReduceWait pair of `launches` its own buffer
/// of the bucket's size, from `alloc` (nullptr: out of memory, false).
bool assignAllReduceBuffers(std::vector<Launch> &launches,
                            const std::function<void *(size_t)> &alloc);

/// Lowers program `index` of `p` into launches. `workspaceBytes` is raised
/// to what the program's steps need (lower once with any workspace address to
/// size it, then again with the real one). Errors name the step.
bool lowerProgram(const plan::Plan &p, int index, const DeviceMemory &mem,
                  std::vector<Launch> &out, size_t &workspaceBytes, std::string &error);

/// Ops the CUDA backend can run, sorted.
std::vector<std::string> cudaKernelOps();

/// Device memory check of --memory-fraction / --memory-limit: false (with a
/// one-line message naming the bytes needed and available) when `needed`
/// exceeds `fraction` of `deviceTotal` or `limit` (0: no limit).
bool checkDeviceMemory(uint64_t needed, const std::string &breakdown, uint64_t deviceTotal,
                       double fraction, uint64_t limit, std::string &error);

/// Runs launches on the host (DeviceKernels.h bodies in loops, GEMMs as
/// reference loops): the CUDA backend's work without a GPU.
void emulateLaunch(const Launch &l);

/// A Backend that executes the CUDA backend's launch lists on the host, with
/// the same memory layout: what the GPU computes, up to the order of GEMM
/// sums and the last bits of transcendental functions. For tests.
struct EmulatorOptions {
  /// Lower convolutions as a backend with cuDNN does (else im2col).
  bool cudnn = true;
  /// Fused launches become CompiledFused launches, as on a GPU where NVRTC
  /// compiled every program (run by runCompiledFusedOnHost).
  bool compiledFused = false;
};
std::unique_ptr<Backend> createCudaEmulatorBackend(const EmulatorOptions &opts = {});

/// Readable name of a launch ("fused", "gemm 64x128x256 x4", "memcpy"), for
/// profiles.
std::string describeLaunch(const Launch &l);

/// Threads per row of a row launch (RowKernels.h; its `threads` then counts
/// rows), or 0.
int rowLanesOf(const Launch &l);

} // namespace ampc::rt::cuda
