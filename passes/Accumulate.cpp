//===- Accumulate.cpp - Gradient accumulation over micro-batches -----------===//
//
// With N micro-batches per step, the step splits into two programs that the
// runtime runs as accumulate x N, then apply x 1:
//   accumulate: forward and backward of one micro-batch; every gradient is
//               added into an fp32 buffer (overwritten on the first
//               micro-batch, as ONNX Runtime's accumulation ops do), and a
//               micro-batch counter advances modulo N;
//   apply:      everything after: loss-scale checks and unscales the buffers,
//               the optimizer updates from them.
// The buffers hold the sum; the gradient handed on is their mean, so N
// micro-batches of size B give the update of one batch of N*B for a loss that
// averages over the batch (the usual case; PyTorch users divide by N).
// The graph records which states the accumulate program updates
// (kAccumulateStatesKey); the lowering builds both programs from it.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"
#include "ampc/Support/Error.h"

namespace ampc {

namespace {

class AccumulatePass : public Pass {
public:
  explicit AccumulatePass(int64_t steps) : steps_(steps) {}
  llvm::StringRef name() const override { return "accumulate"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    if (steps_ < 1)
      return makeError("--accumulate must be at least 1");
    if (steps_ == 1)
      return llvm::Error::success();
    if (g.metadata.count(kAccumulateStatesKey))
      return makeError("the graph already accumulates gradients (accumulate ran before)");
    std::vector<GradientOutput> grads = findGradients(g);
    if (grads.empty())
      return makeError("no gradient outputs (<param>_grad): run autodiff first, or use amp-opt --train, which builds the whole training step");
    Builder b(g, "accumulate/");
    Value *counter = addState(g, "accumulate.counter", Tensor::scalar(DType::F32, 0));
    Value *zero = b.constant(DType::F32, 0);
    Value *first = b.equal(counter, zero);
    Value *next = b.add(counter, b.constant(DType::F32, 1));
    Value *wrapped = b.where(b.equal(next, b.constant(DType::F32, double(steps_))), zero, next);
    std::string states = counter->name();
    std::vector<std::pair<Value *, Value *>> bindings = {{counter, wrapped}};
    for (const GradientOutput &go : grads) {
      DType accType = isLowPrecision(go.grad->dtype()) ? DType::F32 : go.grad->dtype();
      Value *grad = b.cast(go.grad, accType);
      Value *buffer = addState(g, go.param->name() + ".accumulated",
                               Tensor(TensorType(accType, go.grad->shape())));
      bindings.push_back({buffer, b.where(first, grad, b.add(buffer, grad))});
      states += "," + buffer->name();
      // Downstream passes see the mean of the accumulated micro-batch gradients.
      Value *mean = b.mul(buffer, b.constant(accType, 1.0 / double(steps_)));
      replaceOutput(g, go, mean, "microbatch");
    }
    for (const auto &[state, updated] : bindings)
      bindState(g, state, updated);
    g.metadata[kAccumulateStatesKey] = states;
    g.metadata[std::string(kInfoPrefix) + "accumulate"] = std::to_string(steps_);
    ctx.addReport("accumulate", "accumulate: " + std::to_string(steps_) + " micro-batches, " +
                                    std::to_string(grads.size()) + " fp32 gradient buffers");
    return llvm::Error::success();
  }

private:
  int64_t steps_;
};

} // namespace

void registerAccumulatePass() {
  PassRegistry::add({"accumulate",
                     "Sum the gradients of N micro-batches in fp32 before one update (an "
                     "accumulate program run N times, then an apply program)",
                     {{"steps", OptionType::Int, "micro-batches per update", "1", {}}},
                     "steps",
                     [](const PassOptions &o) {
                       return std::make_unique<AccumulatePass>(o.getInt("steps"));
                     }});
}

} // namespace ampc
