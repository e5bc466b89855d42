//===- CudaBackend.cpp - Running plans on an NVIDIA GPU --------------------===//
//
// Memory: one device allocation each for the arena (its size from the plan),
// the state, the constants, the step workspace and the input staging buffers.
// Work: every program is lowered once (Lowering.cpp) to a list of launches
// enqueued on one stream, with no host synchronisation inside a step; GEMMs
// go through cuBLASLt where it planned them at load (CublasLt.cpp), else
// through cuBLAS; after
// a warm-up run the list is captured as a CUDA graph and replayed. Inputs:
// write() copies a batch into pinned host memory and from there, on a second
// stream, into a device staging buffer; run() waits for that copy and moves
// the staged bytes into the arena first thing, then records that the staging
// buffer is free again, so the next batch's host-to-device copy overlaps the
// rest of the step. See docs/cuda.md.
//
//===----------------------------------------------------------------------===//

#include "CublasLoader.h"
#include "CudnnRunner.h"
#include "CublasLt.h"
#include "KernelLaunch.h"
#include "Lowering.h"
#include "elementwise/FusedCodegen.h"
#include "elementwise/FusedCompiler.h"
#include "elementwise/FusedModules.h"

#include "ampc/rt/Backend.h"
#include "ampc/rt/Collective.h"
#include "ampc/rt/PlanFile.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace ampc::rt {

bool cudaAvailable(std::string &why) {
  // Without a driver or device the call fails and leaves the count untouched.
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    (void)cudaGetLastError();
    return false;
  }
  if (count <= 0) {
    why = "cudaGetDeviceCount found no device";
    return false;
  }
  return true;
}

namespace {

using cuda::GemmCall;
using cuda::Launch;

constexpr size_t kCublasWorkspace = size_t(32) << 20;

std::string jsonEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

/// A device allocation freed with the backend.
struct DeviceBlock {
  uint8_t *p = nullptr;
  size_t bytes = 0;
  ~DeviceBlock() {
    if (p)
      cudaFree(p);
  }
};

/// A program input's path from the host: pinned host bytes, a device staging
/// buffer, and the events ordering the two streams.
struct Staged {
  int tensor = -1;
  size_t bytes = 0;
  uint8_t *pinned = nullptr;  ///< host
  uint8_t *staging = nullptr; ///< device
  cudaEvent_t ready = nullptr; ///< the staging buffer holds the last write()
  cudaEvent_t free = nullptr;  ///< the staging buffer has been copied into the arena
  bool pending = false;        ///< written since the last run that read it
};

class CudaBackend : public Backend {
public:
  explicit CudaBackend(const CudaOptions &opts) : opts_(opts) {}

  ~CudaBackend() override {
    if (compute_)
      cudaStreamSynchronize(compute_);
    if (copy_)
      cudaStreamSynchronize(copy_);
    for (cudaGraphExec_t g : graphs_)
      if (g)
        cudaGraphExecDestroy(g);
    for (Staged &s : staged_) {
      if (s.ready)
        cudaEventDestroy(s.ready);
      if (s.free)
        cudaEventDestroy(s.free);
    }
    for (auto &[side, ev] : buckets_) {
      cudaEventDestroy(ev.first);
      cudaEventDestroy(ev.second);
    }
    for (void *side : sides_)
      cudaFree(side);
    if (comm_)
      cudaStreamDestroy(comm_);
    if (pinned_)
      cudaFreeHost(pinned_);
    cudnn_.reset(); // its handle before the stream it works on
    if (cublas_)
      cublasDestroy(cublas_);
    if (compute_)
      cudaStreamDestroy(compute_);
    if (copy_)
      cudaStreamDestroy(copy_);
  }

  std::string name() const override { return name_; }

  bool init(std::string &error) {
    // A data-parallel rank's GPU was chosen when its NCCL communicator was
    // made (the node-local rank's); one process uses device 0.
    int device = 0;
    if (opts_.collective && cudaGetDevice(&device) != cudaSuccess)
      device = 0;
    if (!check(cudaSetDevice(device), "cudaSetDevice", error))
      return false;
    cudaDeviceProp prop;
    if (!check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", error))
      return false;
    arch_ = prop.major * 10 + prop.minor;
    name_ = std::string("cuda (") + prop.name + ", sm_" + std::to_string(prop.major) +
            std::to_string(prop.minor) + ")";
    smMajor_ = prop.major;
    if (!check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "cudaStreamCreate",
               error) ||
        !check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate", error))
      return false;
    if (std::string why; !cuda::loadCublas(why)) {
      error = why;
      return false;
    }
    if (!checkBlas(cublasCreate(&cublas_), "cublasCreate", error) ||
        !checkBlas(cublasSetStream(cublas_, compute_), "cublasSetStream", error))
      return false;
    // cuBLASLt is optional: without it every GEMM runs through cuBLAS.
    if (std::string why; !lt_.init(why)) {
      static bool said = false;
      if (!said)
        std::fprintf(stderr, "amp-run: note: %s; GEMMs run through cublasGemmStridedBatchedEx\n",
                     why.c_str());
      said = true;
    } else {
      ltReady_ = true;
    }
    debugSync_ = std::getenv("AMPC_CUDA_SYNC") != nullptr;
    // cuDNN is optional: without it convolutions use im2col + cuBLAS.
    const char *off = std::getenv("AMPC_CUDNN");
    if (!opts_.cudnn || (off && std::string(off) == "0")) {
      cudnnWhy_ = "turned off";
    } else {
      auto r = std::make_unique<cuda::CudnnRunner>();
      if (r->init(compute_, cudnnWhy_))
        cudnn_ = std::move(r);
    }
    return true;
  }

  bool load(const plan::Plan &p, std::string &error) override {
    plan_ = p;
    layout_ = cuda::MemoryLayout::of(plan_);
    // Program inputs get staging buffers (one per tensor).
    std::map<int, size_t> inputs;
    for (const plan::Program &prog : plan_.programs())
      for (const plan::Binding &b : prog.inputs())
        inputs[b.tensor()] = planTensorBytes(plan_.tensors(b.tensor()));
    size_t stagingBytes = 0;
    for (const auto &[t, bytes] : inputs)
      stagingBytes += (bytes + 255) / 256 * 256;

    // Size the workspace by lowering against placeholder addresses.
    size_t wsBytes = 0, bucketBytes = 0; // buckets: ampc.AllReduce's own buffers
    {
      uint8_t *fake = reinterpret_cast<uint8_t *>(uintptr_t(1) << 40);
      cuda::DeviceMemory mem{[&](int id) { return layout_.address(plan_, id, fake, fake, fake); },
                             fake, cudnnHook()};
      std::vector<Launch> scratch;
      for (int i = 0; i < plan_.programs_size(); ++i) {
        if (!cuda::lowerProgram(plan_, i, mem, scratch, wsBytes, error))
          return false;
        for (const Launch &l : scratch)
          if (l.kind == Launch::AllReduce)
            bucketBytes += (l.bytes + 255) / 256 * 256;
      }
    }

    // Refuse what does not fit the share of the device we may use.
    size_t freeBytes = 0, totalBytes = 0;
    if (!check(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo", error))
      return false;
    size_t ltBytes = ltReady_ ? cuda::ltWorkspaceBytes(smMajor_) : 0;
    uint64_t needed = layout_.arenaBytes + layout_.stateBytes + layout_.constantBytes + wsBytes +
                      bucketBytes + stagingBytes + kCublasWorkspace + ltBytes;
    std::string breakdown = "arena " + std::to_string(layout_.arenaBytes) + ", state " +
                            std::to_string(layout_.stateBytes) + ", constants " +
                            std::to_string(layout_.constantBytes) + ", workspace " +
                            std::to_string(wsBytes + bucketBytes + kCublasWorkspace + ltBytes) +
                            ", input staging " +
                            std::to_string(stagingBytes);
    if (!cuda::checkDeviceMemory(needed, breakdown, totalBytes, opts_.memoryFraction,
                                 opts_.memoryLimit, error))
      return false;
    if (needed > freeBytes) {
      error = "the plan needs " + std::to_string(needed) + " bytes of device memory (" +
              breakdown + "), but only " + std::to_string(freeBytes) + " bytes are free";
      return false;
    }
    if (!allocate(arena_, layout_.arenaBytes, "the arena", error) ||
        !allocate(state_, layout_.stateBytes, "the state", error) ||
        !allocate(constants_, layout_.constantBytes, "the constants", error) ||
        !allocate(workspace_, wsBytes, "the workspace", error) ||
        !allocate(cublasWs_, kCublasWorkspace, "the cuBLAS workspace", error) ||
        !allocate(staging_, stagingBytes, "the input staging buffers", error) ||
        (ltBytes && !allocate(ltWs_, ltBytes, "the cuBLASLt workspace", error)))
      return false;
    lt_.setWorkspace(ltWs_.p, ltBytes);
    if (!checkBlas(cublasSetWorkspace(cublas_, cublasWs_.p, kCublasWorkspace),
                   "cublasSetWorkspace", error))
      return false;
    if (!check(cudaMemset(arena_.p, 0, arena_.bytes), "cudaMemset", error))
      return false;
    for (int i = 0; i < plan_.tensors_size(); ++i) {
      const plan::Tensor &t = plan_.tensors(i);
      if (t.has_view_of() || (t.storage() != plan::STATE && t.storage() != plan::CONSTANT))
        continue;
      if (t.zero_init()) {
        if (!check(cudaMemset(address(i), 0, planTensorBytes(t)), "cudaMemset of '" + t.name() + "'",
                   error))
          return false;
        continue;
      }
      // A low-precision copy is converted on the host from its source's
      // value, which the plan still holds here.
      std::vector<char> converted;
      const std::string *value = &t.data();
      if (t.has_cast_of()) {
        converted.resize(planTensorBytes(t));
        initCastState(t, plan_.tensors(t.cast_of()).data().data(), converted.data());
      }
      const char *bytes = t.has_cast_of() ? converted.data() : value->data();
      size_t size = t.has_cast_of() ? converted.size() : value->size();
      if (size == 0)
        continue;
      if (!check(cudaMemcpy(address(i), bytes, size, cudaMemcpyHostToDevice),
                 "cudaMemcpy of '" + t.name() + "'", error))
        return false;
    }

    // Pinned host buffers and events of the staged inputs.
    if (stagingBytes &&
        !check(cudaHostAlloc(reinterpret_cast<void **>(&pinned_), stagingBytes,
                             cudaHostAllocDefault),
               "cudaHostAlloc", error))
      return false;
    size_t at = 0;
    for (const auto &[t, bytes] : inputs) {
      Staged s;
      s.tensor = t;
      s.bytes = bytes;
      s.pinned = pinned_ + at;
      s.staging = staging_.p + at;
      at += (bytes + 255) / 256 * 256;
      if (!check(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming), "cudaEventCreate",
                 error) ||
          !check(cudaEventCreateWithFlags(&s.free, cudaEventDisableTiming), "cudaEventCreate",
                 error))
        return false;
      stagedIndex_[t] = static_cast<int>(staged_.size());
      staged_.push_back(s);
    }

    // The launch lists against the real addresses.
    cuda::DeviceMemory mem{[this](int id) { return address(id); }, workspace_.p, cudnnHook()};
    programs_.resize(plan_.programs_size());
    for (int i = 0; i < plan_.programs_size(); ++i) {
      size_t ws = 0;
      if (!cuda::lowerProgram(plan_, i, mem, programs_[i], ws, error))
        return false;
      // Every GEMM's cuBLASLt plan, chosen once; epilogues without one are
      // rewritten as plain launches.
      if (!cuda::resolveGemms(
              programs_[i], [&](const GemmCall &g) { return ltReady_ ? lt_.plan(g) : -1; },
              error)) {
        error = "program '" + plan_.programs(i).name() + "' " + error;
        return false;
      }
      for (const Launch &l : programs_[i])
        if (!checkGemmLimits(l, i, error))
          return false;
      if (!prepareBuckets(programs_[i], error))
        return false;
      compileFused(programs_[i]);
      for (const plan::Binding &b : plan_.programs(i).inputs())
        programInputs_[i].push_back(stagedIndex_.at(b.tensor()));
    }
    noteConvolutions();
    graphs_.assign(plan_.programs_size(), nullptr);
    runs_.assign(plan_.programs_size(), 0);
    return check(cudaDeviceSynchronize(), "loading the plan", error);
  }

  bool run(int index, std::string &error) override {
    if (index < 0 || index >= static_cast<int>(programs_.size())) {
      error = "no program " + std::to_string(index);
      return false;
    }
    // Staged inputs into the arena, then the staging buffers are free.
    for (int k : programInputs_[index]) {
      Staged &s = staged_[k];
      if (!check(cudaStreamWaitEvent(compute_, s.ready, 0), "cudaStreamWaitEvent", error) ||
          !check(cudaMemcpyAsync(address(s.tensor), s.staging, s.bytes, cudaMemcpyDeviceToDevice,
                                 compute_),
                 "copying input '" + plan_.tensors(s.tensor).name() + "'", error) ||
          !check(cudaEventRecord(s.free, compute_), "cudaEventRecord", error))
        return false;
      s.pending = false;
    }
    int runs = runs_[index]++;
    // --profile: the first run after the warm-up of the first program to run
    // twice, without a graph; the warm-up run is profiled too, so that a
    // single run still leaves a trace (the later one replaces it).
    if (!opts_.profilePath.empty() && !profiled_ && runs <= 1) {
      profiled_ = runs == 1;
      return profile(index, runs == 0, error);
    }
    if (!opts_.cudaGraph || runs == 0 || debugSync_)
      return enqueue(index, error);
    if (!graphs_[index] && !capture(index, error))
      return false;
    return check(cudaGraphLaunch(graphs_[index], compute_),
                 "cudaGraphLaunch of program '" + plan_.programs(index).name() + "'", error);
  }

  bool write(int tensor, const void *src, size_t bytes, std::string &error) override {
    if (!checkTransfer(tensor, bytes, error))
      return false;
    auto it = stagedIndex_.find(tensor);
    if (it == stagedIndex_.end()) {
      // Not an input: state (checkpoints) and the like, in stream order and
      // synchronously (the streams do not synchronise with the legacy one).
      return check(cudaMemcpyAsync(address(tensor), src, bytes, cudaMemcpyHostToDevice, compute_),
                   "writing '" + plan_.tensors(tensor).name() + "'", error) &&
             synchronize(error);
    }
    void *pinned = inputBuffer(tensor, bytes, error);
    if (!pinned)
      return false;
    std::memcpy(pinned, src, bytes);
    return commitInput(tensor, bytes, error);
  }

  /// The input's pinned buffer, once its previous copy is done.
  void *inputBuffer(int tensor, size_t bytes, std::string &error) override {
    error.clear();
    auto it = stagedIndex_.find(tensor);
    if (it == stagedIndex_.end() || !checkTransfer(tensor, bytes, error))
      return nullptr;
    Staged &s = staged_[it->second];
    if (!check(cudaEventSynchronize(s.ready), "cudaEventSynchronize", error))
      return nullptr;
    return s.pinned;
  }

  /// Copies the pinned buffer into the staging buffer on the copy stream,
  /// once the last run has moved the staging buffer's previous value into
  /// the arena.
  bool commitInput(int tensor, size_t bytes, std::string &error) override {
    auto it = stagedIndex_.find(tensor);
    if (it == stagedIndex_.end()) {
      error = "tensor " + std::to_string(tensor) + " is not a program input";
      return false;
    }
    if (!checkTransfer(tensor, bytes, error))
      return false;
    Staged &s = staged_[it->second];
    if (!check(cudaStreamWaitEvent(copy_, s.free, 0), "cudaStreamWaitEvent", error) ||
        !check(cudaMemcpyAsync(s.staging, s.pinned, bytes, cudaMemcpyHostToDevice, copy_),
               "copying input '" + plan_.tensors(tensor).name() + "'", error) ||
        !check(cudaEventRecord(s.ready, copy_), "cudaEventRecord", error))
      return false;
    s.pending = true;
    return true;
  }

  bool read(int tensor, void *dst, size_t bytes, std::string &error) override {
    if (!checkTransfer(tensor, bytes, error))
      return false;
    auto it = stagedIndex_.find(tensor);
    if (it != stagedIndex_.end() && staged_[it->second].pending) {
      // A written input not yet run: its value is in the staging buffer.
      Staged &s = staged_[it->second];
      return check(cudaStreamWaitEvent(compute_, s.ready, 0), "cudaStreamWaitEvent", error) &&
             check(cudaMemcpyAsync(dst, s.staging, bytes, cudaMemcpyDeviceToHost, compute_),
                   "reading '" + plan_.tensors(tensor).name() + "'", error) &&
             synchronize(error);
    }
    return check(cudaMemcpyAsync(dst, address(tensor), bytes, cudaMemcpyDeviceToHost, compute_),
                 "reading '" + plan_.tensors(tensor).name() + "'", error) &&
           synchronize(error);
  }

  bool synchronize(std::string &error) override {
    return check(cudaStreamSynchronize(compute_), "running the plan", error);
  }

private:
  bool check(cudaError_t e, const std::string &what, std::string &error) {
    if (e == cudaSuccess)
      return true;
    error = what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    (void)cudaGetLastError();
    return false;
  }
  bool checkBlas(cublasStatus_t s, const std::string &what, std::string &error) {
    if (s == CUBLAS_STATUS_SUCCESS)
      return true;
    error = what + ": " + cuda::cublasStatusString(s);
    return false;
  }

  bool allocate(DeviceBlock &b, size_t bytes, const char *what, std::string &error) {
    b.bytes = std::max<size_t>(bytes, 256);
    return check(cudaMalloc(reinterpret_cast<void **>(&b.p), b.bytes),
                 std::string("cudaMalloc of ") + what + " (" + std::to_string(b.bytes) + " bytes)",
                 error);
  }

  void *address(int id) const {
    return layout_.address(plan_, id, arena_.p, state_.p, constants_.p);
  }

  bool checkTransfer(int tensor, size_t bytes, std::string &error) const {
    return rt::checkTransfer(
        plan_, tensor, bytes, [&](int id) { return address(id) != nullptr; }, error);
  }

  /// "program 'step' step 12 (MatMul '/fc/MatMul')"
  std::string where(int program, const Launch &l) const {
    const plan::Program &prog = plan_.programs(program);
    if (l.step < 0)
      return "program '" + prog.name() + "' state update";
    const plan::Step &s = prog.steps(l.step);
    return "program '" + prog.name() + "' step " + std::to_string(l.step) + " (" + s.op() + " '" +
           s.name() + "')";
  }

  bool checkGemmLimits(const Launch &l, int program, std::string &error) const {
    if (l.kind != Launch::Gemm)
      return true;
    const GemmCall &g = l.gemm;
    for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch})
      if (v > INT_MAX) {
        error = where(program, l) + ": GEMM dimensions exceed cuBLAS's 32-bit arguments";
        return false;
      }
    return true;
  }

  bool launch(int program, const Launch &l, std::string &error) {
    switch (l.kind) {
    case Launch::Kernel:
      if (!check(cuda::launchKernel(l.kernel, l.args, l.threads, compute_),
                 where(program, l) + ": kernel launch", error))
        return false;
      break;
    case Launch::Gemm: {
      const GemmCall &g = l.gemm;
      if (g.lt >= 0) {
        if (!checkBlas(lt_.run(g, compute_), where(program, l) + ": cublasLtMatmul", error))
          return false;
        break;
      }
      cudaDataType_t ab = cuda::gemmDataType(g.abType), c = cuda::gemmDataType(g.cType);
      cublasStatus_t s = cublasGemmStridedBatchedEx(
          cublas_, g.transA ? CUBLAS_OP_T : CUBLAS_OP_N, g.transB ? CUBLAS_OP_T : CUBLAS_OP_N,
          static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), &g.alpha, g.A,
          ab, static_cast<int>(g.lda), g.strideA, g.B, ab,
          static_cast<int>(g.ldb), g.strideB, &g.beta, g.C, c,
          static_cast<int>(g.ldc), g.strideC, static_cast<int>(g.batch), CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT);
      if (!checkBlas(s, where(program, l) + ": cublasGemmStridedBatchedEx", error))
        return false;
      break;
    }
    case Launch::CudnnConv:
      if (!cudnn_ || !cudnn_->run(l.conv, error)) {
        error = where(program, l) + ": " + (cudnn_ ? error : std::string("cuDNN is not loaded"));
        return false;
      }
      break;
    case Launch::Memset:
      if (!check(cudaMemsetAsync(l.dst, 0, l.bytes, compute_), where(program, l) + ": cudaMemsetAsync",
                 error))
        return false;
      break;
    case Launch::Memcpy:
      if (!check(cudaMemcpyAsync(l.dst, l.src, l.bytes, cudaMemcpyDeviceToDevice, compute_),
                 where(program, l) + ": cudaMemcpyAsync", error))
        return false;
      break;
    case Launch::AllReduce:
      if (!startAllReduce(l, error)) {
        error = where(program, l) + ": " + error;
        return false;
      }
      break;
    case Launch::AllReduceWait:
      if (!finishAllReduce(l, error)) {
        error = where(program, l) + ": " + error;
        return false;
      }
      break;
    case Launch::CompiledFused:
      if (!check(cuda::launchFusedKernel(l.compiled->handle, l.as<cuda::FusedKernelArgs>(),
                                         l.threads, compute_),
                 where(program, l) + ": compiled fused kernel launch", error))
        return false;
      break;
    }
    // AMPC_CUDA_SYNC=1: wait after every launch, so that a failing kernel
    // is reported with its step (debugging; graphs are off then).
    if (debugSync_)
      return check(cudaStreamSynchronize(compute_), where(program, l), error);
    return true;
  }

  /// DeviceMemory::cudnn: convolutions through cuDNN when it started.
  std::function<bool(cuda::CudnnConvCall &)> cudnnHook() {
    if (!cudnn_)
      return nullptr;
    return [this](cuda::CudnnConvCall &c) { return cudnn_->plan(c); };
  }

  /// One note line when a plan's convolutions do not all run on cuDNN.
  void noteConvolutions() const {
    bool convs = false;
    for (const plan::Program &prog : plan_.programs())
      for (const plan::Step &s : prog.steps())
        convs = convs || s.op() == "Conv" || s.op() == "ampc.ConvGrad";
    if (!convs)
      return;
    if (!cudnn_) {
      std::fprintf(stderr, "amp-run: note: cuDNN not used (%s); convolutions run as im2col + "
                           "cuBLAS\n",
                   cudnnWhy_.c_str());
      return;
    }
    for (const std::string &n : cudnn_->notes())
      std::fprintf(stderr, "amp-run: note: im2col + cuBLAS for %s\n", n.c_str());
  }

  /// The fused launches of `launches` whose program compiles (NVRTC for
  /// this device, the disk cache) and loads run their own kernel; the others
  /// stay interpreted, with one note for the plan (never an error).
  /// AMPC_FUSED_INTERPRET=1 keeps them all interpreted.
  void compileFused(std::vector<Launch> &launches) {
    if (const char *v = std::getenv("AMPC_FUSED_INTERPRET"); v && *v && std::string(v) != "0")
      return;
    std::string note;
    cuda::compileFusedLaunches(launches, fusedTable_, arch_, cuda::fusedCacheDir(),
                               cuda::loadFusedKernel, note);
    if (!note.empty() && !fusedNoted_)
      std::fprintf(stderr, "amp-run: note: fused steps run the interpreted kernel (%s)\n",
                   note.c_str());
    fusedNoted_ = fusedNoted_ || !note.empty();
  }

  bool ranks() const { return opts_.collective && opts_.collective->size() > 1; }

  /// Every AllReduce bucket gets its own device buffer and, with several
  /// ranks, the events that fork the communication stream from the compute
  /// stream and join it back.
  bool prepareBuckets(std::vector<Launch> &launches, std::string &error) {
    bool ok = cuda::assignAllReduceBuffers(launches, [&](size_t bytes) -> void * {
      void *p = nullptr;
      if (cudaMalloc(&p, bytes) != cudaSuccess)
        return nullptr;
      sides_.push_back(p);
      return p;
    });
    if (!ok) {
      error = "cannot allocate the all-reduce buckets";
      return false;
    }
    if (!ranks())
      return true;
    if (!comm_ && !check(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking),
                         "cudaStreamCreate", error))
      return false;
    for (const Launch &l : launches) {
      if (l.kind != Launch::AllReduce)
        continue;
      std::pair<cudaEvent_t, cudaEvent_t> ev{nullptr, nullptr};
      if (!check(cudaEventCreateWithFlags(&ev.first, cudaEventDisableTiming), "cudaEventCreate",
                 error) ||
          !check(cudaEventCreateWithFlags(&ev.second, cudaEventDisableTiming),
                 "cudaEventCreate", error))
        return false;
      buckets_[l.side] = ev;
    }
    return true;
  }

  /// The packed bucket to its own buffer; with several ranks, NCCL's average
  /// there on the communication stream, after the compute stream's work so far.
  bool startAllReduce(const Launch &l, std::string &error) {
    if (!check(cudaMemcpyAsync(l.side, l.dst, l.bytes, cudaMemcpyDeviceToDevice, compute_),
               "cudaMemcpyAsync", error))
      return false;
    if (!ranks())
      return true;
    auto &[forked, done] = buckets_.at(l.side);
    return check(cudaEventRecord(forked, compute_), "cudaEventRecord", error) &&
           check(cudaStreamWaitEvent(comm_, forked, 0), "cudaStreamWaitEvent", error) &&
           opts_.collective->allReduceMeanOnStream(static_cast<float *>(l.side), l.bytes / 4,
                                                   comm_, error) &&
           check(cudaEventRecord(done, comm_), "cudaEventRecord", error);
  }

  /// The compute stream waits for the bucket, then copies the averages back
  /// to the workspace for unpacking.
  bool finishAllReduce(const Launch &l, std::string &error) {
    if (ranks() &&
        !check(cudaStreamWaitEvent(compute_, buckets_.at(l.side).second, 0),
               "cudaStreamWaitEvent", error))
      return false;
    return check(cudaMemcpyAsync(l.dst, l.side, l.bytes, cudaMemcpyDeviceToDevice, compute_),
                 "cudaMemcpyAsync", error);
  }

  bool enqueue(int program, std::string &error) {
    for (const Launch &l : programs_[program])
      if (!launch(program, l, error))
        return false;
    return true;
  }

  bool capture(int program, std::string &error) {
    const std::string what = "capturing program '" + plan_.programs(program).name() + "'";
    if (!check(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal), what, error))
      return false;
    std::string enqueueError;
    bool ok = enqueue(program, enqueueError);
    cudaGraph_t graph = nullptr;
    cudaError_t end = cudaStreamEndCapture(compute_, &graph);
    if (!ok) {
      if (graph)
        cudaGraphDestroy(graph);
      error = what + ": " + enqueueError;
      return false;
    }
    if (!check(end, what, error))
      return false;
    cudaError_t inst = cudaGraphInstantiate(&graphs_[program], graph, 0);
    cudaGraphDestroy(graph);
    return check(inst, "instantiating the graph of program '" + plan_.programs(program).name() + "'",
                 error);
  }

  /// Runs a program with events around every launch and writes a Chrome
  /// trace (chrome://tracing, Perfetto) of its launches.
  bool profile(int program, bool warmUp, std::string &error) {
    const std::vector<Launch> &ls = programs_[program];
    std::vector<cudaEvent_t> ev(ls.size() + 1, nullptr);
    auto cleanup = [&] {
      for (cudaEvent_t e : ev)
        if (e)
          cudaEventDestroy(e);
    };
    for (cudaEvent_t &e : ev)
      if (!check(cudaEventCreate(&e), "cudaEventCreate", error)) {
        cleanup();
        return false;
      }
    bool ok = check(cudaEventRecord(ev[0], compute_), "cudaEventRecord", error);
    for (size_t i = 0; ok && i < ls.size(); ++i)
      ok = launch(program, ls[i], error) &&
           check(cudaEventRecord(ev[i + 1], compute_), "cudaEventRecord", error);
    ok = ok && check(cudaStreamSynchronize(compute_), "profiling the plan", error);
    std::string json = std::string("{\"displayTimeUnit\": \"ms\", \"otherData\": {\"backend\": \"") +
                       jsonEscape(name_) + "\", \"warm_up_run\": " + (warmUp ? "true" : "false") +
                       "}, \"traceEvents\": [\n";
    const plan::Program &prog = plan_.programs(program);
    for (size_t i = 0; ok && i < ls.size(); ++i) {
      float start = 0, dur = 0;
      ok = check(cudaEventElapsedTime(&start, ev[0], ev[i]), "cudaEventElapsedTime", error) &&
           check(cudaEventElapsedTime(&dur, ev[i], ev[i + 1]), "cudaEventElapsedTime", error);
      if (!ok)
        break;
      const Launch &l = ls[i];
      std::string name = l.step < 0 ? std::string("state update")
                                    : prog.steps(l.step).op() + " '" + prog.steps(l.step).name() + "'";
      char times[96];
      std::snprintf(times, sizeof times, "\"ts\": %.3f, \"dur\": %.3f", start * 1000.0,
                    dur * 1000.0);
      json += std::string(i ? ",\n" : "") + "{\"name\": \"" + jsonEscape(name) +
              "\", \"cat\": \"" + jsonEscape(cuda::describeLaunch(l)) + "\", \"ph\": \"X\", " +
              times + ", \"pid\": 0, \"tid\": 0, \"args\": {\"program\": \"" +
              jsonEscape(prog.name()) + "\", \"step\": " + std::to_string(l.step) +
              ", \"launch\": \"" + jsonEscape(cuda::describeLaunch(l)) + "\"}}";
    }
    json += "\n]}\n";
    cleanup();
    if (!ok)
      return false;
    FILE *f = std::fopen(opts_.profilePath.c_str(), "w");
    if (!f || std::fwrite(json.data(), 1, json.size(), f) != json.size()) {
      if (f)
        std::fclose(f);
      error = opts_.profilePath + ": cannot write the profile (" + std::strerror(errno) + ")";
      return false;
    }
    std::fclose(f);
    return true;
  }

  CudaOptions opts_;
  std::string name_ = "cuda";
  bool debugSync_ = false, profiled_ = false;
  cudaStream_t compute_ = nullptr, copy_ = nullptr, comm_ = nullptr;
  std::vector<void *> sides_;                                          // AllReduce buckets
  std::map<void *, std::pair<cudaEvent_t, cudaEvent_t>> buckets_;      // fork, join
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<cuda::CudnnRunner> cudnn_; ///< null: convolutions as im2col
  std::string cudnnWhy_;                     ///< why cudnn_ is null
  cuda::LtGemms lt_;
  bool ltReady_ = false;
  int smMajor_ = 0;
  int arch_ = 0;                    ///< 90 for sm_90
  cuda::FusedKernelTable fusedTable_; ///< compiled fused kernels (Launch::compiled)
  bool fusedNoted_ = false;
  plan::Plan plan_;
  cuda::MemoryLayout layout_;
  DeviceBlock arena_, state_, constants_, workspace_, cublasWs_, staging_, ltWs_;
  uint8_t *pinned_ = nullptr;
  std::vector<Staged> staged_;
  std::map<int, int> stagedIndex_;             ///< tensor -> staged_
  std::map<int, std::vector<int>> programInputs_; ///< program -> staged_
  std::vector<std::vector<Launch>> programs_;
  std::vector<cudaGraphExec_t> graphs_;
  std::vector<int64_t> runs_;
};

} // namespace

std::unique_ptr<Backend> createCudaBackend(const CudaOptions &opts, std::string &error) {
  std::string why;
  if (!cudaAvailable(why)) {
    error = "no CUDA device available (" + why + ")";
    return nullptr;
  }
  auto b = std::make_unique<CudaBackend>(opts);
  if (!b->init(error))
    return nullptr;
  return b;
}

} // namespace ampc::rt
