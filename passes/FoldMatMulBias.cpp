//===- FoldMatMulBias.cpp - A Linear's bias added by its GEMM --------------===//
//
// PyTorch exports a Linear on a batch of sequences as MatMul(x, W^T) and then
// Add(b, .): the lowering runs the Add as an elementwise step of its own,
// which reads and writes the whole product again, unless an elementwise
// reader fuses it (a GELU, a residual Add). Where nothing fuses it (attention's
// Q/K/V projection, read by a Split), this pass makes the pair one Gemm with
// the bias as C, on the rows of x:
//
//   y = MatMul(x[..., K], B[K, N]); z = Add(y, c[N])
//   ->  z = Reshape(Gemm(Reshape(x, [-1, K]), B, c), shape(z))
//
// B read through a swap of the last two axes (W^T) becomes Gemm's transB on
// W. The Reshapes are views, no copy. In fp32 the values are the same: the
// backends add C to the fp32 product. In fp16/bf16 the product is no longer
// rounded before the bias is added (as PyTorch's addmm does it): one rounding
// instead of two. Runs last in --train and before a plan is emitted.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"

#include <algorithm>

namespace ampc {

namespace {

/// Readers that would not fuse the Add into an elementwise step: the bias is
/// worth moving into the GEMM only for them.
bool movesDataOnly(const Node &n) {
  static const char *const kOps[] = {"Split",  "Reshape", "Transpose", "Slice",
                                     "Concat", "Flatten", "Squeeze",   "Unsqueeze",
                                     "MatMul", "Gemm",    "Gather",    "Identity"};
  for (const char *op : kOps)
    if (n.is(op))
      return true;
  return false;
}

/// W when `b` is a swap of the last two axes of a matrix W; nullptr otherwise.
Value *swappedMatrix(const Value *b) {
  const Node *t = b->producer();
  if (!t || !swapsLastTwoAxes(*t) || t->input(0)->shape().size() != 2)
    return nullptr;
  return t->input(0);
}

/// The Add's operand that is a bias of the MatMul result `y`: a float vector
/// [N] or [1, N] of y's type, N = y's last dim, the sum shaped like y.
bool isBiasOf(const Value *c, const Value *y, const Value *sum) {
  const Shape &s = c->shape();
  int64_t n = y->shape().back();
  return c->dtype() == y->dtype() && sum->dtype() == y->dtype() && sum->shape() == y->shape() &&
         ((s.size() == 1 && s[0] == n) || (s.size() == 2 && s[0] == 1 && s[1] == n));
}

/// Whether MatMul `mm` and Add `add` reading only its result fold into a Gemm.
bool foldable(const Node &mm, const Node &add, const Value *bias) {
  const Value *y = mm.output(), *x = mm.input(0), *b = mm.input(1);
  if (!x || !b || !y || y->uses().size() != 1 || y->isGraphOutput() || !isFloat(y->dtype()) ||
      x->shape().size() < 2 || b->shape().size() != 2 || add.output()->isGraphOutput() ||
      !add.output()->hasUses() || !isBiasOf(bias, y, add.output()))
    return false;
  // A transposed x would be a copy: the lowering folds it into MatMuls only.
  if (const Node *px = x->producer(); px && px->is("Transpose"))
    return false;
  for (const Use &u : add.output()->uses())
    if (!movesDataOnly(*u.user))
      return false;
  return true;
}

Value *reshapeBefore(Graph &g, Node *pos, Value *v, const Shape &shape, const std::string &name) {
  Graph::InsertionGuard guard(g, pos);
  Value *dims = g.addInitializer(g.uniqueName(name + "/shape"), Tensor::int64Vector(shape),
                                 /*constant=*/true);
  return g
      .createNode("Reshape", {v, dims}, {TensorType(v->dtype(), shape)}, {}, g.uniqueName(name))
      ->output();
}

void fold(Graph &g, Node *mm, Node *add, Value *bias) {
  Value *x = mm->input(0), *b = mm->input(1);
  const Shape &xs = x->shape();
  int64_t k = xs.back(), rows = numElements(xs) / std::max<int64_t>(k, 1);
  int64_t n = mm->output()->shape().back();
  std::string name = add->displayName();
  Value *x2 = xs.size() == 2 ? x : reshapeBefore(g, add, x, {rows, k}, name + "/rows");
  std::map<std::string, Attribute> attrs;
  Value *w = swappedMatrix(b);
  if (w)
    attrs["transB"] = Attribute::ofInt(1);
  Value *product;
  {
    Graph::InsertionGuard guard(g, add);
    product = g.createNode("Gemm", {x2, w ? w : b, bias}, {TensorType(x->dtype(), {rows, n})},
                           std::move(attrs), g.uniqueName(name + "/gemm"))
                  ->output();
  }
  Value *z = add->output();
  Value *result =
      xs.size() == 2 ? product : reshapeBefore(g, add, product, z->shape(), name + "/unrows");
  z->replaceAllUsesWith(result);
  g.eraseNode(add);
  g.eraseNode(mm);
  // W^T may have had no other reader.
  if (Node *t = b->producer(); w && !b->hasUses() && !b->isGraphOutput())
    g.eraseNode(t);
}

} // namespace

bool foldMatMulBias(Graph &g) {
  bool changed = false;
  for (Node *add : g.nodes()) {
    if (!add->is("Add") || add->numInputs() != 2 || !add->input(0) || !add->input(1))
      continue;
    for (unsigned side = 0; side < 2; ++side) {
      Node *mm = add->input(side)->producer();
      Value *bias = add->input(1 - side);
      if (!mm || !mm->is("MatMul") || !foldable(*mm, *add, bias))
        continue;
      fold(g, mm, add, bias);
      changed = true;
      break;
    }
  }
  return changed;
}

namespace {

class FoldMatMulBiasPass : public Pass {
public:
  llvm::StringRef name() const override { return "fold-matmul-bias"; }
  llvm::Error run(Graph &g, PassContext &) override {
    foldMatMulBias(g);
    return llvm::Error::success();
  }
};

} // namespace

void registerFoldMatMulBiasPass() {
  PassRegistry::add(
      {"fold-matmul-bias",
       "Make a MatMul and the Add of a bias vector that only data movement reads one Gemm with "
       "the bias as C",
       {},
       "",
       [](const PassOptions &) { return std::make_unique<FoldMatMulBiasPass>(); }});
}

} // namespace ampc
