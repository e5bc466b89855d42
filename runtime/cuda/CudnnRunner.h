//===- CudnnRunner.h - The CUDA backend's cuDNN convolutions ----*- C++ -*-===//
//
// See CudnnRunner.cpp. Plain C++ (a stream is a void *), so it builds in
// every configuration; only a GPU can run it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CudnnApi.h"
#include "conv/CudnnConv.h"

#include <map>
#include <string>
#include <vector>

namespace ampc::rt::cuda {

class CudnnRunner {
public:
  CudnnRunner() = default;
  CudnnRunner(const CudnnRunner &) = delete;
  CudnnRunner &operator=(const CudnnRunner &) = delete;
  ~CudnnRunner();

  /// Opens cuDNN and creates its handle on `stream` (a cudaStream_t); false
  /// with the reason when cuDNN is missing or cannot start (the backend then
  /// lowers convolutions to im2col).
  bool init(void *stream, std::string &why);
  bool enabled() const { return handle_ != nullptr; }

  /// DeviceMemory::cudnn: descriptors and the algorithm of a call, chosen
  /// once per distinct call (cudnnConvKey) with cuDNN's heuristics on this
  /// device; sets c.algo, c.mathType, c.workspaceBytes and c.plan. False
  /// when no algorithm qualifies (chooseCudnnAlgorithm) or a cuDNN call
  /// fails; the reason is kept for notes().
  bool plan(CudnnConvCall &c);

  /// Enqueues a planned call on the stream; false with cuDNN's message.
  bool run(const CudnnConvCall &c, std::string &error) const;

  /// Why calls were left to im2col, one line per distinct reason.
  const std::vector<std::string> &notes() const { return notes_; }

private:
  struct Plan {
    cudnn::TensorDesc x = nullptr, y = nullptr;
    cudnn::FilterDesc w = nullptr;
    cudnn::ConvDesc conv = nullptr;
    int algo = -1, mathType = 0;
    size_t workspaceBytes = 0;
  };
  bool makePlan(const CudnnConvCall &c, Plan &p, std::string &why);
  void destroy(Plan &p);
  void note(const std::string &why);

  const cudnn::Api *api_ = nullptr;
  cudnn::Handle handle_ = nullptr;
  std::vector<Plan> plans_;
  std::map<std::string, int> byKey_; ///< key -> plans_ index, or -1: im2col
  std::vector<std::string> notes_;
};

} // namespace ampc::rt::cuda
