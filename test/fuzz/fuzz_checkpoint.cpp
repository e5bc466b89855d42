//===- fuzz_checkpoint.cpp - amp-run --resume -----------------------------===//
//
// The input is a checkpoint's state.npz for a small training plan (an MLP
// with AdamW, compiled once): the target writes it into a checkpoint folder
// and resumes from it.
//
//===----------------------------------------------------------------------===//

#include "FuzzUtil.h"

#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/Pass/Pass.h"
#include "ampc/Passes/Passes.h"
#include "ampc/rt/Backend.h"
#include "ampc/rt/Session.h"

#include "plan.pb.h"

#include <fstream>
#include <map>

namespace {

const char *kModel = R"(<ir_version: 8, opset_import: ["" : 17]>
mlp (float[4,8] x, int64[4] t) => (float loss)
<float[8,8] w1 = {0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8, 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,
  0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8, 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8, 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,
  0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8, 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8, 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8},
 float[8] b1 = {0,0,0,0,0,0,0,0}>
{
  h = MatMul (x, w1)
  a = Add (h, b1)
  r = Relu (a)
  loss = SoftmaxCrossEntropyLoss (r, t)
})";

const ampc::plan::Plan &trainingPlan() {
  static ampc::plan::Plan plan = [] {
    ampc::registerAllPasses();
    auto g = ampc::importModelText(kModel, "mlp");
    if (!g)
      std::abort();
    ampc::PassManager pm;
    ampc::PassContext ctx;
    if (pm.addPipeline("canonicalize,autodiff,loss-scale{dynamic},optimizer{adamw},canonicalize") ||
        pm.run(**g, ctx))
      std::abort();
    auto p = ampc::lowerToPlan(**g, ampc::LowerOptions{});
    if (!p)
      std::abort();
    return std::move(*p);
  }();
  return plan;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > ampc::fuzz::kMaxInput)
    return 0;
  const std::string &dir = ampc::fuzz::scratchDir();
  {
    std::ofstream out(dir + "/state.npz", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
  }
  std::string error;
  auto session = ampc::rt::Session::fromPlan(trainingPlan(), ampc::rt::createCpuBackend({1}), error);
  if (!session)
    std::abort(); // the plan itself is valid
  std::map<std::string, int64_t> counters;
  session->loadCheckpoint(dir, counters, error);
  return 0;
}
