//===- CSE.cpp - Common-subexpression elimination --------------------------===//
//
// Two nodes with the same operator, attributes and operands compute the same
// results (random operators excepted): the later one is replaced by the
// earlier. Small constants with equal type and bytes are merged too, so that
// the many copies of `axes = [0]` that exports contain become one.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/SmallVector.h"

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

} // namespace

bool eliminateCommonSubexpressions(Graph &g) {
  bool changed = mergeConstants(g);
  std::vector<Node *> nodes = g.nodes();
  // The nodes seen so far by hash, in one open-addressing table (a node
  // allocated per entry made the lookups cache misses on large graphs);
  // equal hashes are rare, so each bucket holds one node almost always.
  llvm::DenseMap<uint64_t, llvm::SmallVector<Node *, 1>> seen;
  seen.reserve(nodes.size());
  for (Node *n : nodes) {
    if (isRandom(*n))
      continue;
    uint64_t hash = NodeHash()(n);
    if (hash >= ~uint64_t(1)) // the table's empty and tombstone keys
      hash = 0;
    llvm::SmallVector<Node *, 1> &bucket = seen[hash];
    auto equal = std::find_if(bucket.begin(), bucket.end(),
                              [&](const Node *m) { return NodeEqual()(m, n); });
    if (equal == bucket.end()) {
      bucket.push_back(n);
      continue;
    }
    Node *first = *equal;
    bool types = true;
    for (unsigned i = 0; i < n->numOutputs(); ++i)
      types = types && (!n->output(i) || (first->output(i) &&
                                          first->output(i)->type() == n->output(i)->type()));
    if (!types)
      continue;
    for (unsigned i = 0; i < n->numOutputs(); ++i) {
      Value *v = n->output(i);
      if (v && !v->isGraphOutput())
        v->replaceAllUsesWith(first->output(i));
    }
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
