//===- NcclCollective.cpp - Data-parallel ranks over NCCL ------------------===//
//
// See NcclCollective.h. NCCL is opened with dlopen (the loader's search, then
// AMPC_NCCL_PATH, then the CUDA toolkit's lib64): amp-run starts without it,
// and the GPU kit carries none (the GPU machine has the toolkit's or the
// nvidia-nccl wheel's).
//
//===----------------------------------------------------------------------===//

#include "NcclCollective.h"

#include "ampc/rt/DynamicLibrary.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>

namespace ampc::rt {

namespace {

struct NcclApi {
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) commInitRank = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclCommDestroy) commDestroy = nullptr;
  decltype(&ncclGetErrorString) errorString = nullptr;
  std::string error;
};

NcclApi loadApi() {
  NcclApi api;
  std::string tried;
  void *lib = openFirstLibrary(cudaLibraryCandidates("AMPC_NCCL_PATH", "libnccl.so.2"), tried);
  if (!lib) {
    api.error = "NCCL not found (tried " + tried +
                "; set LD_LIBRARY_PATH or AMPC_NCCL_PATH to libnccl.so.2)";
    return api;
  }
  const char *what = "libnccl";
  if (bindSymbol(lib, what, "ncclGetUniqueId", api.getUniqueId, api.error) &&
      bindSymbol(lib, what, "ncclCommInitRank", api.commInitRank, api.error) &&
      bindSymbol(lib, what, "ncclAllReduce", api.allReduce, api.error) &&
      bindSymbol(lib, what, "ncclCommDestroy", api.commDestroy, api.error) &&
      bindSymbol(lib, what, "ncclGetErrorString", api.errorString, api.error))
    api.error.clear();
  return api;
}

const NcclApi &api() {
  static const NcclApi loaded = loadApi();
  return loaded;
}

class NcclCollective : public Collective {
public:
  explicit NcclCollective(Collective &bootstrap) : boot_(bootstrap) {}

  ~NcclCollective() override {
    if (comm_)
      api().commDestroy(comm_);
    if (stream_)
      cudaStreamDestroy(stream_);
  }

  bool init(int device, std::string &error) {
    if (!cudaOk(cudaSetDevice(device), "cudaSetDevice", error) ||
        !cudaOk(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate",
                error))
      return false;
    // Rank 0 makes the id; the bootstrap (MPI) carries it to every rank.
    ncclUniqueId id{};
    if (boot_.rank() == 0 && !ncclOk(api().getUniqueId(&id), "ncclGetUniqueId", error))
      return false;
    if (!boot_.broadcast(&id, sizeof id, 0, error))
      return false;
    return ncclOk(api().commInitRank(&comm_, boot_.size(), id, boot_.rank()), "ncclCommInitRank",
                  error);
  }

  int rank() const override { return boot_.rank(); }
  int size() const override { return boot_.size(); }
  std::string kind() const override { return "nccl"; }

  /// `data` is device memory: NCCL's average (ncclAvg: the sum divided by
  /// the ranks, in fp32) on this collective's stream.
  bool allReduceMean(float *data, size_t count, std::string &error) override {
    return ncclOk(api().allReduce(data, data, count, ncclFloat, ncclAvg, comm_, stream_),
                  "ncclAllReduce", error) &&
           cudaOk(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", error);
  }

  bool allReduceMeanOnStream(float *data, size_t count, void *stream,
                             std::string &error) override {
    return ncclOk(api().allReduce(data, data, count, ncclFloat, ncclAvg, comm_,
                                  static_cast<cudaStream_t>(stream)),
                  "ncclAllReduce", error);
  }

  bool broadcast(void *data, size_t bytes, int root, std::string &error) override {
    return boot_.broadcast(data, bytes, root, error);
  }
  bool barrier(std::string &error) override { return boot_.barrier(error); }
  bool allEqual(uint64_t value, bool &equal, std::string &error) override {
    return boot_.allEqual(value, equal, error);
  }

private:
  bool ncclOk(ncclResult_t r, const char *what, std::string &error) {
    if (r == ncclSuccess)
      return true;
    error = "rank " + std::to_string(rank()) + ": " + what + ": " + api().errorString(r);
    return false;
  }
  bool cudaOk(cudaError_t e, const char *what, std::string &error) {
    if (e == cudaSuccess)
      return true;
    error = std::string(what) + ": " + cudaGetErrorString(e);
    return false;
  }

  Collective &boot_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

} // namespace

bool loadNccl(std::string &why) {
  why = api().error;
  return why.empty();
}

/// The node-local rank the launchers export (Open MPI, Slurm, MPICH), or 0.
static int localRank() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char *v = std::getenv(name); v && *v)
      return std::atoi(v);
  return 0;
}

std::unique_ptr<Collective> createDeviceCollective(Collective &bootstrap, std::string &error) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    error = "no CUDA device for rank " + std::to_string(bootstrap.rank());
    return nullptr;
  }
  // One rank per GPU of the node: the local rank picks it.
  return createNcclCollective(bootstrap, localRank() % devices, error);
}

std::unique_ptr<Collective> createNcclCollective(Collective &bootstrap, int device,
                                                 std::string &error) {
  if (!loadNccl(error))
    return nullptr;
  auto c = std::make_unique<NcclCollective>(bootstrap);
  if (!c->init(device, error))
    return nullptr;
  return c;
}

} // namespace ampc::rt
