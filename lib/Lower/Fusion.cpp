//===- Fusion.cpp - Grouping elementwise nodes into fused steps ------------===//
//
// Producer-consumer fusion of elementwise chains (casts, loss scaling,
// activations, optimizer updates): a fused step reads each of its inputs once
// and writes only the values used outside the group, so intermediates never
// touch memory and a chain costs one kernel launch.
//
//===----------------------------------------------------------------------===//

#include "Fusion.h"

#include "ampc/IR/IdMap.h"

#include "ampc/rt/FusedOps.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <unordered_map>
#include <optional>

namespace ampc {

/// Node -> position in the program or group, kNone when it has none: arrays
/// by node id, since these maps are probed a few times per node and edge
/// (std::unordered_map's buckets once made fusion the slowest phase of
/// compiling large graphs).
using NodeMap = NodeIdMap<size_t>;
constexpr size_t kNone = static_cast<size_t>(-1);


namespace {

bool fusableType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64 ||
         t == DType::Bool;
}

/// True for an op the fused kernel runs (rt::kFusedOps), without building a
/// qualified name on the heap: fusion asks this of every node several times.
bool isFusedOp(const Node &n) {
  llvm::SmallString<48> storage;
  return rt::isFusedOpName(n.qualifiedOpType(storage));
}

/// Distinct values the nodes of `parts` read that none of them computes.
/// Groups are small: sorted vectors, not std::sets built per candidate
/// (fusion asks this for every candidate group of every node).
size_t countOutsideInputs(std::initializer_list<llvm::ArrayRef<const Node *>> parts) {
  llvm::SmallVector<const Value *, 32> inside, inputs;
  for (llvm::ArrayRef<const Node *> part : parts)
    for (const Node *n : part)
      inside.push_back(n->output());
  llvm::sort(inside);
  for (llvm::ArrayRef<const Node *> part : parts)
    for (const Node *n : part)
      for (const Value *v : n->inputs())
        if (v && !std::binary_search(inside.begin(), inside.end(), v))
          inputs.push_back(v);
  llvm::sort(inputs);
  return static_cast<size_t>(std::unique(inputs.begin(), inputs.end()) - inputs.begin());
}

/// Nodes the lowering emits no step for, as far as the fusion can tell: views,
/// and weight transposes whose every reader is a MatMul (folded into its
/// transpose flags). A group moved past one keeps nothing alive across a kernel.
bool runsNoKernel(const Node &n) {
  if (isView(n))
    return true;
  if (!swapsLastTwoAxes(n) || !n.output()->hasUses())
    return false;
  for (const Use &u : n.output()->uses())
    if (!u.user->is("MatMul") || u.operand >= 2)
      return false;
  return true;
}

/// The bytes of the results of `nodes` that `n` reads and nothing outside
/// the group and `n` does: materialized now, registers once n joins.
template <typename Member>
uint64_t freedByJoining(const std::vector<const Node *> &nodes, const Node *n, Member member,
                        const KeptToEnd &keptToEnd) {
  uint64_t bytes = 0;
  for (const Node *m : nodes) {
    const Value *o = m->output();
    bool readByN = false, onlyInside = true;
    for (const Use &u : o->uses()) {
      readByN = readByN || u.user == n;
      onlyInside = onlyInside && member(u.user);
    }
    if (readByN && onlyInside && !o->isGraphOutput() && !keptToEnd(o))
      bytes += static_cast<uint64_t>(o->type().byteSize());
  }
  return bytes;
}

} // namespace

bool isView(const Node &n) {
  if (!(n.is("Reshape") || n.is("Flatten") || n.is("Squeeze") || n.is("Unsqueeze") ||
        n.is("Identity")))
    return false;
  return n.numOutputs() == 1 && n.output() && n.input(0) &&
         n.input(0)->type().byteSize() == n.output()->type().byteSize() &&
         n.input(0)->dtype() == n.output()->dtype();
}

bool isFusableElementwise(const Node &n) {
  // Identity is a view of its operand (no step at all), never an instruction.
  if (n.is("Identity"))
    return false;
  if (!isFusedOp(n) && !n.is("Sum") && !n.is("Mean"))
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

/// Second phase: merges groups of equal shape that read the same values or
/// feed each other but were not joined in the first pass (order of creation,
/// several producers). Group `j` absorbs an earlier group `i` when no node
/// outside both needs one of i's values before j's last node — the merged
/// group runs there — which also rules out a cycle through outside nodes.
/// Fusing runs a group at its last node. Moving a group later keeps its
/// inputs alive longer; that is not worth it for a large intermediate held
/// across another kernel (a GEMM, a reduction): a low-precision weight
/// gradient whose cast to fp32 would otherwise wait for the optimizer keeps
/// every such gradient alive at once.
class LifetimeGuard {
public:
  static constexpr uint64_t kLargeBytes = 64 * 1024;

  /// `light[p]`: whether the node at position p is no kernel of its own
  /// (fusable elementwise, a view, a transpose the MatMuls fold).
  LifetimeGuard(const std::vector<char> &light, NodeMap &position, const KeptToEnd &keptToEnd)
      : position_(position), keptToEnd_(keptToEnd), heavyBefore_(light.size() + 1, 0) {
    for (size_t p = 0; p < light.size(); ++p)
      heavyBefore_[p + 1] = heavyBefore_[p] + !light[p];
  }

  /// Would running `nodes` (a group) at `to` instead of `from` keep one of its
  /// large intermediate inputs alive past its other uses and across another
  /// kernel? `member` tells the group's own nodes.
  template <typename Member>
  bool extends(const std::vector<const Node *> &nodes, size_t from, size_t to,
               Member member) const {
    return extendedBytes(nodes, from, to, member) > 0;
  }

  /// How many nodes between positions `from` and `to` (exclusive) run a
  /// kernel of their own.
  size_t kernelsBetween(size_t from, size_t to) const {
    return to <= from ? 0 : heavyBefore_[to] - heavyBefore_[from + 1];
  }

  /// The bytes of the large intermediate inputs of `nodes` that running the
  /// group at `to` instead of `from` keeps alive past their other uses and
  /// across another kernel.
  template <typename Member>
  uint64_t extendedBytes(const std::vector<const Node *> &nodes, size_t from, size_t to,
                         Member member) const {
    if (kernelsBetween(from, to) == 0)
      return 0;
    uint64_t bytes = 0;
    llvm::SmallVector<const Value *, 8> counted;
    for (const Node *m : nodes)
      for (const Value *v : m->inputs()) {
        if (!v || !v->producer() || static_cast<uint64_t>(v->type().byteSize()) <= kLargeBytes ||
            keptToEnd_(v) || llvm::is_contained(counted, v))
          continue;
        size_t lastOther = 0;
        for (const Use &u : v->uses())
          if (size_t p = position_.lookup(u.user); !member(u.user) && p != kNone)
            lastOther = std::max(lastOther, p);
        if (lastOther < to) {
          bytes += static_cast<uint64_t>(v->type().byteSize());
          counted.push_back(v);
        }
      }
    return bytes;
  }

private:
  NodeMap &position_;
  const KeptToEnd &keptToEnd_;
  std::vector<size_t> heavyBefore_;
};

void mergeSiblings(std::vector<FusionGroup> &groups,
                   NodeMap &groupOf,
                   NodeMap &position,
                   const LifetimeGuard &lifetimes, size_t maxNodes, size_t maxInputs) {
  auto last = [&](const FusionGroup &g) { return position.lookup(g.nodes.back()); };
  // Groups reading each value, to find related groups quickly. Scalars (a
  // learning rate, a constant, the overflow flag) are read by nearly every
  // group and say nothing about which tensor-shaped groups belong together:
  // they relate scalar groups only, or every group would be a candidate for
  // every other.
  auto relates = [](const Value *v, const Node *reader) {
    return v && (v->type().numElements() > 1 || reader->output()->type().numElements() == 1);
  };
  ValueIdMap<std::vector<const Node *>> readers;
  for (const FusionGroup &g : groups)
    for (const Node *n : g.nodes)
      for (const Value *v : n->inputs())
        if (relates(v, n))
          readers[v].push_back(n);
  auto canMerge = [&](size_t i, size_t j) {
    const FusionGroup &a = groups[i], &b = groups[j];
    if (i == j || a.nodes.empty() || b.nodes.empty() || last(a) > last(b))
      return false;
    if (a.nodes.front()->output()->shape() != b.nodes.front()->output()->shape() ||
        a.nodes.size() + b.nodes.size() > maxNodes)
      return false;
    size_t at = last(b);
    if (lifetimes.extends(a.nodes, last(a), at,
                          [&](const Node *n) { return groupOf.lookup(n) == i; }))
      return false;
    for (const Node *m : a.nodes)
      for (const Use &u : m->output()->uses()) {
        size_t g = groupOf.lookup(u.user);
        bool inside = g == i || g == j;
        // A reader outside this program counts as one before every group.
        size_t p = position.lookup(u.user);
        if (!inside && (p == kNone ? 0 : p) < at)
          return false;
      }
    return countOutsideInputs({a.nodes, b.nodes}) <= maxInputs;
  };
  // (position of its last node, group), sorted: keys looked up once, not
  // in every comparison.
  std::vector<std::pair<size_t, size_t>> byLast;
  byLast.reserve(groups.size());
  for (size_t k = 0; k < groups.size(); ++k)
    if (!groups[k].nodes.empty())
      byLast.push_back({last(groups[k]), k});
  std::sort(byLast.begin(), byLast.end());
  for (const auto &entry : byLast) {
    size_t j = entry.second;
    bool merged = true;
    while (merged) {
      merged = false;
      std::vector<size_t> related;
      for (const Node *n : groups[j].nodes)
        for (const Value *v : n->inputs()) {
          if (!relates(v, n))
            continue;
          if (v->producer() && groupOf.contains(v->producer()))
            related.push_back(groupOf.lookup(v->producer()));
          for (const Node *reader : readers.lookup(v))
            related.push_back(groupOf.lookup(reader));
        }
      std::sort(related.begin(), related.end());
      related.erase(std::unique(related.begin(), related.end()), related.end());
      for (size_t i : related) {
        if (!canMerge(i, j))
          continue;
        // Every group lists its nodes in program order (the first phase
        // appends them in order, and merges keep it): a merge, not a sort
        // of the whole group for every group it absorbs.
        auto byPosition = [&](const Node *x, const Node *y) {
          return position.lookup(x) < position.lookup(y);
        };
        std::vector<const Node *> &into = groups[j].nodes;
        size_t middle = into.size();
        for (const Node *n : groups[i].nodes) {
          groupOf[n] = j;
          into.push_back(n);
        }
        groups[i].nodes.clear();
        std::inplace_merge(into.begin(), into.begin() + middle, into.end(), byPosition);
        merged = true;
        break;
      }
    }
  }
}

void hoistIntoProducers(std::vector<const Node *> &order) {
  size_t count = order.size();
  NodeMap position(kNone);
  std::vector<char> fusable(count);
  std::vector<size_t> kernelsBefore(count + 1, 0);
  for (size_t i = 0; i < count; ++i) {
    position[order[i]] = i;
    fusable[i] = isFusableElementwise(*order[i]);
    bool light = fusable[i] || runsNoKernel(*order[i]);
    kernelsBefore[i + 1] = kernelsBefore[i] + !light;
  }
  // Where each node runs now: its own position, or the producer's it was
  // moved behind. `behind[q]`: the nodes moved to just after position q.
  std::vector<size_t> at(count);
  std::vector<std::vector<const Node *>> behind(count);
  std::vector<char> moved(count, 0);
  for (size_t p = 0; p < count; ++p) {
    at[p] = p;
    if (!fusable[p])
      continue;
    const Node *n = order[p];
    size_t latest = kNone;
    for (const Value *v : n->inputs()) {
      size_t q = v && v->producer() ? position.lookup(v->producer()) : kNone;
      if (q != kNone && (latest == kNone || at[q] > at[latest]))
        latest = q;
    }
    if (latest == kNone || !fusable[latest] ||
        order[latest]->output()->shape() != n->output()->shape())
      continue;
    size_t anchor = at[latest];
    if (kernelsBefore[p] - kernelsBefore[anchor + 1] != 1)
      continue;
    // Only past a kernel that reads a tensor n reads (the ReduceSum of the
    // gradient n casts): n then takes its operand from registers instead of
    // memory. Past an unrelated one, n would only leave the nodes after it
    // that it feeds (a kernel apart now) in a step of their own.
    const Node *between = nullptr;
    for (size_t k = anchor + 1; k < p && !between; ++k)
      if (kernelsBefore[k + 1] != kernelsBefore[k]) // a moved node is fusable: no kernel
        between = order[k];
    bool shared = false;
    for (const Value *v : n->inputs())
      shared =
          shared || (v && v->type().numElements() > 1 && llvm::is_contained(between->inputs(), v));
    if (!shared)
      continue;
    at[p] = anchor;
    moved[p] = 1;
    behind[anchor].push_back(n);
  }
  std::vector<const Node *> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (!moved[i])
      out.push_back(order[i]);
    for (const Node *n : behind[i])
      out.push_back(n);
  }
  order = std::move(out);
}

std::vector<FusionGroup> findFusionGroups(const std::vector<const Node *> &order, bool fuse,
                                          const KeptToEnd &keptToEnd, size_t maxNodes,
                                          size_t maxInputs) {
  NodeMap position(kNone);
  // Each node is classified once: the guard and the grouping both ask, and
  // on a large graph the second walk over the nodes missed the cache again.
  std::vector<char> fusable(order.size()), light(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    position[order[i]] = i;
    fusable[i] = isFusableElementwise(*order[i]);
    light[i] = fusable[i] || runsNoKernel(*order[i]);
  }

  std::vector<FusionGroup> groups;
  NodeMap groupOf(kNone);
  LifetimeGuard lifetimes(light, position, keptToEnd);

  // Can `n` join group `gi`? Its values must not be needed before n by nodes
  // outside the group, since the group will run at n's position.
  auto canJoin = [&](size_t gi, const Node *n) {
    const FusionGroup &grp = groups[gi];
    if (grp.nodes.size() >= maxNodes)
      return false;
    if (grp.nodes.front()->output()->shape() != n->output()->shape())
      return false;
    size_t pos = position.lookup(n);
    for (const Node *m : grp.nodes)
      for (const Use &u : m->output()->uses()) {
        bool inGroup = groupOf.lookup(u.user) == gi;
        size_t userPos = position.lookup(u.user);
        if (!inGroup && u.user != n && userPos != kNone && userPos < pos)
          return false;
      }
    // Moving the group to n may keep a large input alive longer. Across one
    // kernel, n joining pays for that when it frees at least as many bytes:
    // the group's results that only n reads outside it (the fp32 copy of a
    // bf16 gradient that a GEMM also reads, made for the fp32 step after
    // that GEMM, say). Across more, the schedule of the steps in between
    // decides what is alive, and the group stays where it is.
    auto member = [&](const Node *m) { return m == n || groupOf.lookup(m) == gi; };
    size_t from = position.lookup(grp.nodes.back());
    uint64_t extended = lifetimes.extendedBytes(grp.nodes, from, pos, member);
    if (extended > 0 && (lifetimes.kernelsBetween(from, pos) != 1 ||
                         extended > freedByJoining(grp.nodes, n, member, keptToEnd)))
      return false;
    return countOutsideInputs({grp.nodes, llvm::ArrayRef<const Node *>(n)}) <= maxInputs;
  };

  for (size_t i = 0; i < order.size(); ++i) {
    const Node *n = order[i];
    if (!fusable[i])
      continue;
    std::optional<size_t> target;
    if (fuse)
      for (const Value *v : n->inputs()) {
        if (!v || !v->producer())
          continue;
        size_t g = groupOf.lookup(v->producer());
        if (g != kNone && canJoin(g, n)) {
          target = g;
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
  if (fuse)
    mergeSiblings(groups, groupOf, position, lifetimes, maxNodes, maxInputs);
  std::vector<FusionGroup> live;
  for (FusionGroup &g : groups)
    if (!g.nodes.empty())
      live.push_back(std::move(g));
  return live;
}

} // namespace ampc
