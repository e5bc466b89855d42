//===- CublasLt.h - GEMMs through cuBLASLt, opened at run time --*- C++ -*-===//
//
// cuBLASLt (libcublasLt.so.13) is opened with dlopen like cuBLAS
// (CublasLoader.cpp) and called through a table of entry points, not under
// its own names: libcublas itself calls into libcublasLt, and definitions of
// the same names in amp-run could be taken for the library's. The CUDA
// backend plans every GEMM record once at load (descriptors, layouts and a
// heuristic algorithm, gemm/GemmPlan.h's LtGemm) and enqueues
// cublasLtMatmul calls; GEMMs it cannot plan stay on
// cublasGemmStridedBatchedEx. Built with CUDA only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "gemm/GemmPlan.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace ampc::rt::cuda {

/// The cuBLASLt entry points the backend calls.
struct CublasLtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) descCreate = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) descSet = nullptr;
  decltype(&cublasLtMatmulDescDestroy) descDestroy = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layoutSet = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) prefCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) prefSet = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) prefDestroy = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

/// Where cuBLASLt is looked for: only AMPC_CUBLASLT_PATH when it is set (so
/// a path that does not exist turns cuBLASLt off), otherwise the loader's
/// own search, then the CUDA toolkit's folders.
std::vector<std::string> cublasLtCandidates();

/// Opens the first of `names` that opens and binds every entry point; false
/// with one line saying what was tried or which symbol is missing.
bool openCublasLt(const std::vector<std::string> &names, CublasLtApi &api, std::string &why);

/// "CUBLAS_STATUS_NOT_INITIALIZED", ...
const char *cublasStatusString(cublasStatus_t s);

/// The CUDA data type of a GEMM operand's element type (FusedElem).
cudaDataType_t gemmDataType(uint8_t elem);

/// The cuBLASLt GEMMs of one backend: a handle, and for every planned call
/// its descriptors and the algorithm chosen once.
class LtGemms {
public:
  LtGemms() = default;
  LtGemms(const LtGemms &) = delete;
  LtGemms &operator=(const LtGemms &) = delete;
  ~LtGemms();

  /// Opens the library (cublasLtCandidates); false with why.
  bool open(std::string &why);
  /// open(), then creates the handle; false with why, and then plan() plans
  /// nothing.
  bool init(std::string &why);
  /// Makes, then releases, what plan() hands the heuristic for `g`: the
  /// matmul descriptor, the layouts and the preference with every attribute
  /// set (no handle, so no GPU, needed); false naming the first call that
  /// fails or why describeLtGemm refused `g`. Needs open().
  bool describe(const GemmCall &g, std::string &why);
  /// The workspace every planned call may use (one block: the calls run one
  /// after another on one stream). Set before planning.
  void setWorkspace(void *p, size_t bytes) {
    ws_ = p;
    wsBytes_ = bytes;
  }
  /// An index for GemmCall::lt, or -1: describeLtGemm refused the call, or
  /// cuBLASLt has no algorithm for it within the workspace.
  int32_t plan(const GemmCall &g);
  /// Enqueues planned call `g` (g.lt >= 0) on `stream`.
  cublasStatus_t run(const GemmCall &g, cudaStream_t stream) const;
  int planned() const { return static_cast<int>(plans_.size()); }

private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t wsBytes = 0;
  };
  /// The descriptors and preference of `g` (describe, plan); on failure
  /// nothing is left to release.
  bool build(const GemmCall &g, Plan &p, cublasLtMatmulPreference_t &pref, std::string &why);
  void release(Plan &p) const;

  CublasLtApi api_;
  cublasLtHandle_t handle_ = nullptr;
  std::vector<Plan> plans_;
  void *ws_ = nullptr;
  size_t wsBytes_ = 0;
};

} // namespace ampc::rt::cuda
