//===- CastCache.cpp - Low-precision parameter copies kept as state --------===//
//
// Autocast casts every fp32 master parameter that a low-precision op reads,
// every step, and remat casts it again for the backward pass: each cast reads
// 4 bytes and writes 2 per parameter. Apex's O2 mode keeps the low-precision
// model weights instead and refreshes them from the master weights after each
// optimizer step. This pass does that inside the graph: the copy becomes a
// state `<param>.<dtype>` holding the cast of the initial value; the casts of
// the parameter read it; and the step computes the cast of the updated
// parameter as the state's next value: ampc.AdamW writes it as its fourth
// result, and other updates' Casts fuse into their elementwise steps (2 more
// bytes written per parameter there). The numbers
// do not change: the same round-to-nearest-even cast of the same fp32 value,
// done at the end of the previous step instead of the start of this one. The
// price is memory: the copies persist between steps (2 bytes per parameter of
// state) where the casts were temporaries.
//
//===----------------------------------------------------------------------===//

#include "ampc/IR/IdMap.h"
#include "ampc/Passes/Autocast.h"
#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"

#include <algorithm>

namespace ampc {

namespace {


class CastCachePass : public Pass {
public:
  llvm::StringRef name() const override { return "cast-cache"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    ValueIdMap<Value *> nextOf(nullptr);
    for (const StateBinding &b : g.stateBindings)
      nextOf[b.state] = b.updated;
    // The casts of each trained parameter, per target type, in the order of
    // the gradients (a map keyed by parameter name cost n log n scattered
    // string compares and a name lookup per parameter: the pass took 40%
    // longer on docs/benchmarks.md's residual MLP).
    unsigned cached = 0;
    llvm::SmallVector<std::pair<DType, std::vector<Node *>>, 2> casts;
    for (const GradientOutput &go : findGradients(g)) {
      if (!nextOf.contains(go.param))
        continue;
      casts.clear();
      for (const Use &u : go.param->uses()) {
        Node *n = u.user;
        if (!n->is("Cast") || !n->output() || !isLowPrecision(n->output()->dtype()))
          continue;
        DType dt = n->output()->dtype();
        auto it =
            std::find_if(casts.begin(), casts.end(), [&](const auto &c) { return c.first == dt; });
        if (it == casts.end())
          casts.push_back({dt, {n}});
        else
          it->second.push_back(n);
      }
      // fp16 before bf16, as DType orders them.
      std::sort(casts.begin(), casts.end(),
                [](const auto &a, const auto &b) { return a.first < b.first; });
      for (auto &[dtype, nodes] : casts) {
        // A cast the model outputs must show this step's value, not the copy
        // the update refreshes in place: leave such a parameter's casts alone.
        if (std::any_of(nodes.begin(), nodes.end(),
                        [](const Node *n) { return n->output()->isGraphOutput(); }))
          continue;
        cacheCasts(g, go.param, nextOf.lookup(go.param), dtype, nodes);
        ++cached;
      }
    }
    if (cached)
      ctx.addReport("cast-cache", "cast-cache: " + std::to_string(cached) +
                                      " parameter casts kept as state, refreshed by the update");
    return llvm::Error::success();
  }

private:
  /// Replaces `nodes` (casts of `param` to `dtype`) by a state updated with
  /// the cast of `next`, param's value after the step.
  static void cacheCasts(Graph &g, Value *param, Value *next, DType dtype,
                         const std::vector<Node *> &nodes) {
    // Deferred: the plan stores such a copy as converted at load.
    Value *copy = addState(g, g.uniqueName(param->name() + "." + shortDTypeName(dtype)),
                           Tensor::deferredCast(param->sharedData(), dtype));
    for (Node *n : nodes) {
      n->output()->replaceAllUsesWith(copy);
      g.eraseNode(n);
    }
    if (Value *fused = copyFromAdamW(g, next, dtype)) {
      bindState(g, copy, fused);
      return;
    }
    Graph::InsertionGuard guard(g, nullptr);
    Node *refresh = g.createNode("Cast", {next}, {next->type().withDType(dtype)},
                                 {{"to", Attribute::ofInt(dtypeToOnnx(dtype))}},
                                 copy->name() + "/refresh");
    bindState(g, copy, refresh->output());
  }

  /// An ampc.AdamW update writes the copy itself (its optional result 3),
  /// rounding the value it has just computed: no second pass over the
  /// parameter. Null when `next` is not such an update's parameter.
  static Value *copyFromAdamW(Graph &g, Value *next, DType dtype) {
    Node *n = next->producer();
    if (!n || !n->isAmpc("AdamW") || next != n->output(0) || n->numOutputs() != 3)
      return nullptr;
    return n->addOutput(g.uniqueName(next->name() + "." + shortDTypeName(dtype)),
                        next->type().withDType(dtype));
  }
};

} // namespace

void registerCastCachePass() {
  PassRegistry::add({"cast-cache",
                     "Keep the fp16/bf16 copies of trained parameters as state refreshed by the "
                     "optimizer update, instead of casting the parameters every step",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<CastCachePass>(); }});
}

} // namespace ampc
