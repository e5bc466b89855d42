//===- LossScale.cpp - Loss scaling, overflow check, unscale ---------------===//
//
// Everything PyTorch's GradScaler does, inside the graph, so that no host
// decision is needed within a step:
//   - the backward seed is the scale (the loss is scaled);
//   - one ampc.AllFinite checks every gradient: found_inf = not all finite;
//   - gradients are unscaled by the inverse scale, computed in double and
//     rounded to float as PyTorch does;
//   - dynamic scaling updates the scale and the growth tracker exactly like
//     torch's _amp_update_scale: on overflow scale *= backoff and the tracker
//     resets; otherwise the tracker counts up and at the interval the scale
//     grows, only if the grown scale is finite, and the tracker resets.
// The optimizer pass reads found_inf to skip the update.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"
#include "ampc/Support/Error.h"

#include "llvm/Support/Format.h"

#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <limits>

namespace ampc {

namespace {

struct LossScaleConfig {
  std::string mode; ///< auto, dynamic, none, or a number (static)
  double init, growth, backoff;
  int64_t interval;
  std::optional<double> min;
};

bool usesFloat16(const Graph &g) {
  for (const Node *n : g.nodes())
    for (const Value *v : n->outputs())
      if (v && v->dtype() == DType::F16)
        return true;
  return false;
}

class LossScalePass : public Pass {
public:
  explicit LossScalePass(LossScaleConfig c) : c_(std::move(c)) {}
  llvm::StringRef name() const override { return "loss-scale"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    std::vector<GradientOutput> grads = findGradients(g);
    if (grads.empty())
      return makeError("no gradient outputs (<param>_grad): run autodiff first, or use amp-opt --train, which builds the whole training step");
    std::string mode = c_.mode;
    if (mode == "auto")
      mode = usesFloat16(g) ? "dynamic" : "none";
    if (Value *seed = findSeed(g))
      g.metadata[std::string(kInfoPrefix) + "output.loss"] =
          seed->name().substr(0, seed->name().size() - 5);
    if (mode == "none") {
      g.metadata[std::string(kInfoPrefix) + "loss_scale"] = "none";
      ctx.addReport("loss-scale", "loss-scale: none (no fp16 values to protect)");
      return llvm::Error::success();
    }
    // The scale is an fp32 value: above FLT_MAX it would be inf and skip every step.
    constexpr double kMaxScale = std::numeric_limits<float>::max();
    if (!(c_.init > 0 && c_.init <= kMaxScale) || !(c_.growth >= 1) ||
        !(c_.backoff > 0 && c_.backoff <= 1) || c_.interval < 1)
      return makeError("loss scaling needs 0 < init <= 3.4e38 (fp32), growth-factor >= 1, "
                       "0 < backoff <= 1 and growth-interval >= 1");
    Value *seed = findSeed(g);
    if (!seed)
      return makeError("no backward seed input (<loss>_grad): run autodiff first, or use amp-opt --train, which builds the whole training step");
    std::string lossName = seed->name().substr(0, seed->name().size() - 5);

    bool dynamic = mode == "dynamic";
    double init = c_.init;
    if (!dynamic) {
      double v;
      if (llvm::StringRef(mode).getAsDouble(v) || !(v > 0) || !(v <= kMaxScale))
        return makeError("--loss-scale must be dynamic, none or a positive fp32 number, got '" +
                         mode + "'");
      init = v;
    }
    Builder b(g, "loss_scale/");
    Value *scale = dynamic ? addState(g, "loss_scale.scale", Tensor::scalar(DType::F32, init))
                           : b.constant(DType::F32, init);

    // The seed of the backward pass is the scale: the loss is scaled.
    Value *seedValue = b.cast(scale, seed->dtype());
    seed->replaceAllUsesWith(seedValue);
    g.removeValue(seed);

    // Unscale: inverse scale in double, rounded to float (torch does the same).
    Value *inv = b.cast(b.reciprocal(b.cast(scale, DType::F64)), DType::F32);
    std::vector<Value *> toCheck;
    for (const GradientOutput &go : grads) {
      Value *unscaled = b.mul(go.grad, b.cast(inv, go.grad->dtype()));
      replaceOutput(g, go, unscaled, "scaled");
      toCheck.push_back(unscaled);
    }
    // One check of every unscaled gradient. PyTorch's
    // _amp_foreach_non_finite_check_and_unscale_ checks the scaled values;
    // ampc deliberately checks after unscaling, because a finite scaled
    // gradient can still become inf or NaN when unscaled (a scale backed off
    // below 1 until its inverse overflows), and such a step must be skipped,
    // not applied. For a scale >= 1 both checks agree exactly (1/scale <= 1
    // keeps finite values finite, and cannot be 0).
    Value *allFinite =
        b.node("AllFinite", toCheck, {TensorType(DType::Bool, {})}, {}, std::string(kAmpcDomain))
            ->output();
    Value *found = b.notOf(allFinite);

    Value *reported = scale;
    if (dynamic) {
      Value *tracker = addState(g, "loss_scale.growth_tracker", Tensor::scalar(DType::F32, 0));
      Value *zero = b.constant(DType::F32, 0);
      Value *successful = b.add(tracker, b.constant(DType::F32, 1));
      Value *atInterval =
          b.greaterOrEqual(successful, b.constant(DType::F32, static_cast<double>(c_.interval)));
      Value *grown = b.mul(scale, b.constant(DType::F32, c_.growth));
      Value *growOk = b.andOf(atInterval, b.notOf(b.isInf(grown)));
      Value *ifFinite = b.where(growOk, grown, scale);
      Value *trackerIfFinite = b.where(atInterval, zero, successful);
      Value *newScale = b.where(found, b.mul(scale, b.constant(DType::F32, c_.backoff)), ifFinite);
      if (c_.min)
        newScale = b.max(newScale, b.constant(DType::F32, *c_.min));
      Value *newTracker = b.where(found, zero, trackerIfFinite);
      bindState(g, scale, newScale);
      bindState(g, tracker, newTracker);
      reported = newScale;
    }
    // Reported outputs: the overflow flag and the scale after this step.
    b.named(found, kFoundInfName);
    g.addOutput(found);
    Value *scaleOut = b.node("Identity", {reported}, {reported->type()})->output();
    b.named(scaleOut, kLossScaleOutput);
    g.addOutput(scaleOut);

    std::string desc = dynamic ? "dynamic(init=" + formatOptionValue(c_.init) + ", growth=" + formatOptionValue(c_.growth) +
                                     ", backoff=" + formatOptionValue(c_.backoff) +
                                     ", interval=" + std::to_string(c_.interval) +
                                     (c_.min ? ", min=" + formatOptionValue(*c_.min) : "") + ")"
                               : "static(" + mode + ")";
    g.metadata[std::string(kInfoPrefix) + "loss_scale"] = desc;
    g.metadata[std::string(kInfoPrefix) + "output.found_inf"] = kFoundInfName;
    g.metadata[std::string(kInfoPrefix) + "output.loss_scale"] = kLossScaleOutput;
    ctx.addReport("loss-scale", "loss-scale: " + desc + ", " + std::to_string(grads.size()) +
                                    " gradients checked and unscaled");
    return llvm::Error::success();
  }

private:
  LossScaleConfig c_;
};

} // namespace

void registerLossScalePass() {
  PassRegistry::add(
      {"loss-scale",
       "Scale the loss, check gradients for inf/NaN, unscale them and update the scale (like "
       "PyTorch's GradScaler)",
       {{"mode", OptionType::String,
         "auto (dynamic when the graph has fp16 values, else none), dynamic, none, or a number",
         "auto", {}},
        {"init", OptionType::Float, "initial scale", "65536", {}},
        {"growth-factor", OptionType::Float, "scale growth on a clean interval", "2", {}},
        {"backoff", OptionType::Float, "scale factor on overflow", "0.5", {}},
        {"growth-interval", OptionType::Int, "clean steps before growing", "2000", {}},
        {"min", OptionType::Float, "smallest scale (default: none)", "", {}}},
       "mode",
       [](const PassOptions &o) {
         LossScaleConfig c{o.getString("mode"), o.getFloat("init"), o.getFloat("growth-factor"),
                           o.getFloat("backoff"), o.getInt("growth-interval"), std::nullopt};
         if (o.has("min"))
           c.min = o.getFloat("min");
         return std::make_unique<LossScalePass>(c);
       }});
}

} // namespace ampc
