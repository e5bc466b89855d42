//===- Lowering.cpp - Plan steps as CUDA launches --------------------------===//
//
// One function per op reads the step's operands and attributes (with the CPU
// kernels' checks and ONNX defaults) and appends launches. Shapes are static,
// so everything — grid sizes, strides, GEMM dimensions, workspace offsets — is
// fixed at load time; running a program only enqueues the list. Those
// functions live with their kernels, one folder per op family
// (runtime/cuda/<family>/<Family>Lowering.cpp); this file holds the memory
// layout, the helpers the families share and the dispatch on the op name.
//
//===----------------------------------------------------------------------===//

#include "StepLowering.h"
#include "gemm/GemmPlan.h"

#include "ampc/rt/FusedOps.h"
#include "ampc/rt/PlanFile.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace ampc::rt::cuda {

static_assert(static_cast<int>(plan::F32) == FusedElem::F32 &&
                  static_cast<int>(plan::F16) == FusedElem::F16 &&
                  static_cast<int>(plan::BF16) == FusedElem::BF16 &&
                  static_cast<int>(plan::F64) == FusedElem::F64 &&
                  static_cast<int>(plan::I64) == FusedElem::I64 &&
                  static_cast<int>(plan::I32) == FusedElem::I32 &&
                  static_cast<int>(plan::I8) == FusedElem::I8 &&
                  static_cast<int>(plan::U8) == FusedElem::U8 &&
                  static_cast<int>(plan::BOOL) == FusedElem::BOOL,
              "FusedElem mirrors plan::ElemType");

GemmCall rowMajorGemm(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, bool transA,
                      const void *B, int64_t ldb, bool transB, void *Y, int64_t ldy) {
  // Row-major X with leading dimension ld is the column-major X^T with the
  // same ld, so Y^T (N x M) = op(B)^T (N x K) * op(A)^T (K x M).
  GemmCall g;
  g.transA = transB;
  g.transB = transA;
  g.m = N;
  g.n = M;
  g.k = K;
  g.A = B;
  g.lda = ldb;
  g.B = A;
  g.ldb = lda;
  g.C = Y;
  g.ldc = ldy;
  return g;
}

//===----------------------------------------------------------------------===//
// Memory layout
//===----------------------------------------------------------------------===//


MemoryLayout MemoryLayout::of(const plan::Plan &p) {
  MemoryLayout m;
  m.arenaBytes = p.memory().arena_bytes();
  m.offset.assign(p.tensors_size(), 0);
  for (int i = 0; i < p.tensors_size(); ++i) {
    const plan::Tensor &t = p.tensors(i);
    if (t.has_view_of())
      continue;
    size_t bytes = alignUp(planTensorBytes(t));
    if (t.storage() == plan::STATE) {
      m.offset[i] = m.stateBytes;
      m.stateBytes += bytes;
    } else if (t.storage() == plan::CONSTANT) {
      m.offset[i] = m.constantBytes;
      m.constantBytes += bytes;
    }
  }
  return m;
}

void *MemoryLayout::address(const plan::Plan &p, int id, uint8_t *arena, uint8_t *state,
                            uint8_t *constants) const {
  if (id < 0 || id >= p.tensors_size())
    return nullptr;
  const plan::Tensor &t = p.tensors(id);
  if (t.has_view_of())
    return address(p, t.view_of(), arena, state, constants);
  switch (t.storage()) {
  case plan::ARENA:
    return arena + t.offset();
  case plan::STATE:
    return state + offset[id];
  case plan::CONSTANT:
    return constants + offset[id];
  default:
    return nullptr;
  }
}

bool checkDeviceMemory(uint64_t needed, const std::string &breakdown, uint64_t deviceTotal,
                       double fraction, uint64_t limit, std::string &error) {
  if (!(fraction > 0 && fraction <= 1)) {
    error = "--memory-fraction must be in (0, 1], got " + std::to_string(fraction);
    return false;
  }
  uint64_t share = static_cast<uint64_t>(std::floor(fraction * static_cast<double>(deviceTotal)));
  uint64_t available = limit ? std::min(share, limit) : share;
  if (needed <= available)
    return true;
  std::string why = limit && limit < share
                        ? "--memory-limit " + std::to_string(limit) + " bytes"
                        : "--memory-fraction " + std::to_string(fraction).substr(0, 6) + " of the " +
                              std::to_string(deviceTotal) + " bytes of the device";
  error = "the plan needs " + std::to_string(needed) + " bytes of device memory (" + breakdown +
          "), more than the " + std::to_string(available) + " bytes available under " + why;
  return false;
}


//===----------------------------------------------------------------------===//
// Helpers the families share (StepLowering.h)
//===----------------------------------------------------------------------===//

namespace {

/// Where the innermost dim is contiguous on both sides and the pointers and
/// strides allow, copies 16 (else 8 or 4) bytes a thread instead of one
/// element: a thread per 2-byte element leaves most of the memory system idle.
void widenCopy(CopyArgs &c) {
  const int last = c.rank - 1;
  if (last < 0 || c.srcStrides[last] != 1 || c.dstStrides[last] != 1)
    return;
  for (int bytes = 16; bytes > c.elemBytes; bytes /= 2) {
    const int64_t f = bytes / c.elemBytes;
    bool ok = c.shape[last] % f == 0 && reinterpret_cast<uintptr_t>(c.src) % bytes == 0 &&
              reinterpret_cast<uintptr_t>(c.dst) % bytes == 0;
    for (int d = 0; d < last && ok; ++d)
      ok = c.srcStrides[d] % f == 0 && c.dstStrides[d] % f == 0;
    if (!ok)
      continue;
    c.shape[last] /= f;
    for (int d = 0; d < last; ++d) {
      c.srcStrides[d] /= f;
      c.dstStrides[d] /= f;
    }
    c.elemBytes = bytes;
    return;
  }
}

} // namespace

int64_t addCopy(std::vector<int64_t> shape, std::vector<int64_t> srcStrides,
                std::vector<int64_t> dstStrides, const void *src, void *dst, int elemBytes,
                CopyArgs &c) {
  c.src = src;
  c.dst = dst;
  c.elemBytes = elemBytes;
  c.rank = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (c.rank == kMaxRank) {
      c.rank = kMaxRank + 1;
      return 0;
    }
    c.shape[c.rank] = shape[d];
    c.srcStrides[c.rank] = srcStrides[d];
    c.dstStrides[c.rank] = dstStrides[d];
    ++c.rank;
  }
  widenCopy(c);
  int64_t threads = 1;
  for (int d = 0; d < c.rank; ++d)
    threads *= c.shape[d];
  return threads;
}

bool sameFloatTypes(const std::vector<Operand> &ops, const Operand &y, std::string &error) {
  if (!isFloat(y.type)) {
    error = "expects float, float16 or bfloat16 results, got " + argString(y);
    return false;
  }
  for (const Operand &o : ops)
    if (o.present() && o.type != y.type) {
      error = "operand types differ: " + argString(o) + " and result " + argString(y);
      return false;
    }
  return true;
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

namespace {

using Lower = bool (StepLowering::*)(std::string &);
using LowerFn = std::function<bool(StepLowering &, std::string &)>;

const std::map<std::string, LowerFn> &table() {
  static const std::map<std::string, LowerFn> t = [] {
    std::map<std::string, LowerFn> m;
    auto simple = [&](const char *name, Lower fn) {
      m[name] = [fn](StepLowering &s, std::string &e) { return (s.*fn)(e); };
    };
    simple("ampc.Fused", &StepLowering::lowerFused);
    for (const char *n : {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})
      simple(n, &StepLowering::lowerCopyLike);
    simple("Transpose", &StepLowering::lowerTranspose);
    simple("Expand", &StepLowering::lowerExpand);
    simple("Concat", &StepLowering::lowerConcat);
    simple("Split", &StepLowering::lowerSplit);
    simple("Slice", &StepLowering::lowerSlice);
    simple("ampc.SliceGrad", &StepLowering::lowerSliceGrad);
    simple("Pad", &StepLowering::lowerPad);
    simple("Tile", &StepLowering::lowerTile);
    simple("Gather", &StepLowering::lowerGather);
    simple("GatherElements", &StepLowering::lowerGatherElements);
    simple("ampc.GatherGrad", &StepLowering::lowerGatherGrad);
    simple("MatMul", &StepLowering::lowerMatMul);
    simple("Gemm", &StepLowering::lowerGemm);
    simple("LayerNormalization", &StepLowering::lowerLayerNorm);
    simple("ampc.LayerNormalizationGrad", &StepLowering::lowerLayerNormGrad);
    simple("ampc.MaxPoolGrad", &StepLowering::lowerMaxPoolGrad);
    simple("ampc.AveragePoolGrad", &StepLowering::lowerAveragePoolGrad);
    simple("Conv", &StepLowering::lowerConv);
    simple("ampc.ConvGrad", &StepLowering::lowerConvGrad);
    simple("ampc.AllFinite", &StepLowering::lowerAllFinite);
    simple("ampc.AdamW", &StepLowering::lowerAdamW);
    simple("ampc.AllReduce", &StepLowering::lowerAllReduce);
    simple("Dropout", &StepLowering::lowerDropout);
    simple("ampc.DropoutGrad", &StepLowering::lowerDropoutGrad);
    const std::pair<const char *, ReduceOp> reductions[] = {
        {"ReduceSum", ReduceOp::Sum},         {"ReduceMean", ReduceOp::Mean},
        {"ReduceSumSquare", ReduceOp::SumSquare}, {"ReduceL1", ReduceOp::L1},
        {"ReduceL2", ReduceOp::L2},           {"ReduceMax", ReduceOp::Max},
        {"ReduceMin", ReduceOp::Min},         {"ReduceProd", ReduceOp::Prod},
        {"ReduceLogSum", ReduceOp::LogSum},   {"ReduceLogSumExp", ReduceOp::LogSumExp}};
    for (const auto &[name, op] : reductions) {
      ReduceOp r = op;
      m[name] = [r](StepLowering &s, std::string &e) { return s.lowerReduce(r, e); };
    }
    const std::pair<const char *, SoftOp> soft[] = {
        {"Softmax", SoftOp::Softmax},
        {"LogSoftmax", SoftOp::LogSoftmax},
        {"Hardmax", SoftOp::Hardmax},
        {"ampc.SoftmaxGrad", SoftOp::SoftmaxGrad},
        {"ampc.LogSoftmaxGrad", SoftOp::LogSoftmaxGrad}};
    for (const auto &[name, op] : soft) {
      SoftOp o = op;
      m[name] = [o](StepLowering &s, std::string &e) { return s.lowerSoftmax(o, e); };
    }
    auto flag = [&](const char *name, bool (StepLowering::*fn)(bool, std::string &), bool v) {
      m[name] = [fn, v](StepLowering &s, std::string &e) { return (s.*fn)(v, e); };
    };
    flag("BatchNormalization", &StepLowering::lowerBatchNorm, false);
    flag("ampc.BatchNormalizationGrad", &StepLowering::lowerBatchNorm, true);
    flag("SoftmaxCrossEntropyLoss", &StepLowering::lowerLoss, true);
    flag("NegativeLogLikelihoodLoss", &StepLowering::lowerLoss, false);
    flag("ampc.SoftmaxCrossEntropyLossGrad", &StepLowering::lowerLossGrad, true);
    flag("ampc.NegativeLogLikelihoodLossGrad", &StepLowering::lowerLossGrad, false);
    flag("MaxPool", &StepLowering::lowerPool, true);
    flag("AveragePool", &StepLowering::lowerPool, false);
    flag("GlobalMaxPool", &StepLowering::lowerGlobalPool, true);
    flag("GlobalAveragePool", &StepLowering::lowerGlobalPool, false);
    return m;
  }();
  return t;
}

} // namespace

bool StepLowering::lower(std::string &error) {
  auto it = table().find(step_.op());
  if (it == table().end()) {
    FusedOp op = fusedOpByName(step_.op());
    if (op != FusedOp::Count)
      return lowerElementwise(op, error);
    error = "the CUDA backend has no kernel for '" + step_.op() + "'";
    return false;
  }
  return it->second(*this, error);
}

std::vector<std::string> cudaKernelOps() {
  std::vector<std::string> ops;
  for (const auto &[name, fn] : table())
    ops.push_back(name);
  for (const FusedOpInfo &info : kFusedOps)
    if (!table().count(info.name))
      ops.push_back(info.name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

namespace {

/// Moves each AllReduceWait, with the unpacking copies that follow it, to
/// just before the first launch of the first step that reads an average:
/// the buckets travel while the steps in between run.
void deferAllReduceWaits(const plan::Program &prog, const plan::Plan &p,
                         std::vector<Launch> &launches) {
  struct Group {
    size_t begin, end;
    int reader;
  };
  std::vector<Group> groups;
  int buckets = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    if (launches[i].kind == Launch::AllReduce)
      launches[i].bucket = buckets;
    if (launches[i].kind != Launch::AllReduceWait)
      continue;
    launches[i].bucket = buckets++;
    size_t end = i + 1;
    while (end < launches.size() && launches[end].kind == Launch::Memcpy &&
           launches[end].step == launches[i].step)
      ++end;
    groups.push_back({i, end, firstReaderStep(p, prog, launches[i].step)});
    i = end - 1;
  }
  if (groups.empty())
    return;
  std::vector<Launch> ordered;
  ordered.reserve(launches.size());
  std::vector<bool> emitted(groups.size(), false);
  auto emitDue = [&](int step) {
    for (size_t g = 0; g < groups.size(); ++g)
      if (!emitted[g] && groups[g].reader <= step) {
        emitted[g] = true;
        ordered.insert(ordered.end(), launches.begin() + groups[g].begin,
                       launches.begin() + groups[g].end);
      }
  };
  size_t g = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    if (g < groups.size() && i == groups[g].begin) {
      i = groups[g++].end - 1;
      continue;
    }
    emitDue(launches[i].step);
    ordered.push_back(launches[i]);
  }
  emitDue(prog.steps_size());
  launches = std::move(ordered);
}

} // namespace

bool assignAllReduceBuffers(std::vector<Launch> &launches,
                            const std::function<void *(size_t)> &alloc) {
  std::map<int, void *> side;
  for (Launch &l : launches)
    if (l.kind == Launch::AllReduce) {
      if (!(l.side = alloc(l.bytes)))
        return false;
      side[l.bucket] = l.side;
    }
  for (Launch &l : launches)
    if (l.kind == Launch::AllReduceWait)
      l.side = side[l.bucket];
  return true;
}

bool lowerProgram(const plan::Plan &p, int index, const DeviceMemory &mem,
                  std::vector<Launch> &out, size_t &workspaceBytes, std::string &error) {
  if (index < 0 || index >= p.programs_size()) {
    error = "no program " + std::to_string(index);
    return false;
  }
  const plan::Program &prog = p.programs(index);
  out.clear();
  // Relu steps that run as their GEMM's epilogue launch nothing themselves.
  std::vector<int> relu = reluEpilogueSteps(p, prog);
  for (int s = 0; s < prog.steps_size(); ++s) {
    if (s > 0 && relu[s - 1] == s)
      continue;
    const plan::Step &step = prog.steps(s);
    StepLowering lowering(p, step, mem, out, s);
    if (relu[s] >= 0)
      lowering.fuseRelu(prog.steps(relu[s]).outputs(0));
    std::string why;
    if (!lowering.lower(why)) {
      error = "program '" + prog.name() + "' step " + std::to_string(s) + " (" + step.op() +
              " '" + step.name() + "'): " + why;
      return false;
    }
    workspaceBytes = std::max(workspaceBytes, lowering.workspaceUsed());
  }
  deferAllReduceWaits(prog, p, out);
  // State updates that the planner could not make in place.
  for (const plan::StateUpdate &u : prog.updates()) {
    void *dst = mem.tensor(u.state()), *src = mem.tensor(u.updated());
    if (dst == src)
      continue;
    Launch l;
    l.kind = Launch::Memcpy;
    l.dst = dst;
    l.src = src;
    l.bytes = planTensorBytes(p.tensors(u.state()));
    out.push_back(l);
  }
  return true;
}

std::string describeLaunch(const Launch &l) {
  switch (l.kind) {
  case Launch::Gemm: {
    const GemmCall &g = l.gemm;
    std::string s = "gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                    std::to_string(g.k);
    if (g.batch > 1)
      s += " x" + std::to_string(g.batch);
    static const char *epilogues[] = {"", " +bias", " relu", " +bias relu"};
    s += epilogues[static_cast<int>(g.epilogue)];
    return s + (g.lt >= 0 ? " (cuBLASLt)" : "");
  }
  case Launch::Memset:
    return "memset " + std::to_string(l.bytes) + " bytes";
  case Launch::Memcpy:
    return "memcpy " + std::to_string(l.bytes) + " bytes";
  case Launch::AllReduce:
    return "all-reduce " + std::to_string(l.bytes / 4) + " floats (start)";
  case Launch::AllReduceWait:
    return "all-reduce " + std::to_string(l.bytes / 4) + " floats (wait)";
  case Launch::CudnnConv:
    return describeCudnnCall(l.conv);
  case Launch::CompiledFused:
    return "Fused kernel (compiled), " + std::to_string(l.threads) + " threads";
  case Launch::Kernel:
    break;
  }
  static const char *names[] = {
#define AMPC_KERNEL_NAME(NAME, ARGS) #NAME,
      AMPC_CUDA_KERNELS(AMPC_KERNEL_NAME)
#undef AMPC_KERNEL_NAME
  };
  std::string name = std::string(names[static_cast<int>(l.kernel)]) + " kernel, ";
  int lanes = rowLanesOf(l);
  if (lanes)
    return name + std::to_string(l.threads) + " rows x " + std::to_string(lanes) + " threads";
  return name + std::to_string(l.threads) + " threads";
}

namespace {
template <typename A> int lanesOf(const Launch &l) {
  if constexpr (kIsRowKernel<A>)
    return l.as<A>().lanes;
  else
    return 0;
}
} // namespace

int rowLanesOf(const Launch &l) {
  if (l.kind != Launch::Kernel)
    return 0;
  switch (l.kernel) {
#define AMPC_ROW_LANES(NAME, ARGS)                                                                 \
  case KernelKind::NAME:                                                                           \
    return lanesOf<ARGS>(l);
    AMPC_CUDA_KERNELS(AMPC_ROW_LANES)
#undef AMPC_ROW_LANES
  }
  return 0;
}

} // namespace ampc::rt::cuda
