//===- TrainingKernels.cpp - CPU kernels of the training-step operators ----===//

#include "Kernel.h"

#include <atomic>

namespace ampc::rt::cpu {

namespace {

/// ampc.AllFinite: one pass over every gradient; each thread scans its range
/// and the flags are combined, so the result does not depend on scheduling.
std::unique_ptr<Kernel> createAllFinite(const StepContext &ctx, std::string &error) {
  if (ctx.outputs.size() != 1 || ctx.outputs[0].type != plan::BOOL) {
    error = "AllFinite produces one bool";
    return nullptr;
  }
  for (const TensorArg &t : ctx.inputs)
    if (t.type != plan::F32 && t.type != plan::F16 && t.type != plan::BF16 && t.type != plan::F64) {
      error = "AllFinite checks float tensors";
      return nullptr;
    }
  std::vector<TensorArg> inputs = ctx.inputs;
  TensorArg out = ctx.outputs[0];
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([inputs, out, &pool] {
    std::atomic<bool> finite{true};
    for (const TensorArg &t : inputs) {
      pool.parallelFor(t.numel, 1 << 14, [&](int64_t begin, int64_t end, int) {
        bool ok = true;
        switch (t.type) {
        case plan::F32: {
          // Exponent bits all ones means inf or NaN.
          const uint32_t *p = static_cast<const uint32_t *>(t.data);
          for (int64_t i = begin; i < end; ++i)
            ok &= (p[i] & 0x7F800000u) != 0x7F800000u;
          break;
        }
        case plan::F16:
        case plan::BF16: {
          const uint16_t *p = static_cast<const uint16_t *>(t.data);
          uint16_t mask = t.type == plan::F16 ? 0x7C00 : 0x7F80;
          for (int64_t i = begin; i < end; ++i)
            ok &= (p[i] & mask) != mask;
          break;
        }
        default: {
          const double *p = static_cast<const double *>(t.data);
          for (int64_t i = begin; i < end; ++i)
            ok &= std::isfinite(p[i]);
        }
        }
        if (!ok)
          finite = false;
      });
    }
    *static_cast<uint8_t *>(out.data) = finite ? 1 : 0;
  });
}

} // namespace

void registerTrainingKernels() { registerKernel("ampc.AllFinite", createAllFinite); }

} // namespace ampc::rt::cpu
