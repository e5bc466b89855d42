//===- Optimizer.cpp - Gradient clipping and the optimizer update ----------===//
//
// Appends the update of torch.optim.SGD or torch.optim.AdamW to the graph, on
// the fp32 master parameters, with PyTorch's exact semantics:
//   SGD:   g += wd * p; with momentum the buffer is g on the first step and
//          momentum * buf + (1 - dampening) * g afterwards; nesterov uses
//          g + momentum * buf; p -= lr * update.
//   AdamW: p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//          p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// Optionally the gradients are first clipped by their global L2 norm with
// torch.nn.utils.clip_grad_norm_'s formula. An fp32 parameter's AdamW update
// is one ampc.AdamW node (OptimizerMath.h: the same operations in the same
// order as the elementwise graph, which other types still get): a node per
// parameter instead of about twenty keeps compile time down on models with
// thousands of small parameters. When loss scaling found an
// overflow (found_inf) every parameter, moment and the step counter keep their
// old values, bit for bit (Where selects the old tensor). BatchNormalization's
// running statistics become state too.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Autocast.h"
#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"
#include "ampc/Support/Error.h"

#include "llvm/Support/Format.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <map>

namespace ampc {

namespace {

struct OptimizerConfig {
  std::string kind; ///< sgd or adamw
  double lr, momentum, dampening, weightDecay, beta1, beta2, eps;
  bool nesterov;
  std::optional<double> clipNorm;
};

class OptimizerPass : public Pass {
public:
  explicit OptimizerPass(OptimizerConfig c) : c_(std::move(c)) {}
  llvm::StringRef name() const override { return "optimizer"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    if (auto err = validate())
      return err;
    // A second optimizer would give each parameter two conflicting updates.
    if (g.metadata.count(std::string(kInfoPrefix) + "optimizer"))
      return makeError("the graph already updates its parameters (optimizer ran before)");
    // The pass may run on several graphs (--split-input-file): no value of
    // an earlier one may be reused.
    constants_.clear();
    shared_.clear();
    std::vector<GradientOutput> grads = findGradients(g);
    if (grads.empty())
      return makeError("no gradient outputs (<param>_grad): run autodiff first, or use amp-opt --train, which builds the whole training step");
    Builder b(g, "optimizer/");
    Value *found = g.findValue(kFoundInfName);
    Value *lr = g.findValue("lr");
    if (!lr)
      lr = g.addInputWithDefault("lr", Tensor::scalar(DType::F32, c_.lr));
    Value *step = addState(g, "optimizer.step", Tensor::scalar(DType::F32, 0));
    Value *one = cst(b, DType::F32, 1);

    std::vector<Value *> gradValues;
    for (const GradientOutput &go : grads)
      gradValues.push_back(go.grad);
    if (c_.clipNorm)
      clip(b, gradValues);

    // Bitwise skip on overflow: keep the old tensor.
    auto keepOnOverflow = [&](Value *old, Value *updated) {
      return found ? b.where(found, old, updated) : updated;
    };
    Value *t = b.add(step, one); // torch counts steps from 1
    for (size_t i = 0; i < grads.size(); ++i) {
      Value *p = grads[i].param;
      if (!p->isInitializer())
        return makeError("parameter '" + p->name() + "' is not an initializer");
      if (c_.kind == "adamw" && p->dtype() == DType::F32) {
        fusedAdamW(b, g, p, gradValues[i], lr, t, found);
        continue;
      }
      Value *grad = b.cast(gradValues[i], p->dtype());
      Value *updated = c_.kind == "sgd" ? sgd(b, g, p, grad, lr, step, keepOnOverflow)
                                        : adamw(b, g, p, grad, lr, t, keepOnOverflow);
      bindState(g, p, keepOnOverflow(p, updated));
    }
    bindState(g, step, keepOnOverflow(step, t));
    unsigned stats = bindBatchNormStatistics(g);

    std::string desc = describe();
    g.metadata[std::string(kInfoPrefix) + "optimizer"] = desc;
    ctx.addReport("optimizer", "optimizer: " + desc + ", " + std::to_string(grads.size()) +
                                   " parameters" +
                                   (stats ? ", " + std::to_string(stats) +
                                                " BatchNormalization statistics as state"
                                          : std::string()) +
                                   (found ? ", update skipped on found_inf" : ""));
    return llvm::Error::success();
  }

private:
  /// Scalars every parameter's update shares (constants, bias corrections,
  /// the learning rate in the parameter's type) are built once per type, not
  /// once per parameter: 12,000 parameters made some 240,000 identical nodes
  /// that canonicalize then spent most of its time merging.
  std::map<std::pair<DType, double>, Value *> constants_;
  std::map<std::pair<std::string, DType>, Value *> shared_;

  Value *cst(Builder &b, DType dt, double v) {
    Value *&slot = constants_[{dt, v}];
    if (!slot)
      slot = b.constant(dt, v);
    return slot;
  }
  template <typename Make> Value *once(const std::string &key, DType dt, Make make) {
    Value *&slot = shared_[{key, dt}];
    if (!slot)
      slot = make();
    return slot;
  }

  llvm::Error validate() const {
    if (!(c_.lr >= 0))
      return makeError("--lr must not be negative");
    if (c_.kind == "sgd" && c_.nesterov && (c_.momentum <= 0 || c_.dampening != 0))
      return makeError("nesterov momentum requires a momentum and zero dampening (as in torch)");
    if (c_.kind == "adamw" && !(c_.beta1 >= 0 && c_.beta1 < 1 && c_.beta2 >= 0 && c_.beta2 < 1))
      return makeError("--beta1 and --beta2 must be in [0, 1)");
    if (c_.clipNorm && !(*c_.clipNorm > 0))
      return makeError("--clip-grad-norm must be positive");
    return llvm::Error::success();
  }

  std::string describe() const {
    std::string s;
    if (c_.kind == "sgd")
      s = "sgd(lr=" + formatOptionValue(c_.lr) + ", momentum=" + formatOptionValue(c_.momentum) + ", dampening=" +
          formatOptionValue(c_.dampening) + ", nesterov=" + (c_.nesterov ? "true" : "false") +
          ", weight_decay=" + formatOptionValue(c_.weightDecay) + ")";
    else
      s = "adamw(lr=" + formatOptionValue(c_.lr) + ", betas=(" + formatOptionValue(c_.beta1) + ", " + formatOptionValue(c_.beta2) +
          "), eps=" + formatOptionValue(c_.eps) + ", weight_decay=" + formatOptionValue(c_.weightDecay) + ")";
    if (c_.clipNorm)
      s += ", clip_grad_norm=" + formatOptionValue(*c_.clipNorm);
    return s;
  }

  /// torch.nn.utils.clip_grad_norm_: total = ||(||g_1||, ..., ||g_n||)||,
  /// every gradient *= min(max_norm / (total + 1e-6), 1).
  void clip(Builder &b, std::vector<Value *> &grads) {
    std::vector<Value *> squares;
    for (Value *gv : grads)
      squares.push_back(b.sumOfSquares(b.cast(gv, DType::F32)));
    Value *total = b.sqrt(b.sum(squares));
    Value *coef = b.div(cst(b, DType::F32, *c_.clipNorm),
                        b.add(total, cst(b, DType::F32, 1e-6)));
    Value *clamped = b.min(coef, cst(b, DType::F32, 1.0));
    for (Value *&gv : grads)
      gv = b.mul(gv, b.cast(clamped, gv->dtype()));
  }

  template <typename Keep>
  Value *sgd(Builder &b, Graph &g, Value *p, Value *grad, Value *lr, Value *step, Keep keep) {
    DType dt = p->dtype();
    if (c_.weightDecay != 0)
      grad = b.add(grad, b.mul(p, cst(b, dt, c_.weightDecay)));
    Value *update = grad;
    if (c_.momentum != 0) {
      Value *buf = addState(g, p->name() + ".momentum_buffer", Tensor(p->type()));
      Value *running = b.add(b.mul(buf, cst(b, dt, c_.momentum)),
                             b.mul(grad, cst(b, dt, 1 - c_.dampening)));
      // torch starts the buffer as a copy of the first gradient.
      Value *first = once("first", DType::F32,
                          [&] { return b.equal(step, cst(b, DType::F32, 0)); });
      Value *newBuf = b.where(first, grad, running);
      bindState(g, buf, keep(buf, newBuf));
      update = c_.nesterov ? b.add(grad, b.mul(newBuf, cst(b, dt, c_.momentum))) : newBuf;
    }
    return b.sub(p, b.mul(update, once("lr", dt, [&] { return b.cast(lr, dt); })));
  }

  /// An fp32 master parameter: one ampc.AdamW node updates it and both
  /// moments (skipping on found_inf itself), with the arithmetic of adamw()
  /// below, operation for operation.
  void fusedAdamW(Builder &b, Graph &g, Value *p, Value *grad, Value *lr, Value *t, Value *found) {
    Value *m = addState(g, p->name() + ".exp_avg", Tensor(p->type()));
    Value *v = addState(g, p->name() + ".exp_avg_sq", Tensor(p->type()));
    // A gradient widened from fp16/bf16 is read in its own type: the update
    // widens it exactly, and the fp32 copy need not be written.
    if (Node *widen = grad->producer();
        widen && widen->is("Cast") && widen->input(0) && isLowPrecision(widen->input(0)->dtype()))
      grad = widen->input(0);
    std::vector<Value *> inputs = {p, grad, m, v, lr, t};
    if (found)
      inputs.push_back(found);
    Node *n = b.node("AdamW", inputs, {p->type(), p->type(), p->type()},
                     {{"beta1", Attribute::ofFloat(c_.beta1)},
                      {"one_minus_beta1", Attribute::ofFloat(1 - c_.beta1)},
                      {"beta2", Attribute::ofFloat(c_.beta2)},
                      {"one_minus_beta2", Attribute::ofFloat(1 - c_.beta2)},
                      {"epsilon", Attribute::ofFloat(c_.eps)},
                      {"weight_decay", Attribute::ofFloat(c_.weightDecay)}},
                     std::string(kAmpcDomain),
                     // Named as bindState names them: not named twice.
                     {p->name() + ".next", m->name() + ".next", v->name() + ".next"});
    bindState(g, p, n->output(0));
    bindState(g, m, n->output(1));
    bindState(g, v, n->output(2));
  }

  /// AdamW on a parameter of another type (fp16, bf16, double), node by node.
  template <typename Keep>
  Value *adamw(Builder &b, Graph &g, Value *p, Value *grad, Value *lr, Value *t, Keep keep) {
    DType dt = p->dtype();
    Value *one = cst(b, DType::F32, 1);
    Value *decayed = p;
    if (c_.weightDecay != 0)
      decayed = b.mul(p, once("decay", dt, [&] {
        return b.cast(b.sub(one, b.mul(lr, cst(b, DType::F32, c_.weightDecay))), dt);
      }));
    Value *m = addState(g, p->name() + ".exp_avg", Tensor(p->type()));
    Value *v = addState(g, p->name() + ".exp_avg_sq", Tensor(p->type()));
    Value *newM = b.add(b.mul(m, cst(b, dt, c_.beta1)), b.mul(grad, cst(b, dt, 1 - c_.beta1)));
    Value *newV = b.add(b.mul(v, cst(b, dt, c_.beta2)),
                        b.mul(b.mul(grad, grad), cst(b, dt, 1 - c_.beta2)));
    bindState(g, m, keep(m, newM));
    bindState(g, v, keep(v, newV));
    // Bias corrections of step t (scalars, fp32).
    Value *bc1 = once("bc1", DType::F32,
                      [&] { return b.sub(one, b.pow(cst(b, DType::F32, c_.beta1), t)); });
    Value *bc2 = once("bc2", DType::F32,
                      [&] { return b.sub(one, b.pow(cst(b, DType::F32, c_.beta2), t)); });
    Value *stepSize = once("step_size_fp32", DType::F32, [&] { return b.div(lr, bc1); });
    Value *sqrtBc2 = once("sqrt_bc2", dt, [&] { return b.cast(b.sqrt(bc2), dt); });
    Value *denom = b.add(b.div(b.sqrt(newV), sqrtBc2), cst(b, dt, c_.eps));
    return b.sub(decayed, b.mul(b.div(newM, denom),
                                once("step_size", dt, [&] { return b.cast(stepSize, dt); })));
  }

  /// BatchNormalization in training mode computes updated running statistics;
  /// they become the next values of the statistics initializers.
  unsigned bindBatchNormStatistics(Graph &g) {
    unsigned count = 0;
    for (Node *n : g.nodes()) {
      if (!n->is("BatchNormalization") || n->numOutputs() < 3)
        continue;
      for (unsigned i = 1; i <= 2; ++i) {
        Value *stat = n->input(2 + i), *updated = n->output(i);
        if (!stat || !updated || !stat->isInitializer() || stat->isConstant())
          continue;
        bool bound = false;
        for (const StateBinding &sb : g.stateBindings)
          bound = bound || sb.state == stat;
        if (bound)
          continue;
        bindState(g, stat, updated);
        ++count;
      }
    }
    return count;
  }

  OptimizerConfig c_;
};

} // namespace

void registerOptimizerPass() {
  PassRegistry::add(
      {"optimizer",
       "Clip gradients by global norm and update the fp32 master parameters with SGD or AdamW "
       "(torch semantics), skipping the step on found_inf",
       {{"optimizer", OptionType::Enum, "sgd or adamw", "sgd", {"sgd", "adamw"}},
        {"lr", OptionType::Float, "learning rate (the default of the 'lr' input)", "0.01", {}},
        {"momentum", OptionType::Float, "SGD momentum", "0", {}},
        {"dampening", OptionType::Float, "SGD dampening", "0", {}},
        {"nesterov", OptionType::Bool, "SGD Nesterov momentum", "false", {}},
        {"weight-decay", OptionType::Float,
         "weight decay (default: 0 for sgd, 0.01 for adamw, as in torch)", "", {}},
        {"beta1", OptionType::Float, "AdamW beta1", "0.9", {}},
        {"beta2", OptionType::Float, "AdamW beta2", "0.999", {}},
        {"eps", OptionType::Float, "AdamW epsilon", "1e-8", {}},
        {"clip-grad-norm", OptionType::Float, "clip gradients to this global L2 norm", "", {}}},
       "optimizer",
       [](const PassOptions &o) {
         OptimizerConfig c;
         c.kind = o.getString("optimizer");
         c.lr = o.getFloat("lr");
         c.momentum = o.getFloat("momentum");
         c.dampening = o.getFloat("dampening");
         c.nesterov = o.getBool("nesterov");
         c.weightDecay = o.has("weight-decay") ? o.getFloat("weight-decay")
                                               : (c.kind == "adamw" ? 0.01 : 0.0);
         c.beta1 = o.getFloat("beta1");
         c.beta2 = o.getFloat("beta2");
         c.eps = o.getFloat("eps");
         if (o.has("clip-grad-norm"))
           c.clipNorm = o.getFloat("clip-grad-norm");
         return std::make_unique<OptimizerPass>(c);
       }});
}

} // namespace ampc
