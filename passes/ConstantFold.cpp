//===- ConstantFold.cpp - Fold constant subgraphs with the interpreter -----===//
//
// torch training exports compute shapes in the graph (Shape, Gather,
// Unsqueeze, Concat, ...). With static shapes all of that is constant: this
// pass evaluates it with the reference interpreter and replaces the results
// by constant initializers. Parameters (float initializers of the model) are
// not constants: folding a Transpose of a weight would cut it off from
// training.
//
//===----------------------------------------------------------------------===//

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/Passes/Passes.h"
#include "ampc/Support/Error.h"

#include <algorithm>

namespace ampc {

namespace {

/// Operators whose results are not a function of their operands alone.
bool isNondeterministic(const Node &n) {
  if (n.is("Dropout")) {
    const Value *training = n.input(2);
    // Dropout in inference mode is deterministic (an identity).
    return training && !(training->isConstant() && training->data()->getInt(0) == 0);
  }
  return n.opType().rfind("Random", 0) == 0 || n.is("Multinomial") || n.is("Bernoulli");
}

/// Shape and Size only read the static type of their operand.
bool readsOnlyType(const Node &n) { return n.is("Shape") || n.is("Size"); }

bool isFoldable(const Node &n, int64_t maxElements) {
  // Cheapest test first: most nodes read a value computed at run time.
  if (!readsOnlyType(n))
    for (const Value *v : n.inputs())
      if (v && !v->isConstant())
        return false;
  if (n.numOutputs() == 0 || isNondeterministic(n) || !hasKernel(n))
    return false;
  for (unsigned i = 0; i < n.numOutputs(); ++i)
    if (!n.output(i) || n.output(i)->type().numElements() > maxElements)
      return false;
  return true;
}

/// Shape and Size computed from the operand's static type, without its data.
llvm::Expected<std::vector<Tensor>> typeFacts(const Node &n) {
  const Shape &shape = n.input(0)->shape();
  Tensor out(n.output()->type());
  if (n.is("Size")) {
    out.setInt(0, numElements(shape));
    return std::vector<Tensor>{std::move(out)};
  }
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t start = n.getInt("start", 0), end = n.getInt("end", rank);
  start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
  end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
  for (int64_t i = start; i < end; ++i)
    out.setInt(i - start, shape[i]);
  return std::vector<Tensor>{std::move(out)};
}

llvm::Expected<std::vector<Tensor>> evaluate(const Node &n) {
  std::vector<const Tensor *> operands;
  for (const Value *v : n.inputs())
    operands.push_back(v ? v->data() : nullptr);
  return evaluateNode(n, operands);
}

} // namespace

llvm::Expected<bool> foldConstants(Graph &g, int64_t maxElements) {
  bool changed = false;
  for (Node *n : g.nodes()) {
    if (!isFoldable(*n, maxElements))
      continue;
    auto results = readsOnlyType(*n) ? typeFacts(*n) : evaluate(*n);
    if (!results)
      return results.takeError();
    for (unsigned i = 0; i < n->numOutputs(); ++i) {
      Value *old = n->output(i);
      std::string name = old->name();
      g.renameValue(old, name + ".folded");
      Value *c = g.addInitializer(name, std::move((*results)[i]), /*constant=*/true);
      old->replaceAllUsesWith(c);
    }
    g.eraseNode(n);
    changed = true;
  }
  return changed;
}

namespace {

class ConstantFoldPass : public Pass {
public:
  llvm::StringRef name() const override { return "constant-fold"; }
  llvm::Error run(Graph &g, PassContext &) override {
    auto changed = foldConstants(g);
    return changed ? llvm::Error::success() : changed.takeError();
  }
};

} // namespace

void registerConstantFoldPass() {
  PassRegistry::add({"constant-fold",
                     "Evaluate constant subgraphs (and Shape/Size of static values) with the "
                     "reference interpreter; Constant nodes become initializers",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<ConstantFoldPass>(); }});
}

} // namespace ampc
