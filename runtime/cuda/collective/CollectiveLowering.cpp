//===- collective/CollectiveLowering.cpp - Data-parallel averaging ---------===//
//
// Lowers ampc.AllReduce (passes/DataParallel.cpp, docs/distributed.md): the
// bucket's fp32 gradients are copied into one contiguous block of the step's
// workspace, an AllReduce launch averages the block across the ranks (the
// backend calls NCCL on its stream, so a CUDA graph captures it too; the
// emulator and a one-rank run do nothing), and the averages are copied out.
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
  allReduce(bucket, static_cast<size_t>(total));
  at = 0;
  for (const Operand &y : outs_) {
    memcpy(y.p, slot(at), static_cast<size_t>(y.numel) * sizeof(float));
    at += y.numel;
  }
  return true;
}

} // namespace ampc::rt::cuda
