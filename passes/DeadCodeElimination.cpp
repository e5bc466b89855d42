//===- DeadCodeElimination.cpp - Remove unused nodes and initializers ------===//

#include "ampc/Passes/Passes.h"

#include <algorithm>

namespace ampc {

bool eliminateDeadCode(Graph &g) {
  bool changed = false;
  std::vector<Node *> nodes = g.nodes();
  // Reverse order: a node's users are erased before it is looked at.
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node *n = *it;
    std::vector<Value *> results = n->outputs();
    bool dead = std::all_of(results.begin(), results.end(),
                            [](const Value *v) { return !v || v->isDead(); });
    if (!dead)
      continue;
    g.eraseNode(n);
    changed = true;
  }
  std::vector<Value *> inits = g.initializers();
  for (Value *v : inits) {
    bool isState = std::any_of(g.stateBindings.begin(), g.stateBindings.end(),
                               [&](const StateBinding &b) { return b.state == v; });
    if (v->isDead() && !isState) {
      g.removeValue(v);
      changed = true;
    }
  }
  return changed;
}

namespace {

class DeadCodeEliminationPass : public Pass {
public:
  llvm::StringRef name() const override { return "dce"; }
  llvm::Error run(Graph &g, PassContext &) override {
    eliminateDeadCode(g);
    return llvm::Error::success();
  }
};

} // namespace

void registerDeadCodeEliminationPass() {
  PassRegistry::add({"dce", "Remove nodes whose results are unused, and unused initializers",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<DeadCodeEliminationPass>(); }});
}

} // namespace ampc
