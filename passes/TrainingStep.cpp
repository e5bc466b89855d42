//===- TrainingStep.cpp - Helpers shared by the training-step passes -------===//

#include "ampc/Passes/Training.h"

#include <cstdio>

namespace ampc {

std::vector<GradientOutput> findGradients(const Graph &g) {
  std::vector<GradientOutput> out;
  const std::string suffix = "_grad";
  for (Value *v : g.outputs()) {
    const std::string &name = v->name();
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    Value *param = g.findValue(name.substr(0, name.size() - suffix.size()));
    if (param && (param->isInitializer() || param->isGraphInput()))
      out.push_back({param, v});
  }
  return out;
}

Value *findSeed(const Graph &g) {
  for (Value *out : g.outputs()) {
    Value *seed = g.findValue(out->name() + "_grad");
    if (seed && seed->isGraphInput())
      return seed;
  }
  return nullptr;
}

std::string formatOptionValue(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Value *addState(Graph &g, const std::string &name, Tensor init) {
  return g.addInitializer(name, std::move(init), /*constant=*/false);
}

void bindState(Graph &g, Value *state, Value *updated) {
  g.renameValue(updated, state->name() + ".next");
  g.addOutput(updated);
  g.stateBindings.push_back({state, updated});
}

void replaceOutput(Graph &g, Value *old, Value *replacement, const std::string &suffix) {
  std::string name = old->name();
  g.renameValue(old, name + "." + suffix);
  for (unsigned i = 0; i < g.outputs().size(); ++i)
    if (g.outputs()[i] == old)
      g.setOutput(i, replacement);
  g.renameValue(replacement, name);
}

} // namespace ampc
