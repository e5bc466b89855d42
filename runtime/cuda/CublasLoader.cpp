//===- CublasLoader.cpp - cuBLAS, opened at run time -----------------------===//
//
// amp-run links no CUDA library by name: the CUDA runtime is linked
// statically (it opens the driver, libcuda.so.1, itself) and cuBLAS is opened
// here with dlopen the first time the CUDA backend needs it. So one amp-run
// binary starts on any machine, with or without a GPU or a CUDA installation,
// and trains on the CPU where there is none; and the GPU kit's binaries carry
// no 600 MB cuBLAS (the GPU machine has its own: the CUDA toolkit's, or the
// nvidia-cublas wheel that PyTorch brings).
//
// The few cuBLAS entry points the backend calls are defined below under
// their own names, forwarding to the library's; cublas_v2.h's declarations
// are what CudaBackend.cpp compiles against, unchanged.
//
//===----------------------------------------------------------------------===//

#include "CublasLoader.h"

#include "ampc/rt/DynamicLibrary.h"

#include <cublas_v2.h>

#include <string>

namespace ampc::rt::cuda {

namespace {

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) setStream = nullptr;
  decltype(&cublasSetWorkspace_v2) setWorkspace = nullptr;
  // Spelled out: C++ sees an overload of this name (the 64-bit variant).
  using GemmFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void *, const void *, cudaDataType, int,
                                    long long int, const void *, cudaDataType, int, long long int,
                                    const void *, void *, cudaDataType, int, long long int, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  GemmFn gemmStridedBatchedEx = nullptr;
  std::string error; // why it did not load; empty once loaded
};

CublasApi loadApi() {
  CublasApi api;
  std::string tried;
  void *lib = openFirstLibrary(cudaLibraryCandidates("AMPC_CUBLAS_PATH", "libcublas.so.13"), tried);
  if (!lib) {
    api.error = "cuBLAS not found (tried " + tried +
                "; set LD_LIBRARY_PATH or AMPC_CUBLAS_PATH to libcublas.so.13)";
    return api;
  }
  const char *what = "libcublas";
  if (!bindSymbol(lib, what, "cublasCreate_v2", api.create, api.error) ||
      !bindSymbol(lib, what, "cublasDestroy_v2", api.destroy, api.error) ||
      !bindSymbol(lib, what, "cublasSetStream_v2", api.setStream, api.error) ||
      !bindSymbol(lib, what, "cublasSetWorkspace_v2", api.setWorkspace, api.error) ||
      !bindSymbol(lib, what, "cublasGemmStridedBatchedEx", api.gemmStridedBatchedEx, api.error))
    return api;
  api.error.clear();
  return api;
}

const CublasApi &api() {
  static const CublasApi loaded = loadApi();
  return loaded;
}

} // namespace

bool loadCublas(std::string &why) {
  why = api().error;
  return why.empty();
}

} // namespace ampc::rt::cuda

// The entry points CudaBackend.cpp calls. Each returns NOT_INITIALIZED when
// the library did not load (the backend calls loadCublas first and reports
// why, so this is only a guard).
using ampc::rt::cuda::api;

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
  return api().create ? api().create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  return api().destroy ? api().destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return api().setStream ? api().setStream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                                  size_t bytes) {
  return api().setWorkspace ? api().setWorkspace(handle, workspace, bytes)
                            : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA,
    const void *B, cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  if (!api().gemmStridedBatchedEx)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  return api().gemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA,
                                    B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC,
                                    batchCount, computeType, algo);
}

} // extern "C"
