//===- Graph.h - ampc's graph IR: values, nodes, graphs ---------*- C++ -*-===//
//
// A graph owns its nodes (kept in a valid execution order) and its values.
// Every value has exactly one definition: a graph input, an initializer (which
// carries data) or a node result. Values keep their use lists up to date as
// node operands change, so passes can walk def-use chains in both directions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/DType.h"
#include "ampc/IR/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Allocator.h"

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ampc {

class Graph;
class Node;

/// "op" or "domain.op" in `storage` (kept in it only when a domain is given).
llvm::StringRef qualifiedOpTypeIn(llvm::StringRef domain, llvm::StringRef op,
                                  llvm::SmallVectorImpl<char> &storage);

/// The project's own operator domain.
inline constexpr std::string_view kAmpcDomain = "ampc";

//===----------------------------------------------------------------------===//
// Attribute
//===----------------------------------------------------------------------===//

struct Attribute {
  enum class Kind { Float, Int, String, Tensor, Floats, Ints, Strings };
  Kind kind = Kind::Int;
  double f = 0.0; ///< ONNX float attributes are float32; kept as double here.
  int64_t i = 0;
  std::string s;
  std::shared_ptr<const ampc::Tensor> t;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;

  static Attribute ofFloat(double v);
  static Attribute ofInt(int64_t v);
  static Attribute ofString(std::string v);
  static Attribute ofTensor(ampc::Tensor v);
  static Attribute ofFloats(std::vector<double> v);
  static Attribute ofInts(std::vector<int64_t> v);
  static Attribute ofStrings(std::vector<std::string> v);

  bool operator==(const Attribute &o) const;
};

//===----------------------------------------------------------------------===//
// Value
//===----------------------------------------------------------------------===//

/// Destroys an object the graph's slab holds; the memory goes with the graph.
struct SlabDelete {
  template <typename T> void operator()(T *p) const { p->~T(); }
};
template <typename T> using SlabPtr = std::unique_ptr<T, SlabDelete>;

/// Allocates the graph's node list entries from an arena of their own, in
/// the order they are made, and never reuses one: the list's order is mostly
/// the order of creation, so that walking it (Graph::nodes) reads memory
/// mostly in address order instead of taking a cache miss per entry (the
/// walk was 4% of compiling the 10,000-node residual MLP, whose training
/// graph has about 100,000 nodes).
template <typename T> struct ListEntryAllocator {
  using value_type = T;
  llvm::BumpPtrAllocator *arena;
  explicit ListEntryAllocator(llvm::BumpPtrAllocator *a) : arena(a) {}
  template <typename U> ListEntryAllocator(const ListEntryAllocator<U> &o) : arena(o.arena) {}
  T *allocate(size_t n) { return static_cast<T *>(arena->Allocate(n * sizeof(T), alignof(T))); }
  void deallocate(T *, size_t) {}
  template <typename U> bool operator==(const ListEntryAllocator<U> &o) const {
    return arena == o.arena;
  }
};

using NodeList = std::list<SlabPtr<Node>, ListEntryAllocator<SlabPtr<Node>>>;

struct Use {
  Node *user;
  unsigned operand;
  bool operator==(const Use &) const = default;
};

class Value {
public:
  enum class Kind { GraphInput, Initializer, NodeResult };

  const std::string &name() const { return name_; }
  const TensorType &type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape &shape() const { return type_.shape; }
  void setType(TensorType t) { type_ = std::move(t); }
  void setDType(DType d) { type_.dtype = d; }

  Kind kind() const { return kind_; }
  bool isGraphInput() const { return kind_ == Kind::GraphInput; }
  bool isInitializer() const { return kind_ == Kind::Initializer; }
  /// The node defining this value, or nullptr for inputs and initializers.
  Node *producer() const { return producer_; }
  unsigned resultIndex() const { return resultIndex_; }
  Graph *graph() const { return graph_; }
  /// A number below graph()->valueIdBound(), unique among the graph's values
  /// and given in creation order: passes index arrays by it instead of
  /// hashing value pointers (a hash scatters a walk of the graph over the
  /// whole table, an array follows the order values were made in).
  unsigned id() const { return id_; }

  llvm::ArrayRef<Use> uses() const { return uses_; }
  bool hasUses() const { return !uses_.empty(); }
  /// Number of times this value appears in the graph's output list.
  unsigned numOutputRefs() const { return outputRefs_; }
  bool isGraphOutput() const { return outputRefs_ > 0; }
  /// Unused and not a graph output.
  bool isDead() const { return uses_.empty() && outputRefs_ == 0; }

  /// True for an initializer that is a constant rather than a parameter: it
  /// came from a Constant node or from folding, and is never trained. Model
  /// initializers of integer or bool type are constants too.
  bool isConstant() const {
    return kind_ == Kind::Initializer && (constant_ || !isFloat(type_.dtype));
  }
  /// True for a float initializer that is a parameter (possibly trainable).
  bool isParameter() const { return kind_ == Kind::Initializer && !isConstant(); }
  void setConstant(bool c) { constant_ = c; }

  /// Initializer data, or a graph input's default value (nullptr otherwise).
  const Tensor *data() const { return data_.get(); }
  /// A graph input that takes `data()` when it is not fed (ONNX: an
  /// initializer that is also a graph input).
  bool hasDefault() const { return kind_ == Kind::GraphInput && data_ != nullptr; }
  std::shared_ptr<const Tensor> sharedData() const { return data_; }
  void setData(Tensor t);

  /// Makes every user and every graph-output reference of this value refer to
  /// `other` instead.
  void replaceAllUsesWith(Value *other);
  /// Like replaceAllUsesWith, for the uses accepted by `pred` (graph outputs
  /// are not touched).
  void replaceUsesWithIf(Value *other, const std::function<bool(const Use &)> &pred);

private:
  friend class Graph;
  friend class Node;
  Value(Graph *g, std::string name, TensorType type, Kind kind)
      : graph_(g), name_(std::move(name)), type_(std::move(type)), kind_(kind) {}

  void addUse(Node *user, unsigned operand);
  void removeUse(Node *user, unsigned operand);

  Graph *graph_;
  std::string name_;
  TensorType type_;
  Kind kind_;
  unsigned id_ = 0;
  Node *producer_ = nullptr;
  unsigned resultIndex_ = 0;
  // Inline: most values have one or two users, and a walk of the graph then
  // reads a value's users without a second, scattered allocation.
  llvm::SmallVector<Use, 2> uses_;
  unsigned outputRefs_ = 0;
  std::shared_ptr<const Tensor> data_;
  bool constant_ = false;
};

//===----------------------------------------------------------------------===//
// Node
//===----------------------------------------------------------------------===//

class Node {
public:
  const std::string &opType() const { return opType_; }
  const std::string &domain() const { return domain_; }
  const std::string &name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }
  /// True when this node is `op` of the default ONNX domain.
  bool is(std::string_view op) const { return domain_.empty() && opType_ == op; }
  /// True when this node is `op` of ampc's own domain.
  bool isAmpc(std::string_view op) const { return domain_ == kAmpcDomain && opType_ == op; }
  /// "Op" or "domain.Op".
  std::string qualifiedOpType() const;
  /// The same in `storage`, for lookups that should not allocate.
  llvm::StringRef qualifiedOpType(llvm::SmallVectorImpl<char> &storage) const {
    return qualifiedOpTypeIn(domain_, opType_, storage);
  }
  /// The node's name, or its first output's name when it has none: for messages.
  std::string displayName() const;

  unsigned numInputs() const { return static_cast<unsigned>(inputs_.size()); }
  /// Operand i; nullptr for an omitted optional input.
  Value *input(unsigned i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  llvm::ArrayRef<Value *> inputs() const { return inputs_; }
  void setInput(unsigned i, Value *v);
  void addInput(Value *v);
  /// Drops operands from index `count` on.
  void truncateInputs(unsigned count);

  unsigned numOutputs() const { return static_cast<unsigned>(outputs_.size()); }
  /// Result i; nullptr for an optional output the model does not ask for.
  Value *output(unsigned i = 0) const {
    return i < outputs_.size() ? outputs_[i].get() : nullptr;
  }
  std::vector<Value *> outputs() const;
  /// Adds a result (or an omitted one when `name` is empty and type undefined).
  Value *addOutput(std::string name, TensorType type);

  // Attributes.
  const std::map<std::string, Attribute> &attributes() const { return attrs_; }
  bool hasAttr(std::string_view name) const { return attrs_.count(std::string(name)); }
  const Attribute *attr(std::string_view name) const;
  int64_t getInt(std::string_view name, int64_t dflt) const;
  double getFloat(std::string_view name, double dflt) const;
  std::string getString(std::string_view name, std::string dflt) const;
  std::vector<int64_t> getInts(std::string_view name, std::vector<int64_t> dflt = {}) const;
  std::vector<double> getFloats(std::string_view name, std::vector<double> dflt = {}) const;
  const Tensor *getTensor(std::string_view name) const;
  void setAttr(std::string name, Attribute a) { attrs_[std::move(name)] = std::move(a); }
  void setInt(std::string name, int64_t v) { setAttr(std::move(name), Attribute::ofInt(v)); }
  void setFloat(std::string name, double v) { setAttr(std::move(name), Attribute::ofFloat(v)); }
  void setInts(std::string name, std::vector<int64_t> v) {
    setAttr(std::move(name), Attribute::ofInts(std::move(v)));
  }
  void setString(std::string name, std::string v) {
    setAttr(std::move(name), Attribute::ofString(std::move(v)));
  }
  void removeAttr(std::string_view name) { attrs_.erase(std::string(name)); }

  Graph *graph() const { return graph_; }
  /// A number below graph()->nodeIdBound(), unique among the graph's nodes
  /// and given in creation order (see Value::id()).
  unsigned id() const { return id_; }

private:
  friend class Graph;
  friend class Value;
  Node(Graph *g, std::string opType, std::string domain, std::string name)
      : graph_(g), opType_(std::move(opType)), domain_(std::move(domain)),
        name_(std::move(name)) {}

  Graph *graph_;
  std::string opType_;
  std::string domain_;
  std::string name_;
  // Operands and results inline, as the users of a value (most nodes have up
  // to three operands and one result): 3-5% off compiling the 10,000- and
  // 20,000-node graphs of docs/benchmarks.md.
  llvm::SmallVector<Value *, 3> inputs_;
  /// Operand i's position in its value's use list: removing a use is O(1)
  /// (a value read by 10,000 optimizer updates made dead-code elimination
  /// quadratic).
  llvm::SmallVector<unsigned, 3> usePos_;
  llvm::SmallVector<SlabPtr<Value>, 1> outputs_;
  std::map<std::string, Attribute> attrs_;
  NodeList::iterator self_;
  unsigned id_ = 0;
};

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

/// A Transpose's permutation, ONNX's default (the axes reversed) spelled
/// out; empty when `n` is not a Transpose of a value with a shape or its perm
/// does not have the operand's rank.
std::vector<int64_t> transposePerm(const Node &n);

/// A Transpose exchanging the last two axes and nothing else (the lowering
/// folds it into the MatMuls that read it).
bool swapsLastTwoAxes(const Node &n);

/// An updated-state output and the state input it replaces on the next step
/// (ONNX TrainingInfoProto.update_binding).
struct StateBinding {
  Value *state;   ///< Graph input or initializer holding the state.
  Value *updated; ///< Graph output holding its next value.
};

class Graph {
public:
  Graph() = default;
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;
  ~Graph();

  std::string name = "main";
  int64_t irVersion = 8;
  std::string producerName;
  std::string producerVersion;
  std::string docString;
  /// opset_import: domain -> version ("" is the default ONNX domain).
  std::map<std::string, int64_t> opsets;
  /// metadata_props, sorted by key.
  std::map<std::string, std::string> metadata;

  int64_t opsetVersion(const std::string &domain = "") const;

  // Graph inputs, initializers and outputs.
  Value *addInput(std::string name, TensorType type);
  /// A graph input with a default value (a scalar learning rate, a seed...).
  Value *addInputWithDefault(std::string name, Tensor defaultValue);
  /// Adds an initializer; `constant` marks it as a constant, not a parameter.
  Value *addInitializer(std::string name, Tensor data, bool constant = false);
  void addOutput(Value *v);
  void setOutput(unsigned i, Value *v);
  void removeOutput(unsigned i);
  /// Removes an unused input or initializer.
  void removeValue(Value *v);
  /// Removes unused inputs and initializers at once: linear in the graph's
  /// values, where one removeValue call per value would be quadratic.
  void removeValues(const std::vector<Value *> &values);
  /// Turns an unused-as-input graph input into an initializer with data, or back.
  void convertToInitializer(Value *input, Tensor data);
  void convertToInput(Value *initializer);

  const std::vector<Value *> &inputs() const { return inputs_; }
  const std::vector<Value *> &initializers() const { return initializers_; }
  const std::vector<Value *> &outputs() const { return outputs_; }

  // Nodes.
  /// Creates a node with the given operands and result types. Results are named
  /// `outputNames[i]` when given (made unique), otherwise after the node. The
  /// node is inserted at the current insertion point (the end by default).
  Node *createNode(std::string opType, const std::vector<Value *> &inputs,
                   const std::vector<TensorType> &outputTypes,
                   std::map<std::string, Attribute> attrs = {},
                   std::string name = "", std::string domain = "",
                   const std::vector<std::string> &outputNames = {});
  /// Erases a node whose results are all dead.
  void eraseNode(Node *n);
  void moveBefore(Node *n, Node *pos);

  /// Where createNode inserts: before `pos`, or at the end when nullptr.
  void setInsertionPoint(Node *pos);
  Node *insertionPoint() const;
  /// Restores the previous insertion point when destroyed.
  class InsertionGuard {
  public:
    InsertionGuard(Graph &g, Node *pos) : g_(g), saved_(g.insertPos_) { g.setInsertionPoint(pos); }
    ~InsertionGuard() { g_.insertPos_ = saved_; }

  private:
    Graph &g_;
    NodeList::iterator saved_;
  };

  /// The nodes in execution order, as a snapshot (safe to mutate while iterating).
  std::vector<Node *> nodes() const;
  size_t numNodes() const { return nodes_.size(); }
  /// Calls fn on each node in order; fn must not erase nodes other than the current one.
  template <typename Fn> void forEachNode(Fn &&fn) const {
    for (auto it = nodes_.begin(); it != nodes_.end();) {
      Node *n = (it++)->get();
      fn(n);
    }
  }

  /// Reorders nodes so that every value is defined before use, keeping the
  /// current order where it is already valid. Returns false (and leaves the
  /// order unchanged) if the graph has a cycle.
  bool topologicalSort();

  // Names.
  Value *findValue(std::string_view name) const;
  Node *findNode(std::string_view name) const;
  /// `base` if unused by any value or node, else `base_1`, `base_2`...
  std::string uniqueName(std::string_view base);
  void renameValue(Value *v, std::string newName);

  // Training state.
  std::vector<StateBinding> stateBindings;

  /// One more than the largest Value::id() so far (ids are not reused).
  unsigned valueIdBound() const { return nextValueId_; }
  /// One more than the largest Node::id() so far (ids are not reused).
  unsigned nodeIdBound() const { return nextNodeId_; }

private:
  friend class Node;
  friend class Value;
  Value *newValue(std::string name, TensorType type, Value::Kind kind);
  /// uniqueName(base), registered as v's name.
  std::string claimName(std::string_view base, Value *v);

  /// Nodes and values, in creation order: walks of the graph read memory
  /// in order rather than wherever the heap put each one.
  llvm::BumpPtrAllocator slab_;
  llvm::BumpPtrAllocator listEntries_;
  NodeList nodes_{ListEntryAllocator<SlabPtr<Node>>(&listEntries_)};
  NodeList::iterator insertPos_ = nodes_.end();
  /// nodes() as a contiguous snapshot, rebuilt after the order changed:
  /// walking the list touches one allocation per node, and large graphs are
  /// walked a few times per pass.
  mutable std::vector<Node *> orderCache_;
  mutable bool orderCacheValid_ = false;
  std::vector<SlabPtr<Value>> ownedValues_; // inputs and initializers
  std::vector<Value *> inputs_;
  std::vector<Value *> initializers_;
  std::vector<Value *> outputs_;
  // StringMaps: one allocation per entry and no std::string built for a
  // lookup; naming was about 8% of compiling a graph of 100,000 values.
  llvm::StringMap<Value *> valuesByName_;
  llvm::StringMap<unsigned> nameCounters_;
  unsigned nextValueId_ = 0;
  unsigned nextNodeId_ = 0;
};

/// Metadata keys through which ampc keeps IR facts that ONNX has no field for
/// (or none that ONNX text can express): which initializers are constants, and
/// the state bindings of a training step.
inline constexpr const char *kConstantsKey = "ampc.constants";
inline constexpr const char *kUpdateBindingKey = "ampc.update_binding";
/// Graph inputs with defaults: ONNX writes them as initializers that are also
/// inputs, which torch uses for parameters; this key tells ampc's own apart.
inline constexpr const char *kInputDefaultsKey = "ampc.input_defaults";
/// The parameters PyTorch trains (requires_grad), comma separated, as
/// ampc.export (python/ampc) writes them: autodiff trains exactly these.
inline constexpr const char *kTrainableParametersKey = "ampc.trainable_parameters";

/// Training-step facts for the runtime: metadata "ampc.info.<key>" becomes the
/// plan's info[<key>] (output names, optimizer, loss scaling...).
inline constexpr const char *kInfoPrefix = "ampc.info.";
/// The states the accumulate program updates (comma separated); the others
/// belong to the apply program (see passes/Accumulate.cpp).
inline constexpr const char *kAccumulateStatesKey = "ampc.program.accumulate";

/// g.metadata plus the entries above, as written to a model.
std::map<std::string, std::string> metadataWithIRFacts(const Graph &g);
/// Reads the entries above back from g.metadata into the IR (and removes
/// them). Returns an error message, empty on success.
std::string absorbIRFacts(Graph &g);

} // namespace ampc
