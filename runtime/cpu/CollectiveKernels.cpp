//===- CollectiveKernels.cpp - Communication steps of data parallelism -----===//
//
// ampc.AllReduce (passes/DataParallel.cpp): one bucket of fp32 gradients,
// averaged across the data-parallel ranks. The gradients sit at their own
// arena offsets; they are packed into one contiguous buffer (one message per
// bucket, as DDP's buckets are), reduced, and unpacked into the outputs. In
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
  std::vector<TensorArg> ins = ctx.inputs, outs = ctx.outputs;
  Collective *coll = ctx.collective;
  std::string where = ctx.step.name();
  auto bucket = std::make_shared<std::vector<float>>(coll && coll->size() > 1 ? total : 0);
  return std::make_unique<LambdaKernel>([ins, outs, coll, bucket, where] {
    if (bucket->empty()) {
      for (size_t i = 0; i < ins.size(); ++i)
        if (ins[i].data != outs[i].data)
          std::memcpy(outs[i].data, ins[i].data, static_cast<size_t>(ins[i].numel) * 4);
      return;
    }
    size_t at = 0;
    for (const TensorArg &in : ins) {
      std::memcpy(bucket->data() + at, in.data, static_cast<size_t>(in.numel) * 4);
      at += static_cast<size_t>(in.numel);
    }
    std::string error;
    if (!coll->allReduceMean(bucket->data(), bucket->size(), error)) {
      // A kernel cannot return an error, and a rank that cannot average its
      // gradients must not apply an update the others do not: stop, with
      // the reason, and let the launcher end the other ranks.
      std::fprintf(stderr, "amp-run: error: %s: %s\n", where.c_str(), error.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
    at = 0;
    for (const TensorArg &out : outs) {
      std::memcpy(out.data, bucket->data() + at, static_cast<size_t>(out.numel) * 4);
      at += static_cast<size_t>(out.numel);
    }
  });
}

} // namespace

void registerCollectiveKernels() { registerKernel("ampc.AllReduce", createAllReduce); }

} // namespace ampc::rt::cpu
