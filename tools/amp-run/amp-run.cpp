//===- amp-run.cpp - Train with a plan -------------------------------------===//
//
// The runtime's driver: parses the command line and hands it to the training
// loop (runtime/core/Trainer.cpp). Depends only on the runtime.
//
//===----------------------------------------------------------------------===//

#include "ampc/rt/Trainer.h"

#include "llvm/Support/CommandLine.h"
#include "ampc/rt/PlanFile.h"
#include "llvm/Support/InitLLVM.h"

#include <iostream>
#include <unistd.h>

namespace cl = llvm::cl;

namespace {
cl::OptionCategory kRun("amp-run options");
cl::opt<std::string> planFile(cl::Positional, cl::desc("<model.plan>"), cl::Required, cl::cat(kRun));
cl::list<std::string> feeds("feed", cl::desc("One batch for a graph input, reused every step"),
                            cl::value_desc("NAME=FILE.npy"), cl::cat(kRun));
cl::opt<std::string> data("data", cl::desc("A data set: one array per graph input, samples first"),
                          cl::value_desc("FILE.npz"), cl::cat(kRun));
cl::opt<int64_t> batchSize("batch-size", cl::desc("Samples per step (must be the plan's batch)"),
                           cl::init(0), cl::cat(kRun));
cl::opt<bool> shuffle("shuffle", cl::desc("Shuffle the data set every epoch"), cl::cat(kRun));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of the shuffle"), cl::init(0), cl::cat(kRun));
cl::opt<int64_t> steps("steps", cl::desc("Training steps (in all, when resuming)"), cl::init(1),
                       cl::cat(kRun));
cl::opt<std::string> backend("backend", cl::desc("cpu, cuda or auto (cuda when a device is present)"),
                             cl::init("auto"), cl::cat(kRun));
cl::opt<int> threads("threads", cl::desc("CPU threads (0: all cores)"), cl::init(0), cl::cat(kRun));
cl::opt<std::string> dumpGrads("dump-grads", cl::desc("After the last step, write each parameter's "
                                                       "fp32 unscaled gradient as DIR/<name>.npy"),
                               cl::value_desc("DIR"), cl::cat(kRun));
cl::opt<std::string> dumpParams("dump-params", cl::desc("Write the fp32 master parameters to DIR"),
                                cl::value_desc("DIR"), cl::cat(kRun));
cl::opt<std::string> metrics("metrics", cl::desc("One JSON object per step"),
                             cl::value_desc("FILE.jsonl"), cl::cat(kRun));
cl::opt<std::string> checkpoint("checkpoint", cl::desc("Checkpoint folder"), cl::value_desc("DIR"),
                                cl::cat(kRun));
cl::opt<int64_t> checkpointEvery("checkpoint-every", cl::desc("Checkpoint every K steps"),
                                 cl::init(0), cl::cat(kRun));
cl::opt<std::string> resume("resume", cl::desc("Continue from a checkpoint folder"),
                            cl::value_desc("DIR"), cl::cat(kRun));
cl::opt<std::string> exportOnnx("export-onnx", cl::desc("Write the model with trained weights"),
                                cl::value_desc("OUT.onnx"), cl::cat(kRun));
cl::opt<bool> cudaGraph("cuda-graph", cl::desc("Capture the step as a CUDA graph (cuda backend)"),
                        cl::init(true), cl::cat(kRun));
cl::opt<double> memoryFraction("memory-fraction",
                               cl::desc("Largest share of device memory the plan may use"),
                               cl::init(0.9), cl::cat(kRun));
cl::opt<uint64_t> memoryLimit("memory-limit", cl::desc("Largest device memory in bytes"),
                              cl::init(0), cl::cat(kRun));
cl::opt<std::string> profile("profile", cl::desc("Chrome trace of one step (cuda backend)"),
                             cl::value_desc("FILE.json"), cl::cat(kRun));
cl::opt<bool> quiet("quiet", cl::desc("No progress output"), cl::cat(kRun));
} // namespace

constexpr int kMaxThreads = 1024;

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  ampc::rt::silenceProtobufLog();
  cl::SetVersionPrinter([](llvm::raw_ostream &os) { os << "amp-run (ampc) 0.1.0\n"; });
  cl::HideUnrelatedOptions({&kRun});
  cl::ParseCommandLineOptions(argc, argv, "amp-run: train with an ampc plan\n");

  ampc::rt::TrainOptions opts;
  opts.planPath = planFile;
  for (const std::string &f : feeds) {
    size_t eq = f.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "amp-run: error: --feed expects NAME=FILE.npy, got '" << f << "'\n";
      return 1;
    }
    opts.feeds.push_back({f.substr(0, eq), f.substr(eq + 1)});
  }
  if (steps < 0 || batchSize < 0 || checkpointEvery < 0 || threads < 0) {
    std::cerr << "amp-run: error: --steps, --batch-size, --checkpoint-every and --threads must "
                 "not be negative\n";
    return 1;
  }
  if (!(memoryFraction > 0.0 && memoryFraction <= 1.0)) {
    std::cerr << "amp-run: error: --memory-fraction must be in (0, 1], got " << memoryFraction
              << "\n";
    return 1;
  }
  // OpenMP and oneDNN crash when asked for tens of thousands of threads.
  if (threads > kMaxThreads) {
    std::cerr << "amp-run: error: --threads " << threads << " is more than " << kMaxThreads << "\n";
    return 1;
  }
  opts.dataPath = data;
  opts.batchSize = batchSize;
  opts.shuffle = shuffle;
  opts.seed = seed;
  opts.steps = steps;
  opts.backend = backend;
  opts.threads = threads;
  opts.dumpGrads = dumpGrads;
  opts.dumpParams = dumpParams;
  opts.metricsPath = metrics;
  opts.checkpointDir = checkpoint;
  opts.checkpointEvery = checkpointEvery;
  opts.resumeDir = resume;
  opts.exportOnnx = exportOnnx;
  opts.cuda.cudaGraph = cudaGraph;
  opts.cuda.memoryFraction = memoryFraction;
  opts.cuda.memoryLimit = memoryLimit;
  opts.cuda.profilePath = profile;
  opts.terminal = ::isatty(STDOUT_FILENO);
  opts.quiet = quiet;
  return ampc::rt::runTraining(opts, std::cout, std::cerr);
}
