//===- Canonicalize.cpp - Fold, simplify, CSE and DCE to a fixed point -----===//

#include "ampc/Passes/Passes.h"

namespace ampc {

/// Whether a round that only merged equal nodes (CSE) and erased dead ones
/// (DCE) can have left work for another. Both run in the graph's order,
/// which is topological (a verified invariant), so each finishes its own
/// work in one walk; merging and erasing make no value constant and change
/// no type, so neither folding nor simplify gains a node, except a Dropout
/// whose mask lost its last reader.
bool mergesCanEnableMore(const Graph &g) {
  for (const Node *n : g.nodes())
    if (n->is("Dropout"))
      return true;
  return false;
}

llvm::Error canonicalize(Graph &g) {
  // Each round can expose more work for the others; the graph shrinks every
  // round that changes it, so this terminates. The bound is a safety net.
  for (int round = 0; round < 32; ++round) {
    auto folded = foldConstants(g);
    if (!folded)
      return folded.takeError();
    bool simplified = simplifyNoOps(g);
    bool merged = eliminateCommonSubexpressions(g);
    bool erased = eliminateDeadCode(g);
    if (!*folded && !simplified && !merged && !erased)
      break;
    // The round a large training graph needs after its CSE was a full walk
    // of every sub-pass that found nothing (a tenth of compiling it).
    if (!*folded && !simplified && !mergesCanEnableMore(g))
      break;
  }
  return llvm::Error::success();
}

namespace {

class CanonicalizePass : public Pass {
public:
  llvm::StringRef name() const override { return "canonicalize"; }
  llvm::Error run(Graph &g, PassContext &) override { return canonicalize(g); }
};

} // namespace

void registerCanonicalizePass() {
  PassRegistry::add({"canonicalize",
                     "Constant folding, no-op removal, CSE and DCE, repeated to a fixed point",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<CanonicalizePass>(); }});
}

} // namespace ampc
