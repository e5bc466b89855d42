//===- CudnnRunner.cpp - The CUDA backend's cuDNN convolutions -------------===//
//
// At plan load, each distinct convolution (direction, type, shapes, pads,
// strides, dilations, groups) gets its tensor, filter and convolution
// descriptors and an algorithm from cuDNN's heuristics for this device
// (cudnnGet*Algorithm_v7, ranked), filtered by chooseCudnnAlgorithm:
// deterministic, the type's math (no TF32 for fp32), at most 256 MiB of
// workspace. The lowering reserves that workspace in the step's share of
// the backend's one workspace block (the largest step decides its size), so
// nothing is allocated per step, and running a step only enqueues the calls
// (CUDA graphs capture them like any launch).
//
//===----------------------------------------------------------------------===//

#include "CudnnRunner.h"

#include "CudnnLoader.h"

#include <algorithm>

namespace ampc::rt::cuda {

CudnnRunner::~CudnnRunner() {
  for (Plan &p : plans_)
    destroy(p);
  if (handle_)
    api_->destroy(handle_);
}

bool CudnnRunner::init(void *stream, std::string &why) {
  api_ = loadCudnn(why);
  if (!api_)
    return false;
  cudnn::Handle h = nullptr;
  if (cudnn::Status s = api_->create(&h); s != cudnn::kStatusSuccess) {
    why = std::string("cudnnCreate: ") + api_->getErrorString(s);
    return false;
  }
  if (cudnn::Status s = api_->setStream(h, stream); s != cudnn::kStatusSuccess) {
    why = std::string("cudnnSetStream: ") + api_->getErrorString(s);
    api_->destroy(h);
    return false;
  }
  handle_ = h;
  why.clear();
  return true;
}

void CudnnRunner::destroy(Plan &p) {
  if (p.x)
    api_->destroyTensor(p.x);
  if (p.y)
    api_->destroyTensor(p.y);
  if (p.w)
    api_->destroyFilter(p.w);
  if (p.conv)
    api_->destroyConv(p.conv);
  p = Plan{};
}

void CudnnRunner::note(const std::string &why) {
  if (std::find(notes_.begin(), notes_.end(), why) == notes_.end())
    notes_.push_back(why);
}

bool CudnnRunner::makePlan(const CudnnConvCall &c, Plan &p, std::string &why) {
  const cudnn::Api &a = *api_;
  CudnnConvDescriptor d = describeCudnnConv(c);
  auto ok = [&](cudnn::Status s, const char *what) {
    if (s != cudnn::kStatusSuccess)
      why = std::string(what) + ": " + a.getErrorString(s);
    return s == cudnn::kStatusSuccess;
  };
  if (!ok(a.createTensor(&p.x), "cudnnCreateTensorDescriptor") ||
      !ok(a.createTensor(&p.y), "cudnnCreateTensorDescriptor") ||
      !ok(a.createFilter(&p.w), "cudnnCreateFilterDescriptor") ||
      !ok(a.createConv(&p.conv), "cudnnCreateConvolutionDescriptor") ||
      !ok(a.setTensorNd(p.x, d.dataType, d.nbDims, d.xDims, d.xStrides),
          "cudnnSetTensorNdDescriptor") ||
      !ok(a.setTensorNd(p.y, d.dataType, d.nbDims, d.yDims, d.yStrides),
          "cudnnSetTensorNdDescriptor") ||
      !ok(a.setFilterNd(p.w, d.dataType, cudnn::kTensorNchw, d.nbDims, d.wDims),
          "cudnnSetFilterNdDescriptor") ||
      !ok(a.setConvNd(p.conv, d.nbDims - 2, d.pads, d.strides, d.dilations,
                      cudnn::kCrossCorrelation, d.computeType),
          "cudnnSetConvolutionNdDescriptor") ||
      !ok(a.setConvGroupCount(p.conv, d.groups), "cudnnSetConvolutionGroupCount") ||
      !ok(a.setConvMathType(p.conv, d.mathType), "cudnnSetConvolutionMathType"))
    return false;
  std::vector<cudnn::AlgoPerf> perf(16);
  int returned = 0;
  cudnn::Status s = cudnn::kStatusSuccess;
  switch (c.dir) {
  case CudnnConvCall::Forward:
    s = a.getFwdAlgorithm(handle_, p.x, p.w, p.conv, p.y, 16, &returned, perf.data());
    break;
  case CudnnConvCall::BackwardData:
    s = a.getBwdDataAlgorithm(handle_, p.w, p.y, p.conv, p.x, 16, &returned, perf.data());
    break;
  case CudnnConvCall::BackwardFilter:
    s = a.getBwdFilterAlgorithm(handle_, p.x, p.y, p.conv, p.w, 16, &returned, perf.data());
    break;
  }
  if (!ok(s, "cudnnGetConvolution*Algorithm_v7"))
    return false;
  perf.resize(static_cast<size_t>(std::clamp(returned, 0, 16)));
  int i = chooseCudnnAlgorithm(perf, c.type);
  if (i < 0) {
    why = "cuDNN offers no deterministic algorithm keeping the type's math within " +
          std::to_string(kCudnnWorkspaceLimit >> 20) + " MiB of workspace";
    return false;
  }
  p.algo = perf[i].algo;
  p.mathType = perf[i].mathType;
  if (!ok(a.setConvMathType(p.conv, p.mathType), "cudnnSetConvolutionMathType"))
    return false;
  switch (c.dir) {
  case CudnnConvCall::Forward:
    s = a.fwdWorkspaceSize(handle_, p.x, p.w, p.conv, p.y, p.algo, &p.workspaceBytes);
    break;
  case CudnnConvCall::BackwardData:
    s = a.bwdDataWorkspaceSize(handle_, p.w, p.y, p.conv, p.x, p.algo, &p.workspaceBytes);
    break;
  case CudnnConvCall::BackwardFilter:
    s = a.bwdFilterWorkspaceSize(handle_, p.x, p.y, p.conv, p.w, p.algo, &p.workspaceBytes);
    break;
  }
  return ok(s, "cudnnGetConvolution*WorkspaceSize");
}

bool CudnnRunner::plan(CudnnConvCall &c) {
  if (!handle_)
    return false;
  std::string key = cudnnConvKey(c);
  auto it = byKey_.find(key);
  if (it == byKey_.end()) {
    Plan p;
    std::string why;
    int index = -1;
    if (makePlan(c, p, why)) {
      index = static_cast<int>(plans_.size());
      plans_.push_back(p);
    } else {
      destroy(p);
      note(describeCudnnCall(c) + ": " + why);
    }
    it = byKey_.emplace(key, index).first;
  }
  if (it->second < 0)
    return false;
  const Plan &p = plans_[it->second];
  c.plan = it->second;
  c.algo = p.algo;
  c.mathType = p.mathType;
  c.workspaceBytes = p.workspaceBytes;
  return true;
}

bool CudnnRunner::run(const CudnnConvCall &c, std::string &error) const {
  if (!handle_ || c.plan < 0 || c.plan >= static_cast<int>(plans_.size())) {
    error = "a cuDNN convolution without a plan";
    return false;
  }
  const Plan &p = plans_[c.plan];
  const cudnn::Api &a = *api_;
  // Scaling factors are floats for every compute type used here (fp32).
  float alpha = c.alpha, beta = c.beta;
  cudnn::Status s = cudnn::kStatusSuccess;
  const char *what = "";
  switch (c.dir) {
  case CudnnConvCall::Forward:
    what = "cudnnConvolutionForward";
    s = a.forward(handle_, &alpha, p.x, c.x, p.w, c.w, p.conv, p.algo, c.workspace,
                  c.workspaceBytes, &beta, p.y, c.y);
    break;
  case CudnnConvCall::BackwardData:
    what = "cudnnConvolutionBackwardData";
    s = a.backwardData(handle_, &alpha, p.w, c.w, p.y, c.y, p.conv, p.algo, c.workspace,
                       c.workspaceBytes, &beta, p.x, c.x);
    break;
  case CudnnConvCall::BackwardFilter:
    what = "cudnnConvolutionBackwardFilter";
    s = a.backwardFilter(handle_, &alpha, p.x, c.x, p.y, c.y, p.conv, p.algo, c.workspace,
                         c.workspaceBytes, &beta, p.w, c.w);
    break;
  }
  if (s != cudnn::kStatusSuccess) {
    error = std::string(what) + ": " + a.getErrorString(s);
    return false;
  }
  return true;
}

} // namespace ampc::rt::cuda
