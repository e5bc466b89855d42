//===- Verifier.cpp - Structural checks of a graph -------------------------===//

#include "ampc/IR/Verifier.h"

#include "ampc/Support/Error.h"

#include <algorithm>
#include <unordered_set>

namespace ampc {

namespace {

std::string label(const Node &n) {
  return "node '" + n.displayName() + "' (" + n.qualifiedOpType() + ")";
}

llvm::Error checkType(const Value &v) {
  if (v.dtype() == DType::Undefined)
    return makeError("value '" + v.name() + "' has no element type");
  for (int64_t d : v.shape())
    if (d < 0)
      return makeError("value '" + v.name() + "' has a negative dimension in " + v.type().str());
  return llvm::Error::success();
}

llvm::Error checkUses(const Value &v) {
  for (const Use &u : v.uses())
    if (u.operand >= u.user->numInputs() || u.user->input(u.operand) != &v)
      return makeError("value '" + v.name() + "': use list out of sync with " + label(*u.user));
  return llvm::Error::success();
}

} // namespace

llvm::Error verifyGraph(const Graph &g) {
  std::unordered_set<const Value *> defined;
  std::unordered_set<std::string> names;
  auto define = [&](const Value *v) -> llvm::Error {
    if (!names.insert(v->name()).second)
      return makeError("value name '" + v->name() + "' is defined twice");
    defined.insert(v);
    if (auto err = checkType(*v))
      return err;
    return checkUses(*v);
  };
  for (const Value *v : g.inputs()) {
    if (!v->isGraphInput())
      return makeError("graph input '" + v->name() + "' is not marked as an input");
    if (v->hasDefault() && v->data()->type() != v->type())
      return makeError("graph input '" + v->name() + "' has a default of type " +
                       v->data()->type().str() + " but is typed " + v->type().str());
    if (auto err = define(v))
      return err;
  }
  for (const Value *v : g.initializers()) {
    if (!v->data())
      return makeError("initializer '" + v->name() + "' has no data");
    if (v->data()->type() != v->type())
      return makeError("initializer '" + v->name() + "' holds " + v->data()->type().str() +
                       " data but is typed " + v->type().str());
    if (auto err = define(v))
      return err;
  }
  for (const Node *n : g.nodes()) {
    if (n->graph() != &g)
      return makeError(label(*n) + " belongs to another graph");
    for (unsigned i = 0; i < n->numInputs(); ++i) {
      const Value *v = n->input(i);
      if (!v)
        continue;
      if (!defined.count(v))
        return makeError(label(*n) + ": operand " + std::to_string(i) + " '" + v->name() +
                         "' is used before it is defined (or the graph has a cycle)");
      const auto &uses = v->uses();
      if (std::find(uses.begin(), uses.end(), Use{const_cast<Node *>(n), i}) == uses.end())
        return makeError(label(*n) + ": operand '" + v->name() + "' does not list this use");
    }
    for (unsigned i = 0; i < n->numOutputs(); ++i) {
      const Value *v = n->output(i);
      if (!v)
        continue;
      if (v->producer() != n || v->resultIndex() != i)
        return makeError(label(*n) + ": result '" + v->name() + "' has a wrong producer");
      if (auto err = define(v))
        return err;
    }
  }
  for (const Value *v : g.outputs())
    if (!defined.count(v))
      return makeError("graph output '" + v->name() + "' is not defined");
  for (const StateBinding &b : g.stateBindings) {
    if (b.state->kind() == Value::Kind::NodeResult)
      return makeError("state '" + b.state->name() + "' must be a graph input or initializer");
    if (!b.updated->isGraphOutput())
      return makeError("updated state '" + b.updated->name() + "' is not a graph output");
    if (b.state->type() != b.updated->type())
      return makeError("state '" + b.state->name() + "' is " + b.state->type().str() +
                       " but its update '" + b.updated->name() + "' is " +
                       b.updated->type().str());
  }
  return llvm::Error::success();
}

} // namespace ampc
