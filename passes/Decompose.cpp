//===- Decompose.cpp - Ops rewritten into ops with kernels and gradients ---===//
//
// Some ops that training models use have no runtime kernel or gradient rule
// of their own, but are short compositions of ops that have both. Rewriting
// them once gives them every backend, autodiff and autocast at no further
// cost (as ONNX functions and PyTorch's decompositions do):
//
//   InstanceNormalization(X, scale, B)
//     -> per (n, c): (X - mean) / sqrt(var + epsilon) * scale[c] + B[c],
//        mean and var over the spatial axes (ReduceMean, population variance);
//   Resize, mode nearest, integer scale factors >= 1, coordinate mapping
//   "asymmetric" with nearest_mode "floor" (PyTorch's nn.Upsample export) or
//   "half_pixel" with "round_prefer_floor" (ONNX's defaults), which pick the
//   same input element out[i] = in[floor(i / s)]
//     -> Reshape to [d0, 1, d1, 1, ...], Expand to [d0, s0, d1, s1, ...],
//        Reshape to [d0 s0, d1 s1, ...].
//
// Other forms stay as they are (and a missing kernel or rule reports them).
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"

#include <optional>

namespace ampc {

namespace {

class Decomposer {
public:
  explicit Decomposer(Graph &g) : g_(g) {}

  unsigned run() {
    unsigned rewritten = 0;
    for (Node *n : g_.nodes()) {
      bool done = false;
      if (n->is("InstanceNormalization"))
        done = instanceNorm(n);
      else if (n->is("Resize"))
        done = resizeNearest(n);
      rewritten += done;
    }
    return rewritten;
  }

private:
  Value *ints(const std::string &base, const std::vector<int64_t> &values) {
    return g_.addInitializer(
        g_.uniqueName(base),
        Tensor::fromInt64s(TensorType(DType::I64, {static_cast<int64_t>(values.size())}), values),
        /*constant=*/true);
  }

  Value *scalar(const std::string &base, DType t, double v) {
    return g_.addInitializer(g_.uniqueName(base), Tensor::scalar(t, v), /*constant=*/true);
  }

  Node *make(const std::string &op, const std::vector<Value *> &inputs, const TensorType &type,
             const std::string &name, std::map<std::string, Attribute> attrs = {}) {
    return g_.createNode(op, inputs, {type}, std::move(attrs), g_.uniqueName(name));
  }

  /// Makes `replacement` take over n's result (its name included) and erases n.
  void replace(Node *n, Value *replacement) {
    Value *out = n->output(0);
    std::string name = out->name();
    g_.renameValue(out, name + ".decomposed");
    out->replaceAllUsesWith(replacement);
    g_.renameValue(replacement, name);
    g_.eraseNode(n);
  }

  bool instanceNorm(Node *n) {
    Value *x = n->input(0), *scale = n->input(1), *bias = n->input(2);
    if (!x || !scale || !bias || n->numOutputs() != 1 || !n->output())
      return false;
    const TensorType &xt = x->type();
    int64_t rank = xt.rank();
    if (rank < 3)
      return false;
    std::string base = n->name().empty() ? n->output()->name() : n->name();
    Graph::InsertionGuard guard(g_, n);
    std::vector<int64_t> axes;
    for (int64_t d = 2; d < rank; ++d)
      axes.push_back(d);
    Shape reduced = xt.shape;
    for (int64_t a : axes)
      reduced[a] = 1;
    TensorType statType(xt.dtype, reduced);
    auto mean = [&](Value *v, const std::string &what) {
      return make("ReduceMean", {v}, statType, base + "/" + what,
                  {{"axes", Attribute::ofInts(axes)}, {"keepdims", Attribute::ofInt(1)}})
          ->output();
    };
    Value *mu = mean(x, "mean");
    Value *centered = make("Sub", {x, mu}, xt, base + "/centered")->output();
    Value *squares = make("Mul", {centered, centered}, xt, base + "/squares")->output();
    Value *var = mean(squares, "variance");
    Value *eps = scalar(base + "/epsilon", xt.dtype, n->getFloat("epsilon", 1e-5));
    Value *stddev =
        make("Sqrt", {make("Add", {var, eps}, statType, base + "/add_epsilon")->output()},
             statType, base + "/stddev")
            ->output();
    Value *normalized = make("Div", {centered, stddev}, xt, base + "/normalized")->output();
    // scale and B are [C]: as [C, 1, ...] they broadcast over the spatial axes.
    Shape perChannel(rank - 1, 1);
    perChannel[0] = xt.shape[1];
    Value *shape = ints(base + "/per_channel", perChannel);
    auto channel = [&](Value *v, const std::string &what) {
      return make("Reshape", {v, shape}, TensorType(v->dtype(), perChannel), base + "/" + what)
          ->output();
    };
    Value *scaled =
        make("Mul", {normalized, channel(scale, "scale")}, xt, base + "/scaled")->output();
    Value *y = make("Add", {scaled, channel(bias, "bias")}, xt, base + "/shifted")->output();
    replace(n, y);
    return true;
  }

  /// The integer factor per axis of a nearest Resize, if it is one we rewrite.
  std::optional<std::vector<int64_t>> nearestFactors(const Node &n) {
    if (n.getString("mode", "nearest") != "nearest" || !n.output() || !n.input(0))
      return std::nullopt;
    std::string ctm = n.getString("coordinate_transformation_mode", "half_pixel");
    std::string nearest = n.getString("nearest_mode", "round_prefer_floor");
    bool floorMapping = (ctm == "asymmetric" && nearest == "floor") ||
                        (ctm == "half_pixel" && nearest == "round_prefer_floor");
    if (!floorMapping)
      return std::nullopt;
    const Shape &in = n.input(0)->shape(), &out = n.output()->shape();
    if (in.size() != out.size())
      return std::nullopt;
    std::vector<int64_t> factors;
    for (size_t d = 0; d < in.size(); ++d) {
      if (in[d] <= 0 || out[d] % in[d] != 0)
        return std::nullopt;
      factors.push_back(out[d] / in[d]);
    }
    // The output shape came from scales or sizes; with scales, they must be
    // these integers (a scale of 2.5 on a size-2 axis also gives 5).
    if (const Value *scales = n.numInputs() > 2 ? n.input(2) : nullptr) {
      if (scales->type().numElements() > 0) {
        if (!scales->isConstant())
          return std::nullopt;
        std::vector<double> s = scales->data()->toDoubles();
        for (size_t d = 0; d < s.size() && d < factors.size(); ++d)
          if (s[d] != static_cast<double>(factors[d]))
            return std::nullopt;
      }
    }
    return factors;
  }

  bool resizeNearest(Node *n) {
    auto factors = nearestFactors(*n);
    if (!factors)
      return false;
    const TensorType &xt = n->input(0)->type();
    std::string base = n->name().empty() ? n->output()->name() : n->name();
    Graph::InsertionGuard guard(g_, n);
    Shape spread, expanded;
    for (size_t d = 0; d < xt.shape.size(); ++d) {
      spread.push_back(xt.shape[d]);
      spread.push_back(1);
      expanded.push_back(xt.shape[d]);
      expanded.push_back((*factors)[d]);
    }
    Value *a = make("Reshape", {n->input(0), ints(base + "/spread_shape", spread)},
                    TensorType(xt.dtype, spread), base + "/spread")
                   ->output();
    Value *b = make("Expand", {a, ints(base + "/repeat_shape", expanded)},
                    TensorType(xt.dtype, expanded), base + "/repeat")
                   ->output();
    Value *y = make("Reshape", {b, ints(base + "/merge_shape", n->output()->shape())},
                    n->output()->type(), base + "/merge")
                   ->output();
    replace(n, y);
    return true;
  }

  Graph &g_;
};

class DecomposePass : public Pass {
public:
  llvm::StringRef name() const override { return "decompose"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    unsigned rewritten = Decomposer(g).run();
    if (rewritten)
      ctx.addReport("decompose", "decompose: " + std::to_string(rewritten) +
                                     " nodes rewritten into ops with kernels and gradients");
    return llvm::Error::success();
  }
};

} // namespace

void registerDecomposePass() {
  PassRegistry::add({"decompose",
                     "Rewrite InstanceNormalization and nearest integer-factor Resize into ops "
                     "that have kernels and gradient rules",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<DecomposePass>(); }});
}

} // namespace ampc
