//===- Session.h - A loaded plan on a backend -------------------*- C++ -*-===//
//
// Binds names to tensors: feeds inputs by graph-input name (checking element
// type and shape), runs programs, reads outputs, and handles everything that
// touches the training state as a whole: checkpoints, parameter and gradient
// dumps, and exporting the trained model back to ONNX.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/rt/Backend.h"
#include "ampc/rt/Npy.h"

#include "plan.pb.h"

#include <functional>
#include <map>
#include <memory>
#include <string>

namespace ampc::rt {

ElemType elemTypeOf(plan::ElemType t);
std::string typeString(plan::ElemType t, const std::vector<int64_t> &shape);

class Session {
public:
  /// Loads and validates a plan file and prepares it on `backend`.
  static std::unique_ptr<Session> open(const std::string &planPath,
                                       std::unique_ptr<Backend> backend, std::string &error);
  /// The same for a plan held in memory (tests).
  static std::unique_ptr<Session> fromPlan(plan::Plan p, std::unique_ptr<Backend> backend,
                                           std::string &error);

  const plan::Plan &plan() const { return plan_; }
  Backend &backend() { return *backend_; }

  /// Index of a program by name, or -1.
  int program(const std::string &name) const;

  /// Copies a host array into the program input `name`; type and shape must
  /// match (errors name the input and both types). `what` names the source.
  bool feed(int program, const std::string &name, const HostArray &a, const std::string &what,
            std::string &error);
  /// The same for an array of `type` and `shape` that `fill` writes (all of
  /// its bytes) into the memory it is given: the backend's input buffer when
  /// it has one (no copy: the CUDA backend's pinned staging), else `scratch`,
  /// which is then written; keeping `scratch` between calls saves its
  /// allocation.
  bool feedWith(int program, const std::string &name, ElemType type,
                const std::vector<int64_t> &shape, const std::function<void(uint8_t *)> &fill,
                HostArray &scratch, const std::string &what, std::string &error);
  /// Inputs of the program that have no feed yet and no default.
  std::vector<std::string> missingFeeds(int program) const;
  bool run(int program, std::string &error);
  /// Reads a program output (by graph-output name) to the host; an output
  /// bound narrow (Binding.widen_to) comes back widened, exactly.
  bool output(int program, const std::string &name, HostArray &out, std::string &error);
  bool readTensor(int tensor, HostArray &out, std::string &error);
  bool writeTensor(int tensor, const HostArray &a, std::string &error);

  /// Writes every STATE tensor plus `counters` to DIR/state.npz atomically
  /// (temporary file, then rename; the folder is created if needed).
  bool saveCheckpoint(const std::string &dir, const std::map<std::string, int64_t> &counters,
                      std::string &error);
  bool loadCheckpoint(const std::string &dir, std::map<std::string, int64_t> &counters,
                      std::string &error);

  /// One .npy per model parameter (fp32 master values) / per trained
  /// parameter's last unscaled gradient (widened to the master's type when
  /// the plan keeps it narrower). File names: the ONNX initializer name
  /// with characters outside [A-Za-z0-9._-] replaced by '_'; two names that
  /// would share a file are an error, before anything is written (amp-run
  /// asks dumpFileNamesDistinct before training, so no run is lost to it).
  bool dumpParameters(const std::string &dir, std::string &error);
  bool dumpGradients(const std::string &dir, std::string &error);
  bool dumpFileNamesDistinct(const std::string &dir, std::string &error) const;

  /// Writes the original ONNX model with the trained parameter values.
  bool exportOnnx(const std::string &path, std::string &error);

private:
  Session() = default;

  /// The tensor of program input `name`, checked against `type` and `shape`;
  /// -1 with `error` set when there is no such input or they differ.
  int inputTensor(int program, const std::string &name, ElemType type,
                  const std::vector<int64_t> &shape, const std::string &what,
                  std::string &error) const;

  plan::Plan plan_;
  /// The file the plan came from ("the plan" when built in memory), for errors.
  std::string planPath_ = "the plan";
  std::unique_ptr<Backend> backend_;
  std::vector<std::map<std::string, bool>> fed_;
};

/// "fc1.weight" with characters outside [A-Za-z0-9._-] replaced by '_'.
std::string safeFileName(const std::string &name);

} // namespace ampc::rt
