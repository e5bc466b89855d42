//===- DeadCodeElimination.cpp - Remove unused nodes and initializers ------===//

#include "ampc/IR/IdMap.h"
#include "ampc/Passes/Passes.h"

#include <algorithm>

namespace ampc {

bool eliminateDeadCode(Graph &g) {
  bool changed = false;
  std::vector<Node *> nodes = g.nodes();
  // Reverse order: a node's users are erased before it is looked at.
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node *n = *it;
    bool dead = true;
    for (unsigned i = 0; dead && i < n->numOutputs(); ++i)
      dead = !n->output(i) || n->output(i)->isDead();
    if (!dead)
      continue;
    g.eraseNode(n);
    changed = true;
  }
  ValueIdMap<char> states;
  for (const StateBinding &b : g.stateBindings)
    states[b.state] = 1;
  std::vector<Value *> unused;
  for (Value *v : g.initializers())
    if (v->isDead() && !states.lookup(v))
      unused.push_back(v);
  g.removeValues(unused);
  return changed || !unused.empty();
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
