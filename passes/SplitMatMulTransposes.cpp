//===- SplitMatMulTransposes.cpp - Transposes around MatMuls keep rows -----===//
//
// Attention reads its keys transposed: K^T = Transpose(k, perm = [0,2,3,1])
// moves the innermost axis of k (the head dimension) to the middle, a copy
// that gathers one element at a time. The same permutation followed by a swap
// of the last two axes, perm = [0,2,1,3] and then [0,1,3,2], is two copies of
// which the first moves whole rows (memcpy) and the second is no copy at all:
// the lowering folds a swap read only by MatMuls into their transpose flags
// (lib/Lower/Lower.cpp, foldTransposesIntoMatMuls). This pass makes that
// split, on both sides of a MatMul:
//   - a Transpose read only as MatMul operands whose permutation p sends the
//     stored innermost axis to the second-to-last place becomes
//     Transpose(p o s) then Transpose(s), s the swap of the last two axes
//     (a swap of it, which MatMul's gradient rule makes, then reads the
//     first copy directly);
//   - a Transpose of a MatMul's result (read by nothing else) whose
//     permutation q takes the result's second-to-last axis innermost becomes
//     Transpose(s) then Transpose(s o q); the lowering computes the swapped
//     product, (A B)^T = B^T A^T, into the swap's result.
// The values are the same (a transposition copies elements exactly); only
// the copies change. Where the lowering cannot fold the swap after all (a
// MatMul in another program than the Transpose), the swap is a copy of its
// own: correct, one copy more. Runs last in the --train pipeline, after remat:
// canonicalize would merge the two Transposes again.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"

#include <numeric>
#include <set>

namespace ampc {

namespace {

/// The node's permutation (transposePerm) when it is a Transpose of rank 3
/// or more whose perm is a permutation; empty otherwise.
std::vector<int64_t> permOf(const Node &n) {
  std::vector<int64_t> perm = transposePerm(n);
  int64_t r = static_cast<int64_t>(perm.size());
  if (r < 3)
    return {};
  std::vector<char> seen(r, 0);
  for (int64_t a : perm)
    if (a < 0 || a >= r || seen[a]++)
      return {};
  return perm;
}

std::vector<int64_t> swapLastTwo(std::vector<int64_t> v) {
  std::swap(v[v.size() - 1], v[v.size() - 2]);
  return v;
}

std::vector<int64_t> swapPerm(size_t rank) {
  std::vector<int64_t> s(rank);
  std::iota(s.begin(), s.end(), 0);
  return swapLastTwo(s);
}

/// Whether every read of `v` is a MatMul operand, or (with `throughSwaps`) a
/// swap of the last two axes read only as MatMul operands: the gradient
/// rule of MatMul transposes its operands, and the lowering cancels a swap
/// of a swap.
bool readOnlyByMatMuls(const Value *v, bool throughSwaps) {
  if (!v->hasUses() || v->isGraphOutput())
    return false;
  for (const Use &u : v->uses()) {
    if (u.user->is("MatMul") && u.operand < 2)
      continue;
    if (!throughSwaps || !swapsLastTwoAxes(*u.user) || !readOnlyByMatMuls(u.user->output(), false))
      return false;
  }
  return true;
}

/// A new Transpose of `x` by `perm` before `pos`, its result typed `type`.
Value *transposeBefore(Graph &g, Node *pos, Value *x, std::vector<int64_t> perm, TensorType type,
                       const std::string &name) {
  Graph::InsertionGuard guard(g, pos);
  std::map<std::string, Attribute> attrs;
  attrs["perm"] = Attribute::ofInts(std::move(perm));
  return g.createNode("Transpose", {x}, {std::move(type)}, std::move(attrs), g.uniqueName(name))
      ->output();
}

/// Shape of `x` permuted by `perm`.
TensorType permuted(const TensorType &x, const std::vector<int64_t> &perm) {
  TensorType t = x;
  for (size_t d = 0; d < perm.size(); ++d)
    t.shape[d] = x.shape[perm[d]];
  return t;
}

/// Operand side: T = Transpose(x, p) -> Transpose(Transpose(x, p o s), s).
/// The swaps of T it erases are added to `erased`.
bool splitOperandTranspose(Graph &g, Node *t, const std::vector<int64_t> &p,
                           std::set<const Node *> &erased) {
  size_t r = p.size();
  if (static_cast<size_t>(p[r - 2]) != r - 1 || swapsLastTwoAxes(*t) ||
      !readOnlyByMatMuls(t->output(), /*throughSwaps=*/true))
    return false;
  std::vector<int64_t> rows = swapLastTwo(p); // p o s
  Value *x = t->input(0);
  Value *w = transposeBefore(g, t, x, rows, permuted(x->type(), rows), t->displayName() + "/rows");
  t->setInput(0, w);
  t->setInts("perm", swapPerm(r));
  // A swap of t is now a swap of a swap: its readers read w.
  std::vector<Node *> swapsOfT;
  for (const Use &u : t->output()->uses())
    if (u.user->is("Transpose"))
      swapsOfT.push_back(u.user);
  for (Node *o : swapsOfT) {
    o->output()->replaceAllUsesWith(w);
    erased.insert(o);
    g.eraseNode(o);
  }
  return true;
}

/// Result side: T = Transpose(MatMul(..), q) -> Transpose(Transpose(.., s), s o q).
bool splitResultTranspose(Graph &g, Node *t, const std::vector<int64_t> &q) {
  size_t r = q.size();
  Value *y = t->input(0);
  const Node *m = y->producer();
  if (static_cast<size_t>(q[r - 1]) != r - 2 || swapsLastTwoAxes(*t) || !m || !m->is("MatMul") ||
      y->uses().size() != 1 || y->isGraphOutput() || m->input(0)->type().shape.size() < 2 ||
      m->input(1)->type().shape.size() < 2)
    return false;
  std::vector<int64_t> s = swapPerm(r), rest(r);
  for (size_t d = 0; d < r; ++d)
    rest[d] = s[q[d]]; // s o q
  Value *z = transposeBefore(g, t, y, s, permuted(y->type(), s), t->displayName() + "/swap");
  t->setInput(0, z);
  t->setInts("perm", rest);
  return true;
}

} // namespace

bool splitMatMulTransposes(Graph &g) {
  bool changed = false;
  std::set<const Node *> erased; // later in the snapshot, gone from the graph
  for (Node *n : g.nodes()) {
    if (erased.count(n))
      continue;
    std::vector<int64_t> perm = permOf(*n);
    if (perm.empty())
      continue;
    changed |= splitOperandTranspose(g, n, perm, erased) || splitResultTranspose(g, n, perm);
  }
  return changed;
}

namespace {

class SplitMatMulTransposesPass : public Pass {
public:
  llvm::StringRef name() const override { return "split-matmul-transposes"; }
  llvm::Error run(Graph &g, PassContext &) override {
    splitMatMulTransposes(g);
    return llvm::Error::success();
  }
};

} // namespace

void registerSplitMatMulTransposesPass() {
  PassRegistry::add(
      {"split-matmul-transposes",
       "Split Transposes read by or reading a MatMul into a row copy and a swap of the last two "
       "axes, which the lowering folds into the MatMul",
       {},
       "",
       [](const PassOptions &) { return std::make_unique<SplitMatMulTransposesPass>(); }});
}

} // namespace ampc
