//===- Fusion.cpp - Grouping elementwise nodes into fused steps ------------===//
//
// Producer-consumer fusion of elementwise chains (casts, loss scaling,
// activations, optimizer updates): a fused step reads each of its inputs once
// and writes only the values used outside the group, so intermediates never
// touch memory and a chain costs one kernel launch.
//
//===----------------------------------------------------------------------===//

#include "Fusion.h"

#include "ampc/rt/FusedOps.h"

#include <algorithm>
#include <optional>
#include <set>

namespace ampc {

namespace {

bool fusableType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64 ||
         t == DType::Bool;
}

} // namespace

bool isFusableElementwise(const Node &n) {
  if (rt::fusedOpByName(n.qualifiedOpType()) == rt::FusedOp::Count &&
      !n.is("Sum") && !n.is("Mean"))
    return false;
  if (n.numOutputs() != 1 || !n.output())
    return false;
  for (const Value *v : n.inputs())
    if (v && !fusableType(v->dtype()))
      return false;
  if (!fusableType(n.output()->dtype()))
    return false;
  // Every operand must broadcast to the result (true of these ops), and Clip's
  // bounds must be scalars.
  if (n.is("Clip"))
    for (unsigned i = 1; i < n.numInputs(); ++i)
      if (n.input(i) && n.input(i)->type().numElements() != 1)
        return false;
  return true;
}

std::vector<FusionGroup> findFusionGroups(const std::vector<const Node *> &order, bool fuse,
                                          size_t maxNodes, size_t maxInputs) {
  std::unordered_map<const Node *, size_t> position;
  for (size_t i = 0; i < order.size(); ++i)
    position[order[i]] = i;

  std::vector<FusionGroup> groups;
  std::unordered_map<const Node *, size_t> groupOf;

  // Distinct outside values a group reads if `extra` joined it.
  auto inputCount = [&](const FusionGroup &grp, const Node *extra) {
    std::set<const Value *> inside, inputs;
    for (const Node *n : grp.nodes)
      inside.insert(n->output());
    inside.insert(extra->output());
    for (const Node *n : grp.nodes)
      for (const Value *v : n->inputs())
        if (v && !inside.count(v))
          inputs.insert(v);
    for (const Value *v : extra->inputs())
      if (v && !inside.count(v))
        inputs.insert(v);
    return inputs.size();
  };

  // Can `n` join group `gi`? Its values must not be needed before n by nodes
  // outside the group, since the group will run at n's position.
  auto canJoin = [&](size_t gi, const Node *n) {
    const FusionGroup &grp = groups[gi];
    if (grp.nodes.size() >= maxNodes)
      return false;
    if (grp.nodes.front()->output()->shape() != n->output()->shape())
      return false;
    size_t pos = position[n];
    for (const Node *m : grp.nodes)
      for (const Use &u : m->output()->uses()) {
        auto it = groupOf.find(u.user);
        bool inGroup = it != groupOf.end() && it->second == gi;
        auto userPos = position.find(u.user);
        if (!inGroup && u.user != n && userPos != position.end() && userPos->second < pos)
          return false;
      }
    return inputCount(grp, n) <= maxInputs;
  };

  for (const Node *n : order) {
    if (!isFusableElementwise(*n))
      continue;
    std::optional<size_t> target;
    if (fuse)
      for (const Value *v : n->inputs()) {
        if (!v || !v->producer())
          continue;
        auto it = groupOf.find(v->producer());
        if (it != groupOf.end() && canJoin(it->second, n)) {
          target = it->second;
          break;
        }
      }
    if (!target) {
      groups.push_back({});
      target = groups.size() - 1;
    }
    groups[*target].nodes.push_back(n);
    groupOf[n] = *target;
  }
  return groups;
}

} // namespace ampc
