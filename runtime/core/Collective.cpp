//===- Collective.cpp - One process, and choosing the implementation -------===//

#include "ampc/rt/Collective.h"

#include <cstdlib>
#include <string>

namespace ampc::rt {

#ifdef AMPC_HAVE_MPI
std::unique_ptr<Collective> createMpiCollective(double timeoutSeconds, std::string &error);
#endif

namespace {

/// One rank: the average over one rank is the value; nothing to send.
class SingleProcess : public Collective {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "single"; }
  bool allReduceMean(float *, size_t, std::string &) override { return true; }
  bool broadcast(void *, size_t, int, std::string &) override { return true; }
  bool barrier(std::string &) override { return true; }
  bool allEqual(uint64_t, bool &equal, std::string &) override {
    equal = true;
    return true;
  }
};

int envInt(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

} // namespace

bool launchedAsRanks(int &size) {
  size = 0;
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"})
    if (int n = envInt(name); n > 0) {
      size = n;
      break;
    }
  return size > 1;
}

#ifndef AMPC_HAVE_NCCL
std::unique_ptr<Collective> createDeviceCollective(Collective &, std::string &error) {
  error = "data parallel CUDA plans need NCCL, and this amp-run was built without it";
  return nullptr;
}
#endif

std::unique_ptr<Collective> createCollective(double timeoutSeconds, std::string &error) {
  int size = 0;
  if (!launchedAsRanks(size))
    return std::make_unique<SingleProcess>();
#ifdef AMPC_HAVE_MPI
  return createMpiCollective(timeoutSeconds, error);
#else
  error = "started as " + std::to_string(size) +
          " ranks, but this amp-run was built without MPI (install libopenmpi-dev and rebuild)";
  return nullptr;
#endif
}

} // namespace ampc::rt
