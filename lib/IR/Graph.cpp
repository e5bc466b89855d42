//===- Graph.cpp - ampc's graph IR ----------------------------------------===//

#include "ampc/IR/Graph.h"
#include "ampc/IR/IdMap.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cassert>

namespace ampc {

//===----------------------------------------------------------------------===//
// Attribute
//===----------------------------------------------------------------------===//

Attribute Attribute::ofFloat(double v) {
  Attribute a;
  a.kind = Kind::Float;
  a.f = static_cast<float>(v);
  return a;
}
Attribute Attribute::ofInt(int64_t v) {
  Attribute a;
  a.kind = Kind::Int;
  a.i = v;
  return a;
}
Attribute Attribute::ofString(std::string v) {
  Attribute a;
  a.kind = Kind::String;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::ofTensor(ampc::Tensor v) {
  Attribute a;
  a.kind = Kind::Tensor;
  a.t = std::make_shared<const ampc::Tensor>(std::move(v));
  return a;
}
Attribute Attribute::ofFloats(std::vector<double> v) {
  Attribute a;
  a.kind = Kind::Floats;
  for (double &x : v)
    x = static_cast<float>(x);
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::ofInts(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Kind::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::ofStrings(std::vector<std::string> v) {
  Attribute a;
  a.kind = Kind::Strings;
  a.strings = std::move(v);
  return a;
}

bool Attribute::operator==(const Attribute &o) const {
  if (kind != o.kind)
    return false;
  switch (kind) {
  case Kind::Float:
    return f == o.f;
  case Kind::Int:
    return i == o.i;
  case Kind::String:
    return s == o.s;
  case Kind::Tensor:
    return t && o.t && t->bitwiseEqual(*o.t);
  case Kind::Floats:
    return floats == o.floats;
  case Kind::Ints:
    return ints == o.ints;
  case Kind::Strings:
    return strings == o.strings;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Value
//===----------------------------------------------------------------------===//

void Value::setData(Tensor t) {
  type_ = t.type();
  data_ = std::make_shared<const Tensor>(std::move(t));
}

void Value::addUse(Node *user, unsigned operand) {
  user->usePos_[operand] = static_cast<unsigned>(uses_.size());
  uses_.push_back({user, operand});
}

void Value::removeUse(Node *user, unsigned operand) {
  // The last use takes the removed one's place: O(1), where erasing from
  // the middle of a shared value's thousands of uses was not.
  unsigned pos = user->usePos_[operand];
  assert(pos < uses_.size() && uses_[pos] == (Use{user, operand}) && "use list out of sync");
  Use last = uses_.back();
  uses_[pos] = last;
  last.user->usePos_[last.operand] = pos;
  uses_.pop_back();
}

void Value::replaceAllUsesWith(Value *other) {
  assert(other != this);
  while (!uses_.empty()) {
    Use u = uses_.back();
    u.user->setInput(u.operand, other);
  }
  if (outputRefs_ == 0)
    return;
  for (unsigned i = 0; i < graph_->outputs_.size(); ++i)
    if (graph_->outputs_[i] == this)
      graph_->setOutput(i, other);
}

void Value::replaceUsesWithIf(Value *other, const std::function<bool(const Use &)> &pred) {
  std::vector<Use> snapshot(uses_.begin(), uses_.end());
  for (const Use &u : snapshot)
    if (pred(u))
      u.user->setInput(u.operand, other);
}

//===----------------------------------------------------------------------===//
// Node
//===----------------------------------------------------------------------===//

llvm::StringRef qualifiedOpTypeIn(llvm::StringRef domain, llvm::StringRef op,
                                  llvm::SmallVectorImpl<char> &storage) {
  if (domain.empty())
    return op;
  storage.assign(domain.begin(), domain.end());
  storage.push_back('.');
  storage.append(op.begin(), op.end());
  return llvm::StringRef(storage.data(), storage.size());
}

std::vector<int64_t> transposePerm(const Node &n) {
  if (!n.is("Transpose") || !n.input(0) || !n.output())
    return {};
  int64_t r = static_cast<int64_t>(n.input(0)->type().shape.size());
  std::vector<int64_t> perm = n.getInts("perm", {});
  if (perm.empty())
    for (int64_t d = r - 1; d >= 0; --d)
      perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != r)
    return {};
  return perm;
}

bool swapsLastTwoAxes(const Node &n) {
  std::vector<int64_t> perm = transposePerm(n);
  int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2)
    return false;
  for (int64_t d = 0; d < r - 2; ++d)
    if (perm[d] != d)
      return false;
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

std::string Node::qualifiedOpType() const {
  return domain_.empty() ? opType_ : domain_ + "." + opType_;
}

std::string Node::displayName() const {
  if (!name_.empty())
    return name_;
  for (const auto &o : outputs_)
    if (o)
      return o->name();
  return opType_;
}

void Node::setInput(unsigned i, Value *v) {
  assert(i < inputs_.size());
  if (inputs_[i] == v)
    return;
  if (inputs_[i])
    inputs_[i]->removeUse(this, i);
  inputs_[i] = v;
  if (v)
    v->addUse(this, i);
}

void Node::addInput(Value *v) {
  inputs_.push_back(v);
  usePos_.push_back(0);
  if (v)
    v->addUse(this, static_cast<unsigned>(inputs_.size() - 1));
}

void Node::truncateInputs(unsigned count) {
  while (inputs_.size() > count) {
    setInput(static_cast<unsigned>(inputs_.size() - 1), nullptr);
    inputs_.pop_back();
    usePos_.pop_back();
  }
}

std::vector<Value *> Node::outputs() const {
  std::vector<Value *> out;
  out.reserve(outputs_.size());
  for (const auto &o : outputs_)
    out.push_back(o.get());
  return out;
}

Value *Node::addOutput(std::string name, TensorType type) {
  if (name.empty() && type.dtype == DType::Undefined) {
    outputs_.push_back(nullptr);
    return nullptr;
  }
  SlabPtr<Value> v(new (graph_->slab_.Allocate<Value>())
                       Value(graph_, "", std::move(type), Value::Kind::NodeResult));
  v->id_ = graph_->nextValueId_++;
  if (name.empty())
    name = displayName();
  v->name_ = graph_->claimName(name, v.get());
  v->producer_ = this;
  v->resultIndex_ = static_cast<unsigned>(outputs_.size());
  outputs_.push_back(std::move(v));
  return outputs_.back().get();
}

const Attribute *Node::attr(std::string_view name) const {
  auto it = attrs_.find(std::string(name));
  return it == attrs_.end() ? nullptr : &it->second;
}

int64_t Node::getInt(std::string_view name, int64_t dflt) const {
  const Attribute *a = attr(name);
  return a && a->kind == Attribute::Kind::Int ? a->i : dflt;
}

double Node::getFloat(std::string_view name, double dflt) const {
  const Attribute *a = attr(name);
  if (!a)
    return dflt;
  if (a->kind == Attribute::Kind::Float)
    return a->f;
  if (a->kind == Attribute::Kind::Int)
    return static_cast<double>(a->i);
  return dflt;
}

std::string Node::getString(std::string_view name, std::string dflt) const {
  const Attribute *a = attr(name);
  return a && a->kind == Attribute::Kind::String ? a->s : dflt;
}

std::vector<int64_t> Node::getInts(std::string_view name, std::vector<int64_t> dflt) const {
  const Attribute *a = attr(name);
  return a && a->kind == Attribute::Kind::Ints ? a->ints : dflt;
}

std::vector<double> Node::getFloats(std::string_view name, std::vector<double> dflt) const {
  const Attribute *a = attr(name);
  return a && a->kind == Attribute::Kind::Floats ? a->floats : dflt;
}

const Tensor *Node::getTensor(std::string_view name) const {
  const Attribute *a = attr(name);
  return a && a->kind == Attribute::Kind::Tensor ? a->t.get() : nullptr;
}

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

Graph::~Graph() {
  // Drop operands first so no use list refers to a destroyed node.
  for (auto &n : nodes_)
    n->inputs_.clear();
}

int64_t Graph::opsetVersion(const std::string &domain) const {
  auto it = opsets.find(domain);
  return it == opsets.end() ? 0 : it->second;
}

Value *Graph::newValue(std::string name, TensorType type, Value::Kind kind) {
  ownedValues_.emplace_back(new (slab_.Allocate<Value>()) Value(this, "", std::move(type), kind));
  Value *v = ownedValues_.back().get();
  v->id_ = nextValueId_++;
  v->name_ = claimName(name, v);
  return v;
}

Value *Graph::addInput(std::string name, TensorType type) {
  Value *v = newValue(std::move(name), std::move(type), Value::Kind::GraphInput);
  inputs_.push_back(v);
  return v;
}

Value *Graph::addInputWithDefault(std::string name, Tensor defaultValue) {
  Value *v = addInput(std::move(name), defaultValue.type());
  v->setData(std::move(defaultValue));
  return v;
}

Value *Graph::addInitializer(std::string name, Tensor data, bool constant) {
  Value *v = newValue(std::move(name), data.type(), Value::Kind::Initializer);
  v->setData(std::move(data));
  v->constant_ = constant;
  initializers_.push_back(v);
  return v;
}

void Graph::addOutput(Value *v) {
  outputs_.push_back(v);
  ++v->outputRefs_;
}

void Graph::setOutput(unsigned i, Value *v) {
  assert(i < outputs_.size());
  --outputs_[i]->outputRefs_;
  outputs_[i] = v;
  ++v->outputRefs_;
}

void Graph::removeOutput(unsigned i) {
  assert(i < outputs_.size());
  --outputs_[i]->outputRefs_;
  outputs_.erase(outputs_.begin() + i);
}

void Graph::removeValue(Value *v) {
  assert(v->isDead() && v->kind() != Value::Kind::NodeResult);
  auto &list = v->isGraphInput() ? inputs_ : initializers_;
  list.erase(std::find(list.begin(), list.end(), v));
  std::erase_if(stateBindings, [&](const StateBinding &b) { return b.state == v; });
  valuesByName_.erase(v->name());
  auto it = std::find_if(ownedValues_.begin(), ownedValues_.end(),
                         [&](const auto &p) { return p.get() == v; });
  ownedValues_.erase(it);
}

void Graph::removeValues(const std::vector<Value *> &values) {
  ValueIdMap<char> gone;
  for (const Value *v : values)
    gone[v] = 1;
  for (const Value *v : values) {
    assert(v->isDead() && v->kind() != Value::Kind::NodeResult);
    valuesByName_.erase(v->name());
  }
  auto isGone = [&](const Value *v) { return gone.lookup(v) != 0; };
  std::erase_if(inputs_, isGone);
  std::erase_if(initializers_, isGone);
  std::erase_if(stateBindings, [&](const StateBinding &b) { return gone.lookup(b.state) != 0; });
  std::erase_if(ownedValues_, [&](const auto &p) { return gone.lookup(p.get()) != 0; });
}

void Graph::convertToInitializer(Value *input, Tensor data) {
  assert(input->isGraphInput());
  inputs_.erase(std::find(inputs_.begin(), inputs_.end(), input));
  input->kind_ = Value::Kind::Initializer;
  input->setData(std::move(data));
  initializers_.push_back(input);
}

void Graph::convertToInput(Value *initializer) {
  assert(initializer->isInitializer());
  initializers_.erase(std::find(initializers_.begin(), initializers_.end(), initializer));
  initializer->kind_ = Value::Kind::GraphInput;
  initializer->data_.reset();
  inputs_.push_back(initializer);
}

Node *Graph::createNode(std::string opType, const std::vector<Value *> &inputs,
                        const std::vector<TensorType> &outputTypes,
                        std::map<std::string, Attribute> attrs, std::string name,
                        std::string domain, const std::vector<std::string> &outputNames) {
  // A node of another domain (ampc's own) needs that domain imported, at its
  // only version so far.
  if (!domain.empty() && !opsets.count(domain))
    opsets[domain] = 1;
  SlabPtr<Node> node(new (slab_.Allocate<Node>())
                         Node(this, std::move(opType), std::move(domain), std::move(name)));
  Node *n = node.get();
  n->id_ = nextNodeId_++;
  n->attrs_ = std::move(attrs);
  // Sized once: pushed one at a time, the operand lists were reallocated as
  // they grew (a quarter of the cost of making a node).
  n->inputs_.reserve(inputs.size());
  n->usePos_.reserve(inputs.size());
  for (Value *v : inputs)
    n->addInput(v);
  n->outputs_.reserve(outputTypes.size());
  const std::string &base = n->name_.empty() ? n->opType_ : n->name_;
  for (size_t i = 0; i < outputTypes.size(); ++i) {
    std::string outName = i < outputNames.size() && !outputNames[i].empty()
                              ? outputNames[i]
                              : base + "_out" + (i ? std::to_string(i) : "");
    if (i < outputNames.size() && outputNames[i].empty() &&
        outputTypes[i].dtype == DType::Undefined)
      outName.clear();
    n->addOutput(std::move(outName), outputTypes[i]);
  }
  n->self_ = nodes_.insert(insertPos_, std::move(node));
  orderCacheValid_ = false;
  return n;
}

void Graph::eraseNode(Node *n) {
  for (const auto &o : n->outputs_) {
    (void)o;
    assert((!o || o->isDead()) && "erasing a node whose results are used");
  }
  for (unsigned i = 0; i < n->inputs_.size(); ++i)
    n->setInput(i, nullptr);
  for (const auto &o : n->outputs_)
    if (o)
      valuesByName_.erase(o->name());
  if (insertPos_ == n->self_)
    ++insertPos_;
  nodes_.erase(n->self_);
  orderCacheValid_ = false;
}

void Graph::moveBefore(Node *n, Node *pos) {
  auto target = pos ? pos->self_ : nodes_.end();
  nodes_.splice(target, nodes_, n->self_);
  orderCacheValid_ = false;
}

void Graph::setInsertionPoint(Node *pos) { insertPos_ = pos ? pos->self_ : nodes_.end(); }

Node *Graph::insertionPoint() const {
  return insertPos_ == nodes_.end() ? nullptr : insertPos_->get();
}

std::vector<Node *> Graph::nodes() const {
  if (!orderCacheValid_) {
    orderCache_.clear();
    orderCache_.reserve(nodes_.size());
    for (const auto &n : nodes_)
      orderCache_.push_back(n.get());
    orderCacheValid_ = true;
  }
  return orderCache_;
}

bool Graph::topologicalSort() {
  // Kahn's algorithm, taking ready nodes in their current order so that an
  // already valid order is preserved. Nodes are numbered by position, and
  // the bookkeeping is indexed by that number (hash maps keyed by node were
  // 10% of autodiff on a graph of 10,000 nodes).
  std::vector<Node *> byPosition;
  byPosition.reserve(nodes_.size());
  NodeIdMap<unsigned> position;
  position.reserve(nextNodeId_);
  for (const auto &n : nodes_) {
    position[n.get()] = static_cast<unsigned>(byPosition.size());
    byPosition.push_back(n.get());
  }
  std::vector<unsigned> pending(byPosition.size(), 0);
  bool inOrder = true;
  for (unsigned i = 0; i < byPosition.size(); ++i)
    for (Value *v : byPosition[i]->inputs_)
      if (v && v->producer_) {
        ++pending[i];
        inOrder &= position.lookup(v->producer_) < i;
      }
  // The order Kahn's algorithm would produce is then the current one.
  if (inOrder) {
    insertPos_ = nodes_.end();
    return true;
  }
  std::vector<unsigned> ready; // a min-heap of positions
  for (unsigned i = 0; i < byPosition.size(); ++i)
    if (pending[i] == 0)
      ready.push_back(i);
  std::make_heap(ready.begin(), ready.end(), std::greater<>());
  std::vector<Node *> order;
  order.reserve(byPosition.size());
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), std::greater<>());
    Node *n = byPosition[ready.back()];
    ready.pop_back();
    order.push_back(n);
    for (const auto &o : n->outputs_) {
      if (!o)
        continue;
      for (const Use &u : o->uses_) {
        unsigned user = position.lookup(u.user);
        if (--pending[user] == 0) {
          ready.push_back(user);
          std::push_heap(ready.begin(), ready.end(), std::greater<>());
        }
      }
    }
  }
  if (order.size() != nodes_.size())
    return false;
  for (Node *n : order)
    nodes_.splice(nodes_.end(), nodes_, n->self_);
  insertPos_ = nodes_.end();
  orderCacheValid_ = false;
  return true;
}

Value *Graph::findValue(std::string_view name) const {
  auto it = valuesByName_.find(llvm::StringRef(name.data(), name.size()));
  return it == valuesByName_.end() ? nullptr : it->second;
}

Node *Graph::findNode(std::string_view name) const {
  for (const auto &n : nodes_)
    if (n->name_ == name)
      return n.get();
  return nullptr;
}

/// `base` if `take` accepts it, else the first of `base_1`, `base_2`... that
/// it accepts, counting on from the last number given for `base`.
template <typename Take>
static std::string firstFreeName(std::string_view base, llvm::StringMap<unsigned> &counters,
                                 Take take) {
  llvm::StringRef b = base.empty() ? llvm::StringRef("v") : llvm::StringRef(base.data(), base.size());
  if (take(b))
    return b.str();
  unsigned &counter = counters[b];
  for (;;) {
    std::string candidate = (b + "_" + llvm::Twine(++counter)).str();
    if (take(candidate))
      return candidate;
  }
}

std::string Graph::uniqueName(std::string_view base) {
  return firstFreeName(base, nameCounters_,
                       [&](llvm::StringRef name) { return !valuesByName_.count(name); });
}

std::string Graph::claimName(std::string_view base, Value *v) {
  // One probe of the map for a fresh name (a lookup, then an insert, was
  // two: naming was 6% of compiling a graph of 10,000 nodes).
  return firstFreeName(base, nameCounters_, [&](llvm::StringRef name) {
    return valuesByName_.try_emplace(name, v).second;
  });
}

void Graph::renameValue(Value *v, std::string newName) {
  if (v->name_ == newName)
    return;
  valuesByName_.erase(v->name_);
  v->name_ = claimName(newName, v);
}

//===----------------------------------------------------------------------===//
// IR facts kept in metadata
//===----------------------------------------------------------------------===//

std::map<std::string, std::string> metadataWithIRFacts(const Graph &g) {
  std::map<std::string, std::string> md = g.metadata;
  std::string constants;
  for (const Value *v : g.initializers())
    if (v->isConstant() && isFloat(v->dtype()))
      constants += (constants.empty() ? "" : ",") + v->name();
  if (!constants.empty())
    md[kConstantsKey] = constants;
  std::string bindings;
  for (const StateBinding &b : g.stateBindings)
    bindings += (bindings.empty() ? "" : ";") + b.state->name() + "=" + b.updated->name();
  if (!bindings.empty())
    md[kUpdateBindingKey] = bindings;
  std::string defaults;
  for (const Value *v : g.inputs())
    if (v->hasDefault())
      defaults += (defaults.empty() ? "" : ",") + v->name();
  if (!defaults.empty())
    md[kInputDefaultsKey] = defaults;
  return md;
}

namespace {
std::vector<std::string> splitOn(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos)
      end = s.size();
    if (end > start)
      out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}
} // namespace

std::string absorbIRFacts(Graph &g) {
  g.metadata.erase(kInputDefaultsKey); // applied by the importer
  auto c = g.metadata.find(kConstantsKey);
  if (c != g.metadata.end()) {
    for (const std::string &name : splitOn(c->second, ',')) {
      Value *v = g.findValue(name);
      if (!v || !v->isInitializer())
        return std::string(kConstantsKey) + " names '" + name + "', which is not an initializer";
      v->setConstant(true);
    }
    g.metadata.erase(c);
  }
  auto b = g.metadata.find(kUpdateBindingKey);
  if (b != g.metadata.end()) {
    if (!g.stateBindings.empty())
      return std::string(kUpdateBindingKey) + " repeats the model's training_info bindings";
    for (const std::string &pair : splitOn(b->second, ';')) {
      size_t eq = pair.find('=');
      Value *state = eq == std::string::npos ? nullptr : g.findValue(pair.substr(0, eq));
      Value *updated = eq == std::string::npos ? nullptr : g.findValue(pair.substr(eq + 1));
      if (!state || !updated)
        return std::string(kUpdateBindingKey) + " entry '" + pair + "' names an unknown value";
      g.stateBindings.push_back({state, updated});
    }
    g.metadata.erase(b);
  }
  return {};
}

} // namespace ampc
