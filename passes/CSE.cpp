//===- CSE.cpp - Common-subexpression elimination --------------------------===//
//
// Two nodes with the same operator, attributes and operands compute the same
// results (random operators excepted): the later one is replaced by the
// earlier. Small constants with equal type and bytes are merged too, so that
// the many copies of `axes = [0]` that exports contain become one.
//
//===----------------------------------------------------------------------===//

#include "ampc/IR/Printer.h"
#include "ampc/Passes/Passes.h"

#include <unordered_map>

namespace ampc {

namespace {

constexpr int64_t kMaxMergedConstant = 64;

bool isRandom(const Node &n) {
  return n.is("Dropout") || n.opType().rfind("Random", 0) == 0 || n.is("Multinomial") ||
         n.is("Bernoulli");
}

std::string attributeKey(const Attribute &a) {
  std::string k = std::to_string(static_cast<int>(a.kind)) + ":";
  switch (a.kind) {
  case Attribute::Kind::Float:
    return k + formatFloat(a.f, DType::F64);
  case Attribute::Kind::Int:
    return k + std::to_string(a.i);
  case Attribute::Kind::String:
    return k + a.s;
  case Attribute::Kind::Tensor:
    return k + a.t->type().str() +
           std::string(reinterpret_cast<const char *>(a.t->data()), a.t->byteSize());
  case Attribute::Kind::Floats:
    for (double f : a.floats)
      k += formatFloat(f, DType::F64) + ",";
    return k;
  case Attribute::Kind::Ints:
    for (int64_t i : a.ints)
      k += std::to_string(i) + ",";
    return k;
  case Attribute::Kind::Strings:
    for (const auto &s : a.strings)
      k += s + "\x1f";
    return k;
  }
  return k;
}

std::string nodeKey(const Node &n) {
  std::string k = n.domain() + "." + n.opType() + "(";
  for (const Value *v : n.inputs())
    k += std::to_string(reinterpret_cast<uintptr_t>(v)) + ",";
  k += ")<";
  for (const auto &[name, a] : n.attributes())
    k += name + "=" + attributeKey(a) + ";";
  k += ">" + std::to_string(n.numOutputs());
  return k;
}

bool mergeConstants(Graph &g) {
  bool changed = false;
  std::unordered_map<std::string, Value *> seen;
  for (Value *v : g.initializers()) {
    if (!v->isConstant() || v->type().numElements() > kMaxMergedConstant || v->isGraphOutput())
      continue;
    std::string key = v->type().str() +
                      std::string(reinterpret_cast<const char *>(v->data()->data()),
                                  v->data()->byteSize());
    auto [it, inserted] = seen.emplace(key, v);
    if (inserted || !v->hasUses())
      continue;
    v->replaceAllUsesWith(it->second);
    changed = true;
  }
  return changed;
}

} // namespace

bool eliminateCommonSubexpressions(Graph &g) {
  bool changed = mergeConstants(g);
  std::unordered_map<std::string, Node *> seen;
  for (Node *n : g.nodes()) {
    if (isRandom(*n))
      continue;
    auto [it, inserted] = seen.emplace(nodeKey(*n), n);
    if (inserted)
      continue;
    Node *first = it->second;
    bool types = true;
    for (unsigned i = 0; i < n->numOutputs(); ++i)
      types = types && (!n->output(i) || (first->output(i) &&
                                          first->output(i)->type() == n->output(i)->type()));
    if (!types)
      continue;
    for (unsigned i = 0; i < n->numOutputs(); ++i) {
      Value *v = n->output(i);
      if (v && !v->isGraphOutput())
        v->replaceAllUsesWith(first->output(i));
    }
    changed = true;
  }
  return changed;
}

namespace {

class CSEPass : public Pass {
public:
  llvm::StringRef name() const override { return "cse"; }
  llvm::Error run(Graph &g, PassContext &) override {
    eliminateCommonSubexpressions(g);
    return llvm::Error::success();
  }
};

} // namespace

void registerCSEPass() {
  PassRegistry::add({"cse", "Merge nodes computing the same results, and equal small constants",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<CSEPass>(); }});
}

} // namespace ampc
