//===- Autodiff.cpp - The autodiff pass: append the backward graph ---------===//
//
// Reverse-mode differentiation over the IR, as ONNX Runtime's gradient graph
// builder does it:
//   1. pick the loss and the parameters;
//   2. keep the nodes that lie on a path from a parameter to the loss, where a
//      path only follows the operands a rule declares differentiable (integer
//      operands, shapes and indices stop gradients);
//   3. visit those nodes in reverse order; each node's rule turns the
//      gradients of its results into gradients of its operands. A value used
//      several times gets one Sum of its partial gradients.
// The seed is a graph input `<loss>_grad` with default 1.0, so that loss
// scaling can feed it, and every parameter's gradient becomes a graph output
// `<parameter>_grad`.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Autodiff.h"

#include "ampc/IR/IdMap.h"
#include "ampc/ONNX/TypeInference.h"
#include "ampc/Passes/Passes.h"
#include "ampc/Support/Error.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace ampc {

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

bool GradientRule::isDifferentiable(unsigned input) const {
  if (!differentiableInputs.empty() && differentiableInputs[0] == kAllOperands)
    return true;
  return std::find(differentiableInputs.begin(), differentiableInputs.end(), input) !=
         differentiableInputs.end();
}

const GradientRegistry &GradientRegistry::get() {
  static const GradientRegistry registry = [] {
    GradientRegistry r;
    registerElementwiseGradients(r);
    registerNNGradients(r);
    registerTensorGradients(r);
    registerLossGradients(r);
    return r;
  }();
  return registry;
}

void GradientRegistry::add(std::string opType, std::vector<unsigned> differentiableInputs,
                           GradientFn build) {
  GradientRule rule{opType, std::move(differentiableInputs), std::move(build)};
  rules_[opType] = std::move(rule);
}

const GradientRule *GradientRegistry::lookup(const Node &n) const {
  if (!n.domain().empty())
    return nullptr;
  auto it = rules_.find(n.opType());
  return it == rules_.end() ? nullptr : &it->second;
}

std::vector<std::string> GradientRegistry::ops() const {
  std::vector<std::string> out;
  for (const auto &[name, rule] : rules_)
    out.push_back(name);
  return out;
}

//===----------------------------------------------------------------------===//
// GradientBuilder
//===----------------------------------------------------------------------===//

GradientBuilder::GradientBuilder(Graph &g, Node &node, std::vector<Value *> outputGrads,
                                 std::vector<bool> wantedInputGrads)
    : g_(g), node_(node), outputGrads_(std::move(outputGrads)),
      wanted_(std::move(wantedInputGrads)), inputGrads_(node.numInputs()) {}

Value *GradientBuilder::fail(const llvm::Twine &msg) {
  if (error_.empty())
    error_ = msg.str();
  return nullptr;
}

void GradientBuilder::setGrad(unsigned i, Value *grad) {
  if (!grad) {
    fail("no gradient given for operand " + llvm::Twine(i));
    return;
  }
  if (i >= inputGrads_.size()) {
    fail("gradient for operand " + llvm::Twine(i) + " of a node with " +
         llvm::Twine(inputGrads_.size()) + " operands");
    return;
  }
  inputGrads_[i].push_back(grad);
}

const Tensor *GradientBuilder::constantData(const Value *v) {
  if (!v)
    return nullptr;
  if (v->isConstant())
    return v->data();
  if (v->producer() && v->producer()->is("Constant"))
    return v->producer()->getTensor("value");
  return nullptr;
}

Value *GradientBuilder::dYOrZeros(unsigned i) {
  if (Value *d = dY(i))
    return d;
  if (!y(i))
    return fail("result " + llvm::Twine(i) +
                " is omitted, so there is no shape for its zero gradient");
  return zerosLike(y(i));
}

Value *GradientBuilder::savedOutput(unsigned i, const std::string &what) {
  if (Value *v = node_.output(i))
    return v;
  if (i < node_.numOutputs())
    return fail("result " + llvm::Twine(i) + " (" + what +
                ") is omitted in the middle of the results and cannot be requested");
  while (node_.numOutputs() < i)
    node_.addOutput("", TensorType());
  Value *v = node_.addOutput(node_.displayName() + "_" + what, TensorType(DType::F32, {}));
  auto types = inferNodeTypes(node_);
  if (!types) {
    fail("requesting result " + llvm::Twine(i) + ": " + llvm::toString(types.takeError()));
    return v;
  }
  v->setType((*types)[i]);
  return v;
}

std::string GradientBuilder::nodeName(const std::string &opType) {
  unsigned k = opCounts_[opType]++;
  return node_.displayName() + "_Grad/" + opType + (k ? "_" + std::to_string(k) : "");
}

Node *GradientBuilder::emit(const std::string &opType, const std::vector<Value *> &inputs,
                            Attrs attrs, const std::vector<bool> &wanted,
                            const std::string &domain) {
  std::vector<TensorType> types;
  for (bool w : wanted)
    types.push_back(w ? TensorType(DType::F32, {}) : TensorType());
  std::vector<std::string> names(wanted.size());
  Node *n = g_.createNode(opType, inputs, types, std::move(attrs), nodeName(opType), domain, names);
  emitted_.push_back(n);
  auto inferred = inferNodeTypes(*n);
  if (!inferred) {
    // Keep going with a plausible type so the rule can finish; the error
    // aborts the pass once it returns.
    fail(llvm::toString(inferred.takeError()));
    TensorType fallback = inputs.empty() || !inputs[0] ? TensorType(DType::F32, {})
                                                       : inputs[0]->type();
    for (Value *v : n->outputs())
      if (v)
        v->setType(fallback);
    return n;
  }
  for (unsigned i = 0; i < n->numOutputs(); ++i)
    if (Value *v = n->output(i))
      v->setType((*inferred)[i]);
  return n;
}

Value *GradientBuilder::op(const std::string &opType, const std::vector<Value *> &inputs,
                           Attrs attrs) {
  return emit(opType, inputs, std::move(attrs), {true}, "")->output(0);
}

std::vector<Value *> GradientBuilder::ops(const std::string &opType,
                                          const std::vector<Value *> &inputs, Attrs attrs,
                                          const std::vector<bool> &wanted,
                                          const std::string &domain) {
  return emit(opType, inputs, std::move(attrs), wanted, domain)->outputs();
}

Value *GradientBuilder::ampc(const std::string &opType, const std::vector<Value *> &inputs,
                             Attrs attrs) {
  return emit(opType, inputs, std::move(attrs), {true}, std::string(kAmpcDomain))->output(0);
}

Value *GradientBuilder::constant(Tensor t) {
  return g_.addInitializer(g_.uniqueName(node_.displayName() + "_Grad/const"), std::move(t),
                           /*constant=*/true);
}

Value *GradientBuilder::scalarLike(double v, const Value *like) {
  return constant(Tensor::scalar(like->dtype(), v));
}

Value *GradientBuilder::ints(const std::vector<int64_t> &values) {
  return constant(Tensor::int64Vector(values));
}

Value *GradientBuilder::zerosLike(const Value *like) {
  std::vector<double> zero{0.0};
  Tensor value = Tensor::fromDoubles(TensorType(like->dtype(), {1}), zero);
  return op("ConstantOfShape", {ints(like->shape())},
            {{"value", Attribute::ofTensor(std::move(value))}});
}

Value *GradientBuilder::scale(Value *a, double c) {
  if (c == 1.0)
    return a;
  return mul(a, scalarLike(c, a));
}

Value *GradientBuilder::reshape(Value *v, const Shape &shape) {
  if (v->shape() == shape)
    return v;
  return op("Reshape", {v, ints(shape)});
}

Value *GradientBuilder::transpose(Value *v, const std::vector<int64_t> &perm) {
  return op("Transpose", {v}, {{"perm", Attribute::ofInts(perm)}});
}

Value *GradientBuilder::transposeLast2(Value *v) {
  int64_t r = v->type().rank();
  std::vector<int64_t> perm(r);
  for (int64_t i = 0; i < r; ++i)
    perm[i] = i;
  std::swap(perm[r - 1], perm[r - 2]);
  return transpose(v, perm);
}

Value *GradientBuilder::cast(Value *v, DType to) {
  if (v->dtype() == to)
    return v;
  return op("Cast", {v}, {{"to", Attribute::ofInt(dtypeToOnnx(to))}});
}

Value *GradientBuilder::reduceSum(Value *v, const std::vector<int64_t> &axes, bool keepDims) {
  // Opset 13+ (checked by the pass): the axes are an operand.
  return op("ReduceSum", {v, ints(axes)}, {{"keepdims", Attribute::ofInt(keepDims ? 1 : 0)}});
}

Value *GradientBuilder::expand(Value *v, const Shape &shape) {
  if (v->shape() == shape)
    return v;
  return op("Expand", {v, ints(shape)});
}

Value *GradientBuilder::sumToShape(Value *grad, const Shape &shape) {
  const Shape &from = grad->shape();
  if (from == shape)
    return grad;
  int64_t lead = static_cast<int64_t>(from.size()) - static_cast<int64_t>(shape.size());
  if (lead < 0)
    return fail("cannot reduce a gradient of shape " + shapeStr(from) + " to " + shapeStr(shape));
  // Axes along which the value was broadcast; size-1 axes need no sum.
  std::vector<int64_t> axes;
  for (int64_t a = 0; a < static_cast<int64_t>(from.size()); ++a) {
    bool broadcast = a < lead || shape[a - lead] == 1;
    if (broadcast && from[a] != 1)
      axes.push_back(a);
  }
  if (axes.empty())
    return reshape(grad, shape);
  // Only leading axes to sum (a bias): drop them in the sum itself.
  bool leadingOnly = axes.back() < lead;
  return reshape(reduceSum(grad, axes, /*keepDims=*/!leadingOnly), shape);
}

GradientBuilder::Attrs GradientBuilder::forwardAttrs(const std::vector<std::string> &names) const {
  Attrs out;
  for (const std::string &name : names)
    if (const Attribute *a = node_.attr(name))
      out[name] = *a;
  return out;
}

//===----------------------------------------------------------------------===//
// The transformation
//===----------------------------------------------------------------------===//

namespace {

std::string label(const Node &n) {
  return "node '" + n.displayName() + "' (" + n.qualifiedOpType() + ")";
}

bool carriesGradient(const Value *v) { return v && isFloat(v->dtype()); }

bool isScalarFloat(const Value *v) { return isFloat(v->dtype()) && v->type().numElements() == 1; }

/// Whether a gradient flows through operand i of n: a float operand the rule
/// declares differentiable. Nodes without a rule pass gradients through every
/// float operand, so that the analysis finds them and reports them.
bool isGradientEdge(const Node &n, unsigned i, const GradientRule *rule) {
  return carriesGradient(n.input(i)) && (!rule || rule->isDifferentiable(i));
}

llvm::Expected<Value *> findLoss(const Graph &g, const std::string &name) {
  if (!name.empty()) {
    Value *v = g.findValue(name);
    if (!v)
      return makeError("loss '" + name + "' is not a value of the graph");
    if (!isScalarFloat(v))
      return makeError("loss '" + name + "' is " + v->type().str() +
                       ": it must be a float scalar or one-element tensor");
    return v;
  }
  std::vector<Value *> candidates;
  std::string outputs;
  for (Value *v : g.outputs()) {
    outputs += (outputs.empty() ? "" : ", ") + v->name() + " " + v->type().str();
    if (isScalarFloat(v) && std::find(candidates.begin(), candidates.end(), v) == candidates.end())
      candidates.push_back(v);
  }
  if (candidates.size() == 1)
    return candidates[0];
  if (candidates.empty())
    return makeError("no scalar float graph output to use as the loss (outputs: " + outputs +
                     "); name one with --loss");
  std::string names;
  for (Value *v : candidates)
    names += (names.empty() ? "'" : ", '") + v->name() + "'";
  return makeError("several scalar float graph outputs could be the loss (" + names +
                   "); choose one with --loss");
}

class Differentiator {
public:
  Differentiator(Graph &g, const AutodiffOptions &opts, PassContext *ctx)
      : g_(g), opts_(opts), ctx_(ctx), registry_(GradientRegistry::get()) {}

  llvm::Expected<AutodiffResult> run();

private:
  void markUseful();
  llvm::Error selectParameters();
  void warnAboutBufferLikeParameters();
  /// The parameters came from the model's kTrainableParametersKey list.
  bool fromModel_ = false;
  void markVaried();
  llvm::Error checkActiveNodes();
  llvm::Error buildBackward();
  llvm::Error differentiateNode(Node *n);
  Value *finalGradient(Value *v);
  llvm::Error emitParameterGradients();
  void rename(Value *v, const std::string &name);

  bool isActive(const Value *v) const {
    return v && useful_.lookup(v) && varied_.lookup(v) && carriesGradient(v);
  }

  Graph &g_;
  const AutodiffOptions &opts_;
  PassContext *ctx_;
  const GradientRegistry &registry_;

  Value *loss_ = nullptr;
  std::vector<Node *> order_;
  // Per value, as arrays by Value::id() (hash sets and maps of value
  // pointers were a tenth of autodiff's cache misses on large graphs).
  ValueIdMap<char> useful_, varied_;
  std::vector<Value *> params_;
  std::vector<Node *> active_;
  /// Partial gradients of each value, and the gradient once summed.
  ValueIdMap<std::vector<Value *>> partials_;
  ValueIdMap<Value *> final_{nullptr};
  /// Values created by rules that do not have a gradient's name yet.
  ValueIdMap<char> fresh_;
  AutodiffResult result_;
};

/// Useful values: those the loss depends on through differentiable operands.
void Differentiator::markUseful() {
  useful_[loss_] = 1;
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    Node *n = *it;
    auto outs = n->outputs();
    if (std::none_of(outs.begin(), outs.end(), [&](Value *v) { return v && useful_.lookup(v); }))
      continue;
    const GradientRule *rule = registry_.lookup(*n);
    for (unsigned i = 0; i < n->numInputs(); ++i)
      if (isGradientEdge(*n, i, rule))
        useful_[n->input(i)] = 1;
  }
}

llvm::Error Differentiator::selectParameters() {
  // Running statistics are state updated by the forward pass, never trained.
  std::set<const Value *> runningStats;
  for (Node *n : order_)
    if (n->is("BatchNormalization"))
      for (unsigned i : {3u, 4u})
        if (n->input(i))
          runningStats.insert(n->input(i));

  auto findParameter = [&](const std::string &name, const char *option) -> llvm::Expected<Value *> {
    Value *v = g_.findValue(name);
    if (!v || !v->isParameter())
      return makeError(std::string(option) + ": '" + name + "' is not a float parameter initializer");
    if (runningStats.count(v))
      return makeError(std::string(option) + ": '" + name +
                       "' is a BatchNormalization running statistic, not a trainable parameter");
    return v;
  };

  std::set<const Value *> frozen;
  for (const std::string &name : opts_.freeze) {
    auto v = findParameter(name, "--freeze");
    if (!v)
      return v.takeError();
    frozen.insert(*v);
  }

  bool all = opts_.params.empty() || (opts_.params.size() == 1 && opts_.params[0] == "all");
  std::set<const Value *> requested;
  for (const std::string &name : all ? std::vector<std::string>{} : opts_.params) {
    auto v = findParameter(name, "--params");
    if (!v)
      return v.takeError();
    requested.insert(*v);
  }
  // A model from ampc.export names the parameters torch trains; names the
  // graph no longer has (parameters the loss does not use) are skipped.
  auto listed = g_.metadata.find(kTrainableParametersKey);
  fromModel_ = all && listed != g_.metadata.end();
  if (fromModel_) {
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(listed->second).split(names, ',', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef name : names)
      if (Value *v = g_.findValue(name.str()); v && v->isParameter())
        requested.insert(v);
  }
  for (Value *v : g_.initializers()) {
    if (!v->isParameter() || runningStats.count(v) || frozen.count(v))
      continue;
    if (fromModel_ ? requested.count(v) && useful_.lookup(v)
                   : all ? useful_.lookup(v) : requested.count(v))
      params_.push_back(v);
  }
  if (params_.empty())
    return makeError("loss '" + loss_->name() + "' depends on no trainable parameter");
  if (all && !fromModel_)
    warnAboutBufferLikeParameters();
  return llvm::Error::success();
}

/// Names of tensors that are no parameters: constants torch.export lifts
/// (_tensor_constant0) and common buffer names (masks, rotary and positional
/// tables). Exporter names such as val_12 or onnx::MatMul_42 are not enough:
/// constant folding gives them to transposed parameters too.
static bool bufferLikeName(llvm::StringRef name) {
  std::string lower = name.lower();
  llvm::StringRef n(lower);
  if (n.startswith("_tensor_constant"))
    return true;
  for (const char *word : {"mask", "buffer", "inv_freq", "cos_cached", "sin_cached", "rope",
                           "rotary", "pos_enc", "positional_encoding", "causal", "bias_mask"})
    if (n.contains(word))
      return true;
  return false;
}

/// Trained tensors that look like buffers or exporter constants: scalars,
/// buffer-like names, and 0/1 tables (masks). Without ampc.export's list,
/// ampc trains every float initializer the loss depends on, which torch
/// does not; say which ones, and how to leave them out.
void Differentiator::warnAboutBufferLikeParameters() {
  if (!ctx_)
    return;
  std::vector<std::string> suspects;
  for (const Value *v : params_) {
    bool scalar = v->type().numElements() <= 1;
    bool mask = false;
    // A table of zeros and one other value (1, -inf, -1e4...): a mask.
    // Rank 2 at least, so that fresh LayerNorm weights are not taken for one.
    if (const Tensor *t = v->data(); t && v->type().shape.size() >= 2) {
      std::set<double> distinct;
      for (int64_t i = 0, count = t->size(); i < count && distinct.size() <= 2; ++i)
        distinct.insert(t->getDouble(i));
      mask = distinct.size() == 2 && distinct.count(0.0);
    }
    if (scalar || mask || bufferLikeName(v->name()))
      suspects.push_back(v->name());
  }
  if (suspects.empty())
    return;
  ctx_->warnings.push_back(
      "autodiff: " + std::to_string(suspects.size()) +
      (suspects.size() == 1 ? " trained initializer looks like a buffer or an exporter constant, "
                              : " trained initializers look like buffers or exporter constants, ") +
      "which torch does not train: " + llvm::join(suspects, ", ") + " (leave them out with --freeze=" +
      llvm::join(suspects, ",") + ", or export with ampc.export, which lists the parameters)");
}

/// Varied values: those that depend on a parameter through differentiable operands.
void Differentiator::markVaried() {
  for (const Value *p : params_)
    varied_[p] = 1;
  for (Node *n : order_) {
    const GradientRule *rule = registry_.lookup(*n);
    bool depends = false;
    for (unsigned i = 0; i < n->numInputs() && !depends; ++i)
      depends = isGradientEdge(*n, i, rule) && varied_.lookup(n->input(i));
    if (!depends)
      continue;
    for (Value *v : n->outputs())
      if (carriesGradient(v))
        varied_[v] = 1;
  }
}

llvm::Error Differentiator::checkActiveNodes() {
  for (Node *n : order_) {
    auto outs = n->outputs();
    if (std::none_of(outs.begin(), outs.end(), [&](Value *v) { return isActive(v); }))
      continue;
    const GradientRule *rule = registry_.lookup(*n);
    if (!rule)
      return makeError(label(*n) + " has no gradient rule, and it lies on a path from a "
                                   "parameter to loss '" + loss_->name() + "'");
    for (unsigned i = 0; i < n->numInputs(); ++i) {
      Value *in = n->input(i);
      if (carriesGradient(in) && !rule->isDifferentiable(i) && varied_.lookup(in))
        return makeError(label(*n) + ": operand " + std::to_string(i) + " ('" + in->name() +
                         "') depends on a parameter, but the rule has no gradient for it");
    }
    active_.push_back(n);
  }
  return llvm::Error::success();
}

void Differentiator::rename(Value *v, const std::string &name) {
  g_.renameValue(v, name);
  fresh_[v] = 0;
}

/// The gradient of v: its only partial, or the Sum of its partials.
Value *Differentiator::finalGradient(Value *v) {
  if (Value *done = final_.lookup(v))
    return done;
  if (partials_.lookup(v).empty())
    return nullptr;
  std::vector<Value *> &parts = partials_[v];
  std::string name = v->name() + "_grad";
  Value *grad = parts[0];
  if (parts.size() == 1) {
    if (fresh_.lookup(grad))
      rename(grad, name);
  } else {
    for (size_t k = 0; k < parts.size(); ++k)
      if (fresh_.lookup(parts[k]))
        rename(parts[k], name + "_" + std::to_string(k));
    Node *sum = g_.createNode("Sum", parts, {v->type()}, {}, g_.uniqueName(name + "/Sum"), "",
                              {name});
    grad = sum->output(0);
  }
  final_[v] = grad;
  return grad;
}

llvm::Error Differentiator::differentiateNode(Node *n) {
  const GradientRule *rule = registry_.lookup(*n);
  std::vector<Value *> outGrads(n->numOutputs(), nullptr);
  for (unsigned i = 0; i < n->numOutputs(); ++i)
    if (Value *out = n->output(i); isActive(out))
      outGrads[i] = finalGradient(out);
  std::vector<bool> wanted(n->numInputs(), false);
  for (unsigned i = 0; i < n->numInputs(); ++i)
    wanted[i] = isGradientEdge(*n, i, rule) && isActive(n->input(i));

  GradientBuilder b(g_, *n, outGrads, wanted);
  rule->build(b);
  if (b.failed())
    return makeError(label(*n) + ": gradient rule: " + b.errorMessage());
  for (Node *e : b.emittedNodes())
    for (Value *v : e->outputs())
      if (v)
        fresh_[v] = 1;
  for (unsigned i = 0; i < n->numInputs(); ++i) {
    if (!wanted[i])
      continue;
    Value *in = n->input(i);
    const auto &grads = b.inputGrads()[i];
    if (grads.empty())
      return makeError(label(*n) + ": the gradient rule gives no gradient for operand " +
                       std::to_string(i) + " ('" + in->name() + "')");
    for (Value *grad : grads) {
      if (grad->type() != in->type())
        return makeError(label(*n) + ": the gradient rule gives " + grad->type().str() +
                         " for operand " + std::to_string(i) + " ('" + in->name() + "') of type " +
                         in->type().str());
      partials_[in].push_back(grad);
    }
  }
  return llvm::Error::success();
}

llvm::Error Differentiator::buildBackward() {
  std::string seedName = loss_->name() + "_grad";
  if (g_.findValue(seedName))
    return makeError("the name of the loss gradient '" + seedName + "' is already taken");
  Tensor one(loss_->type());
  one.setDouble(0, 1.0);
  result_.seed = g_.addInputWithDefault(seedName, std::move(one));
  partials_[loss_].push_back(result_.seed);
  final_[loss_] = result_.seed;

  g_.setInsertionPoint(nullptr);
  for (auto it = active_.rbegin(); it != active_.rend(); ++it)
    if (auto err = differentiateNode(*it))
      return err;
  return llvm::Error::success();
}

llvm::Error Differentiator::emitParameterGradients() {
  for (Value *p : params_) {
    std::string name = p->name() + "_grad";
    Value *grad = finalGradient(p);
    if (!grad) {
      // Requested by name but the loss does not depend on it: its gradient is 0.
      if (ctx_)
        ctx_->remarks.push_back("autodiff: loss '" + loss_->name() + "' does not depend on '" +
                                p->name() + "'; its gradient is zero");
      Tensor zero = Tensor::fromDoubles(TensorType(p->dtype(), {1}), std::vector<double>{0.0});
      Value *shape = g_.addInitializer(g_.uniqueName(name + "/shape"),
                                       Tensor::int64Vector(p->shape()), /*constant=*/true);
      grad = g_.createNode("ConstantOfShape", {shape}, {p->type()},
                           {{"value", Attribute::ofTensor(std::move(zero))}},
                           g_.uniqueName(name + "/zeros"), "", {name})
                 ->output(0);
    } else if (grad->name() != name) {
      // The gradient passed through unchanged from another value (or the
      // seed): give the parameter's gradient its own name.
      grad = g_.createNode("Identity", {grad}, {p->type()}, {}, g_.uniqueName(name + "/Identity"),
                           "", {name})
                 ->output(0);
    }
    if (grad->name() != name)
      return makeError("cannot name the gradient of '" + p->name() + "' '" + name +
                       "': the name is already taken");
    g_.addOutput(grad);
    result_.gradients.push_back({p, grad});
  }
  return llvm::Error::success();
}

llvm::Expected<AutodiffResult> Differentiator::run() {
  // The rules emit opset-13 forms (ReduceSum and Split take operands).
  if (g_.opsetVersion() < 13)
    return makeError("autodiff needs ONNX opset 13 or newer, the graph has opset " +
                     std::to_string(g_.opsetVersion()));
  auto loss = findLoss(g_, opts_.loss);
  if (!loss)
    return loss.takeError();
  loss_ = *loss;
  result_.loss = loss_;
  if (!g_.topologicalSort())
    return makeError("the graph has a cycle");
  order_ = g_.nodes();
  markUseful();
  if (auto err = selectParameters())
    return err;
  bool all = opts_.params.empty() || (opts_.params.size() == 1 && opts_.params[0] == "all");
  result_.parameterSource = fromModel_ ? "the model's " + std::string(kTrainableParametersKey)
                            : all      ? std::string("every float initializer the loss uses")
                                       : std::string("--params");
  markVaried();
  if (auto err = checkActiveNodes())
    return err;
  if (auto err = buildBackward())
    return err;
  if (auto err = emitParameterGradients())
    return err;
  return result_;
}

} // namespace

llvm::Expected<AutodiffResult> differentiate(Graph &g, const AutodiffOptions &opts,
                                             PassContext *ctx) {
  return Differentiator(g, opts, ctx).run();
}

//===----------------------------------------------------------------------===//
// Pass
//===----------------------------------------------------------------------===//

namespace {

class AutodiffPass : public Pass {
public:
  explicit AutodiffPass(AutodiffOptions opts) : opts_(std::move(opts)) {}
  llvm::StringRef name() const override { return "autodiff"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    size_t nodesBefore = g.numNodes();
    auto result = differentiate(g, opts_, &ctx);
    if (!result)
      return result.takeError();
    std::string text = "loss: " + result->loss->name() +
                       " (seed input '" + result->seed->name() + "', default 1.0)\n" +
                       "backward nodes: " + std::to_string(g.numNodes() - nodesBefore) + "\n" +
                       "gradients: " + std::to_string(result->gradients.size()) + "\n";
    PassContext::Trained trained;
    for (const auto &[param, grad] : result->gradients) {
      text += "  " + grad->name() + " " + grad->type().str() + "\n";
      ++trained.tensors;
      trained.elements += param->type().numElements();
    }
    // As sum(p.numel() for p in model.parameters() if p.requires_grad).
    text += "trained parameters: " + std::to_string(trained.tensors) + " tensors, " +
            std::to_string(trained.elements) + " elements (" +
            result->parameterSource + ")\n";
    ctx.trained = trained;
    ctx.addReport("autodiff", std::move(text));
    return llvm::Error::success();
  }

private:
  AutodiffOptions opts_;
};

} // namespace

void registerAutodiffPass() {
  PassRegistry::add(
      {"autodiff",
       "Append the gradients of a scalar loss with respect to the trainable parameters",
       {{"loss", OptionType::String,
         "The loss to differentiate (default: the only scalar float graph output)", "", {}},
        {"params", OptionType::List, "Parameters to train: all, or a list of names", "all", {}},
        {"freeze", OptionType::List, "Parameters not to train", "", {}}},
       "loss",
       [](const PassOptions &o) {
         AutodiffOptions opts;
         opts.loss = o.getString("loss");
         opts.params = o.getList("params");
         opts.freeze = o.getList("freeze");
         return std::make_unique<AutodiffPass>(std::move(opts));
       }});
}

} // namespace ampc
