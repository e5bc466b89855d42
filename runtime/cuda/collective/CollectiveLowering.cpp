//===- collective/CollectiveLowering.cpp - Data-parallel averaging ---------===//
//
// Lowers ampc.AllReduce (passes/DataParallel.cpp, docs/distributed.md): the
// bucket's fp32 gradients are copied into one contiguous block of the step's
// workspace; an AllReduce launch copies the block to the bucket's own buffer
// and starts averaging it across the ranks (NCCL on the backend's
// communication stream; nothing more in one process or the emulator); an
// AllReduceWait launch, which lowerProgram moves to just before the first
// step reading an average, joins the streams and copies the averages back
// into the workspace, and the copies after it unpack them. A CUDA graph
// captures the fork and the join like any other launches.
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"

namespace ampc::rt::cuda {

bool StepLowering::lowerAllReduce(std::string &error) {
  if (in_.empty() || in_.size() != outs_.size()) {
    error = "AllReduce takes as many gradients as it returns";
    return false;
  }
  int64_t total = 0;
  for (size_t i = 0; i < in_.size(); ++i) {
    const Operand &x = in_[i], &y = outs_[i];
    if (!x.present() || !y.present() || x.type != FusedElem::F32 || y.type != FusedElem::F32 ||
        x.numel != y.numel) {
      error = "AllReduce averages fp32 gradients into fp32 results of the same size";
      return false;
    }
    total += x.numel;
  }
  float *bucket = ws_.alloc<float>(total);
  // Integer arithmetic: the sizing pass runs with a null workspace.
  auto slot = [bucket](int64_t at) {
    return reinterpret_cast<float *>(reinterpret_cast<uintptr_t>(bucket) +
                                     static_cast<uintptr_t>(at) * sizeof(float));
  };
  int64_t at = 0;
  for (const Operand &x : in_) {
    memcpy(slot(at), x.p, static_cast<size_t>(x.numel) * sizeof(float));
    at += x.numel;
  }
  allReduce(Launch::AllReduce, bucket, static_cast<size_t>(total));
  // lowerProgram moves the wait and the unpacking copies after it to just
  // before the first step that reads an average.
  allReduce(Launch::AllReduceWait, bucket, static_cast<size_t>(total));
  at = 0;
  for (const Operand &y : outs_) {
    memcpy(y.p, slot(at), static_cast<size_t>(y.numel) * sizeof(float));
    at += y.numel;
  }
  return true;
}

} // namespace ampc::rt::cuda
