//===- Simplify.cpp - Remove Identity and no-op nodes ----------------------===//
//
// A node whose result always equals its first operand is bypassed: Identity,
// Cast to the operand's own type, Reshape/Flatten/Squeeze/Unsqueeze/Expand to
// the operand's own shape, Transpose by the identity permutation, Dropout in
// inference mode. A bypassed graph output keeps its name.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"

namespace ampc {

namespace {

bool isNoOp(const Node &n) {
  // The operator first: most nodes are passed over without touching their
  // values.
  bool keepsOperand = n.is("Identity") || n.is("Cast") || n.is("CastLike") || n.is("Reshape") ||
                      n.is("Flatten") || n.is("Squeeze") || n.is("Unsqueeze") || n.is("Expand");
  if (!keepsOperand && !n.is("Transpose") && !n.is("Dropout"))
    return false;
  const Value *in = n.input(0);
  const Value *out = n.output(0);
  if (!in || !out || in->type() != out->type())
    return false;
  if (keepsOperand)
    return n.numOutputs() == 1;
  if (n.is("Transpose")) {
    auto perm = n.getInts("perm");
    for (size_t i = 0; i < perm.size(); ++i)
      if (perm[i] != static_cast<int64_t>(i))
        return false;
    return true;
  }
  if (n.is("Dropout")) {
    const Value *training = n.input(2);
    bool inference = !training || (training->isConstant() && training->data()->getInt(0) == 0);
    bool maskUnused = n.numOutputs() < 2 || !n.output(1) || n.output(1)->isDead();
    return inference && maskUnused;
  }
  return false;
}

/// Bypasses n; returns false when it must stay to keep a graph output's name.
bool bypass(Graph &g, Node *n) {
  Value *in = n->input(0);
  Value *out = n->output(0);
  if (!out->isGraphOutput()) {
    out->replaceAllUsesWith(in);
    return true;
  }
  // The result is a graph output: its producer's value takes over its name,
  // which is only possible when that value is an ordinary intermediate.
  if (in->kind() != Value::Kind::NodeResult || in->isGraphOutput())
    return false;
  std::string name = out->name();
  g.renameValue(out, name + ".bypassed");
  out->replaceAllUsesWith(in);
  g.renameValue(in, name);
  return true;
}

} // namespace

bool simplifyNoOps(Graph &g) {
  bool changed = false;
  for (Node *n : g.nodes()) {
    if (!isNoOp(*n) || !bypass(g, n))
      continue;
    if (n->output(0)->isDead() && (n->numOutputs() < 2 || !n->output(1) || n->output(1)->isDead()))
      g.eraseNode(n);
    changed = true;
  }
  return changed;
}

namespace {

class SimplifyPass : public Pass {
public:
  llvm::StringRef name() const override { return "simplify"; }
  llvm::Error run(Graph &g, PassContext &) override {
    simplifyNoOps(g);
    return llvm::Error::success();
  }
};

} // namespace

void registerSimplifyPass() {
  PassRegistry::add({"simplify",
                     "Remove Identity nodes and no-op Cast, Reshape, Transpose and Dropout nodes",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<SimplifyPass>(); }});
}

} // namespace ampc
