//===- Rematerialize.cpp - Recompute weight casts for the backward pass ----===//
//
// Autocast's weight casts (and the cheap data movement after them, such as
// the Transpose of a MatMul weight) are needed twice: by the forward pass and
// again by the backward pass. Kept alive in between, every low-precision copy
// of a weight occupies memory through the whole step, which for wide layers
// outweighs the activations themselves. Recomputing them is a cast of a
// parameter, far cheaper than the GEMM it feeds: this pass gives the uses
// after the loss their own copy, computed just before the first of them, so
// the forward copy dies after the forward pass (the sublinear-memory idea of
// Chen et al. 2016, applied to the cheapest values). It runs after the last
// canonicalize of the training pipeline, since CSE would merge the copies.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"
#include "ampc/Support/Error.h"

#include <functional>
#include <unordered_map>

namespace ampc {

namespace {

bool isCheapOp(const Node &n) {
  return n.numOutputs() == 1 && (n.is("Cast") || n.is("Transpose") || n.is("Reshape") ||
                                 n.is("Flatten") || n.is("Squeeze") || n.is("Unsqueeze") ||
                                 n.is("Identity"));
}

class RematerializePass : public Pass {
public:
  llvm::StringRef name() const override { return "remat"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    auto lossName = g.metadata.find(std::string(kInfoPrefix) + "output.loss");
    Value *loss = lossName == g.metadata.end() ? nullptr : g.findValue(lossName->second);
    if (!loss || !loss->producer())
      return llvm::Error::success(); // not a training step: nothing is "after the loss"
    std::unordered_map<const Node *, size_t> position;
    size_t index = 0;
    for (const Node *n : g.nodes())
      position[n] = index++;
    size_t lossAt = position[loss->producer()];

    // Values computed by cheap ops from parameters and constants only.
    std::unordered_map<const Value *, bool> derived;
    std::function<bool(const Value *)> fromParameters = [&](const Value *v) {
      if (!v || v->isInitializer())
        return true;
      auto it = derived.find(v);
      if (it != derived.end())
        return it->second;
      const Node *p = v->producer();
      bool ok = p && isCheapOp(*p);
      for (const Value *in : p ? p->inputs() : std::vector<Value *>{})
        ok = ok && fromParameters(in);
      return derived[v] = ok;
    };

    unsigned copies = 0;
    for (Node *n : g.nodes()) {
      Value *v = n->output(0);
      if (!v || !isCheapOp(*n) || v->isInitializer() || !fromParameters(v) ||
          position[n] > lossAt)
        continue;
      // Uses after the loss that would keep this copy alive.
      std::vector<Use> late;
      for (const Use &u : v->uses())
        if (position.count(u.user) && position[u.user] > lossAt)
          late.push_back(u);
      if (late.empty())
        continue;
      Node *first = late.front().user;
      for (const Use &u : late)
        if (position[u.user] < position[first])
          first = u.user;
      Graph::InsertionGuard guard(g, first);
      std::unordered_map<const Value *, Value *> clones;
      Value *copy = clone(g, v, clones);
      for (const Use &u : late)
        u.user->setInput(u.operand, copy);
      ++copies;
    }
    if (copies)
      ctx.addReport("remat", "remat: " + std::to_string(copies) +
                                 " weight copies recomputed for the backward pass");
    return llvm::Error::success();
  }

private:
  /// A copy of the cheap chain computing v, at the insertion point.
  Value *clone(Graph &g, Value *v, std::unordered_map<const Value *, Value *> &clones) {
    if (v->isInitializer())
      return v;
    auto it = clones.find(v);
    if (it != clones.end())
      return it->second;
    const Node *p = v->producer();
    std::vector<Value *> inputs;
    for (Value *in : p->inputs())
      inputs.push_back(in ? clone(g, in, clones) : nullptr);
    Node *n = g.createNode(p->opType(), inputs, {v->type()}, p->attributes(),
                           p->name().empty() ? "" : p->name() + "/remat", p->domain(),
                           {v->name() + ".remat"});
    return clones[v] = n->output();
  }
};

} // namespace

void registerRematerializePass() {
  PassRegistry::add({"remat",
                     "Recompute weight casts (and cheap ops on them) for the backward pass "
                     "instead of keeping the forward copies alive",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<RematerializePass>(); }});
}

} // namespace ampc
