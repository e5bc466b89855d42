//===- FixturePlans.cpp - The fixtures' training plans, for tests ---------===//

#include "FixturePlans.h"
#include "FixtureUtil.h"

#include "ampc/IR/Graph.h"
#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/Pass/Pass.h"
#include "ampc/Passes/Passes.h"

#include <gtest/gtest.h>

namespace ampc::test {

std::string trainingPipeline(const std::string &precision, const std::string &optimizer,
                             int accumulate, bool dataParallel) {
  std::string p = "canonicalize,decompose,";
  if (precision == "bf16conv")
    p += "autocast{dtype=bf16 bf16-conv=true},";
  else if (precision != "fp32")
    p += "autocast{dtype=" + precision + "},";
  p += "autodiff,";
  if (accumulate > 1)
    p += "accumulate{steps=" + std::to_string(accumulate) + "},";
  if (dataParallel) // small buckets: several AllReduce launches a step
    p += "data-parallel{bucket-mb=0.004},";
  p += std::string("loss-scale{mode=") + (precision == "fp16" ? "dynamic init=1024" : "none") +
       "},";
  p += "optimizer{optimizer=" + optimizer + " lr=0.01},canonicalize";
  // The rest of --train: parameter copies as state, recomputation.
  if (precision != "fp32")
    p += ",cast-cache";
  return p + ",remat";
}

bool compileTrainingPlan(const std::string &fixture, const std::string &precision,
                         const std::string &optimizer, plan::Plan &out, int accumulate,
                         bool dataParallel) {
  registerAllPasses();
  std::unique_ptr<Graph> g = loadFixtureModel(fixture);
  std::vector<std::string> params;
  for (const Value *v : g->initializers())
    params.push_back(v->name());
  PassManager pm;
  PassContext ctx;
  if (auto err = pm.addPipeline(trainingPipeline(precision, optimizer, accumulate, dataParallel))) {
    ADD_FAILURE() << llvm::toString(std::move(err));
    return false;
  }
  if (auto err = pm.run(*g, ctx)) {
    ADD_FAILURE() << llvm::toString(std::move(err));
    return false;
  }
  LowerOptions lo;
  lo.modelParameters = params;
  auto p = lowerToPlan(*g, lo);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return false;
  }
  out = std::move(*p);
  return true;
}

bool planFromText(const std::string &text, bool fuseElementwise, plan::Plan &out) {
  auto g = importModelText(text, "model");
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError()) << "\n" << text;
    return false;
  }
  LowerOptions lo;
  lo.fuseElementwise = fuseElementwise;
  auto p = lowerToPlan(**g, lo);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return false;
  }
  out = std::move(*p);
  return true;
}

} // namespace ampc::test
