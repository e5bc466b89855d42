//===- FusedKernel.cpp - Fused elementwise steps on the CPU ----------------===//
//
// Executes a FusedProgram over blocks of elements: each block loads every
// input once (converting fp16/bf16 storage to fp32 and broadcasting), runs the
// instructions over the block as tight loops, rounds each result to its
// element type, and stores only the step's outputs. Blocks are split across
// threads by ThreadPool, so results do not depend on scheduling.
//
//===----------------------------------------------------------------------===//

#include "Kernel.h"

#include "ampc/rt/FusedEval.h"
#include "ampc/rt/FusedOps.h"

#include <limits>

namespace ampc::rt::cpu {

namespace {

constexpr int64_t kBlock = 256;

/// How an input maps output element indices to its own.
struct InputMap {
  enum Kind { Contiguous, Scalar, Strided } kind = Contiguous;
  std::vector<int64_t> strides; ///< per output dimension (0 where broadcast)
};

struct Instr {
  FusedOp op;
  int a = 0, b = 0, c = 0;
  plan::ElemType type;
  fused::FusedParams params;
};

template <typename R> void loadBlock(const TensorArg &t, const InputMap &m,
                                     const std::vector<int64_t> &outShape, int64_t begin,
                                     int64_t n, R *dst) {
  if (m.kind == InputMap::Scalar) {
    R v = static_cast<R>(t.type == plan::F64 ? static_cast<const double *>(t.data)[0]
                                             : loadFloat(t, 0));
    for (int64_t j = 0; j < n; ++j)
      dst[j] = v;
    return;
  }
  if (m.kind == InputMap::Contiguous) {
    switch (t.type) {
    case plan::F32: {
      const float *p = static_cast<const float *>(t.data) + begin;
      for (int64_t j = 0; j < n; ++j)
        dst[j] = static_cast<R>(p[j]);
      return;
    }
    case plan::F16: {
      const uint16_t *p = static_cast<const uint16_t *>(t.data) + begin;
      for (int64_t j = 0; j < n; ++j)
        dst[j] = static_cast<R>(math::halfToFloat(p[j]));
      return;
    }
    case plan::BF16: {
      const uint16_t *p = static_cast<const uint16_t *>(t.data) + begin;
      for (int64_t j = 0; j < n; ++j)
        dst[j] = static_cast<R>(math::bfloat16ToFloat(p[j]));
      return;
    }
    case plan::F64: {
      const double *p = static_cast<const double *>(t.data) + begin;
      for (int64_t j = 0; j < n; ++j)
        dst[j] = static_cast<R>(p[j]);
      return;
    }
    default:
      for (int64_t j = 0; j < n; ++j)
        dst[j] = static_cast<R>(loadFloat(t, begin + j));
      return;
    }
  }
  // Broadcast: walk the output multi-index like an odometer.
  size_t rank = outShape.size();
  std::vector<int64_t> idx(rank);
  int64_t rem = begin, src = 0;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rem % outShape[d];
    rem /= outShape[d];
    src += idx[d] * m.strides[d];
  }
  for (int64_t j = 0; j < n; ++j) {
    dst[j] = static_cast<R>(t.type == plan::F64 ? static_cast<const double *>(t.data)[src]
                                                : loadFloat(t, src));
    for (size_t d = rank; d-- > 0;) {
      src += m.strides[d];
      if (++idx[d] < outShape[d])
        break;
      src -= m.strides[d] * outShape[d];
      idx[d] = 0;
    }
  }
}

template <typename R> void storeBlock(const TensorArg &t, int64_t begin, int64_t n, const R *src) {
  switch (t.type) {
  case plan::F32: {
    float *p = static_cast<float *>(t.data) + begin;
    for (int64_t j = 0; j < n; ++j)
      p[j] = static_cast<float>(src[j]);
    return;
  }
  case plan::F16: {
    uint16_t *p = static_cast<uint16_t *>(t.data) + begin;
    for (int64_t j = 0; j < n; ++j)
      p[j] = math::floatToHalf(static_cast<float>(src[j]));
    return;
  }
  case plan::BF16: {
    uint16_t *p = static_cast<uint16_t *>(t.data) + begin;
    for (int64_t j = 0; j < n; ++j)
      p[j] = math::floatToBFloat16(static_cast<float>(src[j]));
    return;
  }
  case plan::F64: {
    double *p = static_cast<double *>(t.data) + begin;
    for (int64_t j = 0; j < n; ++j)
      p[j] = static_cast<double>(src[j]);
    return;
  }
  default:
    for (int64_t j = 0; j < n; ++j)
      storeFloat(t, begin + j, static_cast<float>(src[j]));
  }
}

/// Rounds a block to what storage of `type` holds (values stay in registers).
template <typename R> void roundBlock(plan::ElemType type, R *r, int64_t n) {
  switch (type) {
  case plan::F16:
    for (int64_t j = 0; j < n; ++j)
      r[j] = static_cast<R>(math::roundToHalf(static_cast<float>(r[j])));
    return;
  case plan::BF16:
    for (int64_t j = 0; j < n; ++j)
      r[j] = static_cast<R>(math::roundToBFloat16(static_cast<float>(r[j])));
    return;
  case plan::F32:
    if constexpr (sizeof(R) == 8)
      for (int64_t j = 0; j < n; ++j)
        r[j] = static_cast<R>(static_cast<float>(r[j]));
    return;
  case plan::BOOL:
    for (int64_t j = 0; j < n; ++j)
      r[j] = r[j] != R(0) ? R(1) : R(0);
    return;
  default:
    return;
  }
}

/// One instruction over a block: the per-element definitions are
/// fused::fusedScalar (FusedEval.h), which the CUDA fused kernel runs too.
template <typename R>
void execute(const Instr &in, R *out, const R *a, const R *b, const R *c, int64_t n) {
  const fused::FusedParams p = in.params; // a copy: cannot alias out
  switch (in.op) {
#define AMPC_CPU_FUSED_CASE(NAME)                                                                  \
  case FusedOp::NAME:                                                                              \
    for (int64_t j = 0; j < n; ++j)                                                                \
      out[j] = fused::fusedScalar<FusedOp::NAME, R>(p, a[j], b[j], c[j]);                          \
    return;
    AMPC_FUSED_OPS(AMPC_CPU_FUSED_CASE)
#undef AMPC_CPU_FUSED_CASE
  case FusedOp::Count:
    return;
  }
}

template <typename R> class FusedKernel : public Kernel {
public:
  FusedKernel(std::vector<TensorArg> inputs, std::vector<TensorArg> outputs,
              std::vector<InputMap> maps, std::vector<Instr> instrs, std::vector<int> results,
              ThreadPool &pool)
      : inputs_(std::move(inputs)), outputs_(std::move(outputs)), maps_(std::move(maps)),
        instrs_(std::move(instrs)), results_(std::move(results)), pool_(pool) {
    shape_ = outputs_.front().shape;
    numel_ = outputs_.front().numel;
    numRegs_ = inputs_.size() + instrs_.size();
    scratch_.resize(pool_.size());
  }

  void run() override {
    pool_.parallelFor(numel_, 4 * kBlock, [&](int64_t begin, int64_t end, int range) {
      std::vector<R> &regs = scratch_[range];
      regs.resize(numRegs_ * kBlock);
      for (int64_t start = begin; start < end; start += kBlock)
        block(start, std::min(kBlock, end - start), regs.data());
    });
  }

private:
  void block(int64_t start, int64_t n, R *regs) {
    auto reg = [&](int r) { return regs + static_cast<int64_t>(r) * kBlock; };
    for (size_t i = 0; i < inputs_.size(); ++i)
      loadBlock<R>(inputs_[i], maps_[i], shape_, start, n, reg(static_cast<int>(i)));
    int next = static_cast<int>(inputs_.size());
    for (const Instr &in : instrs_) {
      R *out = reg(next++);
      execute<R>(in, out, reg(in.a), reg(in.b), reg(in.c), n);
      roundBlock<R>(in.type, out, n);
    }
    for (size_t o = 0; o < outputs_.size(); ++o)
      if (outputs_[o].data)
        storeBlock<R>(outputs_[o], start, n, reg(results_[o]));
  }

  std::vector<TensorArg> inputs_, outputs_;
  std::vector<InputMap> maps_;
  std::vector<Instr> instrs_;
  std::vector<int> results_;
  ThreadPool &pool_;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  size_t numRegs_ = 0;
  std::vector<std::vector<R>> scratch_;
};

/// Broadcast map of an input of shape `in` to the output shape.
bool mapInput(const std::vector<int64_t> &in, const std::vector<int64_t> &out, InputMap &m) {
  int64_t n = 1;
  for (int64_t d : in)
    n *= d;
  if (in == out) {
    m.kind = InputMap::Contiguous;
    return true;
  }
  if (n == 1) {
    m.kind = InputMap::Scalar;
    return true;
  }
  if (in.size() > out.size())
    return false;
  m.kind = InputMap::Strided;
  m.strides.assign(out.size(), 0);
  size_t offset = out.size() - in.size();
  int64_t stride = 1;
  for (size_t d = in.size(); d-- > 0;) {
    if (in[d] != 1 && in[d] != out[d + offset])
      return false;
    m.strides[d + offset] = in[d] == 1 ? 0 : stride;
    stride *= in[d];
  }
  return true;
}

std::unique_ptr<Kernel> createFused(const StepContext &ctx, std::string &error) {
  const plan::FusedProgram &fp = ctx.step.fused();
  if (ctx.outputs.empty() || fp.results_size() != static_cast<int>(ctx.outputs.size()) ||
      fp.num_inputs() != static_cast<int>(ctx.inputs.size())) {
    error = "malformed fused program";
    return nullptr;
  }
  const std::vector<int64_t> &shape = ctx.outputs.front().shape;
  for (const TensorArg &o : ctx.outputs)
    if (o.shape != shape) {
      error = "fused outputs differ in shape";
      return nullptr;
    }
  bool wide = false;
  std::vector<InputMap> maps(ctx.inputs.size());
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!ctx.inputs[i].data || !mapInput(ctx.inputs[i].shape, shape, maps[i])) {
      error = "input " + std::to_string(i) + " does not broadcast to the result";
      return nullptr;
    }
    wide = wide || ctx.inputs[i].type == plan::F64;
  }
  std::vector<Instr> instrs;
  int regs = fp.num_inputs();
  for (const plan::Instruction &pi : fp.instructions()) {
    Instr in;
    in.op = fusedOpByName(pi.op());
    if (in.op == FusedOp::Count) {
      error = "unknown fused instruction '" + pi.op() + "'";
      return nullptr;
    }
    int args[3] = {0, 0, 0};
    for (int k = 0; k < pi.args_size() && k < 3; ++k) {
      if (pi.args(k) < 0 || pi.args(k) >= regs) {
        error = "fused instruction reads an undefined register";
        return nullptr;
      }
      args[k] = pi.args(k);
    }
    in.a = args[0];
    in.b = args[1];
    in.c = args[2];
    in.type = pi.type();
    wide = wide || in.type == plan::F64;
    // ONNX defaults, overridden by the instruction's attributes.
    in.params = fused::fusedDefaults(in.op);
    for (const plan::Attribute &a : pi.attrs()) {
      if (a.name() == "alpha")
        in.params.alpha = static_cast<float>(a.f());
      else if (a.name() == "beta")
        in.params.beta = static_cast<float>(a.f());
      else if (a.name() == "gamma")
        in.params.gamma = static_cast<float>(a.f());
      else if (a.name() == "has_min")
        in.params.hasMin = a.i() != 0;
      else if (a.name() == "has_max")
        in.params.hasMax = a.i() != 0;
      else if (a.name() == "detect_positive")
        in.params.detectPos = a.i() != 0;
      else if (a.name() == "detect_negative")
        in.params.detectNeg = a.i() != 0;
    }
    instrs.push_back(in);
    ++regs;
  }
  std::vector<int> results(fp.results().begin(), fp.results().end());
  for (int r : results)
    if (r < 0 || r >= regs) {
      error = "fused result names an undefined register";
      return nullptr;
    }
  if (wide)
    return std::make_unique<FusedKernel<double>>(ctx.inputs, ctx.outputs, maps, instrs, results,
                                                 ctx.pool);
  return std::make_unique<FusedKernel<float>>(ctx.inputs, ctx.outputs, maps, instrs, results,
                                              ctx.pool);
}

} // namespace

void registerFusedKernels() { registerKernel("ampc.Fused", createFused); }

} // namespace ampc::rt::cpu
