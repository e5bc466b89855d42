//===- Fusion.h - Grouping elementwise nodes into fused steps ---*- C++ -*-===//
#pragma once

#include "ampc/IR/Graph.h"

#include <functional>
#include <unordered_map>
#include <vector>

namespace ampc {

/// Nodes that run as one fused elementwise step, in graph order. The group is
/// executed at the position of its last node.
struct FusionGroup {
  std::vector<const Node *> nodes;
};

/// True if the node can be an instruction of a fused step (see
/// ampc/rt/FusedOps.h): an elementwise operator on float or bool values.
bool isFusableElementwise(const Node &n);

/// Nodes whose result is their first operand's bytes under another shape
/// (the lowering emits no step for them).
bool isView(const Node &n);

/// Moves each fusable node that a single kernel separates from the latest
/// of its producers, itself fusable and of the same shape, to just after
/// that producer, so that it joins the producer's fused step: the bf16 cast
/// of a gradient that a bias's ReduceSum also reads then comes out of the
/// kernel that computes the gradient instead of reading it back from
/// memory. The moved node's result lives across that one kernel.
void hoistIntoProducers(std::vector<const Node *> &order);

/// Values that stay live to the end of the program whatever the fusion does
/// (program outputs): fusing their readers later keeps nothing alive longer.
using KeptToEnd = std::function<bool(const Value *)>;

/// Groups elementwise nodes greedily in graph order: a node joins the group of
/// one of its producers when the result shapes agree and no value of the group
/// is needed by an unfused node placed before it. Every fusable node belongs
/// to exactly one group (possibly of one node).
std::vector<FusionGroup> findFusionGroups(const std::vector<const Node *> &order, bool fuse,
                                          const KeptToEnd &keptToEnd, size_t maxNodes = 64,
                                          size_t maxInputs = 16);

} // namespace ampc
