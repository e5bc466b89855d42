//===- Canonicalize.cpp - Fold, simplify, CSE and DCE to a fixed point -----===//

#include "ampc/Passes/Passes.h"

namespace ampc {

llvm::Error canonicalize(Graph &g) {
  // Each round can expose more work for the others; the graph shrinks every
  // round that changes it, so this terminates. The bound is a safety net.
  for (int round = 0; round < 32; ++round) {
    auto folded = foldConstants(g);
    if (!folded)
      return folded.takeError();
    bool changed = *folded;
    changed |= simplifyNoOps(g);
    changed |= eliminateCommonSubexpressions(g);
    changed |= eliminateDeadCode(g);
    if (!changed)
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
