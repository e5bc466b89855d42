//===- StepRunner.h - Running a training step in the interpreter -*- C++ -*-===//
//
// Test helper: compiles a graph with a pass pipeline and runs it step after
// step with the reference interpreter, carrying the state bindings over.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/Pass/Pass.h"
#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace ampc::test {

/// A compiled training step and the current values of its state.
class StepRunner {
public:
  bool compile(std::unique_ptr<Graph> g, const std::string &pipeline) {
    registerAllPasses();
    g_ = std::move(g);
    PassManager pm;
    pm.verifyEach = true;
    PassContext ctx;
    if (auto err = pm.addPipeline(pipeline)) {
      ADD_FAILURE() << llvm::toString(std::move(err));
      return false;
    }
    if (auto err = pm.run(*g_, ctx)) {
      ADD_FAILURE() << llvm::toString(std::move(err));
      return false;
    }
    for (const StateBinding &b : g_->stateBindings)
      state_[b.state->name()] = *b.state->data();
    return true;
  }

  Graph &graph() { return *g_; }
  std::map<std::string, Tensor> &state() { return state_; }

  /// Runs the nodes `wanted` needs with the batch and the current state,
  /// then applies the state updates among them. Returns the wanted values by name.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &batch,
                                    std::vector<const Value *> wanted) {
    std::set<const Value *> wantedSet(wanted.begin(), wanted.end());
    std::map<std::string, Tensor> feeds = batch;
    for (const auto &[name, t] : state_)
      feeds[name] = t;
    Interpreter interp(*g_);
    auto values = interp.runFor(feeds, wanted);
    std::map<std::string, Tensor> out;
    if (!values) {
      ADD_FAILURE() << llvm::toString(values.takeError());
      return out;
    }
    for (size_t i = 0; i < wanted.size(); ++i)
      out[wanted[i]->name()] = (*values)[i];
    for (const StateBinding &b : g_->stateBindings)
      if (wantedSet.count(b.updated))
        state_[b.state->name()] = out[b.updated->name()];
    return out;
  }

  /// One whole step (every graph output).
  std::map<std::string, Tensor> step(const std::map<std::string, Tensor> &batch) {
    return run(batch, std::vector<const Value *>(g_->outputs().begin(), g_->outputs().end()));
  }

  /// The values a program of an accumulating step computes, split as
  /// lib/Lower/Lower.cpp splits them: the states listed in
  /// kAccumulateStatesKey, the loss, and every other state update or output
  /// computed from the forward pass belong to "accumulate"; the rest to
  /// "apply".
  std::vector<const Value *> program(bool accumulate) {
    std::string states = g_->metadata.at(kAccumulateStatesKey) + ",";
    std::string loss = g_->metadata.at(std::string(kInfoPrefix) + "output.loss");
    std::set<const Value *> updated;
    std::vector<std::pair<const Value *, bool>> roots; // value, in accumulate
    for (const StateBinding &b : g_->stateBindings) {
      updated.insert(b.updated);
      roots.push_back({b.updated, states.find(b.state->name() + ",") != std::string::npos});
    }
    for (const Value *v : g_->outputs())
      if (!updated.count(v))
        roots.push_back({v, v->name() == loss});
    for (bool grew = true; grew;) {
      grew = false;
      std::set<const Node *> forward;
      for (const auto &[v, acc] : roots)
        if (acc)
          collect(v, forward);
      for (auto &[v, acc] : roots) {
        std::set<const Node *> mine;
        collect(v, mine);
        bool readsForward = std::any_of(mine.begin(), mine.end(),
                                        [&](const Node *n) { return forward.count(n) > 0; });
        if (!acc && readsForward)
          acc = grew = true;
      }
    }
    std::vector<const Value *> out;
    for (const auto &[v, acc] : roots)
      if (acc == accumulate)
        out.push_back(v);
    return out;
  }

private:
  /// The nodes computing v.
  static void collect(const Value *v, std::set<const Node *> &nodes) {
    const Node *n = v ? v->producer() : nullptr;
    if (!n || !nodes.insert(n).second)
      return;
    for (const Value *in : n->inputs())
      collect(in, nodes);
  }

  std::unique_ptr<Graph> g_;
  std::map<std::string, Tensor> state_;
};

} // namespace ampc::test
