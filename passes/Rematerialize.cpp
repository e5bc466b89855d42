//===- Rematerialize.cpp - Recompute cheap values for the backward pass ----===//
//
// The backward pass reads values of the forward pass; every one it reads is
// kept alive across the loss. Many are cheap to compute again from others:
// autocast's casts (a weight's fp16 copy, the fp32 copy of an fp16 result),
// elementwise chains (GELU's), layout changes, a softmax. This pass chooses
// which values to keep and which to recompute in the backward pass so that
// the bytes kept are the fewest, by the min-cut formulation of functorch's
// rematerialization partitioner:
//
//   every forward value v is an edge v.in -> v.out whose capacity is the
//   bytes of keeping it (0 for graph inputs, initializers and graph
//   outputs: they stay alive anyway); v.out -> u.in for each forward use
//   of v by u; source -> v.in for values that cannot be recomputed (the
//   results of GEMMs, convolutions, reductions, normalizations, random
//   ops...); v.out -> sink for values the backward pass reads.
//
// A minimum cut keeps the values whose edge it cuts; values beyond the cut
// are recomputed, just before their first use in the backward pass, from
// kept ones. Recomputing runs the same deterministic kernels on the same
// inputs, so every number stays bitwise the same. It runs after the last
// canonicalize of the training pipeline, since CSE would merge the copies.
//
//===----------------------------------------------------------------------===//

#include "ampc/IR/IdMap.h"
#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"
#include "ampc/Support/Error.h"
#include "ampc/rt/FusedOps.h"

#include "llvm/ADT/SmallString.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <set>

namespace ampc {

namespace {

/// How much a recomputed value may cost, cheapest first. `layout`: no
/// arithmetic (casts, views, layout changes); `elementwise`: also
/// elementwise math (GELU's chain); `all`: also row-wise ops (a softmax).
enum class RematLevel { Layout, Elementwise, All };

/// Ops worth recomputing at `level`: linear in their result's size,
/// deterministic, one result. Everything else (GEMMs, convolutions,
/// reductions, normalizations, losses, random ops, multi-result ops) is kept
/// when the backward pass needs it.
bool isRecomputable(const Node &n, RematLevel level) {
  static const std::set<std::string> kLayout = {"Cast",      "Identity",  "Reshape", "Flatten",
                                                "Squeeze",   "Unsqueeze", "Transpose", "Expand"};
  static const std::set<std::string> kElementwise = {
      "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Pow", "Relu",
      "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf", "Softplus", "Softsign",
      "Clip", "Where", "Not", "And", "Or", "Equal", "Less", "Greater", "LessOrEqual",
      "GreaterOrEqual", "Max", "Min", "Sum", "Mean"};
  // Row-wise and cheap: recomputing a softmax is what attention kernels do.
  static const std::set<std::string> kRowwise = {"Softmax", "LogSoftmax"};
  if (!n.domain().empty() || n.numOutputs() != 1 || !n.output())
    return false;
  const std::string &op = n.opType();
  return kLayout.count(op) || (level >= RematLevel::Elementwise && kElementwise.count(op)) ||
         (level >= RematLevel::All && kRowwise.count(op));
}

/// Dinic's maximum flow. After run(), reachesSink() tells the sink side of
/// the minimum cut closest to the sink: among cuts of the fewest bytes, the
/// one that recomputes the fewest values.
class MaxFlow {
public:
  static constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

  explicit MaxFlow(int nodes) : adj_(nodes), level_(nodes), next_(nodes) {}

  void addEdge(int from, int to, int64_t capacity) {
    adj_[from].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({to, capacity});
    adj_[to].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({from, 0});
  }

  void run(int source, int sink) {
    while (levels(source, sink)) {
      std::fill(next_.begin(), next_.end(), 0);
      while (push(source, sink, kInf) > 0) {
      }
    }
    // The nodes from which the sink is still reachable in the residual graph.
    toSink_.assign(adj_.size(), false);
    std::queue<int> q;
    toSink_[sink] = true;
    q.push(sink);
    while (!q.empty()) {
      int v = q.front();
      q.pop();
      for (int e : adj_[v]) {
        int from = edges_[e].to; // e ^ 1 is the edge from -> v
        if (!toSink_[from] && edges_[e ^ 1].capacity > 0) {
          toSink_[from] = true;
          q.push(from);
        }
      }
    }
  }

  bool reachesSink(int node) const { return toSink_[node]; }

private:
  struct Edge {
    int to;
    int64_t capacity;
  };

  bool levels(int source, int sink) {
    std::fill(level_.begin(), level_.end(), -1);
    std::queue<int> q;
    level_[source] = 0;
    q.push(source);
    while (!q.empty()) {
      int v = q.front();
      q.pop();
      for (int e : adj_[v])
        if (edges_[e].capacity > 0 && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[v] + 1;
          q.push(edges_[e].to);
        }
    }
    return level_[sink] >= 0;
  }

  int64_t push(int v, int sink, int64_t limit) {
    if (v == sink)
      return limit;
    for (size_t &i = next_[v]; i < adj_[v].size(); ++i) {
      Edge &e = edges_[adj_[v][i]];
      if (e.capacity <= 0 || level_[e.to] != level_[v] + 1)
        continue;
      int64_t pushed = push(e.to, sink, std::min(limit, e.capacity));
      if (pushed > 0) {
        e.capacity -= pushed;
        edges_[adj_[v][i] ^ 1].capacity += pushed;
        return pushed;
      }
    }
    return 0;
  }

  std::vector<std::vector<int>> adj_;
  std::vector<Edge> edges_;
  std::vector<int> level_;
  std::vector<size_t> next_;
  std::vector<bool> toSink_;
};

/// Arrays by node and value id: the pass looks up every use of every forward
/// value (hash maps made those lookups cache misses). A node added by the
/// pass has no position; a value outside the cut's problem no index.
constexpr size_t kNoPosition = static_cast<size_t>(-1);
using NodePositions = NodeIdMap<size_t>;
using ValueIndex = ValueIdMap<int>;

class RematerializePass : public Pass {
public:
  RematerializePass(RematLevel maxLevel, uint64_t budget, bool intoKernels)
      : maxLevel_(maxLevel), budget_(budget), intoKernels_(intoKernels) {}
  llvm::StringRef name() const override { return "remat"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    auto lossName = g.metadata.find(std::string(kInfoPrefix) + "output.loss");
    Value *loss = lossName == g.metadata.end() ? nullptr : g.findValue(lossName->second);
    if (!loss || !loss->producer())
      return llvm::Error::success(); // not a training step: nothing is "after the loss"
    std::vector<Node *> order = g.nodes();
    NodePositions position(kNoPosition);
    position.reserve(g.nodeIdBound());
    for (size_t i = 0; i < order.size(); ++i)
      position[order[i]] = i;
    size_t lossAt = position.lookup(loss->producer());
    // A node without a position (one this pass added) is in neither part.
    auto isBackward = [&](const Node *n) {
      size_t at = position.lookup(n);
      return at != kNoPosition && at > lossAt;
    };

    // Forward values the backward pass reads, and the values that can
    // reach them through forward nodes.
    std::vector<Value *> values;
    ValueIndex index(-1);
    index.reserve(g.valueIdBound());
    auto addValue = [&](Value *v) {
      if (v && !index.contains(v)) {
        index[v] = static_cast<int>(values.size());
        values.push_back(v);
      }
    };
    for (Value *v : g.inputs())
      addValue(v);
    for (Value *v : g.initializers())
      addValue(v);
    for (size_t i = 0; i <= lossAt; ++i)
      for (Value *v : order[i]->outputs())
        addValue(v);

    // Without a budget, the cut at the level asked for (by default layout:
    // no arithmetic is recomputed, so a plan that fits pays no compute for
    // memory); with one, the cheapest level up to it whose cut fits.
    Cut cut;
    for (RematLevel level : {RematLevel::Layout, RematLevel::Elementwise, RematLevel::All}) {
      if (level > maxLevel_ || (!budget_ && level < maxLevel_))
        continue;
      cut = minCut(values, index, position, isBackward, level);
      if (!budget_ || cut.keptAfter <= budget_)
        break;
    }
    if (intoKernels_)
      recomputeIntoKernels(values, index, isBackward, cut);
    const ValueIdMap<char> &recompute = cut.recompute;
    const std::vector<bool> &neededByBackward = cut.neededByBackward;
    uint64_t keptBefore = cut.keptBefore, keptAfter = cut.keptAfter;
    int n = static_cast<int>(values.size());

    // Each recomputed value the backward pass reads gets its copy just before
    // its first backward use. Copies are shared between chains, so values
    // are handled in the order of those first uses: a shared copy is always
    // made at the earlier point.
    struct Root {
      size_t firstUse;
      Value *value;
      std::vector<Use> late;
    };
    std::vector<Root> roots;
    for (int i = 0; i < n; ++i) {
      Value *v = values[i];
      if (!neededByBackward[i] || !recompute.lookup(v))
        continue;
      Root r{std::numeric_limits<size_t>::max(), v, {}};
      for (const Use &u : v->uses())
        if (isBackward(u.user)) {
          r.late.push_back(u);
          r.firstUse = std::min(r.firstUse, position.lookup(u.user));
        }
      roots.push_back(std::move(r));
    }
    std::stable_sort(roots.begin(), roots.end(),
                     [](const Root &a, const Root &b) { return a.firstUse < b.firstUse; });
    unsigned copies = 0;
    ValueIdMap<Value *> clones(nullptr);
    for (const Root &r : roots) {
      Graph::InsertionGuard guard(g, order[r.firstUse]);
      Value *copy = clone(g, r.value, recompute, clones, copies);
      for (const Use &u : r.late)
        u.user->setInput(u.operand, copy);
    }
    if (copies)
      ctx.addReport("remat", "remat: " + std::to_string(copies) +
                                 " values recomputed for the backward pass, which now reads " +
                                 std::to_string(keptAfter) + " bytes of forward values instead of " +
                                 std::to_string(keptBefore));
    return llvm::Error::success();
  }

  struct Cut {
    ValueIdMap<char> recompute;
    std::vector<bool> neededByBackward;
    uint64_t keptBefore = 0, keptAfter = 0;
  };

  /// The minimum cut over forward values when ops up to `level` may be
  /// recomputed: the values to recompute and the bytes kept for the backward
  /// pass before and after.
  template <typename IsBackward>
  static Cut minCut(const std::vector<Value *> &values,
                    ValueIndex &index, const NodePositions &position,
                    IsBackward isBackward, RematLevel level) {
    int n = static_cast<int>(values.size());
    int source = 2 * n, sink = 2 * n + 1;
    Cut cut;
    cut.neededByBackward.assign(n, false);
    std::vector<bool> &neededByBackward = cut.neededByBackward;
    MaxFlow flow(2 * n + 2);
    for (int i = 0; i < n; ++i) {
      Value *v = values[i];
      const Node *p = v->producer();
      bool free = !p || v->isGraphOutput();
      flow.addEdge(2 * i, 2 * i + 1, free ? 0 : v->type().byteSize());
      if (free || !isRecomputable(*p, level))
        flow.addEdge(source, 2 * i, MaxFlow::kInf);
      for (const Use &u : v->uses()) {
        if (!position.contains(u.user))
          continue;
        if (isBackward(u.user)) {
          neededByBackward[i] = true;
          continue;
        }
        for (Value *out : u.user->outputs())
          if (out && index.contains(out))
            flow.addEdge(2 * i + 1, 2 * index.lookup(out), MaxFlow::kInf);
      }
      if (neededByBackward[i])
        flow.addEdge(2 * i + 1, sink, MaxFlow::kInf);
    }
    flow.run(source, sink);

    // Values wholly beyond the cut are recomputed; the kept ones are read.
    ValueIdMap<char> &recompute = cut.recompute;
    uint64_t &keptBefore = cut.keptBefore, &keptAfter = cut.keptAfter;
    for (int i = 0; i < n; ++i) {
      Value *v = values[i];
      uint64_t bytes = v->producer() && !v->isGraphOutput() ? v->type().byteSize() : 0;
      if (neededByBackward[i])
        keptBefore += bytes;
      if (!flow.reachesSink(2 * i) && flow.reachesSink(2 * i + 1))
        keptAfter += bytes;
      if (flow.reachesSink(2 * i))
        recompute[v] = 1;
    }

    return cut;
  }

  /// Longest chain of elementwise ops recomputeIntoKernels copies into a
  /// backward kernel for one value.
  static constexpr int kMaxIntoKernel = 4;

  /// Kept values the backward pass reads only through elementwise ops of
  /// their own size, computed by at most kMaxIntoKernel elementwise ops
  /// from values it keeps anyway (GELU's x / sqrt(2) and 1 + erf(x / sqrt(2))
  /// from x), or from results of ops that are not recomputed (a GEMM's) whose
  /// bytes are fewer than the value's: the bf16 GEMM result P of an autocast
  /// GELU's x = float(P) + bias is half of x's bytes. Recomputed, the copies
  /// fuse into the backward kernel that reads them: the forward kernel no
  /// longer writes them and the backward one no longer reads them (or reads
  /// fewer bytes instead), for a few instructions more per element. So this
  /// saves time as well as bytes, and runs whatever the level.
  template <typename IsBackward>
  static void recomputeIntoKernels(const std::vector<Value *> &values,
                                   const ValueIndex &index, IsBackward isBackward, Cut &cut) {
    // Values kept because a recomputed chain reads them.
    ValueIdMap<char> keptForChains(0);
    auto kept = [&](const Value *v) {
      int i = index.lookup(v);
      return i >= 0 &&
             ((cut.neededByBackward[i] && !cut.recompute.lookup(v)) || keptForChains.lookup(v));
    };
    // An instruction of a fused kernel (not a view or layout change).
    auto elementwise = [](const Node &n) {
      llvm::SmallString<48> storage;
      return rt::isFusedOpName(n.qualifiedOpType(storage));
    };
    // The values to recompute for v from kept ones, or false when that
    // takes more than `budget` ops or ops that are not elementwise. Results
    // of ops that are never recomputed end the chain as values to keep
    // (`leaves`). `root`: the chain's first value; `read`: the values its
    // copies read (kept ones and leaves).
    const Value *root = nullptr;
    std::vector<const Value *> read;
    std::function<bool(Value *, int &, std::vector<Value *> &, std::vector<Value *> &)> chain =
        [&](Value *v, int &budget, std::vector<Value *> &out, std::vector<Value *> &leaves) {
          if (!v || v->type().numElements() == 1)
            return true;
          if (!v->producer() || v->isGraphOutput() || kept(v)) {
            if (!llvm::is_contained(read, v))
              read.push_back(v);
            return true;
          }
          // Recomputed already (for another chain, or by the cut): the
          // backward kernel has its copy anyway.
          if (v != root && cut.recompute.lookup(v))
            return true;
          if (!index.contains(v))
            return false;
          const Node *p = v->producer();
          if (!isRecomputable(*p, RematLevel::All)) {
            if (!llvm::is_contained(leaves, v)) {
              leaves.push_back(v);
              read.push_back(v);
            }
            return true;
          }
          if (!isRecomputable(*p, RematLevel::Elementwise) || !elementwise(*p) || --budget < 0)
            return false;
          out.push_back(v);
          for (Value *in : p->inputs())
            if (!chain(in, budget, out, leaves))
              return false;
          return true;
        };
    for (Value *v : values) {
      if (!kept(v) || keptForChains.lookup(v) || !v->producer() || v->isGraphOutput())
        continue;
      bool onlyElementwise = true;
      for (const Use &u : v->uses())
        if (isBackward(u.user))
          onlyElementwise &= elementwise(*u.user) && u.user->numOutputs() == 1 &&
                             u.user->output() &&
                             u.user->output()->type().numElements() == v->type().numElements();
      if (!onlyElementwise)
        continue;
      // v itself must not count as kept while its chain is searched.
      cut.recompute[v] = 1;
      int budget = kMaxIntoKernel; // v's own op included
      root = v;
      read.clear();
      std::vector<Value *> copies, leaves;
      uint64_t leafBytes = 0, readBytes = 0;
      bool ok = chain(v, budget, copies, leaves);
      for (const Value *leaf : leaves)
        leafBytes += leaf->type().byteSize();
      for (const Value *r : read)
        readBytes += r->type().byteSize();
      // Keeping leaves instead of v must keep fewer bytes, and the backward
      // kernel must read fewer bytes than v's (a bias row, not a target as
      // large as v).
      uint64_t bytes = static_cast<uint64_t>(v->type().byteSize());
      if (!ok || (!leaves.empty() && (leafBytes >= bytes || readBytes >= bytes))) {
        cut.recompute[v] = 0;
        continue;
      }
      for (const Value *c : copies)
        cut.recompute[c] = 1;
      for (const Value *leaf : leaves)
        keptForChains[leaf] = 1;
      cut.keptAfter += leafBytes;
      cut.keptAfter -= v->type().byteSize();
    }
  }

private:
  RematLevel maxLevel_;
  uint64_t budget_;
  bool intoKernels_;

  /// A copy of the chain computing v from kept values, at the insertion
  /// point; copies made earlier (at an earlier point) are shared.
  Value *clone(Graph &g, Value *v, const ValueIdMap<char> &recompute,
               ValueIdMap<Value *> &clones, unsigned &copies) {
    if (!recompute.lookup(v))
      return v;
    if (Value *done = clones.lookup(v))
      return done;
    const Node *p = v->producer();
    std::vector<Value *> inputs;
    for (Value *in : p->inputs())
      inputs.push_back(in ? clone(g, in, recompute, clones, copies) : nullptr);
    Node *n = g.createNode(p->opType(), inputs, {v->type()}, p->attributes(),
                           p->name().empty() ? "" : p->name() + "/remat", p->domain(),
                           {v->name() + ".remat"});
    ++copies;
    return clones[v] = n->output();
  }
};

} // namespace

void registerRematerializePass() {
  PassRegistry::add(
      {"remat",
       "Recompute forward values in the backward pass where that keeps fewer bytes alive across "
       "the loss (a minimum cut), no costlier than the level allows or the budget asks for",
       {{"ops", OptionType::Enum,
         "The costliest ops recomputed: layout (casts and views, no arithmetic), elementwise "
         "(also elementwise math), all (also softmax); with a budget, the cheapest level whose "
         "kept bytes fit it, up to this one (default: layout, or all with a budget)",
         "", {"layout", "elementwise", "all"}},
        {"budget", OptionType::Int,
         "Bytes of forward values the backward pass may keep (0: no budget, the level's cut)",
         "0", {}},
        {"into-kernels", OptionType::Bool,
         "Also recompute values the backward pass reads only through elementwise ops when a few "
         "elementwise ops compute them from kept values (they fuse into the backward kernel)",
         "true", {}}},
       "ops",
       [](const PassOptions &o) {
         int64_t budget = o.getInt("budget");
         std::string ops = o.has("ops") ? o.getString("ops") : budget > 0 ? "all" : "layout";
         RematLevel level = ops == "all"           ? RematLevel::All
                            : ops == "elementwise" ? RematLevel::Elementwise
                                                   : RematLevel::Layout;
         return std::make_unique<RematerializePass>(level, budget > 0 ? budget : 0,
                                                    o.getBool("into-kernels"));
       }});
}

} // namespace ampc
