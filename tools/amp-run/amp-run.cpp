//===- amp-run.cpp - Train with a plan -------------------------------------===//
//
// The runtime's driver: parses the command line and hands it to the training
// loop (runtime/core/Trainer.cpp). Depends only on the runtime: no LLVM, so
// the runtime-only build (AMPC_RUNTIME_ONLY, the GPU kit) needs nothing but
// the runtime's own few libraries. Options take `--name value`,
// `--name=value` or one dash; flags also `--flag=true|false`.
//
//===----------------------------------------------------------------------===//

#include "ampc/rt/PlanFile.h"
#include "ampc/rt/Trainer.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using ampc::rt::TrainOptions;

struct Option {
  const char *name;
  const char *valueName; // nullptr: a flag
  const char *help;
  std::function<bool(const std::string &)> set; // false: the value is not valid
};

template <typename T> bool parseInt(const std::string &s, T &out) {
  if (s.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end || static_cast<long long>(static_cast<T>(v)) != v)
    return false;
  out = static_cast<T>(v);
  return true;
}

bool parseUnsigned(const std::string &s, uint64_t &out) {
  if (s.empty() || s[0] == '-')
    return false;
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || *end)
    return false;
  out = v;
  return true;
}

bool parseDouble(const std::string &s, double &out) {
  if (s.empty())
    return false;
  char *end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !*end;
}

bool parseBool(const std::string &s, bool &out) {
  if (s.empty() || s == "true" || s == "1") {
    out = true;
    return true;
  }
  if (s == "false" || s == "0") {
    out = false;
    return true;
  }
  return false;
}

std::vector<Option> options(TrainOptions &o) {
  auto str = [](std::string &dst) { return [&dst](const std::string &v) { dst = v; return true; }; };
  auto flag = [](bool &dst) { return [&dst](const std::string &v) { return parseBool(v, dst); }; };
  return {
      {"feed", "NAME=FILE.npy", "One batch for a graph input, reused every step",
       [&o](const std::string &v) {
         size_t eq = v.find('=');
         if (eq == std::string::npos || eq == 0)
           return false;
         o.feeds.push_back({v.substr(0, eq), v.substr(eq + 1)});
         return true;
       }},
      {"data", "FILE.npz", "A data set: one array per graph input, samples first", str(o.dataPath)},
      {"batch-size", "N", "Samples per step (must be the plan's batch)",
       [&o](const std::string &v) { return parseInt(v, o.batchSize); }},
      {"shuffle", nullptr, "Shuffle the data set every epoch", flag(o.shuffle)},
      {"seed", "N", "Seed of the shuffle", [&o](const std::string &v) { return parseUnsigned(v, o.seed); }},
      {"steps", "N", "Training steps (in all, when resuming)",
       [&o](const std::string &v) { return parseInt(v, o.steps); }},
      {"backend", "cpu|cuda|auto", "cpu, cuda or auto (cuda when a device is present)",
       str(o.backend)},
      {"threads", "N", "CPU threads (0: all cores)",
       [&o](const std::string &v) { return parseInt(v, o.threads); }},
      {"dump-grads", "DIR",
       "After the last step, write each parameter's fp32 unscaled gradient as DIR/<name>.npy",
       str(o.dumpGrads)},
      {"dump-params", "DIR", "Write the fp32 master parameters to DIR", str(o.dumpParams)},
      {"metrics", "FILE.jsonl", "One JSON object per step", str(o.metricsPath)},
      {"checkpoint", "DIR", "Checkpoint folder", str(o.checkpointDir)},
      {"checkpoint-every", "K", "Checkpoint every K steps",
       [&o](const std::string &v) { return parseInt(v, o.checkpointEvery); }},
      {"resume", "DIR", "Continue from a checkpoint folder", str(o.resumeDir)},
      {"export-onnx", "OUT.onnx", "Write the model with trained weights", str(o.exportOnnx)},
      {"cuda-graph", nullptr, "Capture the step as a CUDA graph (cuda backend; default true)",
       flag(o.cuda.cudaGraph)},
      {"memory-fraction", "F", "Largest share of device memory the plan may use (default 0.9)",
       [&o](const std::string &v) { return parseDouble(v, o.cuda.memoryFraction); }},
      {"memory-limit", "BYTES", "Largest device memory in bytes",
       [&o](const std::string &v) { return parseUnsigned(v, o.cuda.memoryLimit); }},
      {"profile", "FILE.json", "Chrome trace of one step (cuda backend)", str(o.cuda.profilePath)},
      {"quiet", nullptr, "No progress output", flag(o.quiet)},
  };
}

void printHelp(const std::vector<Option> &opts) {
  std::cout << "OVERVIEW: amp-run: train with an ampc plan\n\n"
               "USAGE: amp-run [options] <model.plan>\n\nOPTIONS:\n";
  for (const Option &o : opts) {
    std::string lhs = std::string("--") + o.name + (o.valueName ? std::string("=") + o.valueName : "");
    std::cout << "  " << lhs << std::string(lhs.size() < 28 ? 28 - lhs.size() : 1, ' ') << o.help
              << "\n";
  }
  std::cout << "  --help                      This list\n  --version                   "
               "The version\n";
}

/// Fills `o` from argv; returns -1 to go on, else the exit status.
int parseCommandLine(int argc, char **argv, TrainOptions &o) {
  std::vector<Option> opts = options(o);
  auto fail = [](const std::string &msg) {
    std::cerr << "amp-run: error: " << msg << " (see amp-run --help)\n";
    return 1;
  };
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1), value;
    size_t eq = name.find('=');
    bool hasValue = eq != std::string::npos;
    if (hasValue) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "help") {
      printHelp(opts);
      return 0;
    }
    if (name == "version") {
      std::cout << "amp-run (ampc) 0.1.0\n";
      return 0;
    }
    const Option *opt = nullptr;
    for (const Option &c : opts)
      if (name == c.name)
        opt = &c;
    if (!opt)
      return fail("unknown option '" + arg + "'");
    if (opt->valueName && !hasValue) {
      if (i + 1 >= argc)
        return fail("--" + name + " needs a value (" + opt->valueName + ")");
      value = argv[++i];
    }
    if (!opt->set(value))
      return fail("--" + name + ": '" + value + "' is not a valid " +
                  (opt->valueName ? opt->valueName : "true or false"));
  }
  if (positional.size() != 1)
    return fail(positional.empty() ? "no plan file given"
                                   : "one plan file expected, got '" + positional[1] + "' too");
  o.planPath = positional[0];
  return -1;
}

constexpr int kMaxThreads = 1024;

} // namespace

int main(int argc, char **argv) {
  ampc::rt::silenceProtobufLog();
  TrainOptions opts;
  if (int rc = parseCommandLine(argc, argv, opts); rc >= 0)
    return rc;
  if (opts.steps < 0 || opts.batchSize < 0 || opts.checkpointEvery < 0 || opts.threads < 0) {
    std::cerr << "amp-run: error: --steps, --batch-size, --checkpoint-every and --threads must "
                 "not be negative\n";
    return 1;
  }
  if (!(opts.cuda.memoryFraction > 0.0 && opts.cuda.memoryFraction <= 1.0)) {
    std::cerr << "amp-run: error: --memory-fraction must be in (0, 1], got "
              << opts.cuda.memoryFraction << "\n";
    return 1;
  }
  // OpenMP and oneDNN crash when asked for tens of thousands of threads.
  if (opts.threads > kMaxThreads) {
    std::cerr << "amp-run: error: --threads " << opts.threads << " is more than " << kMaxThreads
              << "\n";
    return 1;
  }
  opts.terminal = ::isatty(STDOUT_FILENO);
  return ampc::rt::runTraining(opts, std::cout, std::cerr);
}
