//===- Passes.cpp - Registration of every pass -----------------------------===//

#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"

#include <mutex>

namespace ampc {

void registerAllPasses() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerAutocastPass();
    registerAutodiffPass();
    registerCanonicalizePass();
    registerDecomposePass();
    registerConstantFoldPass();
    registerCSEPass();
    registerDeadCodeEliminationPass();
    registerSimplifyPass();
    registerAccumulatePass();
    registerDataParallelPass();
    registerLossScalePass();
    registerOptimizerPass();
    registerRematerializePass();
    registerCastCachePass();
    registerSplitMatMulTransposesPass();
    registerFoldMatMulBiasPass();
  });
}

} // namespace ampc
