//===- FuzzUtil.cpp - Shared pieces of the libFuzzer targets --------------===//

#include "FuzzUtil.h"

#include "ampc/IR/Graph.h"
#include "ampc/Lower/Lower.h"
#include "ampc/Pass/Pass.h"
#include "ampc/Passes/Passes.h"

#include "plan.pb.h"

#include <cstdlib>
#include <unistd.h>

namespace ampc::fuzz {

void compileForTraining(Graph &g, Precision precision) {
  static bool registered = (registerAllPasses(), true);
  (void)registered;
  PassManager pm;
  std::string autocast = precision == Precision::BF16   ? "autocast{dtype=bf16},"
                         : precision == Precision::FP16 ? "autocast{dtype=fp16},"
                                                        : "";
  // --train's pipeline, cast-cache included where --train runs it (fp16, bf16).
  const std::string castCache = autocast.empty() ? "" : "cast-cache,";
  const std::string passes = "canonicalize,decompose," + autocast +
                             "autodiff,loss-scale,optimizer{adamw},canonicalize," + castCache +
                             "remat,split-matmul-transposes,fold-matmul-bias";
  if (auto err = pm.addPipeline(passes)) {
    llvm::consumeError(std::move(err));
    return;
  }
  PassContext ctx;
  if (auto err = pm.run(g, ctx)) {
    llvm::consumeError(std::move(err));
    return;
  }
  auto plan = lowerToPlan(g, LowerOptions{});
  if (!plan)
    llvm::consumeError(plan.takeError());
}

const std::string &scratchDir() {
  static std::string dir = [] {
    std::string d = "/tmp/ampc-fuzz." + std::to_string(::getpid());
    std::string cmd = "mkdir -p " + d;
    if (std::system(cmd.c_str()) != 0)
      std::abort();
    return d;
  }();
  return dir;
}

} // namespace ampc::fuzz
