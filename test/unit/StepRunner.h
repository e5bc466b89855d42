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

  /// The values a program of an accumulating step computes (see
  /// lib/Lower/Lower.cpp: states listed in kAccumulateStatesKey and the loss
  /// belong to "accumulate", everything else to "apply").
  std::vector<const Value *> program(bool accumulate) {
    std::string states = g_->metadata.at(kAccumulateStatesKey) + ",";
    std::string loss = g_->metadata.at(std::string(kInfoPrefix) + "output.loss");
    std::set<const Value *> updated;
    std::vector<const Value *> out;
    for (const StateBinding &b : g_->stateBindings) {
      updated.insert(b.updated);
      bool isAcc = states.find(b.state->name() + ",") != std::string::npos;
      if (isAcc == accumulate)
        out.push_back(b.updated);
    }
    for (const Value *v : g_->outputs())
      if (!updated.count(v) && (v->name() == loss) == accumulate)
        out.push_back(v);
    return out;
  }

private:
  std::unique_ptr<Graph> g_;
  std::map<std::string, Tensor> state_;
};

} // namespace ampc::test
