//===- CSE.cpp - Common-subexpression elimination --------------------------===//
//
// Two nodes with the same operator, attributes and operands compute the same
// results (random operators excepted): the later one is replaced by the
// earlier. Small constants with equal type and bytes are merged too, so that
// the many copies of `axes = [0]` that exports contain become one.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"

#include "llvm/ADT/Hashing.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace ampc {

namespace {

constexpr int64_t kMaxMergedConstant = 64;

bool isRandom(const Node &n) {
  return n.is("Dropout") || n.opType().rfind("Random", 0) == 0 || n.is("Multinomial") ||
         n.is("Bernoulli");
}

uint64_t bitsOf(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

/// Attribute equality for merging: floats compare by their bits (-0.0 and
/// 0.0 stay apart, a NaN equals the same NaN).
bool sameAttribute(const Attribute &a, const Attribute &b) {
  if (a.kind != b.kind)
    return false;
  switch (a.kind) {
  case Attribute::Kind::Float:
    return bitsOf(a.f) == bitsOf(b.f);
  case Attribute::Kind::Floats:
    return a.floats.size() == b.floats.size() &&
           std::equal(a.floats.begin(), a.floats.end(), b.floats.begin(),
                      [](double x, double y) { return bitsOf(x) == bitsOf(y); });
  default:
    return a == b;
  }
}

llvm::hash_code hashAttribute(const Attribute &a) {
  llvm::hash_code h = llvm::hash_value(static_cast<int>(a.kind));
  switch (a.kind) {
  case Attribute::Kind::Float:
    return llvm::hash_combine(h, bitsOf(a.f));
  case Attribute::Kind::Int:
    return llvm::hash_combine(h, a.i);
  case Attribute::Kind::String:
    return llvm::hash_combine(h, a.s);
  case Attribute::Kind::Tensor:
    return llvm::hash_combine(h, a.t ? a.t->byteSize() : 0);
  case Attribute::Kind::Floats:
    for (double f : a.floats)
      h = llvm::hash_combine(h, bitsOf(f));
    return h;
  case Attribute::Kind::Ints:
    return llvm::hash_combine(h, llvm::hash_combine_range(a.ints.begin(), a.ints.end()));
  case Attribute::Kind::Strings:
    return llvm::hash_combine(h, llvm::hash_combine_range(a.strings.begin(), a.strings.end()));
  }
  return h;
}

/// Nodes are equal when they compute the same results: operator, operands
/// (by identity), attributes and result count. Hashing the node itself, not
/// a string key built for it, was most of CSE's time on large graphs.
struct NodeHash {
  size_t operator()(const Node *n) const {
    llvm::hash_code h = llvm::hash_combine(n->opType(), n->domain(), n->numOutputs());
    h = llvm::hash_combine(h, llvm::hash_combine_range(n->inputs().begin(), n->inputs().end()));
    for (const auto &[name, a] : n->attributes())
      h = llvm::hash_combine(h, name, hashAttribute(a));
    return h;
  }
};

struct NodeEqual {
  bool operator()(const Node *a, const Node *b) const {
    if (a->opType() != b->opType() || a->domain() != b->domain() ||
        a->numOutputs() != b->numOutputs() || a->inputs() != b->inputs() ||
        a->attributes().size() != b->attributes().size())
      return false;
    auto x = a->attributes().begin(), y = b->attributes().begin();
    for (; x != a->attributes().end(); ++x, ++y)
      if (x->first != y->first || !sameAttribute(x->second, y->second))
        return false;
    return true;
  }
};

bool mergeConstants(Graph &g) {
  bool changed = false;
  std::unordered_map<std::string, Value *> seen;
  for (Value *v : g.initializers()) {
    if (!v->isConstant() || v->type().numElements() > kMaxMergedConstant || v->isGraphOutput())
      continue;
    std::string key = v->type().str() +
                      std::string(reinterpret_cast<const char *>(v->data()->data()),
                                  v->data()->byteSize());
    auto [it, inserted] = seen.emplace(key, v);
    if (inserted || !v->hasUses())
      continue;
    v->replaceAllUsesWith(it->second);
    changed = true;
  }
  return changed;
}

/// The nodes seen so far by hash: open addressing with linear probing over
/// (hash, node) slots, at most three quarters full. Nodes of one hash are met
/// along a probe sequence in the order they were inserted, so a lookup finds
/// the earliest equal node, as a bucket per hash did.
class NodeTable {
public:
  explicit NodeTable(size_t nodes) {
    size_t capacity = 16;
    while (capacity * 3 < nodes * 4)
      capacity *= 2;
    slots_.assign(capacity, Slot{0, nullptr});
    mask_ = capacity - 1;
  }

  void prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[hash & mask_]); }

  /// The earliest node of this hash equal to n; null after inserting n.
  Node *findOrInsert(uint64_t hash, Node *n) {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      Slot &slot = slots_[i];
      if (!slot.node) {
        slot = {hash, n};
        return nullptr;
      }
      if (slot.hash == hash && NodeEqual()(slot.node, n))
        return slot.node;
    }
  }

private:
  struct Slot {
    uint64_t hash;
    Node *node;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

/// How many nodes ahead the walk hashes a node and asks for its slot: on
/// large graphs the table's slots are cache misses (80% of CSE's time on a
/// training graph of 160,000 nodes), which the lookahead overlaps.
constexpr size_t kLookahead = 8;

} // namespace

bool eliminateCommonSubexpressions(Graph &g) {
  bool changed = mergeConstants(g);
  std::vector<Node *> nodes = g.nodes();
  NodeTable seen(nodes.size());
  // Hashes computed kLookahead nodes early, with the number of merges made
  // by then: a merge rewires the operands of later nodes, whose hashes are
  // then computed again.
  struct Early {
    uint64_t hash;
    size_t merges;
  };
  Early early[kLookahead];
  size_t merges = 0;
  auto hashAhead = [&](size_t i) {
    if (i >= nodes.size())
      return;
    uint64_t h = NodeHash()(nodes[i]);
    early[i % kLookahead] = {h, merges};
    seen.prefetch(h);
  };
  for (size_t i = 0; i < std::min(kLookahead, nodes.size()); ++i)
    hashAhead(i);
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node *n = nodes[i];
    Early e = early[i % kLookahead];
    hashAhead(i + kLookahead);
    if (isRandom(*n))
      continue;
    uint64_t hash = e.merges == merges ? e.hash : NodeHash()(n);
    Node *first = seen.findOrInsert(hash, n);
    if (!first)
      continue;
    bool types = true;
    for (unsigned k = 0; k < n->numOutputs(); ++k)
      types = types && (!n->output(k) ||
                        (first->output(k) && first->output(k)->type() == n->output(k)->type()));
    if (!types)
      continue;
    for (unsigned k = 0; k < n->numOutputs(); ++k) {
      Value *v = n->output(k);
      if (v && !v->isGraphOutput())
        v->replaceAllUsesWith(first->output(k));
    }
    ++merges;
    changed = true;
  }
  return changed;
}

namespace {

class CSEPass : public Pass {
public:
  llvm::StringRef name() const override { return "cse"; }
  llvm::Error run(Graph &g, PassContext &) override {
    eliminateCommonSubexpressions(g);
    return llvm::Error::success();
  }
};

} // namespace

void registerCSEPass() {
  PassRegistry::add({"cse", "Merge nodes computing the same results, and equal small constants",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<CSEPass>(); }});
}

} // namespace ampc
