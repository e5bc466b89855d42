//===- Trainer.cpp - amp-run's training loop -------------------------------===//

#include "ampc/rt/Trainer.h"

#include "DataParallel.h"

#include "ampc/rt/Npy.h"
#include "ampc/rt/PlanFile.h"
#include "ampc/rt/Printable.h"
#include "ampc/rt/Session.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

namespace ampc::rt {

namespace {

/// Temporaries of atomic writes ("<file>.tmp.<pid>") whose process is gone:
/// a run killed while it wrote a checkpoint left one behind.
void removeStaleTemporaries(const std::string &dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    size_t at = name.rfind(".tmp.");
    if (at == std::string::npos)
      continue;
    char *end = nullptr;
    long pid = std::strtol(name.c_str() + at + 5, &end, 10);
    if (*end || pid <= 0)
      continue;
    bool alive = ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
    if (!alive) // a live process may be writing it
      fs::remove(entry.path(), ec);
  }
}

/// A resumed run keeps the metrics of the steps up to its checkpoint: the
/// steps after it, written before the interruption, run again and would
/// appear twice.
bool trimMetrics(const std::string &path, int64_t step, std::string &error) {
  std::ifstream in(path);
  if (!in)
    return true; // no metrics yet
  std::string line, kept;
  while (std::getline(in, line)) {
    size_t at = line.find("\"step\": ");
    if (at == std::string::npos)
      continue;
    if (std::strtoll(line.c_str() + at + 8, nullptr, 10) <= step)
      kept += line + "\n";
  }
  return writeFileAtomic(path, kept, error, Durability::ProcessCrash);
}


using Clock = std::chrono::steady_clock;

/// Iterates over a data set in epochs of whole batches (a last partial batch
/// is dropped), reshuffled per epoch from (seed, epoch) when asked.
class DataLoader {
public:
  /// Rank `rank` of `ranks` reads samples rank, rank + ranks, ... of each
  /// global batch of ranks x the plan's batch (the same order on every rank).
  void shard(int rank, int ranks) {
    rank_ = rank;
    ranks_ = ranks;
  }

  bool open(const std::string &path, const Session &session, int program, int64_t batchSize,
            std::string &error) {
    path_ = path;
    if (!readNpz(path, arrays_, error))
      return false;
    const plan::Program &prog = session.plan().programs(program);
    for (const plan::Binding &b : prog.inputs()) {
      auto it = arrays_.find(b.name());
      if (it == arrays_.end()) {
        if (b.has_default())
          continue;
        error = path + ": no array named '" + b.name() + "' for the plan's input of that name";
        return false;
      }
      const plan::Tensor &t = session.plan().tensors(b.tensor());
      if (t.shape_size() == 0) {
        error = path + ": input '" + b.name() + "' is a scalar, it cannot come from a data set";
        return false;
      }
      const HostArray &a = it->second;
      std::vector<int64_t> sample(t.shape().begin() + 1, t.shape().end());
      std::vector<int64_t> have(a.shape.begin() + (a.shape.empty() ? 0 : 1), a.shape.end());
      if (a.type != elemTypeOf(t.type()) || a.shape.empty() || have != sample) {
        error = path + ": array '" + b.name() + "' is " + elemName(a.type) + " " +
                shapeText(a.shape) + ", the plan needs " + elemName(elemTypeOf(t.type())) +
                " samples of shape " + shapeText(sample) + " (samples first)";
        return false;
      }
      int64_t planBatch = t.shape(0);
      if (planBatch < 1) {
        error = path + ": the plan's input '" + b.name() + "' takes batches of " +
                std::to_string(planBatch) + " samples: nothing to train on";
        return false;
      }
      if (batchSize && batchSize != planBatch) {
        error = "--batch-size " + std::to_string(batchSize) + " differs from the plan's batch of " +
                std::to_string(planBatch) + " (recompile with --batch=" +
                std::to_string(batchSize) + ")";
        return false;
      }
      if (samples_ < 0)
        samples_ = a.shape[0];
      if (a.shape[0] != samples_) {
        error = path + ": arrays hold different numbers of samples";
        return false;
      }
      batch_ = planBatch;
      inputs_.push_back(b.name());
    }
    // The sample order is a vector of indices: a header may claim any count.
    if (samples_ > (int64_t(1) << 32)) {
      error = path + ": " + std::to_string(samples_) + " samples, more than a data set can hold";
      return false;
    }
    if (samples_ < batch_ * ranks_) {
      error = path + ": " + std::to_string(samples_) + " samples, fewer than one batch of " +
              std::to_string(batch_ * ranks_) +
              (ranks_ > 1 ? " (" + std::to_string(ranks_) + " ranks x " + std::to_string(batch_) + ")"
                          : std::string());
      return false;
    }
    return true;
  }

  /// Feeds the batch at (epoch, cursor) and advances.
  bool feedNext(Session &session, int program, bool shuffle, uint64_t seed, int64_t &epoch,
                int64_t &cursor, std::string &error) {
    const int64_t global = batch_ * ranks_;
    if (cursor > samples_ - global) { // (cursor + global could overflow)
      ++epoch;
      cursor = 0;
    }
    const std::vector<int64_t> &order = permutation(epoch, shuffle, seed);
    const int64_t *picked = order.data() + cursor + rank_;
    for (const std::string &name : inputs_) {
      const HostArray &a = arrays_.at(name);
      size_t sampleBytes = a.bytes.size() / static_cast<size_t>(samples_);
      std::vector<int64_t> shape = a.shape;
      shape[0] = batch_;
      // Samples that follow each other in the data set (no shuffling, one
      // rank) are copied as one run; the batch is written straight into the
      // backend's input buffer where it has one (CUDA: pinned memory).
      auto fill = [&](uint8_t *dst) {
        for (int64_t i = 0; i < batch_;) {
          int64_t run = 1;
          while (i + run < batch_ && picked[(i + run) * ranks_] == picked[i * ranks_] + run)
            ++run;
          std::memcpy(dst + i * sampleBytes, a.bytes.data() + picked[i * ranks_] * sampleBytes,
                      sampleBytes * run);
          i += run;
        }
      };
      if (!session.feedWith(program, name, a.type, shape, fill, scratch_[name], path_, error))
        return false;
    }
    cursor += global;
    return true;
  }

private:
  static std::string shapeText(const std::vector<int64_t> &s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i)
      out += (i ? "," : "") + std::to_string(s[i]);
    return out + "]";
  }

  const std::vector<int64_t> &permutation(int64_t epoch, bool shuffle, uint64_t seed) {
    if (permEpoch_ == epoch && !perm_.empty())
      return perm_;
    perm_.resize(samples_);
    std::iota(perm_.begin(), perm_.end(), 0);
    if (shuffle) {
      // Fisher-Yates with a generator fixed by (seed, epoch): reproducible,
      // and a resumed run reshuffles exactly as the uninterrupted one.
      std::mt19937_64 gen(seed * 1000003ULL + static_cast<uint64_t>(epoch));
      for (int64_t i = samples_ - 1; i > 0; --i)
        std::swap(perm_[i], perm_[gen() % static_cast<uint64_t>(i + 1)]);
    }
    permEpoch_ = epoch;
    return perm_;
  }

  std::string path_;
  std::map<std::string, HostArray> arrays_;
  /// Each input's batch when the backend has no input buffer, kept between
  /// steps.
  std::map<std::string, HostArray> scratch_;
  std::vector<std::string> inputs_;
  int64_t samples_ = -1, batch_ = 0;
  int rank_ = 0, ranks_ = 1;
  std::vector<int64_t> perm_;
  int64_t permEpoch_ = -1;
};

std::string info(const plan::Plan &p, const std::string &key, const std::string &dflt = "") {
  auto it = p.info().find(key);
  return it == p.info().end() ? dflt : it->second;
}

/// Reads a scalar output as double (NaN when absent).
double scalarOutput(Session &s, int program, const std::string &name) {
  if (name.empty())
    return NAN;
  HostArray a;
  std::string error;
  if (!s.output(program, name, a, error) || a.numElements() < 1)
    return NAN;
  return a.at(0);
}

/// Whether a program's outputs and its inputs occupy separate arena bytes,
/// so that the next batch may be written while the outputs of the step just
/// run have not been read yet. Conservative: compares whole base tensors.
bool inputsApartFromOutputs(const plan::Plan &p, int program) {
  auto bytesOf = [&](int id, uint64_t &lo, uint64_t &hi) {
    const plan::Tensor &t = p.tensors(id);
    const plan::Tensor &base = t.has_view_of() ? p.tensors(t.view_of()) : t;
    lo = base.offset();
    hi = lo + planTensorBytes(base);
    return base.storage() == plan::ARENA;
  };
  const plan::Program &prog = p.programs(program);
  for (const plan::Binding &in : prog.inputs()) {
    uint64_t inLo, inHi;
    if (!bytesOf(in.tensor(), inLo, inHi))
      return false;
    for (const plan::Binding &out : prog.outputs()) {
      uint64_t outLo, outHi;
      if (bytesOf(out.tensor(), outLo, outHi) && outLo < inHi && inLo < outHi)
        return false;
    }
  }
  return true;
}

/// Seconds a collective call may wait for the other ranks (AMPC_DIST_TIMEOUT).
double distTimeout() {
  const char *v = std::getenv("AMPC_DIST_TIMEOUT");
  double t = v && *v ? std::strtod(v, nullptr) : 0;
  return t > 0 ? t : 300;
}

/// Steps between two checks that the ranks' parameters agree (AMPC_DIST_CHECK_EVERY).
int64_t distCheckEvery() {
  const char *v = std::getenv("AMPC_DIST_CHECK_EVERY");
  long long k = v && *v ? std::strtoll(v, nullptr, 10) : 0;
  return k > 0 ? k : 100;
}

std::string jsonNumber(double v) {
  if (std::isnan(v) || std::isinf(v))
    return "null";
  std::ostringstream os;
  os << std::setprecision(9) << v;
  return os.str();
}

} // namespace

int runTraining(const TrainOptions &given, std::ostream &out, std::ostream &err) {
  auto fail = [&](const std::string &msg) {
    err << "amp-run: error: " << printable(msg) << "\n";
    return 1;
  };
  std::string why, error;
  // Ranks: one process, or one of several started by mpirun / srun.
  std::unique_ptr<Collective> ranks = createCollective(distTimeout(), error);
  if (!ranks)
    return fail(error);
  const bool lead = ranks->rank() == 0, parallel = ranks->size() > 1;
  if (parallel)
    reportLauncherTermination(ranks->rank());
  // Only rank 0 reports and writes files; every rank trains.
  TrainOptions opts = given;
  if (!lead) {
    opts.quiet = true;
    opts.metricsPath.clear();
    opts.dumpGrads.clear();
    opts.dumpParams.clear();
    opts.exportOnnx.clear();
  }
  // Backend.
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Collective> gpuRanks; // NCCL, for data-parallel CUDA plans
  if (opts.backend == "cuda" || opts.backend == "auto") {
    if (cudaAvailable(why)) {
      if (parallel) {
        gpuRanks = createDeviceCollective(*ranks, error);
        if (!gpuRanks)
          return fail(error);
        opts.cuda.collective = gpuRanks.get();
      }
      backend = createCudaBackend(opts.cuda, error);
      if (!backend)
        return fail(error);
    } else if (opts.backend == "cuda") {
      return fail("no CUDA device available (" + why + ")");
    } else if (!opts.quiet) {
      err << "amp-run: note: no CUDA device available (" << why << "); running on the CPU\n";
    }
  } else if (opts.backend != "cpu" && opts.backend != "auto") {
    return fail("--backend must be cpu, cuda or auto, got '" + opts.backend + "'");
  }
  if (!backend) {
    backend = createCpuBackend({opts.threads, ranks.get()});
    if (!backend)
      return fail("this amp-run has no CPU backend (a runtime-only build, AMPC_RUNTIME_ONLY); "
                  "use --backend=cuda");
    if (!opts.quiet && (!opts.cuda.profilePath.empty() || opts.cuda.memoryLimit))
      err << "amp-run: note: --profile and --memory-limit apply to the cuda backend; ignored on "
             "the CPU\n";
  }
  if (opts.batchSize && opts.dataPath.empty())
    return fail("--batch-size goes with --data (a --feed is one whole batch of the plan's size)");

  auto session = Session::open(opts.planPath, std::move(backend), error);
  if (!session)
    return fail(error);
  const plan::Plan &plan = session->plan();
  if (parallel && !planAveragesGradients(plan))
    return fail(opts.planPath + ": the plan does not average gradients across ranks: compile it "
                "with amp-opt --train --data-parallel");
  if (parallel && lead && !opts.quiet)
    out << "data parallel: " << ranks->size() << " ranks ("
        << (gpuRanks ? gpuRanks->kind() : ranks->kind()) << ")\n";
  for (const std::string &dir : {opts.dumpParams, opts.dumpGrads})
    if (!dir.empty() && !session->dumpFileNamesDistinct(dir, error))
      return fail(error);

  // Programs: one "step", or "accumulate" run N times and then "apply".
  int step = session->program("step");
  int accumulate = session->program("accumulate"), apply = session->program("apply");
  std::string accumulateInfo = info(plan, "accumulate", "1");
  char *end = nullptr;
  errno = 0;
  int64_t microBatches = std::strtoll(accumulateInfo.c_str(), &end, 10);
  if (accumulateInfo.empty() || *end || errno == ERANGE || microBatches < 1)
    return fail(opts.planPath + ": the plan's info 'accumulate' is not a positive integer");
  int feedProgram = step >= 0 ? step : accumulate;
  if (feedProgram < 0 || (step < 0 && apply < 0))
    return fail(opts.planPath + ": the plan has neither a 'step' nor 'accumulate'/'apply' programs");

  for (const auto &[name, path] : opts.feeds) {
    HostArray a;
    if (!readNpy(path, a, error))
      return fail(error);
    if (!session->feed(feedProgram, name, a, path, error))
      return fail(error);
  }
  DataLoader data;
  data.shard(ranks->rank(), ranks->size());
  if (!opts.dataPath.empty() &&
      !data.open(opts.dataPath, *session, feedProgram, opts.batchSize, error))
    return fail(error);
  if (opts.dataPath.empty()) {
    std::vector<std::string> missing = session->missingFeeds(feedProgram);
    if (!missing.empty())
      return fail("no feed for input '" + missing.front() + "' (use --feed " + missing.front() +
                  "=FILE.npy or --data FILE.npz)");
  }

  std::map<std::string, int64_t> counters = {{"step", 0}, {"epoch", 0}, {"cursor", 0}};
  if (!opts.resumeDir.empty()) {
    if (!session->loadCheckpoint(opts.resumeDir, counters, error))
      return fail(error);
    // The counters index the data set and the step loop: a checkpoint is
    // untrusted input like any other.
    for (const char *name : {"step", "epoch", "cursor"})
      if (counters[name] < 0)
        return fail(opts.resumeDir + "/state.npz: counter '" + name + "' is negative (" +
                    std::to_string(counters[name]) + ")");
    if (!opts.quiet)
      out << "resumed from " << opts.resumeDir << " at step " << counters["step"] << "\n";
  }

  // Every rank starts from rank 0's parameters and optimizer state.
  if (parallel && !broadcastState(*session, *ranks, error))
    return fail(error);
  // Checkpoints: rank 0 writes, after every rank has finished the step.
  auto checkpoint = [&](const std::map<std::string, int64_t> &at) {
    if (parallel && !ranks->barrier(error))
      return false;
    return !lead || session->saveCheckpoint(opts.checkpointDir, at, error);
  };
  const int64_t checkEvery = distCheckEvery();
  if (!opts.checkpointDir.empty() && lead)
    removeStaleTemporaries(opts.checkpointDir);
  if (!opts.resumeDir.empty() && !opts.metricsPath.empty() &&
      !trimMetrics(opts.metricsPath, counters["step"], error))
    return fail(error);
  std::unique_ptr<FILE, int (*)(FILE *)> metrics(nullptr, fclose);
  if (!opts.metricsPath.empty()) {
    metrics.reset(std::fopen(opts.metricsPath.c_str(), opts.resumeDir.empty() ? "w" : "a"));
    if (!metrics)
      return fail(opts.metricsPath + ": cannot write (" + std::strerror(errno) + ")");
  }

  std::string lossName = info(plan, "output.loss"), scaleName = info(plan, "output.loss_scale"),
              infName = info(plan, "output.found_inf");
  if (lossName.empty())
    for (const plan::Binding &b : plan.programs(feedProgram).outputs())
      if (planNumElements(plan.tensors(b.tensor())) == 1) {
        lossName = b.name();
        break;
      }
  int outputProgram = step >= 0 ? step : apply;
  bool warnedScale = false;
  // Progress shows the mean loss since the previous line: one batch's loss is noisy.
  double lossSum = 0;
  int64_t lossCount = 0;
  auto start = Clock::now();
  int64_t first = counters["step"];
  int64_t reportEvery = std::max<int64_t>(1, (opts.steps - first) / 20);
  bool lastSkipped = false;
  // With --data and one "step" program, the next batch is written as soon as
  // the step is enqueued: an asynchronous backend (CUDA) copies it while the
  // step runs. Checkpoints record the data position before that prefetch, so
  // a resumed run reads the prefetched batch again and stays bitwise equal.
  bool prefetch = !opts.dataPath.empty() && step >= 0 && inputsApartFromOutputs(plan, step);
  bool batchReady = false;
  std::map<std::string, int64_t> stepCounters = counters;
  for (int64_t s = first; s < opts.steps; ++s) {
    auto t0 = Clock::now();
    for (int64_t m = 0; m < (step >= 0 ? 1 : microBatches); ++m) {
      if (!opts.dataPath.empty() && !batchReady &&
          !data.feedNext(*session, feedProgram, opts.shuffle, opts.seed, counters["epoch"],
                         counters["cursor"], error))
        return fail(error);
      batchReady = false;
      if (!session->run(feedProgram, error))
        return fail("step " + std::to_string(s + 1) + ": " + error);
    }
    if (step < 0 && !session->run(apply, error))
      return fail("step " + std::to_string(s + 1) + ": " + error);
    stepCounters = counters;
    stepCounters["step"] = s + 1;
    if (prefetch && s + 1 < opts.steps) {
      if (!data.feedNext(*session, feedProgram, opts.shuffle, opts.seed, counters["epoch"],
                         counters["cursor"], error))
        return fail(error);
      batchReady = true;
    }
    if (!session->backend().synchronize(error))
      return fail(error);
    double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    counters["step"] = s + 1;
    double loss = scalarOutput(*session, feedProgram, lossName);
    double scale = scalarOutput(*session, outputProgram, scaleName);
    double foundInf = scalarOutput(*session, outputProgram, infName);
    bool skipped = !std::isnan(foundInf) && foundInf != 0;
    lastSkipped = skipped;
    if (metrics) {
      // One line per step, flushed: a killed run keeps the metrics of the
      // steps it ran, and a full disk stops the run instead of losing them.
      std::fprintf(metrics.get(),
                   "{\"step\": %lld, \"loss\": %s, \"loss_scale\": %s, \"skipped\": %s, "
                   "\"seconds\": %s}\n",
                   static_cast<long long>(s + 1), jsonNumber(loss).c_str(),
                   jsonNumber(scale).c_str(), skipped ? "true" : "false",
                   jsonNumber(seconds).c_str());
      if (std::fflush(metrics.get()) != 0 || std::ferror(metrics.get()))
        return fail(opts.metricsPath + ": write failed (" + std::strerror(errno) + ")");
    }
    if (!std::isnan(scale) && scale < 1 && !warnedScale) {
      err << "amp-run: warning: step " << s + 1 << ": the loss scale fell below 1 (" << scale
          << "): gradients overflow even unscaled; training may be stalling\n";
      warnedScale = true;
    }
    if (!std::isnan(loss)) {
      lossSum += loss;
      ++lossCount;
    }
    if (!opts.quiet) {
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      double rate = (s + 1 - first) / std::max(elapsed, 1e-9);
      double left = (opts.steps - s - 1) / std::max(rate, 1e-9);
      std::ostringstream line;
      double shown = lossCount ? lossSum / lossCount : loss;
      line << "step " << s + 1 << "/" << opts.steps << "  loss " << std::setprecision(6) << shown;
      if (!std::isnan(scale))
        line << "  scale " << scale;
      if (skipped)
        line << "  (overflow: skipped)";
      line << "  " << std::setprecision(3) << rate << " steps/s  " << std::setprecision(3) << left
           << " s left";
      bool report = (s + 1 - first) % reportEvery == 0 || s + 1 == opts.steps;
      if (opts.terminal)
        out << "\r" << line.str() << "\033[K" << std::flush;
      else if (report)
        out << line.str() << "\n";
      if (report) {
        lossSum = 0;
        lossCount = 0;
      }
    }
    if (parallel && ((s + 1) % checkEvery == 0 || s + 1 == opts.steps) &&
        !checkParametersAgree(*session, *ranks, s + 1, error))
      return fail(error);
    if (opts.checkpointEvery > 0 && !opts.checkpointDir.empty() &&
        (s + 1) % opts.checkpointEvery == 0 && !checkpoint(stepCounters))
      return fail(error);
  }
  if (opts.terminal && !opts.quiet)
    out << "\n";
  if (!opts.checkpointDir.empty() && !checkpoint(stepCounters))
    return fail(error);
  if (!opts.dumpGrads.empty()) {
    // A skipped step's gradients overflowed: say so rather than leave the
    // user to find inf in the files.
    if (lastSkipped)
      err << "amp-run: warning: the last step overflowed and was skipped: the gradients in "
          << opts.dumpGrads << " may hold inf or NaN (start the loss scale lower, or run more "
          << "steps)\n";
    // A resumed run already at --steps computed no gradient: the buffers
    // hold nothing of the last step, so write nothing.
    if (first >= opts.steps && first > 0)
      err << "amp-run: warning: no step ran (resumed at step " << first << ", --steps "
          << opts.steps << "): --dump-grads writes no gradients\n";
    else if (first >= opts.steps)
      err << "amp-run: warning: no step ran (--steps " << opts.steps
          << "): --dump-grads writes no gradients\n";
    else if (!session->dumpGradients(opts.dumpGrads, error))
      return fail(error);
  }
  if (!opts.dumpParams.empty() && !session->dumpParameters(opts.dumpParams, error))
    return fail(error);
  if (!opts.exportOnnx.empty() && !session->exportOnnx(opts.exportOnnx, error))
    return fail(error);
  return 0;
}

} // namespace ampc::rt
