//===- CollectiveKernels.cpp - Communication steps of data parallelism -----===//
//
// ampc.AllReduce (passes/DataParallel.cpp): one bucket of fp32 gradients,
// averaged across the data-parallel ranks. The gradients sit at their own
// arena offsets; run() packs them into the kernel's contiguous buffer (one
// message per bucket, as DDP's buckets are) and starts the reduction in the
// background; finish(), which the backend calls before the first step that
// reads a result, waits and unpacks into the outputs. The inputs are read
// only in run(), so the memory planner may reuse them right after the step;
// the outputs are written only in finish(), before anything reads them. In
// one process the average is the value: the kernel copies.
//
//===----------------------------------------------------------------------===//

#include "Kernel.h"

#include "ampc/rt/Collective.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ampc::rt::cpu {

namespace {

class AllReduceKernel : public Kernel {
public:
  AllReduceKernel(std::vector<TensorArg> ins, std::vector<TensorArg> outs, Collective *ranks,
                  size_t total, std::string where)
      : ins_(std::move(ins)), outs_(std::move(outs)), ranks_(ranks), bucket_(total),
        where_(std::move(where)) {}

  bool asynchronous() const override { return true; }

  void run() override {
    size_t at = 0;
    for (const TensorArg &in : ins_) {
      std::memcpy(bucket_.data() + at, in.data, bytes(in));
      at += static_cast<size_t>(in.numel);
    }
    pending_ = ranks_->startAllReduceMean(bucket_.data(), bucket_.size());
  }

  void finish() override {
    std::string error = pending_.get();
    if (!error.empty()) {
      // A kernel cannot return an error, and a rank that cannot average its
      // gradients must not apply an update the others do not: stop, with
      // the reason; the launcher ends the other ranks.
      std::fprintf(stderr, "amp-run: error: %s: %s\n", where_.c_str(), error.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
    size_t at = 0;
    for (const TensorArg &out : outs_) {
      std::memcpy(out.data, bucket_.data() + at, bytes(out));
      at += static_cast<size_t>(out.numel);
    }
  }

private:
  static size_t bytes(const TensorArg &t) { return static_cast<size_t>(t.numel) * sizeof(float); }

  std::vector<TensorArg> ins_, outs_;
  Collective *ranks_;
  std::vector<float> bucket_;
  std::string where_;
  Collective::Pending pending_;
};

std::unique_ptr<Kernel> createAllReduce(const StepContext &ctx, std::string &error) {
  if (ctx.inputs.size() != ctx.outputs.size() || ctx.inputs.empty()) {
    error = "AllReduce takes as many gradients as it returns";
    return nullptr;
  }
  size_t total = 0;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const TensorArg &in = ctx.inputs[i], &out = ctx.outputs[i];
    if (!in.data || !out.data || in.type != plan::F32 || out.type != plan::F32 ||
        in.numel != out.numel) {
      error = "AllReduce averages fp32 gradients into fp32 results of the same size";
      return nullptr;
    }
    total += static_cast<size_t>(in.numel);
  }
  if (ctx.collective && ctx.collective->size() > 1)
    return std::make_unique<AllReduceKernel>(ctx.inputs, ctx.outputs, ctx.collective, total,
                                             ctx.step.name());
  std::vector<TensorArg> ins = ctx.inputs, outs = ctx.outputs;
  return std::make_unique<LambdaKernel>([ins, outs] {
    for (size_t i = 0; i < ins.size(); ++i)
      if (ins[i].data != outs[i].data)
        std::memmove(outs[i].data, ins[i].data, static_cast<size_t>(ins[i].numel) * 4);
  });
}

} // namespace

void registerCollectiveKernels() { registerKernel("ampc.AllReduce", createAllReduce); }

} // namespace ampc::rt::cpu
