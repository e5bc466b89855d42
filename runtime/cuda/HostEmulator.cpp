//===- HostEmulator.cpp - The CUDA backend's launches, run on the CPU ------===//
//
// Kernels are DeviceKernels.h bodies called for every thread index in order
// (threads of a launch never depend on each other, so any order is what the
// GPU may do); row launches run each row lane by lane in the order the GPU's
// warp shuffles combine them (runRowOnHost, RowKernels.h); GEMMs are
// reference loops with cuBLAS's column-major semantics, fp32 accumulation
// and cuBLASLt's bias and Relu epilogues; cuDNN convolutions are a CPU
// reference (referenceCudnnConv: fp32 sums, one rounding, as cuDNN
// promises). The backend lays memory out as the CUDA backend does and runs
// the same launch lists, so tests exercise everything the CUDA backend
// decides, except the CUDA API calls themselves.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"
#include "elementwise/FusedCodegen.h"

#include "ampc/rt/PlanFile.h"

#include <cstdlib>
#include <deque>
#include <cstring>

namespace ampc::rt::cuda {

namespace {

float loadElem(uint8_t type, const void *base, int64_t i) { return loadAsFloat(type, base, i); }

void emulateGemm(const GemmCall &g) {
  for (int64_t b = 0; b < g.batch; ++b) {
    size_t ab = g.abType == FusedElem::F32 ? 4 : 2, cb = g.cType == FusedElem::F32 ? 4 : 2;
    const uint8_t *A = static_cast<const uint8_t *>(g.A) + b * g.strideA * ab;
    const uint8_t *B = static_cast<const uint8_t *>(g.B) + b * g.strideB * ab;
    uint8_t *C = static_cast<uint8_t *>(g.C) + b * g.strideC * cb;
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t i = 0; i < g.m; ++i) {
        float acc = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          float a = loadElem(g.abType, A, g.transA ? l + i * g.lda : i + l * g.lda);
          float v = loadElem(g.abType, B, g.transB ? j + l * g.ldb : l + j * g.ldb);
          acc += a * v;
        }
        int64_t at = i + j * g.ldc;
        float r = g.alpha * acc;
        if (g.beta != 0.0f)
          r += g.beta * loadElem(g.cType, C, at);
        // cuBLASLt's epilogue, in fp32 before the one rounding.
        if (hasBias(g.epilogue))
          r += loadElem(g.cType, g.bias, i);
        if (hasRelu(g.epilogue))
          r = math::relu(r);
        storeFromFloat(g.cType, C, at, r);
      }
  }
}

template <typename A> void loop(const Launch &l) {
  const A &a = l.as<A>();
  if constexpr (kIsRowKernel<A>) {
    // A row launch: each row lane by lane, in the GPU's order.
    if (a.lanes) {
      for (int64_t row = 0; row < l.threads; ++row)
        runRowOnHost(a, row);
      return;
    }
  }
  for (int64_t i = 0; i < l.threads; ++i)
    A::run(a, i);
}

} // namespace

void emulateLaunch(const Launch &l) {
  switch (l.kind) {
  case Launch::Memset:
    std::memset(l.dst, 0, l.bytes);
    return;
  case Launch::Memcpy:
    std::memmove(l.dst, l.src, l.bytes);
    return;
  case Launch::AllReduce: // one rank: the average is the bucket, kept aside
    std::memcpy(l.side, l.dst, l.bytes);
    return;
  case Launch::AllReduceWait:
    std::memcpy(l.dst, l.side, l.bytes);
    return;
  case Launch::Gemm:
    emulateGemm(l.gemm);
    return;
  case Launch::CudnnConv:
    referenceCudnnConv(l.conv);
    return;
  case Launch::CompiledFused:
    runCompiledFusedOnHost(l.compiled->program, l.compiled->width, l.as<FusedKernelArgs>(),
                           l.threads);
    return;
  case Launch::Kernel:
    break;
  }
  switch (l.kernel) {
#define AMPC_EMULATE(NAME, ARGS)                                                                   \
  case KernelKind::NAME:                                                                           \
    loop<ARGS>(l);                                                                                 \
    return;
    AMPC_CUDA_KERNELS(AMPC_EMULATE)
#undef AMPC_EMULATE
  }
}

namespace {

/// 256-byte aligned, zero-filled host memory standing in for a device block.
struct Block {
  uint8_t *p = nullptr;
  ~Block() { std::free(p); }
  bool allocate(size_t bytes) {
    size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
    p = static_cast<uint8_t *>(std::aligned_alloc(256, rounded));
    if (p)
      std::memset(p, 0, rounded);
    return p != nullptr;
  }
};

class EmulatorBackend : public Backend {
public:
  explicit EmulatorBackend(const EmulatorOptions &opts)
      : cudnn_(opts.cudnn), compiledFused_(opts.compiledFused) {}
  std::string name() const override { return "cuda-emulator (host)"; }

  bool load(const plan::Plan &p, std::string &error) override {
    plan_ = p;
    layout_ = MemoryLayout::of(plan_);
    if (!arena_.allocate(layout_.arenaBytes) || !state_.allocate(layout_.stateBytes) ||
        !constants_.allocate(layout_.constantBytes)) {
      error = "cannot allocate host memory";
      return false;
    }
    for (int i = 0; i < plan_.tensors_size(); ++i) {
      const plan::Tensor &t = plan_.tensors(i);
      if (t.has_view_of() || (t.storage() != plan::STATE && t.storage() != plan::CONSTANT))
        continue;
      if (t.zero_init())
        std::memset(address(i), 0, planTensorBytes(t));
      else if (!t.has_cast_of())
        std::memcpy(address(i), t.data().data(), t.data().size());
    }
    for (int i = 0; i < plan_.tensors_size(); ++i)
      if (plan_.tensors(i).has_cast_of())
        initCastState(plan_.tensors(i), address(plan_.tensors(i).cast_of()), address(i));
    // Lower once to size the workspace, then against the real one.
    size_t wsBytes = 0;
    std::vector<Launch> scratch;
    DeviceMemory mem{[this](int id) { return address(id); }, nullptr};
    // cuDNN's planning without a device: every call that fits takes
    // algorithm 0 and no workspace.
    if (cudnn_)
      mem.cudnn = [](CudnnConvCall &c) {
        c.algo = 0;
        c.mathType = describeCudnnConv(c).mathType;
        c.workspaceBytes = 0;
        return true;
      };
    for (int i = 0; i < plan_.programs_size(); ++i)
      if (!lowerProgram(plan_, i, mem, scratch, wsBytes, error))
        return false;
    if (!workspace_.allocate(wsBytes)) {
      error = "cannot allocate the workspace";
      return false;
    }
    mem.workspace = workspace_.p;
    programs_.resize(plan_.programs_size());
    for (int i = 0; i < plan_.programs_size(); ++i) {
      if (!lowerProgram(plan_, i, mem, programs_[i], wsBytes, error))
        return false;
      // As the CUDA backend does when NVRTC compiled every program.
      if (compiledFused_)
        fused_.use(programs_[i], [](CompiledFusedKernel &) { return true; });
    }
    for (std::vector<Launch> &launches : programs_)
      assignAllReduceBuffers(launches, [this](size_t bytes) {
        sides_.emplace_back(bytes);
        return static_cast<void *>(sides_.back().data());
      });
    return true;
  }

  bool run(int index, std::string &error) override {
    if (index < 0 || index >= static_cast<int>(programs_.size())) {
      error = "no program " + std::to_string(index);
      return false;
    }
    for (const Launch &l : programs_[index])
      emulateLaunch(l);
    return true;
  }

  bool write(int tensor, const void *src, size_t bytes, std::string &error) override {
    if (!check(tensor, bytes, error))
      return false;
    std::memcpy(address(tensor), src, bytes);
    return true;
  }
  bool read(int tensor, void *dst, size_t bytes, std::string &error) override {
    if (!check(tensor, bytes, error))
      return false;
    std::memcpy(dst, address(tensor), bytes);
    return true;
  }

  /// The launches of a program (tests look at them).
  const std::vector<Launch> &launches(int program) const { return programs_[program]; }

private:
  void *address(int id) const {
    return layout_.address(plan_, id, arena_.p, state_.p, constants_.p);
  }
  bool check(int tensor, size_t bytes, std::string &error) const {
    return checkTransfer(
        plan_, tensor, bytes, [&](int id) { return address(id) != nullptr; }, error);
  }

  bool cudnn_;
  plan::Plan plan_;
  MemoryLayout layout_;
  Block arena_, state_, constants_, workspace_;
  std::vector<std::vector<Launch>> programs_;
  bool compiledFused_;
  FusedKernelTable fused_;
  std::deque<std::vector<uint8_t>> sides_; // AllReduce buckets' own buffers
};

} // namespace

std::unique_ptr<Backend> createCudaEmulatorBackend(const EmulatorOptions &opts) {
  return std::make_unique<EmulatorBackend>(opts);
}

} // namespace ampc::rt::cuda
