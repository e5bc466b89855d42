//===- Backend.h - Where a plan runs ----------------------------*- C++ -*-===//
//
// A backend owns the memory of a loaded plan (one arena, the state, the
// constants) and executes its programs. The CPU backend (oneDNN for GEMM and
// convolution) and the CUDA backend (cuBLAS, CUDA graphs) implement it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan.pb.h"

#include <memory>
#include <string>

namespace ampc::rt {

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  /// Allocates the arena, state and constants once and prepares a kernel for
  /// every step of every program. Errors name the step (op and node).
  virtual bool load(const plan::Plan &p, std::string &error) = 0;

  /// Runs program `index` once; at the end its state updates take effect.
  virtual bool run(int index, std::string &error) = 0;

  /// Copies host bytes into a tensor / a tensor's bytes to the host (views,
  /// state and arena tensors alike). Sizes must match the tensor exactly.
  virtual bool write(int tensor, const void *src, size_t bytes, std::string &error) = 0;
  virtual bool read(int tensor, void *dst, size_t bytes, std::string &error) = 0;

  /// Host memory in which the next value of program input `tensor` (`bytes`
  /// long) may be assembled in place, saving write()'s copy of it: the CUDA
  /// backend's pinned staging buffer, once its previous copy is done. Null
  /// with `error` empty when the backend has none (then write() is the way),
  /// null with `error` set on failure. commitInput() then sends it.
  virtual void *inputBuffer(int tensor, size_t bytes, std::string &error) {
    (void)tensor;
    (void)bytes;
    error.clear();
    return nullptr;
  }
  virtual bool commitInput(int tensor, size_t bytes, std::string &error) {
    (void)tensor;
    (void)bytes;
    error = "this backend has no input buffers";
    return false;
  }

  /// Waits for queued work (asynchronous backends).
  virtual bool synchronize(std::string &error) { return true; }
};

class Collective;

struct CpuOptions {
  /// Worker threads; 0 uses every core. Results are the same run after run
  /// for a given thread count.
  int threads = 0;
  /// The data-parallel ranks' communicator (ampc.AllReduce steps); nullptr
  /// in one process. Owned by the caller, who keeps it alive.
  Collective *collective = nullptr;
};
/// nullptr in a runtime-only build (AMPC_RUNTIME_ONLY), which has no CPU backend.
std::unique_ptr<Backend> createCpuBackend(const CpuOptions &opts);

struct CudaOptions {
  bool cudaGraph = true;
  /// Convolutions through cuDNN when it loads (else, or when false, or with
  /// AMPC_CUDNN=0 in the environment: im2col + cuBLAS).
  bool cudnn = true;
  double memoryFraction = 0.9;
  uint64_t memoryLimit = 0; ///< bytes; 0 = no limit beyond the fraction
  std::string profilePath;  ///< Chrome trace of one step when not empty
  /// The GPU ranks' collective (NCCL) for ampc.AllReduce; nullptr in one
  /// process. Owned by the caller, who keeps it alive.
  Collective *collective = nullptr;
};
/// True when the runtime was built with CUDA and a device is present; `why`
/// says what is missing otherwise.
bool cudaAvailable(std::string &why);
/// nullptr (with `error`) when CUDA is unavailable.
std::unique_ptr<Backend> createCudaBackend(const CudaOptions &opts, std::string &error);

} // namespace ampc::rt
