//===- DataParallel.h - amp-run's side of data parallelism ------*- C++ -*-===//
//
// What the training loop does when it is one of several ranks
// (docs/distributed.md): the plan averages gradients itself (ampc.AllReduce
// steps, amp-opt --data-parallel); the loop starts every rank from rank 0's
// state and checks now and then that the parameters stayed identical.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/rt/Collective.h"
#include "ampc/rt/Session.h"

#include <string>

namespace ampc::rt {

/// Whether the plan averages its gradients across ranks (ampc.AllReduce).
bool planAveragesGradients(const plan::Plan &p);

/// Every STATE tensor (parameters, optimizer moments, loss-scale state,
/// counters) becomes rank 0's: on start and after --resume.
bool broadcastState(Session &session, Collective &c, std::string &error);

/// Fails, naming the step, unless every rank holds the same parameters
/// (a 64-bit FNV-1a checksum of the fp32 masters, compared across ranks).
bool checkParametersAgree(Session &session, Collective &c, int64_t step, std::string &error);

/// On SIGTERM (what mpirun / srun send every rank when one rank dies or the
/// job is cancelled), one line naming the rank, then exit 1: each rank says
/// why it stopped.
void reportLauncherTermination(int rank);

} // namespace ampc::rt
