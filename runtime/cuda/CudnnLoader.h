//===- CudnnLoader.h - cuDNN, opened at run time ----------------*- C++ -*-===//
//
// See CudnnLoader.cpp. Plain C++ (no CUDA or cuDNN header), built in every
// configuration, so the tests can check the search and the binding anywhere.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CudnnApi.h"

#include <string>
#include <vector>

namespace ampc::rt::cuda {

/// Where cuDNN is looked for: only $AMPC_CUDNN_PATH when it is set (a file,
/// or a folder holding libcudnn.so.9, such as PyTorch's
/// site-packages/nvidia/cudnn/lib); otherwise the loader's own search
/// (LD_LIBRARY_PATH, the cache) then the CUDA toolkit's folders.
std::vector<std::string> cudnnCandidates();

/// Opens the first of `names` that opens and binds every entry point of
/// cudnn::Api; false with the reason (what was tried, dlerror's words).
bool openCudnn(const std::vector<std::string> &names, cudnn::Api &api, std::string &why);

/// cudnnCandidates() opened once per process; nullptr with the reason.
const cudnn::Api *loadCudnn(std::string &why);

} // namespace ampc::rt::cuda
