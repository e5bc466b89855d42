//===- Autocast.cpp - fp16/bf16 autocast by TensorFlow-style painting ------===//
//
// Decides for every float node whether it computes in low precision or in
// fp32, then changes types and inserts casts only where neighbours differ.
//
// The decision is TensorFlow auto_mixed_precision's painting (see
// docs/precision-policy.md): ALLOW nodes are low precision; DENY spreads
// downstream through INFER/CLEAR nodes that lead to DENY or INFER nodes;
// INFER/CLEAR nodes lying between ALLOW nodes are painted low; low precision
// spreads through connected CLEAR nodes; a model Cast to fp32 whose consumers
// are all low precision casts to the low type instead.
//
// Which operands of a node follow its compute type comes from the ONNX
// schema: the type parameter ("T") bound by its first float operand. Other
// float operands (BatchNormalization's statistics, Dropout's ratio, Resize's
// scales) keep their types, so the graph still satisfies every schema.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Autocast.h"

#include "ampc/IR/IdMap.h"
#include "ampc/IR/Printer.h"
#include "ampc/ONNX/Schemas.h"
#include "ampc/Passes/Passes.h"
#include "ampc/Support/Error.h"
#include "ampc/rt/ElementMath.h"

#include "onnx/defs/schema.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace ampc {

std::string shortDTypeName(DType t) {
  switch (t) {
  case DType::F16:
    return "fp16";
  case DType::BF16:
    return "bf16";
  case DType::F32:
    return "fp32";
  case DType::F64:
    return "fp64";
  default:
    return std::string(dtypeName(t));
  }
}

namespace {

//===----------------------------------------------------------------------===//
// What the ONNX schema says about a node's float operands
//===----------------------------------------------------------------------===//

/// The operands and results bound to a node's compute type.
struct Signature {
  std::string typeParam;              ///< "T", "T1"...
  std::vector<unsigned> inputs;       ///< operand slots bound to it
  std::vector<unsigned> outputs;      ///< result slots bound to it
  std::vector<std::string> allowed;   ///< "tensor(float16)"...
};

const onnx::OpSchema *schemaOf(const Node &n) {
  registerAmpcSchemas();
  int version = static_cast<int>(n.graph()->opsetVersion(n.domain()));
  if (n.domain() == kAmpcDomain && version == 0)
    version = 1;
  return onnx::OpSchemaRegistry::Schema(n.opType(), version, n.domain());
}

/// The formal parameter of slot i (variadic parameters are last).
const onnx::OpSchema::FormalParameter *
formalOf(const std::vector<onnx::OpSchema::FormalParameter> &params, unsigned i) {
  if (i < params.size())
    return &params[i];
  if (!params.empty() && params.back().GetOption() == onnx::OpSchema::Variadic)
    return &params.back();
  return nullptr;
}

/// The type parameter bound by the first float operand (or, for nodes with
/// no float operand, the first float result), with every slot bound to it.
std::optional<Signature> signatureOf(const Node &n, const onnx::OpSchema &schema) {
  std::map<std::string, const onnx::OpSchema::TypeConstraintParam *> params;
  for (const auto &tc : schema.typeConstraintParams())
    params[tc.type_param_str] = &tc;
  auto paramOf = [&](const std::vector<onnx::OpSchema::FormalParameter> &formals, unsigned i,
                     const Value *v) -> std::string {
    const auto *f = formalOf(formals, i);
    if (!v || !f || !params.count(f->GetTypeStr()))
      return "";
    return f->GetTypeStr();
  };
  std::string typeParam;
  for (unsigned i = 0; i < n.numInputs() && typeParam.empty(); ++i)
    if (n.input(i) && isFloat(n.input(i)->dtype()))
      typeParam = paramOf(schema.inputs(), i, n.input(i));
  for (unsigned i = 0; i < n.numOutputs() && typeParam.empty(); ++i)
    if (n.output(i) && isFloat(n.output(i)->dtype()))
      typeParam = paramOf(schema.outputs(), i, n.output(i));
  if (typeParam.empty())
    return std::nullopt;
  Signature sig;
  sig.typeParam = typeParam;
  sig.allowed = params[typeParam]->allowed_type_strs;
  for (unsigned i = 0; i < n.numInputs(); ++i)
    if (paramOf(schema.inputs(), i, n.input(i)) == typeParam)
      sig.inputs.push_back(i);
  for (unsigned i = 0; i < n.numOutputs(); ++i)
    if (paramOf(schema.outputs(), i, n.output(i)) == typeParam)
      sig.outputs.push_back(i);
  return sig;
}

std::string onnxTypeString(DType t) {
  return "tensor(" + std::string(t == DType::F32 ? "float" : dtypeName(t)) + ")";
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

/// The data of a value that is a compile-time constant (not a parameter).
const Tensor *constantData(const Value *v) {
  if (v->isConstant())
    return v->data();
  const Node *p = v->producer();
  if (p && p->is("Constant") && p->getTensor("value"))
    return p->getTensor("value");
  return nullptr;
}

enum class Loss { None, NotFinite, OutOfRange, FlushedToZero };

/// What storing x in `low` does to it.
Loss lossOf(double x, DType low) {
  if (!std::isfinite(x))
    return Loss::NotFinite;
  double r = roundToDType(x, low);
  if (!std::isfinite(r))
    return Loss::OutOfRange;
  return x != 0 && r == 0 ? Loss::FlushedToZero : Loss::None;
}

/// The same for fp32 elements, from the bits of the runtime's conversion:
/// parameters are scanned whole, and GPT-2's 124M elements through doubles
/// took seconds.
Loss lossOfFloat(float x, DType low) {
  if (!std::isfinite(x))
    return Loss::NotFinite;
  uint16_t bits = low == DType::F16 ? rt::math::floatToHalf(x) : rt::math::floatToBFloat16(x);
  uint16_t expMask = low == DType::F16 ? 0x7C00 : 0x7F80;
  if ((bits & expMask) == expMask)
    return Loss::OutOfRange;
  return x != 0 && (bits & 0x7FFF) == 0 ? Loss::FlushedToZero : Loss::None;
}

/// True when every element of `f` is zero or has a magnitude that `low`
/// holds without overflow or flushing to zero (with margin: the exact test
/// decides the rest). A loop over bits the compiler vectorizes: a model's
/// weights are scanned whole.
bool allSafelyInRange(const float *f, int64_t count, DType low) {
  // F16: 2^-24 (its smallest subnormal) to 65504 (its largest value);
  // BF16: 2^-126 (fp32's smallest normal) to bf16's largest value.
  uint32_t lo = low == DType::F16 ? 0x33800000u : 0x00800000u;
  uint32_t hi = low == DType::F16 ? 0x477FE000u : 0x7F7F0000u;
  uint32_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &f[i], sizeof bits);
    uint32_t mag = bits & 0x7FFFFFFFu;
    bad |= static_cast<uint32_t>(mag != 0 && (mag < lo || mag > hi));
  }
  return bad == 0;
}

/// Why `t` cannot be stored in `low` without changing a value, or nullopt.
std::optional<std::string> unrepresentable(const Tensor &t, DType low) {
  bool floats = t.dtype() == DType::F32 && (low == DType::F16 || low == DType::BF16);
  const float *f = floats ? reinterpret_cast<const float *>(t.data()) : nullptr;
  if (floats && allSafelyInRange(f, t.size(), low))
    return std::nullopt;
  for (int64_t i = 0, count = t.size(); i < count; ++i) {
    Loss loss = floats ? lossOfFloat(f[i], low) : lossOf(t.getDouble(i), low);
    if (loss == Loss::None)
      continue;
    std::string shown = formatFloat(t.getDouble(i), t.dtype());
    std::string lowName = shortDTypeName(low);
    switch (loss) {
    case Loss::NotFinite:
      return "holds " + shown + ", which is not finite";
    case Loss::OutOfRange:
      return "holds " + shown + ", out of " + lowName + " range";
    default:
      return "holds " + shown + ", which " + lowName + " flushes to zero";
    }
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Float nodes and their painting
//===----------------------------------------------------------------------===//

/// How a node takes part in the painting. Fixed nodes stay fp32 without
/// spreading fp32 to their neighbours (they cannot take the low type).
enum class Kind { Allow, Deny, Infer, Clear, Fixed };

Kind kindOf(PrecisionClass c) {
  switch (c) {
  case PrecisionClass::Allow:
    return Kind::Allow;
  case PrecisionClass::Deny:
    return Kind::Deny;
  case PrecisionClass::Infer:
    return Kind::Infer;
  case PrecisionClass::Clear:
    return Kind::Clear;
  }
  return Kind::Deny;
}

struct FloatNode {
  Node *node;
  Signature sig;
  /// The type bound to sig.typeParam in the input graph.
  DType computeType = DType::F32;
  /// Computes in fp32 in the input graph: autocast decides its precision.
  bool candidate = false;
  std::optional<PrecisionClass> listClass;
  Kind kind = Kind::Deny;
  std::string reason;
  bool low = false;
  bool deniedByNeighbour = false;
  std::vector<FloatNode *> preds, succs;
};

/// Whether `v` is a small initializer (a scalar, a broadcast row) whose every
/// element is `want`.
bool isConstantOf(const Value *v, double want) {
  const Tensor *t = v && v->isInitializer() ? v->data() : nullptr;
  if (!t || t->size() == 0 || t->size() > 64)
    return false;
  for (int64_t i = 0; i < t->size(); ++i)
    if (t->getDouble(i) != want)
      return false;
  return true;
}

/// Whether 1 is added to n's result or it is taken from 1 (the tanh form of
/// GELU, x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2): near -1 (or +1)
/// the sum cancels, and in low precision it keeps few or no correct digits.
bool resultJoinsOne(const Node &n) {
  const Value *y = n.output();
  if (!y)
    return false;
  for (const Use &u : y->uses()) {
    const Node *user = u.user;
    if (!(user->is("Add") || user->is("Sub")) || user->numInputs() != 2 || u.operand > 1)
      continue;
    if (isConstantOf(user->input(1 - u.operand), 1.0))
      return true;
  }
  return false;
}

/// Shape and Size read only the type of their operand: any type will do.
bool readsOnlyType(const Node &n) { return n.is("Shape") || n.is("Size"); }

/// Float-to-float casts that keep every value (so casting back is exact).
bool isExactWidening(DType from, DType to) {
  if (!isFloat(from) || !isFloat(to) || dtypeSize(to) <= dtypeSize(from))
    return false;
  return to == DType::F64 || isLowPrecision(from);
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

class Autocaster {
public:
  Autocaster(Graph &g, const AutocastOptions &opts, AutocastResult &result)
      : g_(g), opts_(opts), low_(opts.lowType), result_(result) {}

  llvm::Error run();

private:
  // Analysis.
  llvm::Error checkForcedNodes();
  void collectFloatNodes();
  void classify(FloatNode &f);
  std::optional<std::string> cannotRunLow(const FloatNode &f) const;
  std::optional<std::string> badConstant(const FloatNode &f) const;
  void buildEdges();
  void paint();
  void chooseModelCastTargets();

  // Rewriting.
  void rewrite();
  void rewriteModelCast(Node *cast);
  bool removeIdentityCast(Node *cast);
  void rewriteNode(Node *n);
  void restoreGraphOutputTypes();
  bool mayChangeType(const Value *v) const;
  void shareModelCasts();
  void removeUnusedConstants();
  Value *convert(Value *v, DType t, Node *consumer);
  Value *convertConstant(Value *v, const Tensor &data, DType t);
  void warnIfOverflows(const Value *param, DType t);

  // Report.
  void record();

  std::string lowName() const { return shortDTypeName(low_); }
  std::string listReason(const FloatNode &f) const;
  static std::string quoted(const Node *n) { return "'" + n->displayName() + "'"; }

  Graph &g_;
  const AutocastOptions &opts_;
  DType low_;
  AutocastResult &result_;

  std::vector<std::unique_ptr<FloatNode>> floatNodes_;
  /// By node id: asked of live nodes only (IdMap reads the node).
  NodeIdMap<FloatNode *> floatOf_{nullptr};
  /// Nodes of the input graph in order, with what the report needs of them
  /// (the node may be gone by the report: a model Cast the rewrite removed).
  struct Original {
    const Node *node;
    std::string name, op;
    FloatNode *floatNode = nullptr;
  };
  std::vector<Original> original_;
  /// Model Casts to fp32 that will cast to the low type instead.
  llvm::DenseSet<const Node *> retarget_;
  std::unordered_map<const Node *, std::string> modelCastNotes_;
  NodeIdMap<std::vector<DType>> originalInputTypes_;
  std::vector<DType> originalOutputTypes_;

  /// Initializers and Constant node results converted at compile time.
  std::vector<Value *> convertedConstants_;
  /// (value, type) -> the value converted to that type (castKey). LLVM's
  /// open-addressing tables: autocast looks up every operand of every node.
  llvm::DenseMap<std::pair<const Value *, unsigned>, Value *> cache_;
  static std::pair<const Value *, unsigned> castKey(const Value *v, DType t) {
    return {v, static_cast<unsigned>(t)};
  }
  llvm::DenseSet<const Node *> insertedCasts_, weightCasts_;
  /// Nodes the rewrite has reached (the others come later in the order).
  NodeIdMap<char> rewritten_;
  std::vector<std::string> constantLines_;
};

llvm::Error Autocaster::checkForcedNodes() {
  std::set<std::string> names;
  for (const Node *n : g_.nodes())
    names.insert(n->displayName());
  for (const auto &[name, forced] : opts_.policy.forcedNodes())
    if (!names.count(name))
      return makeError("autocast: " + forced.origin + " names no node '" + name + "'");
  return llvm::Error::success();
}

void Autocaster::collectFloatNodes() {
  for (Node *n : g_.nodes()) {
    original_.push_back({n, n->displayName(), n->qualifiedOpType()});
    if (n->is("Cast") || n->is("Constant") || readsOnlyType(*n))
      continue;
    const onnx::OpSchema *schema = schemaOf(*n);
    if (!schema)
      continue; // the verifier rejects such nodes; nothing to decide here
    auto sig = signatureOf(*n, *schema);
    if (!sig)
      continue;
    auto f = std::make_unique<FloatNode>();
    f->node = n;
    f->sig = std::move(*sig);
    Value *bound = f->sig.inputs.empty() ? n->output(f->sig.outputs.front())
                                         : n->input(f->sig.inputs.front());
    f->computeType = bound->dtype();
    f->candidate = f->computeType == DType::F32;
    floatOf_[n] = f.get();
    original_.back().floatNode = f.get();
    floatNodes_.push_back(std::move(f));
  }
}

/// Ops whose ONNX schemas at opset 17 list float16 but not bfloat16, and
/// which every ampc backend (interpreter, CPU through oneDNN's native bf16
/// convolution, CUDA) runs in bf16 anyway, as PyTorch's CPU autocast runs
/// convolutions in bf16. Opt-in (AutocastOptions::bf16BeyondSchema): the
/// graph is then not checker-valid ONNX, which --emit=onnx of the rewritten
/// graph checks; plans do not care.
bool bf16BeyondSchema(const Node &n) {
  return n.domain().empty() && (n.is("Conv") || n.is("MaxPool") || n.is("AveragePool") ||
                                n.is("GlobalAveragePool") || n.is("GlobalMaxPool"));
}

std::optional<std::string> Autocaster::cannotRunLow(const FloatNode &f) const {
  const Node &n = *f.node;
  if (f.sig.inputs.empty())
    return n.qualifiedOpType() + " sets its float result type by attribute";
  if (low_ == DType::BF16 && opts_.bf16BeyondSchema && bf16BeyondSchema(n))
    return std::nullopt;
  if (std::find(f.sig.allowed.begin(), f.sig.allowed.end(), onnxTypeString(low_)) ==
      f.sig.allowed.end())
    return n.qualifiedOpType() + " has no " + lowName() + " form at opset " +
           std::to_string(g_.opsetVersion(n.domain()));
  return std::nullopt;
}

std::optional<std::string> Autocaster::badConstant(const FloatNode &f) const {
  for (unsigned i : f.sig.inputs) {
    const Value *v = f.node->input(i);
    if (const Tensor *data = constantData(v))
      if (auto why = unrepresentable(*data, low_))
        return "constant '" + v->name() + "' " + *why;
  }
  return std::nullopt;
}

std::string Autocaster::listReason(const FloatNode &f) const {
  if (!f.listClass)
    return "not on any list";
  auto entry = opts_.policy.classify(f.node->qualifiedOpType());
  std::string s = precisionClassName(*f.listClass).str() + " list";
  if (entry && entry->origin != "default")
    s += " (" + entry->origin + ")";
  return s;
}

void Autocaster::classify(FloatNode &f) {
  const Node &n = *f.node;
  if (auto entry = opts_.policy.classify(n.qualifiedOpType()))
    f.listClass = entry->cls;
  const auto &forcedNodes = opts_.policy.forcedNodes();
  auto forced = forcedNodes.find(n.displayName());
  if (!f.candidate) {
    f.kind = Kind::Fixed;
    f.reason = "already " + shortDTypeName(f.computeType) + " in the model";
    if (forced != forcedNodes.end())
      result_.remarks.push_back("node " + quoted(&n) + " (" + forced->second.origin +
                                ") is " + shortDTypeName(f.computeType) +
                                " in the model; left as is");
    return;
  }
  bool forcedLow = forced != forcedNodes.end() && forced->second.lowPrecision;
  if (forced != forcedNodes.end() && !forcedLow) {
    f.kind = Kind::Deny;
    f.reason = "forced fp32 by the user (" + forced->second.origin + ")";
    return;
  }
  if (!forcedLow && (f.listClass == PrecisionClass::Deny || !f.listClass)) {
    f.kind = Kind::Deny;
    f.reason = listReason(f);
    return;
  }
  // Tanh is INFER (a bounded activation, fine in low precision), except
  // where 1 is added to it: the tanh GELU, which PyTorch computes in fp32.
  // A policy that lists Tanh itself decides instead.
  auto tanhEntry = n.is("Tanh") ? opts_.policy.classify(n.qualifiedOpType()) : std::nullopt;
  if (!forcedLow && tanhEntry && tanhEntry->origin == "default" && resultJoinsOne(n)) {
    f.kind = Kind::Deny;
    f.reason = listReason(f) + ", kept fp32: 1 + tanh(x) cancels in low precision (the tanh "
                               "form of GELU)";
    return;
  }
  // Nodes that cannot take the low type stay fp32 without spreading fp32:
  // nothing about their numbers is dangerous.
  if (auto why = cannotRunLow(f)) {
    f.kind = Kind::Fixed;
    f.reason = listReason(f) + ", kept fp32: " + *why;
    if (forcedLow)
      result_.remarks.push_back("node " + quoted(&n) + " stays fp32 although " +
                                forced->second.origin + " asks for " + lowName() + ": " + *why);
    return;
  }
  auto constant = badConstant(f);
  if (forcedLow) {
    if (constant) {
      f.kind = Kind::Deny;
      f.reason = "forced " + lowName() + " by the user (" + forced->second.origin +
                 "), kept fp32: " + *constant;
      result_.remarks.push_back("node " + quoted(&n) + " stays fp32 although " +
                                forced->second.origin + " asks for " + lowName() + ": " +
                                *constant);
      return;
    }
    f.kind = Kind::Allow;
    f.reason = "forced " + lowName() + " by the user (" + forced->second.origin + ")";
    return;
  }
  if (constant) {
    f.kind = Kind::Deny;
    f.reason = listReason(f) + ", kept fp32: " + *constant;
    return;
  }
  f.kind = kindOf(*f.listClass);
  f.reason = listReason(f);
}

void Autocaster::buildEdges() {
  for (const auto &f : floatNodes_) {
    if (!f->candidate)
      continue;
    for (unsigned i : f->sig.inputs) {
      Node *p = f->node->input(i)->producer();
      FloatNode *pred = p ? floatOf_.lookup(p) : nullptr;
      if (!pred || !pred->candidate)
        continue;
      if (std::find(f->preds.begin(), f->preds.end(), pred) != f->preds.end())
        continue;
      f->preds.push_back(pred);
      pred->succs.push_back(f.get());
    }
  }
}

/// Depth-first search from `root` along successors and/or predecessors,
/// entering the neighbours `enter` accepts; `visit(node, parent)` runs once
/// per node reached (parent is nullptr for the root).
void search(FloatNode *root, bool down, bool up, const std::function<bool(FloatNode *)> &enter,
            const std::function<void(FloatNode *, FloatNode *)> &visit) {
  std::vector<std::pair<FloatNode *, FloatNode *>> stack{{root, nullptr}};
  std::unordered_set<FloatNode *> seen{root};
  while (!stack.empty()) {
    auto [top, parent] = stack.back();
    FloatNode *f = top; // clang 14 cannot capture a structured binding
    stack.pop_back();
    visit(f, parent);
    auto push = [&](const std::vector<FloatNode *> &next) {
      for (FloatNode *nb : next)
        if (!seen.count(nb) && enter(nb)) {
          seen.insert(nb);
          stack.push_back({nb, f});
        }
    };
    if (down)
      push(f->succs);
    if (up)
      push(f->preds);
  }
}

void Autocaster::paint() {
  std::vector<FloatNode *> nodes;
  for (const auto &f : floatNodes_)
    if (f->candidate)
      nodes.push_back(f.get());
  auto is = [](FloatNode *f, Kind k) { return f->kind == k; };

  // (1) ALLOW nodes run in low precision.
  std::unordered_set<FloatNode *> low;
  for (FloatNode *f : nodes)
    if (is(f, Kind::Allow))
      low.insert(f);

  // (2) DENY spreads downstream through INFER and CLEAR nodes that lead to
  // a DENY or INFER node through CLEAR nodes.
  std::unordered_set<FloatNode *> feedsDenyOrInfer;
  for (FloatNode *root : nodes) {
    if (!is(root, Kind::Deny) && !is(root, Kind::Infer))
      continue;
    search(
        root, /*down=*/false, /*up=*/true,
        [&](FloatNode *nb) { return is(nb, Kind::Clear) && !feedsDenyOrInfer.count(nb); },
        [&](FloatNode *f, FloatNode *) { feedsDenyOrInfer.insert(f); });
  }
  std::unordered_set<FloatNode *> deny;
  for (FloatNode *root : nodes) {
    if (!is(root, Kind::Deny) || deny.count(root))
      continue;
    search(
        root, /*down=*/true, /*up=*/false,
        [&](FloatNode *nb) { return !deny.count(nb) && feedsDenyOrInfer.count(nb); },
        [&](FloatNode *f, FloatNode *) {
          deny.insert(f);
          if (f == root || is(f, Kind::Deny))
            return;
          f->deniedByNeighbour = true;
          f->reason += ", kept fp32: downstream of fp32 node " + quoted(root->node);
        });
  }

  // (3) INFER and CLEAR nodes between ALLOW nodes (downstream of one and
  // upstream of another) run in low precision: no fp32 island in between.
  std::unordered_set<FloatNode *> downstreamOfAllow;
  for (FloatNode *root : nodes) {
    if (!is(root, Kind::Allow))
      continue;
    search(
        root, /*down=*/true, /*up=*/false,
        [&](FloatNode *nb) {
          return !downstreamOfAllow.count(nb) && !deny.count(nb) &&
                 (is(nb, Kind::Clear) || is(nb, Kind::Infer));
        },
        [&](FloatNode *f, FloatNode *) { downstreamOfAllow.insert(f); });
  }
  std::unordered_set<FloatNode *> between;
  for (FloatNode *root : nodes) {
    if (!is(root, Kind::Allow))
      continue;
    search(
        root, /*down=*/false, /*up=*/true,
        [&](FloatNode *nb) { return downstreamOfAllow.count(nb) && !between.count(nb); },
        [&](FloatNode *f, FloatNode *) {
          between.insert(f);
          if (is(f, Kind::Allow) || low.count(f))
            return;
          low.insert(f);
          f->reason += ", painted " + lowName() + " by neighbours: between low-precision nodes "
                       "(feeds " + quoted(root->node) + ")";
        });
  }

  // (4) Low precision spreads through CLEAR nodes connected to low nodes.
  for (FloatNode *root : nodes) {
    if (!low.count(root))
      continue;
    search(
        root, /*down=*/true, /*up=*/true,
        [&](FloatNode *nb) { return is(nb, Kind::Clear) && !low.count(nb) && !deny.count(nb); },
        [&](FloatNode *f, FloatNode *parent) {
          if (!parent)
            return;
          low.insert(f);
          f->reason += ", painted " + lowName() + " by neighbour " + quoted(parent->node);
        });
  }

  for (FloatNode *f : nodes) {
    f->low = low.count(f) > 0;
    if (f->low || f->deniedByNeighbour)
      continue;
    if (is(f, Kind::Infer))
      f->reason += ", kept fp32: not between low-precision nodes";
    else if (is(f, Kind::Clear))
      f->reason += ", kept fp32: no low-precision neighbour";
  }
}

/// Whether every use of `v` is an operand that a low-precision node reads in
/// its compute type.
bool onlyLowConsumers(const Value *v, const NodeIdMap<FloatNode *> &floatOf) {
  if (!v->hasUses() || v->isGraphOutput())
    return false;
  for (const Use &u : v->uses()) {
    const FloatNode *f = floatOf.lookup(u.user);
    if (!f || !f->low)
      return false;
    const auto &slots = f->sig.inputs;
    if (std::find(slots.begin(), slots.end(), u.operand) == slots.end())
      return false;
  }
  return true;
}

// (6) A model Cast to fp32 whose consumers all run in low precision casts to
// the low type instead (and disappears when its input already has it).
void Autocaster::chooseModelCastTargets() {
  for (Node *n : g_.nodes()) {
    if (!n->is("Cast") || !n->output() || n->output()->dtype() != DType::F32)
      continue;
    if (onlyLowConsumers(n->output(), floatOf_))
      retarget_.insert(n);
  }
}

Value *Autocaster::convertConstant(Value *v, const Tensor &data, DType t) {
  Value *c =
      g_.addInitializer(v->name() + "_" + shortDTypeName(t), data.castTo(t), /*constant=*/true);
  convertedConstants_.push_back(v);
  constantLines_.push_back("constant " + v->name() + " -> " + c->name() + " (" +
                           shortDTypeName(t) + ", converted at compile time)");
  return c;
}

// Parameters change while training, so their weight casts are made anyway;
// but a value that is already out of range deserves a word.
void Autocaster::warnIfOverflows(const Value *param, DType t) {
  if (!isLowPrecision(t) || !param->data())
    return;
  if (auto why = unrepresentable(*param->data(), t))
    result_.remarks.push_back("parameter '" + param->name() + "' " + *why +
                              ": its weight cast changes it");
}

Value *Autocaster::convert(Value *v, DType t, Node *consumer) {
  if (v->dtype() == t)
    return v;
  auto key = castKey(v, t);
  if (auto it = cache_.find(key); it != cache_.end()) {
    // A model Cast found by shareModelCasts may come after this consumer.
    Node *cast = it->second->producer();
    if (consumer && cast && !rewritten_.lookup(cast) && !insertedCasts_.count(cast))
      g_.moveBefore(cast, consumer);
    return it->second;
  }
  Value *c;
  if (const Tensor *data = constantData(v)) {
    c = convertConstant(v, *data, t);
  } else {
    Graph::InsertionGuard guard(g_, consumer);
    std::string name = v->name() + "_" + shortDTypeName(t);
    Node *cast = g_.createNode("Cast", {v}, {v->type().withDType(t)},
                               {{"to", Attribute::ofInt(dtypeToOnnx(t))}},
                               g_.uniqueName(v->name() + "_cast_" + shortDTypeName(t)), "",
                               {name});
    c = cast->output();
    insertedCasts_.insert(cast);
    if (v->isParameter()) {
      weightCasts_.insert(cast);
      warnIfOverflows(v, t);
    }
  }
  cache_[key] = c;
  // Casting back gives the original value, never a round trip.
  cache_[castKey(c, v->dtype())] = v;
  return c;
}

bool Autocaster::removeIdentityCast(Node *cast) {
  Value *in = cast->input(0), *out = cast->output();
  if (!out->isGraphOutput()) {
    out->replaceAllUsesWith(in);
    g_.eraseNode(cast);
    return true;
  }
  // A graph output keeps its name: hand it to the operand when the operand
  // is an intermediate value of its own.
  if (in->kind() != Value::Kind::NodeResult || in->isGraphOutput())
    return false;
  std::string name = out->name();
  g_.renameValue(out, name + ".removed");
  out->replaceAllUsesWith(in);
  g_.eraseNode(cast);
  g_.renameValue(in, name);
  return true;
}

void Autocaster::rewriteModelCast(Node *cast) {
  Value *in = cast->input(0), *out = cast->output();
  if (!in || !out)
    return;
  std::string note = "model cast to " + shortDTypeName(out->dtype());
  if (retarget_.count(cast)) {
    cast->setInt("to", dtypeToOnnx(low_));
    out->setDType(low_);
    note += ", now to " + lowName() + ": all its consumers run in " + lowName();
  }
  if (in->dtype() == out->dtype()) {
    if (removeIdentityCast(cast)) {
      modelCastNotes_[cast] = note + "; removed: its operand is already " +
                              shortDTypeName(in->dtype());
      return;
    }
    note += "; kept to name a graph output (its operand is already " +
            shortDTypeName(in->dtype()) + ")";
  }
  if (isExactWidening(in->dtype(), out->dtype()))
    cache_[castKey(out, in->dtype())] = in;
  if (!retarget_.count(cast) && in->dtype() != out->dtype())
    note += ", kept";
  modelCastNotes_[cast] = note;
}

void Autocaster::rewriteNode(Node *n) {
  FloatNode *f = floatOf_.lookup(n);
  const std::vector<DType> &original = originalInputTypes_[n];
  std::set<unsigned> lowSlots;
  if (f && f->candidate && f->low)
    lowSlots.insert(f->sig.inputs.begin(), f->sig.inputs.end());
  for (unsigned i = 0; i < n->numInputs(); ++i) {
    Value *v = n->input(i);
    if (!v)
      continue;
    // Operands outside the compute type keep the type they had.
    DType want = lowSlots.count(i) ? low_ : original[i];
    if (v->dtype() != want)
      n->setInput(i, convert(v, want, n));
  }
  if (!lowSlots.empty())
    for (unsigned o : f->sig.outputs)
      n->output(o)->setDType(low_);
}

void Autocaster::restoreGraphOutputTypes() {
  Graph::InsertionGuard guard(g_, nullptr);
  for (unsigned i = 0; i < g_.outputs().size(); ++i) {
    Value *v = g_.outputs()[i];
    DType declared = originalOutputTypes_[i];
    if (v->dtype() == declared)
      continue;
    std::string name = v->name();
    g_.renameValue(v, name + "_" + shortDTypeName(v->dtype()));
    Value *c = convert(v, declared, nullptr);
    g_.renameValue(c, name);
    for (unsigned j = i; j < g_.outputs().size(); ++j)
      if (g_.outputs()[j] == v)
        g_.setOutput(j, c);
    for (StateBinding &b : g_.stateBindings)
      if (b.updated == v)
        b.updated = c;
  }
}

void Autocaster::removeUnusedConstants() {
  std::set<Value *> seen;
  for (Value *v : convertedConstants_) {
    if (!seen.insert(v).second || !v->isDead())
      continue;
    if (Node *constant = v->producer())
      g_.eraseNode(constant);
    else
      g_.removeValue(v);
  }
}

/// Whether the rewrite may change the type of `v` (a compute result of a
/// node that goes to low precision).
bool Autocaster::mayChangeType(const Value *v) const {
  FloatNode *f = v->producer() ? floatOf_.lookup(v->producer()) : nullptr;
  if (!f || !f->candidate || !f->low)
    return false;
  const auto &outputs = f->sig.outputs;
  return std::find(outputs.begin(), outputs.end(), v->resultIndex()) != outputs.end();
}

// The model's own float-to-float casts that the rewrite leaves alone serve
// as conversions too, so that no value gets a second cast to the same type.
void Autocaster::shareModelCasts() {
  for (Node *n : g_.nodes()) {
    Value *in = n->input(0), *out = n->output();
    if (!n->is("Cast") || retarget_.count(n) || !in || !out)
      continue;
    if (!isFloat(in->dtype()) || !isFloat(out->dtype()) || in->dtype() == out->dtype() ||
        mayChangeType(in))
      continue;
    cache_.try_emplace(castKey(in, out->dtype()), out);
  }
}

void Autocaster::rewrite() {
  originalInputTypes_.reserve(g_.nodeIdBound());
  for (Node *n : g_.nodes()) {
    std::vector<DType> types;
    for (const Value *v : n->inputs())
      types.push_back(v ? v->dtype() : DType::Undefined);
    originalInputTypes_[n] = std::move(types);
  }
  for (const Value *v : g_.outputs())
    originalOutputTypes_.push_back(v->dtype());

  shareModelCasts();
  for (Node *n : g_.nodes()) {
    rewritten_[n] = 1;
    if (n->is("Cast"))
      rewriteModelCast(n);
    else if (!readsOnlyType(*n))
      rewriteNode(n);
  }
  restoreGraphOutputTypes();
  removeUnusedConstants();
}

void Autocaster::record() {
  for (const Original &o : original_) {
    if (auto note = modelCastNotes_.find(o.node); note != modelCastNotes_.end()) {
      result_.rows.push_back({o.name, o.op, "cast", note->second});
      continue;
    }
    if (!o.floatNode)
      continue;
    const FloatNode &f = *o.floatNode;
    DType precision = f.candidate ? (f.low ? low_ : DType::F32) : f.computeType;
    result_.rows.push_back({o.name, o.op, shortDTypeName(precision), f.reason});
    ++result_.floatNodes;
    if (precision == low_)
      ++result_.lowNodes;
  }
  result_.casts = static_cast<unsigned>(insertedCasts_.size());
  result_.weightCasts = static_cast<unsigned>(weightCasts_.size());

  // Casts are listed once the graph has its final names.
  for (const Node *n : g_.nodes())
    if (insertedCasts_.count(n))
      result_.castLines.push_back("cast " + n->input(0)->name() + " -> " + n->output()->name() +
                                  " (" + shortDTypeName(n->output()->dtype()) +
                                  (weightCasts_.count(n) ? ", weight cast" : "") + ")");
  for (const std::string &line : constantLines_)
    result_.castLines.push_back(line);

  for (const Node *n : g_.nodes()) {
    if (n->is("Cast")) {
      result_.colors[n] = weightCasts_.count(n) ? "goldenrod" : "gold";
      continue;
    }
    const FloatNode *found = floatOf_.lookup(n);
    if (!found)
      continue;
    const FloatNode &f = *found;
    DType precision = f.candidate ? (f.low ? low_ : DType::F32) : f.computeType;
    result_.colors[n] = isLowPrecision(precision) ? "palegreen" : "lightsalmon";
  }
}

llvm::Error Autocaster::run() {
  if (auto err = checkForcedNodes())
    return err;
  collectFloatNodes();
  for (const auto &f : floatNodes_)
    classify(*f);
  buildEdges();
  paint();
  chooseModelCastTargets();
  rewrite();
  record();
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Pass registration
//===----------------------------------------------------------------------===//

class AutocastPass : public Pass {
public:
  explicit AutocastPass(const PassOptions &opts) : opts_(opts) {}
  llvm::StringRef name() const override { return "autocast"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    auto options = buildOptions();
    if (!options)
      return options.takeError();
    for (const std::string &remark : options->second)
      ctx.remarks.push_back(remark);
    auto result = autocast(g, options->first);
    if (!result)
      return result.takeError();
    ctx.addReport("autocast", result->report());
    for (const auto &[node, colour] : result->colors)
      ctx.dotColors[node] = colour;
    for (const std::string &remark : result->remarks)
      ctx.remarks.push_back("autocast: " + remark);
    return llvm::Error::success();
  }

private:
  /// The options with the policy file and list flags applied, and remarks
  /// about operator names ONNX does not know.
  llvm::Expected<std::pair<AutocastOptions, std::vector<std::string>>> buildOptions() const {
    AutocastOptions o;
    std::vector<std::string> remarks;
    o.lowType = opts_.getString("dtype") == "bf16" ? DType::BF16 : DType::F16;
    bool bf16 = opts_.getString("dtype") == "bf16";
    // Asked for with fp16, bf16-conv is refused rather than ignored.
    bool explicitConv = opts_.has("bf16-conv");
    if (!bf16 && explicitConv && opts_.getBool("bf16-conv"))
      return makeError("autocast: bf16-conv applies to bf16 only (the low-precision type is " +
                       opts_.getString("dtype") + ")");
    bool conv = explicitConv ? opts_.getBool("bf16-conv") : true; // on unless turned off
    o.bf16BeyondSchema = bf16 && conv && !opts_.getBool("onnx17-types");
    std::string path = opts_.getString("policy");
    if (!path.empty())
      if (auto err = o.policy.applyFile(path))
        return err;
    auto ops = [&](const char *option, PrecisionClass cls) {
      std::string origin = std::string("--") + option;
      for (const std::string &op : opts_.getList(option)) {
        o.policy.setClass(op, cls, origin);
        if (!llvm::StringRef(op).endswith("*") && !knownOperator(op))
          remarks.push_back("autocast: " + origin + " names '" + op +
                            "', which is no ONNX operator");
      }
      if (opts_.has(option) && !opts_.getList(option).empty())
        o.policy.addSource(origin);
    };
    ops("fp32-ops", PrecisionClass::Deny);
    ops("lowp-ops", PrecisionClass::Allow);
    const std::pair<const char *, bool> forcing[] = {{"fp32-nodes", false}, {"lowp-nodes", true}};
    for (const auto &[option, lowp] : forcing)
      for (const std::string &node : opts_.getList(option))
        if (auto err = o.policy.forceNode(node, lowp, std::string("--") + option))
          return err;
    return std::make_pair(std::move(o), std::move(remarks));
  }

  static bool knownOperator(const std::string &qualified) {
    registerAmpcSchemas();
    auto [domain, op] = llvm::StringRef(qualified).rsplit('.');
    if (op.empty())
      return onnx::OpSchemaRegistry::Schema(qualified, "") != nullptr;
    return onnx::OpSchemaRegistry::Schema(op.str(), domain.str()) != nullptr;
  }

  PassOptions opts_;
};

} // namespace

std::string AutocastResult::summaryLine() const {
  return "autocast: " + std::to_string(lowNodes) + "/" + std::to_string(floatNodes) +
         " float nodes in " + shortDTypeName(lowType) + ", " + std::to_string(casts) + " casts (" +
         std::to_string(weightCasts) + " weight casts)";
}

std::string AutocastResult::report() const {
  size_t nodeWidth = 4, opWidth = 2;
  for (const AutocastRow &r : rows) {
    nodeWidth = std::max(nodeWidth, r.node.size());
    opWidth = std::max(opWidth, r.op.size());
  }
  std::ostringstream os;
  auto row = [&](const std::string &node, const std::string &op, const std::string &precision,
                 const std::string &reason) {
    os << node << std::string(nodeWidth - node.size() + 2, ' ') << op
       << std::string(opWidth - op.size() + 2, ' ') << precision
       << std::string(precision.size() < 9 ? 11 - precision.size() : 2, ' ') << reason << "\n";
  };
  os << "policy: " << policy << "\n";
  row("node", "op", "precision", "reason");
  for (const AutocastRow &r : rows)
    row(r.node, r.op, r.precision, r.reason);
  for (const std::string &line : castLines)
    os << line << "\n";
  for (const std::string &remark : remarks)
    os << "note: " << remark << "\n";
  os << summaryLine() << "\n";
  return os.str();
}

llvm::Expected<AutocastResult> autocast(Graph &g, const AutocastOptions &opts) {
  if (opts.lowType != DType::F16 && opts.lowType != DType::BF16)
    return makeError("autocast: the low-precision type must be fp16 or bf16, got " +
                     shortDTypeName(opts.lowType));
  // fp16 convolutions would be just as far beyond the schemas, but no CPU
  // kernel takes them and PyTorch's CPU autocast does not do it either.
  if (opts.bf16BeyondSchema && opts.lowType != DType::BF16)
    return makeError("autocast: bf16-conv applies to bf16 only (the low-precision type is " +
                     shortDTypeName(opts.lowType) + ")");
  AutocastResult result;
  result.lowType = opts.lowType;
  result.policy = llvm::join(opts.policy.sources(), " + ");
  Autocaster autocaster(g, opts, result);
  if (auto err = autocaster.run())
    return err;
  return result;
}

void registerAutocastPass() {
  PassRegistry::add(
      {"autocast",
       "Mixed precision: run float nodes in fp16 or bf16 by an allow/deny/infer/clear policy "
       "(TensorFlow-style painting), inserting the fewest casts",
       {{"dtype", OptionType::Enum, "Low-precision type", "fp16", {"fp16", "bf16"}},
        {"policy", OptionType::String, "Policy file (see docs/precision-policy.md)", "", {}},
        {"fp32-ops", OptionType::List, "Operators to keep in fp32", "", {}},
        {"lowp-ops", OptionType::List, "Operators to run in low precision", "", {}},
        {"fp32-nodes", OptionType::List, "Nodes (by name) to keep in fp32", "", {}},
        {"lowp-nodes", OptionType::List, "Nodes (by name) to run in low precision", "", {}},
        {"bf16-conv", OptionType::Bool,
         "bf16: run Conv and pooling in bf16 too, beyond their opset-17 schemas, as PyTorch's "
         "autocast does (the rewritten graph is no longer checker-valid opset-17 ONNX; default "
         "on)",
         "", {}},
        {"onnx17-types", OptionType::Bool,
         "Keep every op in a type its opset-17 schema allows (bf16: Conv and pooling stay fp32)",
         "false", {}}},
       "dtype",
       [](const PassOptions &opts) { return std::make_unique<AutocastPass>(opts); }});
}

} // namespace ampc
