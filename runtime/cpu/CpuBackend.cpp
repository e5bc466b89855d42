//===- CpuBackend.cpp - Running plans on the CPU ---------------------------===//

#include "ampc/rt/Backend.h"

#include "BatchStats.h"
#include "CastPrologue.h"
#include "ChannelLayout.h"
#include "ColumnSumEpilogue.h"
#include "Kernel.h"
#include "NormEpilogue.h"
#include "SplitSource.h"
#include "TransposedResult.h"

#include "ampc/rt/PlanFile.h"
#include "ampc/rt/PlanQueries.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

namespace ampc::rt {

namespace cpu {

namespace {
std::map<std::string, KernelFactory> &registry() {
  static std::map<std::string, KernelFactory> r;
  return r;
}
} // namespace

void registerKernel(const std::string &op, KernelFactory factory) {
  registry()[op] = std::move(factory);
}

const KernelFactory *findKernel(const std::string &op) {
  auto it = registry().find(op);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> cpuKernelOps() {
  static std::once_flag once;
  std::call_once(once, registerAllCpuKernels);
  std::vector<std::string> out;
  for (const auto &[name, f] : registry())
    out.push_back(name);
  return out;
}

const plan::Attribute *StepContext::attr(const std::string &name) const {
  return planStepAttr(step, name);
}

int64_t StepContext::attrInt(const std::string &name, int64_t dflt) const {
  return planStepAttrInt(step, name, dflt);
}

double StepContext::attrFloat(const std::string &name, double dflt) const {
  const plan::Attribute *a = attr(name);
  if (!a)
    return dflt;
  if (a->value_case() == plan::Attribute::kF)
    return a->f();
  if (a->value_case() == plan::Attribute::kI)
    return static_cast<double>(a->i());
  return dflt;
}

std::string StepContext::attrString(const std::string &name, const std::string &dflt) const {
  const plan::Attribute *a = attr(name);
  return a && a->value_case() == plan::Attribute::kS ? a->s() : dflt;
}

std::vector<int64_t> StepContext::attrInts(const std::string &name,
                                           std::vector<int64_t> dflt) const {
  const plan::Attribute *a = attr(name);
  if (!a || a->value_case() != plan::Attribute::kInts)
    return dflt;
  return std::vector<int64_t>(a->ints().values().begin(), a->ints().values().end());
}

std::vector<double> StepContext::attrFloats(const std::string &name,
                                            std::vector<double> dflt) const {
  const plan::Attribute *a = attr(name);
  if (!a || a->value_case() != plan::Attribute::kFloats)
    return dflt;
  return std::vector<double>(a->floats().values().begin(), a->floats().values().end());
}

} // namespace cpu

namespace {

using namespace cpu;

/// 64-byte aligned, zero-filled memory.
class AlignedBuffer {
public:
  AlignedBuffer() = default;
  ~AlignedBuffer() { std::free(ptr_); }
  bool allocate(size_t bytes) {
    // Sizes come from the plan file: one near SIZE_MAX wrapped to 64 bytes
    // when rounded up, and every step then wrote past it (found by fuzzing).
    if (bytes > std::numeric_limits<size_t>::max() - 63)
      return false;
    size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    ptr_ = static_cast<uint8_t *>(std::aligned_alloc(64, rounded));
    if (!ptr_)
      return false;
    std::memset(ptr_, 0, rounded);
    return true;
  }
  uint8_t *get() const { return ptr_; }

private:
  uint8_t *ptr_ = nullptr;
};

class CpuBackend : public Backend {
public:
  explicit CpuBackend(const CpuOptions &opts) {
    int threads = opts.threads > 0 ? opts.threads
                                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads_ = threads;
    collective_ = opts.collective;
    pool_ = std::make_unique<ThreadPool>(threads);
    // oneDNN runs on OpenMP: give it the same thread count, so results are
    // the same run after run for a given --threads.
    omp_set_num_threads(threads);
    static std::once_flag once;
    std::call_once(once, registerAllCpuKernels);
  }

  ~CpuBackend() override {
    if (profile_)
      printProfile();
  }

  std::string name() const override { return "cpu (" + std::to_string(threads_) + " threads)"; }

  bool load(const plan::Plan &p, std::string &error) override {
    // The values go straight from `p` into the backend's buffers: its own
    // copy of the plan holds none (a GPT-2's weights are not held twice).
    copyPlanWithoutValues(p, plan_);
    if (!allocate(p, error))
      return false;
    blocked_ = chooseChannelBlocked(plan_);
    if (std::getenv("AMPC_CPU_LAYOUT_REPORT"))
      reportLayout();
    for (int i = 0; i < plan_.programs_size(); ++i)
      if (!prepareProgram(plan_.programs(i), error))
        return false;
    return true;
  }

  bool run(int index, std::string &error) override {
    if (index < 0 || index >= static_cast<int>(programs_.size())) {
      error = "no program " + std::to_string(index);
      return false;
    }
    Program &prog = programs_[index];
    const size_t n = prog.kernels.size();
    if (!profile_) {
      for (size_t s = 0; s < n; ++s) {
        for (size_t a : prog.finishBefore[s])
          prog.kernels[a]->finish();
        prog.kernels[s]->run();
      }
      for (size_t a : prog.finishBefore[n])
        prog.kernels[a]->finish();
    } else {
      // An asynchronous step's time is its start plus the wait in finish():
      // what the overlap did not hide.
      auto timed = [&](size_t s, auto &&fn) {
        auto t0 = std::chrono::steady_clock::now();
        fn();
        prog.seconds[s] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      for (size_t s = 0; s <= n; ++s) {
        for (size_t a : prog.finishBefore[s])
          timed(a, [&] { prog.kernels[a]->finish(); });
        if (s < n)
          timed(s, [&] { prog.kernels[s]->run(); });
      }
      ++prog.runs;
    }
    for (const auto &[dst, src] : prog.copies)
      std::memcpy(ptr_[dst], ptr_[src], rt::planTensorBytes(plan_.tensors(dst)));
    return true;
  }

  bool write(int tensor, const void *src, size_t bytes, std::string &error) override {
    if (!checkTransfer(tensor, bytes, error))
      return false;
    std::memcpy(ptr_[tensor], src, bytes);
    return true;
  }

  /// The tensor itself: run() is synchronous, so nothing reads it meanwhile.
  void *inputBuffer(int tensor, size_t bytes, std::string &error) override {
    error.clear();
    return checkTransfer(tensor, bytes, error) ? ptr_[tensor] : nullptr;
  }
  bool commitInput(int tensor, size_t bytes, std::string &error) override {
    return checkTransfer(tensor, bytes, error);
  }

  bool read(int tensor, void *dst, size_t bytes, std::string &error) override {
    if (!checkTransfer(tensor, bytes, error))
      return false;
    std::memcpy(dst, ptr_[tensor], bytes);
    return true;
  }

private:
  struct Program {
    std::vector<std::unique_ptr<Kernel>> kernels;
    std::vector<std::pair<int, int>> copies; // (state, updated)
    // finishBefore[s]: asynchronous steps to complete before step s runs
    // (s == number of steps: at the end of the program).
    std::vector<std::vector<size_t>> finishBefore;
    // AMPC_CPU_PROFILE=1: seconds per step, summed over runs.
    std::vector<double> seconds;
    int64_t runs = 0;
    const plan::Program *source = nullptr;
  };

  /// How many of the slowest steps the profile lists: AMPC_CPU_PROFILE's
  /// value when it is a number above 1, otherwise 25.
  static size_t stepsListed() {
    const char *value = std::getenv("AMPC_CPU_PROFILE");
    long n = value ? std::strtol(value, nullptr, 10) : 0;
    return n > 1 ? static_cast<size_t>(n) : 25;
  }

  /// With AMPC_CPU_PROFILE set, the steps that took most time, per program.
  void printProfile() const {
    for (const Program &prog : programs_) {
      if (!prog.runs)
        continue;
      std::vector<size_t> order(prog.seconds.size());
      for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return prog.seconds[a] > prog.seconds[b]; });
      double total = 0;
      for (double t : prog.seconds)
        total += t;
      std::fprintf(stderr, "profile of program '%s': %.3f ms per run over %lld runs\n",
                   prog.source->name().c_str(), 1e3 * total / prog.runs,
                   static_cast<long long>(prog.runs));
      // Per operator: where the time goes, and how much of it oneDNN's
      // GEMMs and convolutions take.
      std::map<std::string, std::pair<double, int>> byOp;
      for (size_t i = 0; i < prog.seconds.size(); ++i) {
        auto &entry = byOp[prog.source->steps(static_cast<int>(i)).op()];
        entry.first += prog.seconds[i];
        ++entry.second;
      }
      std::vector<std::pair<double, std::string>> ops;
      for (const auto &[op, entry] : byOp)
        ops.push_back({entry.first, op});
      std::sort(ops.rbegin(), ops.rend());
      std::fprintf(stderr, "  by operator:\n");
      for (const auto &[seconds, op] : ops)
        std::fprintf(stderr, "  %8.3f ms %5.1f%%  %4d x %s\n", 1e3 * seconds / prog.runs,
                     100 * seconds / total, byOp[op].second, op.c_str());
      std::fprintf(stderr, "  by step:\n");
      size_t listed = std::min(order.size(), stepsListed());
      for (size_t k = 0; k < listed; ++k) {
        const plan::Step &step = prog.source->steps(order[k]);
        std::fprintf(stderr, "  %6.3f ms %5.1f%%  step %zu %s '%s'\n",
                     1e3 * prog.seconds[order[k]] / prog.runs,
                     100 * prog.seconds[order[k]] / total, order[k], step.op().c_str(),
                     step.name().c_str());
      }
    }
  }

  bool checkTransfer(int tensor, size_t bytes, std::string &error) {
    return rt::checkTransfer(
        plan_, tensor, bytes, [&](int id) { return ptr_[id] != nullptr; }, error);
  }

  /// One arena, one block of state, one block of constants; views point into
  /// their base tensor.
  bool allocate(const plan::Plan &values, std::string &error) {
    int n = plan_.tensors_size();
    ptr_.assign(n, nullptr);
    size_t stateBytes = 0, constBytes = 0;
    std::vector<size_t> offset(n, 0);
    for (int i = 0; i < n; ++i) {
      const plan::Tensor &t = plan_.tensors(i);
      if (t.has_view_of())
        continue;
      size_t raw = rt::planTensorBytes(t);
      size_t bytes = (raw + 63) / 64 * 64;
      size_t &total = t.storage() == plan::STATE ? stateBytes : constBytes;
      if (t.storage() != plan::STATE && t.storage() != plan::CONSTANT)
        continue;
      if (raw > std::numeric_limits<size_t>::max() - 63 ||
          __builtin_add_overflow(total, bytes, &total)) {
        error = "tensor '" + t.name() + "' is too large to allocate";
        return false;
      }
      offset[i] = total - bytes;
    }
    if (!arena_.allocate(plan_.memory().arena_bytes()) || !state_.allocate(stateBytes) ||
        !constants_.allocate(constBytes)) {
      error = "cannot allocate " +
              std::to_string(plan_.memory().arena_bytes() + stateBytes + constBytes) +
              " bytes of host memory";
      return false;
    }
    for (int i = 0; i < n; ++i) {
      const plan::Tensor &t = plan_.tensors(i);
      if (t.has_view_of())
        continue;
      switch (t.storage()) {
      case plan::ARENA:
        ptr_[i] = arena_.get() + t.offset();
        break;
      case plan::STATE:
        ptr_[i] = state_.get() + offset[i];
        if (t.zero_init())
          std::memset(ptr_[i], 0, planTensorBytes(t));
        else if (!t.has_cast_of())
          std::memcpy(ptr_[i], values.tensors(i).data().data(), values.tensors(i).data().size());
        break;
      case plan::CONSTANT:
        ptr_[i] = constants_.get() + offset[i];
        std::memcpy(ptr_[i], values.tensors(i).data().data(), values.tensors(i).data().size());
        break;
      default:
        break; // VIRTUAL: no storage
      }
    }
    for (int i = 0; i < n; ++i)
      if (plan_.tensors(i).has_cast_of())
        initCastState(plan_.tensors(i), ptr_[plan_.tensors(i).cast_of()], ptr_[i]);
    for (int i = 0; i < n; ++i)
      if (plan_.tensors(i).has_view_of())
        ptr_[i] = ptr_[plan_.tensors(i).view_of()];
    return true;
  }

  TensorArg arg(int id) const {
    TensorArg a;
    if (id < 0)
      return a;
    const plan::Tensor &t = plan_.tensors(id);
    a.data = ptr_[id];
    a.type = t.type();
    a.shape.assign(t.shape().begin(), t.shape().end());
    a.numel = planNumElements(t);
    return a;
  }

  /// Operand `index` of `step` as its kernel sees it. A tensor kept in
  /// channel blocks (blocked_) is given so where the step takes that
  /// layout; otherwise the step gets a plain copy, converted from the
  /// tensor before it runs (an input) or into the tensor after (an output),
  /// appended to `copies`.
  /// False when that copy cannot be allocated.
  bool operandArg(const plan::Step &step, bool output, int index,
                  std::vector<ChannelLayoutKernel::Copy> &copies, TensorArg &a) {
    int id = output ? step.outputs(index) : step.inputs(index);
    a = arg(id);
    if (id < 0 || !blocked_[id])
      return true;
    if (operandLayout(plan_, step, output, index) != OperandLayout::Plain) {
      a.channelBlocked = true;
      return true;
    }
    auto &buffer = layoutCopies_.emplace_back(std::make_unique<AlignedBuffer>());
    if (!buffer->allocate(planTensorBytes(plan_.tensors(id))))
      return false;
    ChannelLayoutKernel::Copy c{channelLayoutMove(a, output), nullptr, nullptr};
    c.src = output ? buffer->get() : a.data;
    c.dst = output ? a.data : buffer->get();
    a.data = buffer->get();
    copies.push_back(c);
    return true;
  }

  /// AMPC_CPU_LAYOUT_REPORT: how many activations are kept in channel
  /// blocks, and their bytes (stderr).
  void reportLayout() const {
    int64_t count = 0, bytes = 0;
    for (int i = 0; i < plan_.tensors_size(); ++i)
      if (blocked_[i]) {
        ++count;
        bytes += static_cast<int64_t>(planTensorBytes(plan_.tensors(i)));
      }
    std::fprintf(stderr, "cpu layout: %lld tensors (%lld bytes) in channel blocks of 16\n",
                 static_cast<long long>(count), static_cast<long long>(bytes));
  }

  /// Each asynchronous step completes just before the first later step that
  /// reads one of its outputs (through any view), else at the end.
  void scheduleFinishes(const plan::Program &prog, Program &out) const {
    size_t n = out.kernels.size();
    out.finishBefore.assign(n + 1, {});
    for (size_t s = 0; s < n; ++s) {
      if (!out.kernels[s]->asynchronous())
        continue;
      size_t reader = static_cast<size_t>(firstReaderStep(plan_, prog, static_cast<int>(s)));
      out.finishBefore[reader].push_back(s);
    }
  }

  /// The normalizations that write the Relu or cast after them
  /// (NormEpilogue.h), where the three tensors share a layout; a step with a
  /// cast prologue reads its source, not its input 0.
  std::vector<NormEpilogue> epiloguesOf(const plan::Program &prog,
                                        const std::vector<CastPrologue> &prologues) const {
    std::vector<int> input0(prologues.size(), -1);
    for (size_t s = 0; s < prologues.size(); ++s)
      input0[s] = prologues[s].source;
    std::vector<NormEpilogue> e = normEpilogues(plan_, prog, input0);
    for (int s = 0; s < prog.steps_size(); ++s) {
      if (!e[s].fused)
        continue;
      int y = prog.steps(s).outputs(0), z = prog.steps(s + 1).outputs(0), r = e[s].residual;
      if (blocked_[y] != blocked_[z] || (r >= 0 && blocked_[r] != blocked_[y]))
        e[s] = NormEpilogue();
    }
    return e;
  }

  /// The ReduceSums offered to the fused steps before them
  /// (ColumnSumEpilogue.h), where neither tensor is kept in channel blocks.
  std::vector<ColumnSumEpilogue> columnSumEpiloguesOf(const plan::Program &prog) const {
    std::vector<ColumnSumEpilogue> e =
        columnSumEpilogues(plan_, prog, [this](int id) { return arg(id); });
    for (int s = 0; s < prog.steps_size(); ++s)
      if (e[s].result >= 0 && (blocked_[prog.steps(s).outputs(e[s].result)] || blocked_[e[s].sums]))
        e[s] = ColumnSumEpilogue();
    return e;
  }

  /// The steps that read the bf16 tensor a Cast before them widens
  /// (CastPrologue.h), where neither is kept in channel blocks.
  std::vector<CastPrologue> castProloguesOf(const plan::Program &prog) const {
    std::vector<CastPrologue> e = castPrologues(plan_, prog);
    for (int s = 0; s < prog.steps_size(); ++s)
      if (e[s].source >= 0 && (blocked_[e[s].source] || blocked_[prog.steps(s).inputs(0)]))
        e[s] = CastPrologue();
    return e;
  }

  /// The MatMuls that write the Transpose of their result
  /// (TransposedResult.h), where neither result is kept in channel blocks.
  std::vector<TransposedResult> transposedResultsOf(const plan::Program &prog) const {
    std::vector<TransposedResult> e = transposedResults(plan_, prog);
    for (int s = 0; s < prog.steps_size(); ++s)
      if (e[s].transposeStep >= 0 && (blocked_[prog.steps(s).outputs(0)] ||
                                      blocked_[prog.steps(e[s].transposeStep).outputs(0)]))
        e[s] = TransposedResult();
    return e;
  }

  /// The Transposes that gather their part from a Split's operand
  /// (SplitSource.h), where neither is kept in channel blocks; a Split is
  /// skipped only when every one of its results is gathered so.
  std::vector<SplitSource> splitSourcesOf(const plan::Program &prog) const {
    std::vector<SplitSource> e = splitSources(plan_, prog);
    std::vector<char> refused(prog.steps_size(), 0);
    for (int s = 0; s < prog.steps_size(); ++s)
      if (e[s].source >= 0 && (blocked_[e[s].source] || blocked_[prog.steps(s).inputs(0)]))
        refused[e[s].splitStep] = 1;
    for (SplitSource &src : e)
      if (src.source >= 0 && refused[src.splitStep])
        src = SplitSource();
    return e;
  }

  /// Operand `id` as the Relu step after a normalization binds it: as
  /// stored, in channel blocks or not (epiloguesOf checked they agree).
  TensorArg epilogueArg(int id) const {
    TensorArg a = arg(id);
    a.channelBlocked = id >= 0 && blocked_[id];
    return a;
  }

  bool prepareProgram(const plan::Program &prog, std::string &error) {
    Program out;
    std::vector<CastPrologue> prologues = castProloguesOf(prog);
    std::vector<NormEpilogue> epilogues = epiloguesOf(prog, prologues);
    if (std::getenv("AMPC_CPU_EPILOGUE_REPORT")) {
      int relu = 0, cast = 0, castOnly = 0;
      for (const NormEpilogue &e : epilogues) {
        relu += e.fused && !e.cast;
        cast += e.cast;
        castOnly += e.castOnly;
      }
      std::fprintf(
          stderr,
          "cpu epilogues: program '%s': %d BatchNormalization steps write the Relu after them\n",
          prog.name().c_str(), relu);
      std::fprintf(
          stderr,
          "cpu epilogues: program '%s': %d LayerNormalization, Softmax and SoftmaxGrad steps "
          "write the bf16 cast after them, %d of them instead of their own result\n",
          prog.name().c_str(), cast, castOnly);
    }
    std::vector<ColumnSumEpilogue> columnSums = columnSumEpiloguesOf(prog);
    // Per BatchNormalization step whose statistics a grad reuses: the
    // buffer between the two kernels (BatchStats.h).
    std::vector<int> statsFrom = batchStatsSources(plan_, prog);
    std::vector<std::shared_ptr<std::vector<float>>> stats(prog.steps_size());
    int statsReused = 0;
    for (int g = 0; g < prog.steps_size(); ++g) {
      int f = statsFrom[g];
      if (f < 0)
        continue;
      const plan::Tensor &x = plan_.tensors(prog.steps(g).inputs(1));
      if (x.shape_size() < 2 || x.shape(1) <= 0) {
        statsFrom[g] = -1;
        continue;
      }
      if (!stats[f])
        stats[f] = std::make_shared<std::vector<float>>(2 * static_cast<size_t>(x.shape(1)));
      ++statsReused;
    }
    std::vector<SplitSource> splitSourced = splitSourcesOf(prog);
    std::vector<uint8_t> splitSkipped(prog.steps_size(), 0);
    int splitsSkipped = 0;
    for (const SplitSource &src : splitSourced)
      if (src.source >= 0 && !splitSkipped[src.splitStep]) {
        splitSkipped[src.splitStep] = 1;
        ++splitsSkipped;
      }
    std::vector<TransposedResult> transposed = transposedResultsOf(prog);
    std::vector<uint8_t> transposeTaken(prog.steps_size(), 0);
    int transposesTaken = 0;
    std::vector<uint8_t> castTaken(prog.steps_size(), 0);
    for (const CastPrologue &e : prologues)
      if (e.source >= 0)
        castTaken[e.castStep] = 1;
    bool sumsTaken = false; // by the step before
    int sumsFused = 0, sumsOnly = 0, castsTaken = 0;
    for (int s = 0; s < prog.steps_size(); ++s) {
      const plan::Step &step = prog.steps(s);
      if ((s > 0 && epilogues[s - 1].fused) || sumsTaken || castTaken[s] || transposeTaken[s] ||
          splitSkipped[s]) {
        // Done by the step before it, or a later step reads its operand.
        out.kernels.push_back(std::make_unique<LambdaKernel>([] {}));
        sumsTaken = false;
        castsTaken += castTaken[s];
        continue;
      }
      std::string where = "program '" + prog.name() + "' step " + std::to_string(s) + " (" +
                          step.op() + " '" + step.name() + "')";
      const KernelFactory *factory = findKernel(step.op());
      if (!factory) {
        error = where + ": the CPU backend has no kernel for '" + step.op() + "'";
        return false;
      }
      StepContext ctx{plan_,       step, {}, {}, *pool_, [this](int id) { return arg(id); },
                      collective_, {},   {}};
      std::vector<ChannelLayoutKernel::Copy> before, after;
      bool bound = true;
      for (int i = 0; i < step.inputs_size(); ++i)
        bound = bound && operandArg(step, false, i, before, ctx.inputs.emplace_back());
      for (int i = 0; i < step.outputs_size(); ++i)
        bound = bound && operandArg(step, true, i, after, ctx.outputs.emplace_back());
      if (!bound) {
        error = where + ": cannot allocate the plain copy of a channel-blocked operand";
        return false;
      }
      if (prologues[s].source >= 0)
        ctx.inputs[0] = arg(prologues[s].source);
      ctx.batchStatsOut = stats[s];
      if (statsFrom[s] >= 0)
        ctx.batchStatsIn = stats[statsFrom[s]];
      if (epilogues[s].cast) {
        ctx.castOutput = arg(prog.steps(s + 1).outputs(0));
        ctx.castOnly = epilogues[s].castOnly;
        if (epilogues[s].divisor >= 0)
          ctx.castDivisor = arg(epilogues[s].divisor);
      } else if (epilogues[s].fused) {
        ctx.reluOutput = epilogueArg(prog.steps(s + 1).outputs(0));
        ctx.reluResidual = epilogueArg(epilogues[s].residual);
      }
      if (columnSums[s].result >= 0) {
        ctx.columnSumTaken = &sumsTaken;
        ctx.columnSumOf = columnSums[s].result;
        ctx.columnSums = arg(columnSums[s].sums);
        ctx.columnSumsOnly = columnSums[s].sumsOnly;
      }
      if (splitSourced[s].source >= 0) {
        ctx.gathered = arg(splitSourced[s].source);
        ctx.gatheredOffset = splitSourced[s].offset;
        ctx.gatheredStrides = splitSourced[s].strides;
      }
      bool transposedTaken = false;
      if (transposed[s].transposeStep >= 0) {
        ctx.transposedTaken = &transposedTaken;
        ctx.transposed = arg(prog.steps(transposed[s].transposeStep).outputs(0));
        ctx.transposedStrides = transposed[s].strides;
      }
      std::string why;
      std::unique_ptr<Kernel> k = (*factory)(ctx, why);
      if (!k) {
        error = where + ": " + (why.empty() ? "unsupported operands" : why);
        return false;
      }
      if (transposedTaken) {
        transposeTaken[transposed[s].transposeStep] = 1;
        ++transposesTaken;
      }
      if (sumsTaken) {
        ++sumsFused;
        sumsOnly += ctx.columnSumsOnly;
      }
      if (!before.empty() || !after.empty())
        k = std::make_unique<ChannelLayoutKernel>(std::move(k), std::move(before),
                                                  std::move(after));
      out.kernels.push_back(std::move(k));
    }
    if (std::getenv("AMPC_CPU_EPILOGUE_REPORT")) {
      std::fprintf(stderr,
                   "cpu epilogues: program '%s': %d fused steps write the column sums of the "
                   "ReduceSum after them, %d of them instead of the summed result\n",
                   prog.name().c_str(), sumsFused, sumsOnly);
      std::fprintf(stderr,
                   "cpu epilogues: program '%s': %d BatchNormalizationGrad steps read the batch "
                   "statistics of their forward step\n",
                   prog.name().c_str(), statsReused);
      std::fprintf(stderr,
                   "cpu epilogues: program '%s': %d steps read the bf16 tensor that a Cast "
                   "before them widens, instead of its result\n",
                   prog.name().c_str(), castsTaken);
      std::fprintf(stderr,
                   "cpu epilogues: program '%s': %d MatMul steps write the Transpose of their "
                   "result instead of it\n",
                   prog.name().c_str(), transposesTaken);
      std::fprintf(stderr,
                   "cpu epilogues: program '%s': %d Split steps are skipped, their Transposes "
                   "reading the Split's operand\n",
                   prog.name().c_str(), splitsSkipped);
    }
    scheduleFinishes(prog, out);
    for (const plan::StateUpdate &u : prog.updates())
      if (ptr_[u.state()] != ptr_[u.updated()])
        out.copies.push_back({u.state(), u.updated()});
    out.seconds.assign(out.kernels.size(), 0.0);
    out.source = &prog;
    programs_.push_back(std::move(out));
    return true;
  }

  int threads_ = 1;
  Collective *collective_ = nullptr;
  bool profile_ = std::getenv("AMPC_CPU_PROFILE") != nullptr;
  std::unique_ptr<ThreadPool> pool_;
  plan::Plan plan_;
  AlignedBuffer arena_, state_, constants_;
  std::vector<uint8_t *> ptr_;
  /// Per tensor: kept in channel blocks of 16 (ChannelLayout.h).
  std::vector<uint8_t> blocked_;
  /// The plain copies of blocked operands for steps that need that layout.
  std::vector<std::unique_ptr<AlignedBuffer>> layoutCopies_;
  std::vector<Program> programs_;
};

} // namespace

std::unique_ptr<Backend> createCpuBackend(const CpuOptions &opts) {
  return std::make_unique<CpuBackend>(opts);
}

} // namespace ampc::rt
