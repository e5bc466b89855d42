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
//        Reshape to [d0 s0, d1 s1, ...];
//   Resize, mode nearest (other scales or mappings) or linear, changing only
//   the last two axes
//     -> X @ A_w^T, then A_h @ that, with the interpolation matrices A
//        [out, in] of ampc/Interpreter/ResizeCoordinates.h (one-hot rows for
//        nearest), the definition the reference interpreter runs;
//   ConvTranspose (any strides, pads, output_padding, dilations, groups,
//   auto_pad, output_shape)
//     -> a stride-1 Conv of the input with s - 1 zeros stuffed between its
//        elements (Reshape, Pad, Reshape, Slice), padded or cropped, with the
//        weights flipped and their channels exchanged per group (Reshape,
//        Transpose, Reshape, Slice with step -1). This spends s^d more
//        multiply-adds than a direct kernel would: correctness first.
//
//   Pow(float base, integer exponent)
//     -> Pow(base, Cast(exponent to fp32)): the elementwise kernels take
//        float operands only.
//
// Other forms stay as they are (and a missing kernel or rule reports them).
//
//===----------------------------------------------------------------------===//

#include "ampc/Interpreter/ResizeCoordinates.h"
#include "ampc/Passes/Passes.h"

#include <algorithm>
#include <limits>
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
        done = resizeNearest(n) || resizeByMatrices(n);
      else if (n->is("ConvTranspose"))
        done = convTranspose(n);
      else if (n->is("Pow"))
        done = floatExponent(n);
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

  /// Pow of a float base by an integer exponent: the exponent becomes fp32
  /// (fp64 for an fp64 base), exact below 2^24, so the elementwise kernels,
  /// which compute in fp32, take it.
  bool floatExponent(Node *n) {
    Value *base = n->input(0), *exponent = n->input(1);
    if (!base || !exponent || !n->output() || !isFloat(base->dtype()) || isFloat(exponent->dtype()))
      return false;
    DType wide = base->dtype() == DType::F64 ? DType::F64 : DType::F32;
    Graph::InsertionGuard guard(g_, n);
    std::string name = (n->name().empty() ? n->output()->name() : n->name()) + "/exponent";
    Value *cast = make("Cast", {exponent}, TensorType(wide, exponent->shape()), name,
                       {{"to", Attribute::ofInt(dtypeToOnnx(wide))}})
                      ->output();
    n->setInput(1, cast);
    return true;
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

  /// The scale of each axis of a Resize: its scales operand when given (a
  /// constant), else output / input. None when the result's rank is not the
  /// operand's (a model can declare it so; the verifier reports it).
  std::optional<std::vector<double>> resizeScales(const Node &n) {
    const Shape &in = n.input(0)->shape(), &out = n.output()->shape();
    if (out.size() != in.size())
      return std::nullopt;
    std::vector<double> scales;
    for (size_t d = 0; d < in.size(); ++d)
      scales.push_back(double(out[d]) / double(in[d]));
    const Value *given = n.numInputs() > 2 ? n.input(2) : nullptr;
    if (given && given->type().numElements() > 0) {
      if (!given->isConstant() || given->type().numElements() != static_cast<int64_t>(in.size()))
        return std::nullopt;
      scales = given->data()->toDoubles();
    }
    return scales;
  }

  /// Resize (nearest or linear, any scales) that changes only the last two
  /// axes, as interpolation matrices: Y = A_h X A_w^T with A [out, in] from
  /// ampc/Interpreter/ResizeCoordinates.h (one-hot rows for nearest). Two
  /// MatMuls: kernels, gradients and autocast come with them.
  bool resizeByMatrices(Node *n) {
    std::string mode = n->getString("mode", "nearest");
    std::string ctm = n->getString("coordinate_transformation_mode", "half_pixel");
    std::string nearest = n->getString("nearest_mode", "round_prefer_floor");
    if ((mode != "nearest" && mode != "linear") || !n->output() || !n->input(0) ||
        !isFloat(n->input(0)->dtype()))
      return false;
    const Shape &in = n->input(0)->shape(), &out = n->output()->shape();
    size_t rank = in.size();
    auto scales = resizeScales(*n);
    if (rank < 2 || out.size() != rank || !scales || scales->size() != rank)
      return false;
    // The interpolation matrix of axis d, [out, in].
    auto matrix = [&](size_t d) -> std::optional<std::vector<double>> {
      // An empty axis has no source to sample (and a declared result that
      // disagrees with it is the verifier's to report): left as it is.
      if (in[d] <= 0 || out[d] <= 0)
        return std::nullopt;
      std::vector<double> a(out[d] * in[d], 0.0);
      for (int64_t i = 0; i < out[d]; ++i) {
        auto c = resize::sourceCoordinate(ctm, i, (*scales)[d], in[d], out[d]);
        if (!c)
          return std::nullopt;
        if (mode == "nearest") {
          auto at = resize::nearestIndex(nearest, *c, in[d]);
          if (!at)
            return std::nullopt;
          a[i * in[d] + *at] = 1.0;
        } else {
          auto [lo, hi] = resize::linearTaps(*c, in[d]);
          a[i * in[d] + lo.first] += lo.second;
          a[i * in[d] + hi.first] += hi.second;
        }
      }
      return a;
    };
    auto identity = [&](size_t d, const std::vector<double> &a) {
      if (in[d] != out[d])
        return false;
      for (int64_t i = 0; i < in[d]; ++i)
        for (int64_t j = 0; j < in[d]; ++j)
          if (a[i * in[d] + j] != (i == j ? 1.0 : 0.0))
            return false;
      return true;
    };
    std::vector<std::vector<double>> mats(rank);
    for (size_t d = 0; d < rank; ++d) {
      auto a = matrix(d);
      if (!a)
        return false;
      mats[d] = std::move(*a);
      if (d + 2 < rank && !identity(d, mats[d]))
        return false; // only the last two axes may change
    }
    std::string base = n->name().empty() ? n->output()->name() : n->name();
    DType t = n->input(0)->dtype();
    Graph::InsertionGuard guard(g_, n);
    Value *y = n->input(0);
    Shape shape = in;
    size_t w = rank - 1, h = rank - 2;
    if (!identity(w, mats[w])) {
      // X [..., W] @ A_w^T [W, W'].
      std::vector<double> at(in[w] * out[w]);
      for (int64_t i = 0; i < out[w]; ++i)
        for (int64_t j = 0; j < in[w]; ++j)
          at[j * out[w] + i] = mats[w][i * in[w] + j];
      Value *aw = g_.addInitializer(g_.uniqueName(base + "/columns"),
                                    Tensor::fromDoubles(TensorType(t, {in[w], out[w]}), at),
                                    /*constant=*/true);
      shape[w] = out[w];
      y = op("MatMul", {y, aw}, shape, t, base + "/resize_columns");
    }
    if (!identity(h, mats[h])) {
      // A_h [H', H] @ Y [..., H, W'].
      Value *ah = g_.addInitializer(g_.uniqueName(base + "/rows"),
                                    Tensor::fromDoubles(TensorType(t, {out[h], in[h]}), mats[h]),
                                    /*constant=*/true);
      shape[h] = out[h];
      y = op("MatMul", {ah, y}, shape, t, base + "/resize_rows");
    }
    if (y == n->input(0))
      return false; // nothing changes: simplify's business
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

  Value *op(const std::string &opType, const std::vector<Value *> &inputs, const Shape &shape,
            DType dtype, const std::string &name, std::map<std::string, Attribute> attrs = {}) {
    return make(opType, inputs, TensorType(dtype, shape), name, std::move(attrs))->output();
  }

  /// Slice of v over `axes` from `starts` to `ends` with `steps`.
  Value *slice(Value *v, const std::vector<int64_t> &starts, const std::vector<int64_t> &ends,
               const std::vector<int64_t> &axes, const std::vector<int64_t> &steps,
               const Shape &shape, const std::string &name) {
    return op("Slice", {v, ints(name + "_starts", starts), ints(name + "_ends", ends),
                        ints(name + "_axes", axes), ints(name + "_steps", steps)},
              shape, v->dtype(), name);
  }

  /// ConvTranspose as a stride-1 convolution: the input with s - 1 zeros
  /// stuffed between its elements, padded by (k - 1) d - pad at the start
  /// (cropped where negative) and to the output's extent at the end,
  /// convolved with the weights flipped spatially and with input and output
  /// channels exchanged per group. y[o] = sum over k of
  /// z[o + pad - k d] w[k], which is ConvTranspose's definition.
  bool convTranspose(Node *n) {
    Value *x = n->input(0), *w = n->input(1);
    Value *bias = n->numInputs() > 2 ? n->input(2) : nullptr;
    if (!x || !w || !n->output() || n->numOutputs() != 1)
      return false;
    const Shape &xs = x->shape(), &ws = w->shape(), &ys = n->output()->shape();
    size_t sp = xs.size() < 3 ? 0 : xs.size() - 2;
    if (sp == 0 || ws.size() != xs.size() || ys.size() != xs.size())
      return false;
    int64_t group = n->getInt("group", 1), C = xs[1], M = ws[1] * group;
    if (group <= 0 || C % group || ws[0] != C || ys[1] != M)
      return false;
    std::vector<int64_t> strides = n->getInts("strides", std::vector<int64_t>(sp, 1));
    std::vector<int64_t> dil = n->getInts("dilations", std::vector<int64_t>(sp, 1));
    std::vector<int64_t> pads = n->getInts("pads", std::vector<int64_t>(2 * sp, 0));
    std::vector<int64_t> outPad = n->getInts("output_padding", std::vector<int64_t>(sp, 0));
    std::string autoPad = n->getString("auto_pad", "NOTSET");
    if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || outPad.size() != sp)
      return false;
    // The start padding, as the reference interpreter resolves it.
    std::vector<int64_t> padBegin(pads.begin(), pads.begin() + sp);
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER" || n->hasAttr("output_shape"))
      for (size_t d = 0; d < sp; ++d) {
        int64_t total = strides[d] * (xs[2 + d] - 1) + outPad[d] + (ws[2 + d] - 1) * dil[d] + 1 -
                        ys[2 + d];
        padBegin[d] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
        if (autoPad == "NOTSET")
          padBegin[d] = total / 2;
      }
    std::string base = n->name().empty() ? n->output()->name() : n->name();
    DType t = x->dtype();
    Graph::InsertionGuard guard(g_, n);

    // 1. Stuff s - 1 zeros between elements: [N, C, i0, 1, i1, 1, ...] padded
    //    to [N, C, i0, s0, ...], merged, and the trailing zeros cut.
    Value *z = x;
    bool strided = std::any_of(strides.begin(), strides.end(), [](int64_t v) { return v > 1; });
    if (strided) {
      Shape spread{xs[0], xs[1]}, padded{xs[0], xs[1]}, merged{xs[0], xs[1]}, stuffed{xs[0], xs[1]};
      std::vector<int64_t> padsSpread(2 * (2 + 2 * sp), 0), axes, ends;
      for (size_t d = 0; d < sp; ++d) {
        spread.insert(spread.end(), {xs[2 + d], 1});
        padded.insert(padded.end(), {xs[2 + d], strides[d]});
        merged.push_back(xs[2 + d] * strides[d]);
        stuffed.push_back((xs[2 + d] - 1) * strides[d] + 1);
        padsSpread[(2 + 2 * sp) + 3 + 2 * d] = strides[d] - 1; // end of the size-1 axis
        axes.push_back(static_cast<int64_t>(2 + d));
        ends.push_back(stuffed.back());
      }
      z = op("Reshape", {z, ints(base + "/spread_shape", spread)}, spread, t, base + "/spread");
      z = op("Pad", {z, ints(base + "/stuff_pads", padsSpread)}, padded, t, base + "/stuff");
      z = op("Reshape", {z, ints(base + "/merge_shape", merged)}, merged, t, base + "/merge");
      z = slice(z, std::vector<int64_t>(sp, 0), ends, axes, std::vector<int64_t>(sp, 1), stuffed,
                base + "/trim");
    }
    // 2. Pad (or crop) to what a stride-1 convolution needs.
    Shape zs = z->shape();
    std::vector<int64_t> cropStart(sp), cropEnd(sp), padStart(sp), padEnd(sp), axes(sp);
    bool crop = false, pad = false;
    for (size_t d = 0; d < sp; ++d) {
      int64_t k = (ws[2 + d] - 1) * dil[d];
      int64_t before = k - padBegin[d];
      int64_t after = ys[2 + d] + k - before - zs[2 + d];
      axes[d] = static_cast<int64_t>(2 + d);
      cropStart[d] = std::max<int64_t>(0, -before);
      cropEnd[d] = zs[2 + d] - std::max<int64_t>(0, -after);
      padStart[d] = std::max<int64_t>(0, before);
      padEnd[d] = std::max<int64_t>(0, after);
      crop = crop || cropStart[d] > 0 || cropEnd[d] < zs[2 + d];
      pad = pad || padStart[d] > 0 || padEnd[d] > 0;
    }
    if (crop) {
      Shape cs = zs;
      for (size_t d = 0; d < sp; ++d)
        cs[2 + d] = cropEnd[d] - cropStart[d];
      z = slice(z, cropStart, cropEnd, axes, std::vector<int64_t>(sp, 1), cs, base + "/crop");
    }
    if (pad) {
      Shape ps = z->shape();
      std::vector<int64_t> all(2 * (2 + sp), 0);
      for (size_t d = 0; d < sp; ++d) {
        ps[2 + d] += padStart[d] + padEnd[d];
        all[2 + d] = padStart[d];
        all[(2 + sp) + 2 + d] = padEnd[d];
      }
      z = op("Pad", {z, ints(base + "/pads", all)}, ps, t, base + "/pad");
    }
    // 3. Weights [C, M/g, k...] -> [g, C/g, M/g, k...] -> [g, M/g, C/g, k...]
    //    -> [M, C/g, k...], flipped over the spatial axes.
    Shape grouped{group, C / group, M / group}, swapped{group, M / group, C / group},
        convW{M, C / group};
    std::vector<int64_t> perm{0, 2, 1};
    for (size_t d = 0; d < sp; ++d) {
      grouped.push_back(ws[2 + d]);
      swapped.push_back(ws[2 + d]);
      convW.push_back(ws[2 + d]);
      perm.push_back(static_cast<int64_t>(3 + d));
    }
    Value *v = op("Reshape", {w, ints(base + "/weight_groups", grouped)}, grouped, w->dtype(),
                  base + "/weight_groups");
    v = op("Transpose", {v}, swapped, w->dtype(), base + "/weight_swap",
           {{"perm", Attribute::ofInts(perm)}});
    v = op("Reshape", {v, ints(base + "/weight_shape", convW)}, convW, w->dtype(),
           base + "/weight_merge");
    v = slice(v, std::vector<int64_t>(sp, -1),
              std::vector<int64_t>(sp, std::numeric_limits<int64_t>::min()), axes,
              std::vector<int64_t>(sp, -1), convW, base + "/weight_flip");
    // 4. The stride-1 convolution.
    std::vector<Value *> inputs{z, v};
    if (bias)
      inputs.push_back(bias);
    Value *y = op("Conv", inputs, ys, t, base + "/conv",
                  {{"dilations", Attribute::ofInts(dil)}, {"group", Attribute::ofInt(group)}});
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
                     "Rewrite InstanceNormalization, nearest and linear Resize and "
                     "ConvTranspose into ops that have kernels and gradient rules",
                     {},
                     "",
                     [](const PassOptions &) { return std::make_unique<DecomposePass>(); }});
}

} // namespace ampc
