//===- TrainingKernels.cpp - CPU kernels of the training-step operators ----===//

#include "Kernel.h"
#include "KernelHelpers.h"

#include "ampc/rt/OptimizerMath.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

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

/// The arrays one AdamW update reads and writes over [begin, end).
struct AdamWArrays {
  const void *grad;
  float *param, *expAvg, *expAvgSq;
  uint16_t *copy; ///< the parameter's fp16/bf16 copy, or null
};

/// How far ahead (elements) the AdamW loop prefetches its streams.
constexpr int64_t kAdamWPrefetch = 512;

/// The AdamW loop over [begin, end) for one gradient storage type and one
/// copy type (none, fp16, bf16); only the conversions differ, so each
/// instantiation is a plain loop the compiler vectorizes.
template <typename G, typename Load, typename Store>
inline __attribute__((always_inline)) void
adamwRange(math::AdamWConstants c, math::AdamWStepScalars s, const G *g, Load load, float *p,
           float *m, float *v, uint16_t *copy, Store store, int64_t begin, int64_t end) {
  // The constants are copies: read through a reference, they could alias
  // the arrays written, and the compiler would reload them every element
  // and not vectorize.
  // The state comes from memory (last touched a step ago): each block of 64
  // elements asks for the cache lines kAdamWPrefetch elements ahead in every
  // stream, which the hardware prefetchers alone fetch too late (2 threads,
  // 12 tensors of 590k bf16-trained parameters, caches flushed: 46-47 GB/s
  // without, 53-55 with 512 elements ahead, 52-53 with 256 or 1024).
  constexpr int64_t kBlock = 64, kLine = 64;
  for (int64_t b = begin; b < end; b += kBlock) {
    if (b + kAdamWPrefetch < end) {
      int64_t ahead = b + kAdamWPrefetch;
      for (int64_t k = 0; k < kBlock; k += kLine / 4) {
        __builtin_prefetch(p + ahead + k, 1);
        __builtin_prefetch(m + ahead + k, 1);
        __builtin_prefetch(v + ahead + k, 1);
      }
      for (int64_t k = 0; k < kBlock; k += kLine / static_cast<int64_t>(sizeof(G)))
        __builtin_prefetch(g + ahead + k);
    }
    int64_t e = std::min(b + kBlock, end);
    for (int64_t i = b; i < e; ++i) {
      math::adamwUpdate(c, s, load(g[i]), p[i], m[i], v[i]);
      if constexpr (!std::is_same_v<Store, std::nullptr_t>)
        copy[i] = store(p[i]);
    }
  }
}

/// Every (gradient type, copy type) loop of one instruction set.
inline __attribute__((always_inline)) void
adamwChunk(const math::AdamWConstants &c, const math::AdamWStepScalars &s, plan::ElemType gradType,
           plan::ElemType copyType, const AdamWArrays &a, int64_t begin, int64_t end) {
  auto run = [&](auto *g, auto load) __attribute__((always_inline)) {
    if (!a.copy)
      adamwRange(c, s, g, load, a.param, a.expAvg, a.expAvgSq, a.copy, nullptr, begin, end);
    else if (copyType == plan::F16)
      adamwRange(c, s, g, load, a.param, a.expAvg, a.expAvgSq, a.copy, math::floatToHalf, begin,
                 end);
    else
      adamwRange(c, s, g, load, a.param, a.expAvg, a.expAvgSq, a.copy, math::floatToBFloat16, begin,
                 end);
  };
  switch (gradType) {
  case plan::F16:
    return run(static_cast<const uint16_t *>(a.grad), math::halfToFloat);
  case plan::BF16:
    return run(static_cast<const uint16_t *>(a.grad), math::bfloat16ToFloat);
  default:
    return run(static_cast<const float *>(a.grad), [](float x) { return x; });
  }
}

bool isLowPrecision(plan::ElemType t) { return t == plan::F16 || t == plan::BF16; }

/// Checks ampc.AdamW's operands; empty when they are what the kernel reads.
std::string checkAdamWOperands(const StepContext &ctx) {
  if (ctx.inputs.size() < 6 || ctx.outputs.size() < 3 || ctx.outputs.size() > 4)
    return "AdamW takes param, grad, exp_avg, exp_avg_sq, lr, step[, found_inf] and produces 3 "
           "or 4 results";
  for (unsigned i = 0; i < 6; ++i)
    if (!ctx.has(i))
      return "AdamW input " + std::to_string(i) + " is missing";
  int64_t n = ctx.inputs[0].numel;
  for (unsigned i : {0u, 2u, 3u, 4u, 5u})
    if (ctx.inputs[i].type != plan::F32)
      return "AdamW's parameter, moments, lr and step are fp32";
  const TensorArg &g = ctx.inputs[1];
  if (g.type != plan::F32 && !isLowPrecision(g.type))
    return "AdamW's gradient is fp32, fp16 or bf16";
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    const TensorArg &o = ctx.outputs[i];
    bool typeOk = i < 3 ? o.type == plan::F32 : isLowPrecision(o.type);
    if (!o.data || !typeOk || o.numel != n)
      return "AdamW's results are fp32 tensors of the parameter's size (and its fp16/bf16 copy)";
  }
  if (g.numel != n || ctx.inputs[2].numel != n || ctx.inputs[3].numel != n ||
      ctx.inputs[4].numel != 1 || ctx.inputs[5].numel != 1 ||
      (ctx.has(6) && (ctx.inputs[6].type != plan::BOOL || ctx.inputs[6].numel != 1)))
    return "AdamW's operands: param, grad and moments of one size, scalar lr, step and found_inf";
  return "";
}

/// ampc.AdamW: param, moments and their results fp32 (the results usually
/// alias the inputs: the lowering updates state in place), the gradient any
/// float type, and optionally the updated parameter's fp16/bf16 copy.
std::unique_ptr<Kernel> createAdamW(const StepContext &ctx, std::string &error) {
  error = checkAdamWOperands(ctx);
  if (!error.empty())
    return nullptr;
  double beta1 = ctx.attrFloat("beta1", 0.9), beta2 = ctx.attrFloat("beta2", 0.999);
  math::AdamWConstants c = math::adamwConstants(
      beta1, ctx.attrFloat("one_minus_beta1", 1 - beta1), beta2,
      ctx.attrFloat("one_minus_beta2", 1 - beta2), ctx.attrFloat("epsilon", 1e-8),
      ctx.attrFloat("weight_decay", 0.0));
  std::vector<TensorArg> in = ctx.inputs, out = ctx.outputs;
  in.resize(7);
  out.resize(4);
  int64_t n = in[0].numel;
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([c, in, out, n, &pool] {
    const float *pin = in[0].as<float>(), *min = in[2].as<float>(), *vin = in[3].as<float>();
    float *pout = out[0].as<float>(), *mout = out[1].as<float>(), *vout = out[2].as<float>();
    // When the lowering could not update in place, start from a copy.
    auto copyIfApart = [n](const float *from, float *to) {
      if (from != to)
        std::memcpy(to, from, n * sizeof(float));
    };
    copyIfApart(pin, pout);
    copyIfApart(min, mout);
    copyIfApart(vin, vout);
    const TensorArg &copy = out[3];
    if (in[6].data && *in[6].as<uint8_t>() != 0) {
      // Skipped: the copy is refreshed from the unchanged parameter.
      if (copy.data)
        for (int64_t i = 0; i < n; ++i)
          storeFloat(copy, i, pout[i]);
      return;
    }
    math::AdamWStepScalars s = math::adamwStepScalars(c, *in[4].as<float>(), *in[5].as<float>());
    AdamWArrays arrays{in[1].data, pout, mout, vout, copy.as<uint16_t>()};
    // In runForThisCpu's AVX-512 build the loops run 16 lanes wide: the
    // update reads and writes 28 bytes a parameter, and with SSE2's 4 lanes
    // it is bound by its sqrt and division rather than by memory.
    pool.parallelFor(n, 1 << 14, [&](int64_t begin, int64_t end, int) {
      runForThisCpu([&]() AMPC_ALWAYS_INLINE {
        adamwChunk(c, s, in[1].type, copy.type, arrays, begin, end);
      });
    });
  });
}

} // namespace

void registerTrainingKernels() {
  registerKernel("ampc.AllFinite", createAllFinite);
  registerKernel("ampc.AdamW", createAdamW);
}

} // namespace ampc::rt::cpu
