//===- DataParallel.cpp - amp-run's side of data parallelism ---------------===//

#include "DataParallel.h"

#include "plan.pb.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <unistd.h>

namespace ampc::rt {

bool planAveragesGradients(const plan::Plan &p) {
  for (const plan::Program &prog : p.programs())
    for (const plan::Step &s : prog.steps())
      if (s.op() == "ampc.AllReduce")
        return true;
  return false;
}

bool broadcastState(Session &session, Collective &c, std::string &error) {
  const plan::Plan &p = session.plan();
  for (int i = 0; i < p.tensors_size(); ++i) {
    const plan::Tensor &t = p.tensors(i);
    if (t.storage() != plan::STATE || t.has_view_of())
      continue;
    HostArray a;
    if (!session.readTensor(i, a, error))
      return false;
    // The same plan on every rank: the sizes agree, only the bytes travel.
    if (!c.broadcast(a.bytes.data(), a.bytes.size(), 0, error))
      return false;
    if (c.rank() != 0 && !session.writeTensor(i, a, error))
      return false;
  }
  return true;
}

bool checkParametersAgree(Session &session, Collective &c, int64_t step, std::string &error) {
  uint64_t h = 1469598103934665603ULL;
  for (const plan::Parameter &param : session.plan().parameters()) {
    HostArray a;
    if (!session.readTensor(param.state(), a, error))
      return false;
    for (uint8_t byte : a.bytes)
      h = (h ^ byte) * 1099511628211ULL;
  }
  bool equal = false;
  if (!c.allEqual(h, equal, error))
    return false;
  if (equal)
    return true;
  error = "rank " + std::to_string(c.rank()) + ": the parameters differ between ranks after step " +
          std::to_string(step) + " (checksums disagree): the ranks no longer train one model";
  return false;
}

namespace {
char terminationLine[160];
size_t terminationLength = 0;

void onTerminate(int) {
  // Async-signal-safe: one write of a line prepared beforehand, then _exit.
  ssize_t ignored = ::write(STDERR_FILENO, terminationLine, terminationLength);
  (void)ignored;
  ::_exit(1);
}
} // namespace

void reportLauncherTermination(int rank) {
  int n = std::snprintf(terminationLine, sizeof terminationLine,
                        "amp-run: error: rank %d: stopped by the launcher (another rank failed, "
                        "or the job was cancelled)\n",
                        rank);
  terminationLength = n > 0 ? std::min<size_t>(static_cast<size_t>(n), sizeof terminationLine - 1)
                            : 0;
  std::signal(SIGTERM, onTerminate);
}

} // namespace ampc::rt
