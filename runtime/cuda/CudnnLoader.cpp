//===- CudnnLoader.cpp - cuDNN, opened at run time -------------------------===//
//
// Convolutions run through cuDNN when it can be opened (conv/CudnnConv.h),
// and through im2col + cuBLAS otherwise. amp-run links no CUDA library by
// name (docs/cuda.md), and no build may assume cuDNN's headers (the GPU
// machine's cuDNN is PyTorch's nvidia-cudnn wheel), so the library is opened
// here with dlopen and its entry points bound to the declarations of
// CudnnApi.h. libcudnn.so.9 is cuDNN 9's front library: the legacy
// convolution API is exported there and it opens its sub-libraries
// (libcudnn_cnn.so.9, ...) from its own folder.
//
// AMPC_CUDNN_PATH, when set, is the only place looked at: a user who names
// a library wants that one, and a silent fall-through to another cuDNN (or
// to im2col) would hide the mistake.
//
//===----------------------------------------------------------------------===//

#include "CudnnLoader.h"

#include "ampc/rt/DynamicLibrary.h"

#include <cstdlib>
#include <sys/stat.h>

namespace ampc::rt::cuda {

namespace {

constexpr const char *kSoname = "libcudnn.so.9";

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

} // namespace

std::vector<std::string> cudnnCandidates() {
  if (const char *p = std::getenv("AMPC_CUDNN_PATH"); p && *p) {
    std::string path = p;
    if (isDirectory(path))
      path += std::string(path.back() == '/' ? "" : "/") + kSoname;
    return {path};
  }
  // The loader's own search, then the toolkit (DynamicLibrary.h), with no
  // variable of its own (AMPC_CUDNN_PATH was handled above).
  return cudaLibraryCandidates("", kSoname);
}

bool openCudnn(const std::vector<std::string> &names, cudnn::Api &api, std::string &why) {
  api = cudnn::Api{};
  void *lib = nullptr;
  std::string tried;
  for (const std::string &name : names) {
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib)
      break;
    const char *e = dlerror();
    tried += (tried.empty() ? "" : "; ") + name + (e ? std::string(": ") + e : std::string());
  }
  if (!lib) {
    why = "cuDNN not found (tried " + tried +
          "; set AMPC_CUDNN_PATH to libcudnn.so.9 or to the folder holding it, such as "
          "PyTorch's site-packages/nvidia/cudnn/lib)";
    return false;
  }
  const char *w = kSoname;
  why.clear();
  bool ok = bindSymbol(lib, w, "cudnnCreate", api.create, why) &&
            bindSymbol(lib, w, "cudnnDestroy", api.destroy, why) &&
            bindSymbol(lib, w, "cudnnSetStream", api.setStream, why) &&
            bindSymbol(lib, w, "cudnnGetErrorString", api.getErrorString, why) &&
            bindSymbol(lib, w, "cudnnGetVersion", api.getVersion, why) &&
            bindSymbol(lib, w, "cudnnCreateTensorDescriptor", api.createTensor, why) &&
            bindSymbol(lib, w, "cudnnSetTensorNdDescriptor", api.setTensorNd, why) &&
            bindSymbol(lib, w, "cudnnDestroyTensorDescriptor", api.destroyTensor, why) &&
            bindSymbol(lib, w, "cudnnCreateFilterDescriptor", api.createFilter, why) &&
            bindSymbol(lib, w, "cudnnSetFilterNdDescriptor", api.setFilterNd, why) &&
            bindSymbol(lib, w, "cudnnDestroyFilterDescriptor", api.destroyFilter, why) &&
            bindSymbol(lib, w, "cudnnCreateConvolutionDescriptor", api.createConv, why) &&
            bindSymbol(lib, w, "cudnnSetConvolutionNdDescriptor", api.setConvNd, why) &&
            bindSymbol(lib, w, "cudnnSetConvolutionGroupCount", api.setConvGroupCount, why) &&
            bindSymbol(lib, w, "cudnnSetConvolutionMathType", api.setConvMathType, why) &&
            bindSymbol(lib, w, "cudnnDestroyConvolutionDescriptor", api.destroyConv, why) &&
            bindSymbol(lib, w, "cudnnGetConvolutionForwardAlgorithm_v7", api.getFwdAlgorithm,
                       why) &&
            bindSymbol(lib, w, "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                       api.getBwdDataAlgorithm, why) &&
            bindSymbol(lib, w, "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                       api.getBwdFilterAlgorithm, why) &&
            bindSymbol(lib, w, "cudnnGetConvolutionForwardWorkspaceSize", api.fwdWorkspaceSize,
                       why) &&
            bindSymbol(lib, w, "cudnnGetConvolutionBackwardDataWorkspaceSize",
                       api.bwdDataWorkspaceSize, why) &&
            bindSymbol(lib, w, "cudnnGetConvolutionBackwardFilterWorkspaceSize",
                       api.bwdFilterWorkspaceSize, why) &&
            bindSymbol(lib, w, "cudnnConvolutionForward", api.forward, why) &&
            bindSymbol(lib, w, "cudnnConvolutionBackwardData", api.backwardData, why) &&
            bindSymbol(lib, w, "cudnnConvolutionBackwardFilter", api.backwardFilter, why);
  if (!ok) {
    api = cudnn::Api{};
    return false;
  }
  // cuDNN 9's ABI: the declarations of CudnnApi.h hold for 9.x only.
  size_t version = api.getVersion();
  if (version < 90000 || version >= 100000) {
    why = "cuDNN " + std::to_string(version) + " opened, but amp-run uses cuDNN 9's API";
    api = cudnn::Api{};
    return false;
  }
  return true;
}

const cudnn::Api *loadCudnn(std::string &why) {
  static std::string error;
  static const cudnn::Api *loaded = [] {
    static cudnn::Api api;
    return openCudnn(cudnnCandidates(), api, error) ? &api : nullptr;
  }();
  why = error;
  return loaded;
}

} // namespace ampc::rt::cuda
