//===- TrainingStep.cpp - Helpers shared by the training-step passes -------===//

#include "ampc/Passes/Training.h"

#include <cassert>
#include <cstdio>

namespace ampc {

std::vector<GradientOutput> findGradients(const Graph &g) {
  std::vector<GradientOutput> out;
  const std::string suffix = "_grad";
  for (unsigned i = 0; i < g.outputs().size(); ++i) {
    Value *v = g.outputs()[i];
    const std::string &name = v->name();
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    Value *param = g.findValue(name.substr(0, name.size() - suffix.size()));
    if (param && (param->isInitializer() || param->isGraphInput()))
      out.push_back({param, v, i});
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

void replaceOutput(Graph &g, const GradientOutput &go, Value *replacement,
                   const std::string &suffix) {
  assert(g.outputs()[go.outputIndex] == go.grad && "the outputs changed since findGradients");
  std::string name = go.grad->name();
  g.renameValue(go.grad, name + "." + suffix);
  g.setOutput(go.outputIndex, replacement);
  for (unsigned i = 0; go.grad->isGraphOutput() && i < g.outputs().size(); ++i)
    if (g.outputs()[i] == go.grad) // also an output elsewhere: rare, searched
      g.setOutput(i, replacement);
  g.renameValue(replacement, name);
}

} // namespace ampc
