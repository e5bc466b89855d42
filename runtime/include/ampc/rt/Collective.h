//===- Collective.h - Communication between data-parallel ranks -*- C++ -*-===//
//
// amp-run's data parallelism (docs/distributed.md) talks to the other ranks
// only through this interface, implemented over the engines users already
// run: MPI for CPU ranks (runtime/dist/MpiCollective.cpp, when CMake found
// MPI), and a single-process implementation that does nothing. A plan runs
// single-process without MPI.
//
// Every call is collective: every rank makes the same calls in the same
// order. A call that does not complete within the timeout (a rank died or
// hangs) ends the process with a one-line error instead of hanging.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>

namespace ampc::rt {

class Collective {
public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "single", ...: what amp-run prints at start.
  virtual std::string kind() const = 0;
  /// data[i] = (sum over ranks of data[i]) / size(), in place, fp32. Every
  /// rank gets the same bits.
  virtual bool allReduceMean(float *data, size_t count, std::string &error) = 0;
  /// The same, started in the background (a gradient bucket while the
  /// backward pass goes on): get() waits and returns "" or the error. Calls
  /// complete in the order they were started, on every rank. `data` must stay
  /// untouched until then. The default runs it at once.
  using Pending = std::shared_future<std::string>;
  virtual Pending startAllReduceMean(float *data, size_t count) {
    std::promise<std::string> done;
    std::string error;
    done.set_value(allReduceMean(data, count, error) ? std::string() : error);
    return done.get_future().share();
  }
  /// `data` in DEVICE memory averaged on the CUDA stream `stream` (a
  /// cudaStream_t), enqueued, not waited for: what the CUDA backend's
  /// AllReduce launches call. Only GPU collectives (NCCL) have it.
  virtual bool allReduceMeanOnStream(float *data, size_t count, void *stream,
                                     std::string &error) {
    error = "the " + kind() + " collective cannot average device memory";
    return false;
  }
  /// Rank `root`'s bytes to every rank.
  virtual bool broadcast(void *data, size_t bytes, int root, std::string &error) = 0;
  virtual bool barrier(std::string &error) = 0;
  /// Whether every rank passed the same value (a checksum).
  virtual bool allEqual(uint64_t value, bool &equal, std::string &error) = 0;
};

/// The ranks this process was started with: MPI when launched by mpirun /
/// srun (and built with MPI), else one process. nullptr and `error` when a
/// launch under MPI cannot be joined. `timeoutSeconds` bounds every call.
std::unique_ptr<Collective> createCollective(double timeoutSeconds, std::string &error);

/// The GPU ranks' collective over `bootstrap`'s ranks (NCCL; its id travels
/// over `bootstrap`), on the process's local rank's GPU; nullptr and `error`
/// when this build has no NCCL or it cannot start. `bootstrap` must outlive it.
std::unique_ptr<Collective> createDeviceCollective(Collective &bootstrap, std::string &error);

/// Whether the environment says this process is one of several MPI ranks
/// (Open MPI's, PMI's or PMIx's variables), whatever this build supports.
bool launchedAsRanks(int &size);

} // namespace ampc::rt
