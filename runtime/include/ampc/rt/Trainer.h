//===- Trainer.h - amp-run's training loop ----------------------*- C++ -*-===//
//
// Runs a plan step after step: feeds batches (fixed feeds or a data set in
// epochs, optionally shuffled), writes metrics, progress, checkpoints,
// gradient and parameter dumps and the trained ONNX model. Resuming from a
// checkpoint continues bitwise identically on the same backend and thread
// count.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/rt/Backend.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace ampc::rt {

struct TrainOptions {
  std::string planPath;
  std::vector<std::pair<std::string, std::string>> feeds; ///< input name -> .npy path
  std::string dataPath;                                   ///< .npz with one array per input
  int64_t batchSize = 0;                                  ///< 0: the plan's batch
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t steps = 1; ///< total steps (a resumed run continues up to this many)
  std::string backend = "auto"; ///< cpu, cuda or auto
  int threads = 0;
  CudaOptions cuda;
  std::string dumpGrads, dumpParams, metricsPath, checkpointDir, resumeDir, exportOnnx;
  int64_t checkpointEvery = 0;
  /// Progress display: a rewritten line on a terminal, plain lines otherwise.
  bool terminal = false;
  bool quiet = false;
};

/// Runs the training loop; returns the process exit status (0 or 1). Errors
/// and notices go to `err` as single lines prefixed with "amp-run: ".
int runTraining(const TrainOptions &opts, std::ostream &out, std::ostream &err);

} // namespace ampc::rt
