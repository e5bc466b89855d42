//===- NcclCollective.h - Data-parallel ranks over NCCL ---------*- C++ -*-===//
//
// GPU ranks' gradient averaging (docs/distributed.md): NCCL, opened at run
// time like cuBLAS (no NCCL library is linked by name), its communicator
// bootstrapped over another collective (MPI): rank 0's ncclUniqueId is
// broadcast to every rank. allReduceMean takes DEVICE pointers; broadcast,
// barrier and allEqual (host data: checkpoints, checksums) go to the
// bootstrap collective.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/rt/Collective.h"

#include <memory>
#include <string>

namespace ampc::rt {

/// Opens libnccl.so.2 (once); false with what was tried.
bool loadNccl(std::string &why);

/// A NCCL communicator over `bootstrap`'s ranks, on CUDA device `device`.
/// `bootstrap` must outlive it.
std::unique_ptr<Collective> createNcclCollective(Collective &bootstrap, int device,
                                                 std::string &error);

} // namespace ampc::rt
