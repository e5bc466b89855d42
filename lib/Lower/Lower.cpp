//===- Lower.cpp - Lowering a graph to an executable plan ------------------===//

#include "ampc/Lower/Lower.h"

#include "CastStates.h"
#include "Fusion.h"
#include "ampc/IR/IdMap.h"
#include "ampc/Lower/MemoryPlanner.h"

#include "ampc/Support/Error.h"
#include "ampc/rt/FusedOps.h"
#include "ampc/rt/PlanFile.h"
#include "ampc/rt/PlanQueries.h"

#include "plan.pb.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace ampc {

namespace {

plan::ElemType planType(DType d) {
  switch (d) {
  case DType::F32:
    return plan::F32;
  case DType::F16:
    return plan::F16;
  case DType::BF16:
    return plan::BF16;
  case DType::F64:
    return plan::F64;
  case DType::I64:
    return plan::I64;
  case DType::I32:
    return plan::I32;
  case DType::I8:
    return plan::I8;
  case DType::U8:
    return plan::U8;
  case DType::Bool:
    return plan::BOOL;
  case DType::Undefined:
    break;
  }
  return plan::F32;
}

class Lowering {
public:
  Lowering(const Graph &g, const LowerOptions &opts) : g_(g), opts_(opts) {}

  llvm::Expected<plan::Plan> run() {
    p_.set_version(rt::kPlanVersion);
    p_.set_producer("amp-opt (ampc) 0.1.0");
    for (const auto &[k, v] : g_.metadata)
      if (llvm::StringRef(k).startswith(kInfoPrefix))
        (*p_.mutable_info())[k.substr(std::strlen(kInfoPrefix))] = v;
    for (const auto &[k, v] : opts_.info)
      (*p_.mutable_info())[k] = v;
    for (const StateBinding &b : g_.stateBindings) {
      states_[b.state] = 1;
      updatedStates_[b.updated] = 1;
    }
    std::optional<std::vector<ProgramSpec>> specs;
    std::future<std::vector<std::vector<FusionGroup>>> fusion;
    {
      llvm::TimeRegion region(timer("lower: programs and tensors"));
      findWidenedOutputs();
      auto split = splitPrograms();
      if (!split)
        return split.takeError();
      specs = std::move(*split);
      if (opts_.fuseElementwise)
        for (ProgramSpec &spec : *specs)
          hoistIntoProducers(spec.nodes);
      // Fusion reads the graph only: it runs on a second thread while the
      // plan's tensors are made (a fifth of lowering a 10,000-node graph).
      fusion = std::async(std::launch::async, [this, &specs] { return fuseEach(*specs); });
      createValueTensors();
      markCastStates(g_, [this](const Value *v) { return tensorOf_.lookup(v); }, p_);
      storeUnconvertedCasts();
      dropConvertedExternalValues();
    }
    std::vector<std::vector<FusionGroup>> groups;
    {
      llvm::TimeRegion region(timer("lower: fusion and steps"));
      groups = fusion.get();
    }
    for (size_t i = 0; i < specs->size(); ++i) {
      const ProgramSpec &spec = (*specs)[i];
      plan::Program &prog = *p_.add_programs();
      prog.set_name(spec.name);
      {
        llvm::TimeRegion region(timer("lower: fusion and steps"));
        emitSteps(prog, spec.nodes, groups[i]);
      }
      llvm::TimeRegion region(timer("lower: bindings and in-place updates"));
      bindInputsAndOutputs(prog, spec);
      makeUpdatesInPlace(prog, spec);
      computeOutputsInPlace(prog);
      prog.set_launches(prog.steps_size());
    }
    {
      llvm::TimeRegion region(timer("lower: bindings and in-place updates"));
      for (const plan::Program &prog : p_.programs())
        if (auto err = checkDefinedBeforeUse(prog))
          return std::move(err);
    }
    {
      llvm::TimeRegion region(timer("lower: memory plan"));
      collectPinned();
      for (int i = 0; i < p_.programs_size(); ++i)
        planArena(p_.programs(i));
      placePinned();
      finishMemoryStats();
    }
    llvm::TimeRegion region(timer("lower: parameters"));
    addParameters();
    return std::move(p_);
  }

private:
  llvm::Timer *timer(llvm::StringRef phase) const {
    return opts_.timerFor ? opts_.timerFor(phase) : nullptr;
  }

  int addTensor(const std::string &name, const TensorType &type, plan::Storage storage) {
    plan::Tensor &t = *p_.add_tensors();
    t.set_name(name);
    t.set_type(planType(type.dtype));
    t.mutable_shape()->Add(type.shape.begin(), type.shape.end());
    t.set_storage(storage);
    viewOf_.push_back(-1);
    storage_.push_back(storage);
    return p_.tensors_size() - 1;
  }

  void setStorage(int id, plan::Storage storage) {
    p_.mutable_tensors(id)->set_storage(storage);
    storage_[id] = storage;
  }

  static std::string_view bytesOf(const Tensor &data) {
    return std::string_view(reinterpret_cast<const char *>(data.data()), data.byteSize());
  }

  /// State that starts at zero (optimizer moments, accumulators, counters)
  /// is not stored: the runtime zeroes it.
  static bool markedZero(plan::Tensor &t, std::string_view bytes) {
    if (t.storage() != plan::STATE ||
        !std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0; }))
      return false;
    t.set_zero_init(true);
    return true;
  }

  static void setData(plan::Tensor &t, const Tensor &data) {
    if (t.storage() == plan::STATE && data.untouchedZeros())
      return t.set_zero_init(true);
    if (!markedZero(t, bytesOf(data)))
      t.set_data(std::string(bytesOf(data)));
  }

  /// setData for a value the graph holds: with opts_.externalValues, a large
  /// one is not copied into the plan but written from the graph (amp-opt:
  /// GPT-2's weights were held three times while the plan was written).
  void setGraphData(int id, const Tensor &data) {
    // A deferred cast is left to markCastStates, which stores most of them
    // as converted at load: computing them here would be the whole cost.
    if (data.pendingCastSource()) {
      deferredCasts_.emplace_back(id, &data);
      return;
    }
    plan::Tensor &t = *p_.mutable_tensors(id);
    if (!opts_.externalValues || data.byteSize() < rt::kPlanInlineDataLimit ||
        data.untouchedZeros())
      return setData(t, data);
    if (!markedZero(t, bytesOf(data)))
      opts_.externalValues->emplace_back(id, bytesOf(data));
  }

  /// The deferred casts markCastStates did not mark take their value now.
  void storeUnconvertedCasts() {
    for (auto [id, data] : deferredCasts_) {
      const plan::Tensor &t = p_.tensors(id);
      if (t.has_cast_of() || t.zero_init())
        continue;
      data->data(); // computes the conversion, in the graph's own tensor
      setGraphData(id, *data);
    }
    deferredCasts_.clear();
  }

  /// A state converted at load stores nothing, from the graph either.
  void dropConvertedExternalValues() {
    if (!opts_.externalValues)
      return;
    auto &values = *opts_.externalValues;
    values.erase(std::remove_if(values.begin(), values.end(),
                                [&](const auto &v) { return p_.tensors(v.first).has_cast_of(); }),
                 values.end());
  }

  /// The tensor a view ultimately refers to.
  int rootOf(int id) const { return viewOf_[id] >= 0 ? viewOf_[id] : id; }
  bool isViewTensor(int id) const { return viewOf_[id] >= 0; }

  void makeView(int id, int base) {
    base = rootOf(base);
    plan::Tensor &t = *p_.mutable_tensors(id);
    t.set_view_of(base);
    t.set_storage(storage_[base]);
    t.set_offset(0);
    t.clear_data();
    viewOf_[id] = base;
    storage_[id] = storage_[base];
  }

  struct ProgramSpec {
    std::string name;
    std::vector<const Node *> nodes; ///< in graph order
    std::vector<const Value *> outputs;
    std::vector<StateBinding> updates;
  };

  /// The nodes needed to compute `roots`, in graph order.
  std::vector<const Node *> slice(const std::vector<const Value *> &roots) const {
    NodeIdMap<char> needed;
    std::vector<const Value *> work = roots;
    while (!work.empty()) {
      const Value *v = work.back();
      work.pop_back();
      const Node *n = v ? v->producer() : nullptr;
      if (!n || needed.lookup(n))
        continue;
      needed[n] = 1;
      for (const Value *in : n->inputs())
        work.push_back(in);
    }
    std::vector<const Node *> out;
    for (const Node *n : g_.nodes())
      if (needed.lookup(n))
        out.push_back(n);
    return out;
  }

  /// One "step" program, or "accumulate" and "apply" when the graph
  /// accumulates gradients (passes/Accumulate.cpp).
  llvm::Expected<std::vector<ProgramSpec>> splitPrograms() const {
    std::vector<const Value *> plainOutputs;
    ValueIdMap<char> seen;
    for (const Value *v : g_.outputs())
      if (!updatedStates_.lookup(v) && !seen[v]) {
        seen[v] = 1;
        plainOutputs.push_back(v);
      }
    auto acc = g_.metadata.find(kAccumulateStatesKey);
    if (acc == g_.metadata.end()) {
      ProgramSpec step{"step", {}, plainOutputs, g_.stateBindings};
      for (const Node *n : g_.nodes())
        step.nodes.push_back(n);
      return std::vector<ProgramSpec>{step};
    }
    std::set<std::string> accStates;
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(acc->second).split(names, ',', -1, false);
    for (llvm::StringRef n : names)
      accStates.insert(n.str());
    auto lossIt = g_.metadata.find(std::string(kInfoPrefix) + "output.loss");
    std::string loss = lossIt == g_.metadata.end() ? "" : lossIt->second;
    ProgramSpec accumulate{"accumulate", {}, {}, {}}, apply{"apply", {}, {}, {}};
    // The accumulation buffers and the loss run every micro-batch; so does
    // anything else computed from the forward pass (BatchNormalization's
    // running statistics, extra model outputs), as in PyTorch, where they
    // change with every forward. The rest (the optimizer, loss scaling) runs
    // once, in apply, from the accumulated gradients.
    std::vector<const StateBinding *> states;
    std::vector<const Value *> outputs;
    std::vector<bool> stateInAcc, outputInAcc;
    std::vector<const Value *> accRoots;
    for (const StateBinding &b : g_.stateBindings) {
      states.push_back(&b);
      stateInAcc.push_back(accStates.count(b.state->name()) > 0);
      if (stateInAcc.back())
        accRoots.push_back(b.updated);
    }
    for (const Value *v : plainOutputs) {
      outputs.push_back(v);
      outputInAcc.push_back(v->name() == loss);
      if (outputInAcc.back())
        accRoots.push_back(v);
    }
    accumulate.nodes = slice(accRoots);
    std::unordered_set<const Node *> forward(accumulate.nodes.begin(), accumulate.nodes.end());
    auto readsForward = [&](const Value *root) {
      for (const Node *n : slice({root}))
        if (forward.count(n))
          return true;
      return false;
    };
    for (bool grew = true; grew;) {
      grew = false;
      auto join = [&](const Value *root, std::vector<bool> &inAcc, size_t i) {
        if (inAcc[i] || !readsForward(root))
          return;
        inAcc[i] = true;
        accRoots.push_back(root);
        grew = true;
      };
      for (size_t i = 0; i < states.size(); ++i)
        join(states[i]->updated, stateInAcc, i);
      for (size_t i = 0; i < outputs.size(); ++i)
        join(outputs[i], outputInAcc, i);
      if (grew) {
        accumulate.nodes = slice(accRoots);
        forward.insert(accumulate.nodes.begin(), accumulate.nodes.end());
      }
    }
    std::vector<const Value *> applyRoots;
    for (size_t i = 0; i < states.size(); ++i) {
      (stateInAcc[i] ? accumulate : apply).updates.push_back(*states[i]);
      if (!stateInAcc[i])
        applyRoots.push_back(states[i]->updated);
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      (outputInAcc[i] ? accumulate : apply).outputs.push_back(outputs[i]);
      if (!outputInAcc[i])
        applyRoots.push_back(outputs[i]);
    }
    apply.nodes = slice(applyRoots);
    std::unordered_set<const Node *> inAcc(accumulate.nodes.begin(), accumulate.nodes.end());
    for (const Node *n : apply.nodes) {
      if (inAcc.count(n))
        return makeError("node '" + n->displayName() +
                         "' is needed by both the accumulate and the apply program");
      for (const Value *v : n->inputs())
        if (v && v->producer() && inAcc.count(v->producer()))
          return makeError("the apply program reads '" + v->name() +
                           "', computed by the accumulate program (only state crosses programs)");
    }
    return std::vector<ProgramSpec>{accumulate, apply};
  }

  /// Outputs computed by an exact widening Cast of an fp16/bf16 value (the
  /// fp32 weight gradients of a low-precision plan) are bound to the narrow
  /// value and read widened (Binding.widen_to): the same numbers, but no fp32
  /// copy is written every step, and the cast fuses into its other readers
  /// (the optimizer update) like any intermediate.
  void findWidenedOutputs() {
    for (const Value *v : g_.outputs()) {
      const Node *cast = v->producer();
      if (!cast || !cast->is("Cast") || updatedStates_.lookup(v) || v->dtype() != DType::F32)
        continue;
      const Value *narrow = cast->input(0);
      if (!narrow || !narrow->producer() ||
          (narrow->dtype() != DType::F16 && narrow->dtype() != DType::BF16))
        continue;
      widenedFrom_[v] = narrow;
      widenSources_[narrow] = 1;
    }
  }

  /// The value a program output's binding reads: itself, or the narrow value
  /// it widens.
  const Value *boundValue(const Value *v) const {
    const Value *narrow = widenedFrom_.lookup(v);
    return narrow ? narrow : v;
  }

  /// Values a fused step must store although no other step reads them.
  bool readAfterProgram(const Value *v) const {
    return (v->isGraphOutput() && !widenedFrom_.contains(v)) || widenSources_.lookup(v) ||
           updatedStates_.lookup(v);
  }

  void createValueTensors() {
    tensorOf_.reserve(g_.valueIdBound());
    for (const Value *v : g_.initializers()) {
      bool state = states_.contains(v);
      int id = addTensor(v->name(), v->type(), state ? plan::STATE : plan::CONSTANT);
      setGraphData(id, *v->data());
      tensorOf_[v] = id;
    }
    for (const Value *v : g_.inputs()) {
      bool state = states_.contains(v);
      int id = addTensor(v->name(), v->type(), state ? plan::STATE : plan::ARENA);
      if (state && v->hasDefault())
        setGraphData(id, *v->data());
      else if (state)
        setData(*p_.mutable_tensors(id), Tensor(v->type()));
      tensorOf_[v] = id;
    }
    for (const Node *n : g_.nodes()) {
      bool view = isView(*n);
      for (unsigned i = 0; i < n->numOutputs(); ++i) {
        const Value *v = n->output(i);
        if (!v)
          continue;
        int id = addTensor(v->name(), v->type(), plan::ARENA);
        tensorOf_[v] = id;
        if (view)
          makeView(id, tensorOf(n->input(0)));
      }
    }
  }

  int tensorOf(const Value *v) const {
    if (!v)
      return -1;
    assert(tensorOf_.contains(v) && "a value without a plan tensor");
    return tensorOf_.lookup(v);
  }

  /// (MatMul, operand) -> the untransposed value it reads (see
  /// foldTransposesIntoMatMuls), and the Transposes not emitted.
  /// MatMul operands read from another value: (source, read transposed).
  std::map<std::pair<const Node *, unsigned>, std::pair<const Value *, bool>> transposedOperand_;
  llvm::DenseSet<const Node *> foldedTransposes_;
  /// MatMuls that compute the transposed result of the Transpose they map to.
  llvm::DenseMap<const Node *, const Node *> swappedMatMuls_;

  /// Copies node attributes; tensor-valued ones become constant tensors.
  void addAttributes(const Node &n, google::protobuf::RepeatedPtrField<plan::Attribute> &out) {
    for (const auto &[name, a] : n.attributes()) {
      plan::Attribute &pa = *out.Add();
      pa.set_name(name);
      switch (a.kind) {
      case Attribute::Kind::Float:
        pa.set_f(a.f);
        break;
      case Attribute::Kind::Int:
        pa.set_i(a.i);
        break;
      case Attribute::Kind::String:
        pa.set_s(a.s);
        break;
      case Attribute::Kind::Ints:
        pa.mutable_ints()->mutable_values()->Add(a.ints.begin(), a.ints.end());
        break;
      case Attribute::Kind::Floats:
        pa.mutable_floats()->mutable_values()->Add(a.floats.begin(), a.floats.end());
        break;
      case Attribute::Kind::Tensor: {
        int id = addTensor(n.displayName() + "." + name, a.t->type(), plan::CONSTANT);
        setData(*p_.mutable_tensors(id), *a.t);
        pa.set_tensor(id);
        break;
      }
      case Attribute::Kind::Strings:
        pa.set_s(a.strings.empty() ? "" : a.strings.front());
        break;
      }
    }
  }

  /// MatMul operands produced by a Transpose of the last two axes read the
  /// Transpose's input instead, with transA / transB set on the step, and a
  /// Transpose read by nothing else is not emitted (its result is VIRTUAL):
  /// a transposed operand costs no copy (oneDNN reads it through exchanged
  /// strides, cuBLAS through its transpose flags). Weight transposes of
  /// PyTorch's Linear exports and the transposes of the MatMul gradient
  /// rules are all of this form. A swap of a swap (the gradient rule's
  /// Transpose of a rematerialised weight transpose) is the original
  /// operand, read with no flag; the inner Transpose goes too when nothing
  /// else reads it.
  void foldTransposesIntoMatMuls(const std::vector<const Node *> &nodes) {
    NodeIdMap<char> inProgram;
    inProgram.reserve(g_.nodeIdBound());
    for (const Node *n : nodes)
      inProgram[n] = 1;
    auto foldable = [&](const Node &n) {
      const Value *t = n.output();
      return swapsLastTwoAxes(n) && inProgram.lookup(&n) && !readAfterProgram(t) &&
             !t->isGraphOutput() && t->hasUses();
    };
    std::map<const Node *, unsigned> innerReadsLeft; // inner swap -> its reads not folded
    for (const Node *n : nodes) {
      if (!swapsLastTwoAxes(*n))
        continue;
      const Value *t = n->output();
      bool onlyMatMuls = foldable(*n);
      for (const Use &u : t->uses())
        onlyMatMuls = onlyMatMuls && inProgram.lookup(u.user) && u.user->is("MatMul") &&
                      u.operand < 2;
      if (!onlyMatMuls) {
        foldIntoProducingMatMul(*n, inProgram);
        continue;
      }
      // The inner swap cancels unless its operand is not materialized: a
      // MatMul result that the MatMul computes transposed, as the inner
      // swap's value (foldIntoProducingMatMul); then this swap reads that.
      const Node *inner = n->input(0)->producer();
      bool cancels = inner && foldable(*inner) && !computedByItsMatMul(*inner);
      const Value *source = cancels ? inner->input(0) : n->input(0);
      for (const Use &u : t->uses())
        transposedOperand_[{u.user, u.operand}] = {source, !cancels};
      foldedTransposes_.insert(n);
      setStorage(tensorOf(t), plan::VIRTUAL);
      if (cancels) {
        auto [it, fresh] = innerReadsLeft.try_emplace(inner, inner->output()->uses().size());
        --it->second;
      }
    }
    for (const auto &[inner, readsLeft] : innerReadsLeft) {
      if (readsLeft != 0 || foldedTransposes_.count(inner))
        continue;
      foldedTransposes_.insert(inner);
      setStorage(tensorOf(inner->output()), plan::VIRTUAL);
    }
  }

  /// Swap `t` is computed by the MatMul that produces its operand
  /// (foldIntoProducingMatMul): that operand is never written.
  bool computedByItsMatMul(const Node &t) const {
    const Node *m = t.input(0) ? t.input(0)->producer() : nullptr;
    return m && swappedMatMuls_.lookup(m) == &t;
  }

  /// A swap Transpose whose operand is a MatMul's result read by nothing
  /// else: the MatMul computes the transposed result itself, (A B)^T =
  /// B^T A^T, as a MatMul of its operands exchanged with their transpose
  /// flags flipped (the weight gradients of Linear layers, dW^T = x^T dY).
  void foldIntoProducingMatMul(const Node &n, const NodeIdMap<char> &inProgram) {
    const Value *y = n.input(0);
    const Node *m = y->producer();
    if (!m || !m->is("MatMul") || !m->domain().empty() || !inProgram.lookup(m) ||
        y->uses().size() != 1 || readAfterProgram(y) || y->isGraphOutput() ||
        swappedMatMuls_.count(m))
      return;
    if (m->input(0)->type().shape.size() < 2 || m->input(1)->type().shape.size() < 2)
      return; // a vector operand has no transpose
    swappedMatMuls_[m] = &n;
    foldedTransposes_.insert(&n);
    setStorage(tensorOf(y), plan::VIRTUAL);
  }

  /// Operand i of a MatMul step as emitted: the value read, and whether it
  /// is read transposed.
  std::pair<const Value *, bool> matMulOperand(const Node &n, unsigned i) const {
    auto folded = transposedOperand_.find({&n, i});
    if (folded == transposedOperand_.end())
      return {n.input(i), false};
    return folded->second;
  }

  /// Each program's fusion groups. Const, and reading the graph only.
  std::vector<std::vector<FusionGroup>> fuseEach(const std::vector<ProgramSpec> &specs) const {
    std::vector<std::vector<FusionGroup>> groups;
    for (const ProgramSpec &spec : specs)
      groups.push_back(findFusionGroups(spec.nodes, opts_.fuseElementwise,
                                        [&](const Value *v) { return readAfterProgram(v); }));
    return groups;
  }

  void emitSteps(plan::Program &prog, const std::vector<const Node *> &nodes,
                 const std::vector<FusionGroup> &groups) {
    foldTransposesIntoMatMuls(nodes);
    constexpr size_t kNoGroup = static_cast<size_t>(-1);
    NodeIdMap<size_t> groupOf(kNoGroup);
    groupOf.reserve(g_.nodeIdBound());
    for (size_t i = 0; i < groups.size(); ++i)
      for (const Node *n : groups[i].nodes)
        groupOf[n] = i;
    for (const Node *n : nodes) {
      if (isView(*n) || foldedTransposes_.count(n))
        continue;
      size_t group = groupOf.lookup(n);
      if (group == kNoGroup) {
        emitNode(prog, *n);
        continue;
      }
      if (groups[group].nodes.back() == n)
        emitGroup(prog, groups[group]);
    }
  }

  void noteStep(plan::Program &prog, const std::vector<const Value *> &defined) {
    int index = prog.steps_size() - 1;
    for (const Value *v : defined)
      stepOf_[v] = index;
  }

  void emitNode(plan::Program &prog, const Node &n) {
    plan::Step &s = *prog.add_steps();
    s.set_op(n.qualifiedOpType());
    s.set_name(n.displayName());
    auto swapped = swappedMatMuls_.find(&n);
    if (swapped != swappedMatMuls_.end()) {
      // (A B)^T = B^T A^T into the Transpose's result.
      for (unsigned i = 0; i < 2; ++i) {
        auto [source, transposed] = matMulOperand(n, 1 - i);
        s.add_inputs(tensorOf(source));
        addTransposeFlag(s, i, !transposed);
      }
      const Value *result = swapped->second->output();
      s.add_outputs(tensorOf(result));
      noteStep(prog, {result});
      return;
    }
    s.mutable_inputs()->Reserve(n.numInputs());
    bool matMul = n.is("MatMul");
    for (unsigned i = 0; i < n.numInputs(); ++i) {
      if (!matMul || i > 1) {
        s.add_inputs(tensorOf(n.input(i)));
        continue;
      }
      auto [source, transposed] = matMulOperand(n, i);
      s.add_inputs(tensorOf(source));
      addTransposeFlag(s, i, transposed);
    }
    if (n.is("Dropout") && n.domain().empty())
      addDropoutCounter(s, n);
    std::vector<const Value *> defined;
    defined.reserve(n.numOutputs());
    s.mutable_outputs()->Reserve(n.numOutputs());
    for (unsigned i = 0; i < n.numOutputs(); ++i) {
      const Value *v = n.output(i);
      s.add_outputs(tensorOf(v));
      if (v)
        defined.push_back(v);
    }
    addAttributes(n, *s.mutable_attrs());
    noteStep(prog, defined);
  }

  static void addTransposeFlag(plan::Step &s, unsigned operand, bool transposed) {
    if (!transposed)
      return;
    plan::Attribute &a = *s.add_attrs();
    a.set_name(operand == 0 ? "transA" : "transB");
    a.set_i(1);
  }

  /// Dropout draws its mask from (seed, run counter, element): the counter
  /// is an int64 state of the plan, operand 3 of the step, which the kernel
  /// advances every run. Being state, checkpoints save it, so a resumed run
  /// draws the masks the uninterrupted one would.
  ///
  /// ONNX lets the runtime choose the seed when the node has none, and
  /// PyTorch exports none: such a Dropout gets one derived from its
  /// counter's (unique) name, so that two of them draw independent masks
  /// (with one shared default they dropped the same elements every step).
  void addDropoutCounter(plan::Step &s, const Node &n) {
    while (s.inputs_size() < 3)
      s.add_inputs(-1);
    std::string name = uniqueCounterName(n.displayName() + ".dropout_run");
    int id = addTensor(name, TensorType(DType::I64, {}), plan::STATE);
    setData(*p_.mutable_tensors(id), Tensor::scalar(DType::I64, 0.0));
    s.add_inputs(id);
    if (n.hasAttr("seed"))
      return;
    plan::Attribute &seed = *s.add_attrs();
    seed.set_name("seed");
    seed.set_i(static_cast<int64_t>(stableHash(name)));
  }

  /// State names are checkpoint keys: nodes sharing a name (or having
  /// none) must not share a counter.
  std::string uniqueCounterName(const std::string &base) {
    std::string name = base;
    for (int i = 1; !counterNames_.insert(name).second || g_.findValue(name); ++i)
      name = base + "." + std::to_string(i);
    return name;
  }

  /// FNV-1a: the same seed for the same plan on every machine and build.
  static uint64_t stableHash(const std::string &text) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : text)
      h = (h ^ c) * 0x100000001b3ull;
    return h;
  }

  int constantScalar(DType dtype, double value) {
    int id = addTensor("fused.constant", TensorType(dtype, {}), plan::CONSTANT);
    setData(*p_.mutable_tensors(id), Tensor::scalar(dtype, value));
    return id;
  }

  void emitGroup(plan::Program &prog, const FusionGroup &grp) {
    llvm::SmallPtrSet<const Value *, 16> inside;
    for (const Node *n : grp.nodes)
      inside.insert(n->output());
    llvm::SmallPtrSet<const Node *, 16> members(grp.nodes.begin(), grp.nodes.end());

    plan::Step &s = *prog.add_steps();
    s.set_op("ampc.Fused");
    plan::FusedProgram &fp = *s.mutable_fused();
    llvm::DenseMap<const Value *, int> reg;
    auto regOf = [&](const Value *v) {
      auto it = reg.find(v);
      assert(it != reg.end() && "an operand without a register");
      return it->second;
    };
    std::vector<int> inputTensors;
    auto inputReg = [&](const Value *v) {
      auto it = reg.find(v);
      if (it != reg.end())
        return it->second;
      inputTensors.push_back(tensorOf(v));
      return reg[v] = static_cast<int>(inputTensors.size()) - 1;
    };
    for (const Node *n : grp.nodes)
      for (const Value *v : n->inputs())
        if (v && !inside.count(v))
          inputReg(v);
    // Constants the lowering adds (Mean's 1/n) are inputs too.
    std::vector<std::pair<const Node *, int>> meanScales;
    for (const Node *n : grp.nodes)
      if (n->is("Mean")) {
        inputTensors.push_back(constantScalar(n->output()->dtype(), 1.0 / n->numInputs()));
        meanScales.push_back({n, static_cast<int>(inputTensors.size()) - 1});
      }
    int next = static_cast<int>(inputTensors.size());
    fp.set_num_inputs(next);
    for (const Node *n : grp.nodes) {
      plan::ElemType type = planType(n->output()->dtype());
      auto instr = [&](llvm::StringRef op, llvm::ArrayRef<int> args) {
        plan::Instruction &in = *fp.add_instructions();
        in.set_op(op.str());
        in.mutable_args()->Add(args.begin(), args.end());
        in.set_type(type);
        return next++;
      };
      if (n->is("Sum") || n->is("Mean")) {
        int acc = regOf(n->input(0));
        for (unsigned i = 1; i < n->numInputs(); ++i)
          acc = instr("Add", {acc, regOf(n->input(i))});
        if (n->is("Mean"))
          for (const auto &[node, r] : meanScales)
            if (node == n)
              acc = instr("Mul", {acc, r});
        if (n->numInputs() == 1)
          acc = instr("Identity", {acc});
        reg[n->output()] = acc;
        continue;
      }
      llvm::SmallVector<int, 4> args;
      for (const Value *v : n->inputs())
        if (v)
          args.push_back(regOf(v));
      llvm::SmallString<32> opStorage;
      int r = instr(n->qualifiedOpType(opStorage), args);
      plan::Instruction &in = *fp.mutable_instructions(fp.instructions_size() - 1);
      addAttributes(*n, *in.mutable_attrs());
      if (n->is("Clip")) {
        plan::Attribute &lo = *in.add_attrs();
        lo.set_name("has_min");
        lo.set_i(n->input(1) != nullptr);
        plan::Attribute &hi = *in.add_attrs();
        hi.set_name("has_max");
        hi.set_i(n->input(2) != nullptr);
      }
      reg[n->output()] = r;
    }
    for (int t : inputTensors)
      s.add_inputs(t);
    std::vector<const Value *> defined;
    for (const Node *n : grp.nodes) {
      const Value *v = n->output();
      bool usedOutside = readAfterProgram(v);
      for (const Use &u : v->uses())
        usedOutside = usedOutside || !members.count(u.user);
      if (!usedOutside)
        continue;
      s.add_outputs(tensorOf(v));
      fp.add_results(regOf(v));
      defined.push_back(v);
    }
    s.set_name(grp.nodes.back()->displayName());
    // A group whose values nobody reads (a widening cast of an output that is
    // read narrow) is no step at all.
    if (defined.empty())
      prog.mutable_steps()->RemoveLast();
    else
      noteStep(prog, defined);
    // Values computed inside the group and never stored need no storage.
    for (const Node *n : grp.nodes)
      if (std::find(defined.begin(), defined.end(), n->output()) == defined.end())
        setStorage(tensorOf(n->output()), plan::VIRTUAL);
  }

  void bindInputsAndOutputs(plan::Program &prog, const ProgramSpec &spec) {
    // The graph inputs the program reads (a set of those few, not of every
    // operand: that set was 1.5% of compiling a graph of 10,000 nodes).
    llvm::SmallPtrSet<const Value *, 8> read;
    for (const Node *n : spec.nodes)
      for (const Value *v : n->inputs())
        if (v && v->isGraphInput())
          read.insert(v);
    for (const Value *v : spec.outputs)
      if (v->isGraphInput())
        read.insert(v);
    for (const Value *v : g_.inputs()) {
      if (states_.contains(v) || !read.count(v))
        continue;
      plan::Binding &b = *prog.add_inputs();
      b.set_name(v->name());
      b.set_tensor(tensorOf(v));
      if (v->hasDefault()) {
        b.set_has_default(true);
        b.set_default_data(std::string(reinterpret_cast<const char *>(v->data()->data()),
                                       v->data()->byteSize()));
      }
    }
    for (const Value *v : spec.outputs) {
      plan::Binding &b = *prog.add_outputs();
      b.set_name(v->name());
      b.set_tensor(tensorOf(boundValue(v)));
      if (boundValue(v) != v)
        b.set_widen_to(planType(v->dtype()));
    }
    for (const StateBinding &sb : spec.updates) {
      plan::StateUpdate &u = *prog.add_updates();
      u.set_state(tensorOf(sb.state));
      u.set_updated(tensorOf(sb.updated));
    }
  }

  /// The views of each plan tensor, indexed by tensor (tensor ids are dense:
  /// arrays, not hash maps, so that walks in step order stay in cache).
  std::vector<llvm::SmallVector<int, 2>> viewsByTensor() const {
    std::vector<llvm::SmallVector<int, 2>> viewsOf(p_.tensors_size());
    for (int i = 0; i < p_.tensors_size(); ++i)
      if (isViewTensor(i))
        viewsOf[viewOf_[i]].push_back(i);
    return viewsOf;
  }

  /// A Cast that widens a bf16 gradient to fp32 for the one
  /// LayerNormalizationGrad or SoftmaxGrad that reads it: the bf16 operand
  /// lives until the step after that one, so that a backend may give the
  /// step the bf16 values and skip the Cast (the CPU backend's CastPrologue)
  /// without the step's results, or the results of the step after it that
  /// the step may write too (a SoftmaxGrad's scaled bf16 cast), landing on
  /// them. At most the bf16 bytes for a few steps more (the bench GPT: 3 of
  /// its 13 such Casts could not be skipped before).
  void keepNarrowOperands(const plan::Program &prog, const std::vector<int> &soleReaders,
                          std::vector<int> &end) const {
    for (int s = 0; s < prog.steps_size(); ++s) {
      const plan::Step &cast = prog.steps(s);
      if (!rt::isCastStep(cast, plan::F32))
        continue;
      int x = cast.inputs(0), y = cast.outputs(0);
      if (x < 0 || y < 0 || p_.tensors(x).type() != plan::BF16 || soleReaders[y] < 0 ||
          isViewTensor(y))
        continue;
      const plan::Step &r = prog.steps(soleReaders[y]);
      if (rt::readsInput0AsAnyFloat(r) && r.inputs(0) == y)
        end[rootOf(x)] = std::max(end[rootOf(x)], soleReaders[y] + 1);
    }
  }

  /// A MatMul whose result of rank 3 or more only a Transpose keeping the
  /// last axis last reads: the Transpose's result lives from the MatMul's
  /// step on, so that a backend may have the MatMul write it directly
  /// through strides and skip the Transpose (the CPU backend's
  /// TransposedResult) without the MatMul's operands, or the results of the
  /// steps in between, landing on it. The bench GPT bf16: 8 of its 16 such
  /// Transposes could not be skipped before.
  void keepTransposedResults(const plan::Program &prog, const std::vector<int> &soleReaders,
                             std::vector<int> &start) const {
    for (int m = 0; m < prog.steps_size(); ++m) {
      int t = rt::planTransposeOfMatMulResult(p_, prog, m, soleReaders);
      if (t < 0)
        continue;
      int z = rootOf(prog.steps(t).outputs(0));
      start[z] = start[z] < 0 ? m : std::min(start[z], m);
    }
  }

  /// The step index after which no step reads tensor `root` (or a view of it).
  std::vector<int> lastReads(const plan::Program &prog) const {
    std::vector<int> last(p_.tensors_size(), -1);
    for (int s = 0; s < prog.steps_size(); ++s)
      for (int id : prog.steps(s).inputs())
        if (id >= 0)
          last[rootOf(id)] = s;
    return last;
  }

  /// An update computed by a fused step (or an ampc.AdamW, elementwise too)
  /// after the last read of its state is written straight into the state: no
  /// copy, no arena buffer.
  void makeUpdatesInPlace(plan::Program &prog, const ProgramSpec &spec) {
    auto last = lastReads(prog);
    std::vector<char> used(p_.tensors_size(), 0);
    // The views of each tensor, so re-basing them costs their number only.
    auto viewsOf = viewsByTensor();
    for (const StateBinding &sb : spec.updates) {
      int step = stepOf_.lookup(sb.updated);
      if (step < 0 || !rt::planStepMayComputeInPlace(prog.steps(step).op()))
        continue;
      int state = tensorOf(sb.state), updated = tensorOf(sb.updated);
      if (isViewTensor(updated) || sb.updated->isGraphInput() || used[state])
        continue;
      if (last[state] > step)
        continue;
      // Views of the updated value now alias the state too.
      llvm::SmallVector<int, 2> moved = std::move(viewsOf[updated]);
      viewsOf[updated].clear();
      moved.push_back(updated);
      for (int i : moved) {
        makeView(i, state);
        viewsOf[state].push_back(i);
      }
      used[state] = 1;
    }
  }

  /// Some result of fused step `step` is its operand `in` itself (a result
  /// register that is an input register): stored after another result, it
  /// would read bytes that result overwrote if that result took `in`'s.
  static bool resultIsInput(const plan::Step &step, int in) {
    for (int r : step.fused().results())
      if (r >= 0 && r < step.inputs_size() && step.inputs(r) == in)
        return true;
    return false;
  }

  /// A fused step that reads a temporary of the same size as a result for
  /// the last time computes that result in place: the temporary lives in the
  /// result's bytes from the start (gradients checked for overflow and then
  /// unscaled need no second buffer, a residual gradient's Add or a Relu's
  /// gradient writes over the value it reads). Each element is read before
  /// it is written, by every backend; the values are the same bits, and the
  /// step writes lines it has just read instead of fresh ones (ResNet-20 in
  /// fp32: the fused steps 3.3 -> 2.5 ms a step).
  void computeOutputsInPlace(plan::Program &prog) {
    std::vector<char> outputs(p_.tensors_size(), 0), inputs(p_.tensors_size(), 0);
    for (const plan::Binding &b : prog.outputs())
      outputs[b.tensor()] = 1;
    for (const plan::Binding &b : prog.inputs())
      inputs[rootOf(b.tensor())] = 1;
    // An update's value is read after the last step, when it is stored.
    for (const plan::StateUpdate &u : prog.updates())
      outputs[rootOf(u.updated())] = 1;
    auto last = lastReads(prog);
    auto viewsOf = viewsByTensor();
    std::vector<char> written(p_.tensors_size(), 0);
    for (int s = 0; s < prog.steps_size(); ++s) {
      const plan::Step &step = prog.steps(s);
      if (step.op() == "ampc.Fused")
        for (int out : step.outputs()) {
          if (out < 0 || isViewTensor(out) || storage_[out] != plan::ARENA)
            continue;
          for (int i = 0; i < step.inputs_size(); ++i) {
            int in = step.inputs(i);
            if (in < 0 || isViewTensor(in) || storage_[in] != plan::ARENA || outputs[in] ||
                inputs[in] || !written[in] || last[in] != s ||
                rt::planTensorBytes(p_.tensors(in)) != rt::planTensorBytes(p_.tensors(out)) ||
                !viewsOf[in].empty() || resultIsInput(step, in))
              continue;
            makeView(in, out);
            viewsOf[out].push_back(in);
            break;
          }
        }
      for (int id : step.outputs())
        if (id >= 0)
          written[rootOf(id)] = 1;
    }
  }

  /// Every tensor a step reads is state, a constant, a program input, or
  /// written by an earlier step of the program: a lowering invariant, checked
  /// because a violation would read garbage at run time.
  llvm::Error checkDefinedBeforeUse(const plan::Program &prog) const {
    std::vector<char> written(p_.tensors_size(), 0);
    for (const plan::Binding &b : prog.inputs())
      written[rootOf(b.tensor())] = 1;
    auto defined = [&](int id) {
      int root = rootOf(id);
      plan::Storage s = storage_[root];
      return s == plan::STATE || s == plan::CONSTANT || written[root];
    };
    for (int s = 0; s < prog.steps_size(); ++s) {
      const plan::Step &step = prog.steps(s);
      for (int id : step.inputs())
        if (id >= 0 && !defined(id))
          return makeError("internal error in the lowering: program '" + prog.name() + "' step " +
                           std::to_string(s) + " ('" + step.name() + "') reads '" +
                           p_.tensors(id).name() + "' before any step writes it");
      for (int id : step.outputs())
        if (id >= 0)
          written[rootOf(id)] = 1;
    }
    for (const plan::Binding &b : prog.outputs())
      if (!defined(b.tensor()))
        return makeError("internal error in the lowering: program '" + prog.name() +
                         "' output '" + b.name() + "' is never written");
    return llvm::Error::success();
  }

  /// Program inputs and outputs keep their own arena bytes: inputs are fed
  /// once and reused step after step (and defaults are written at load), and
  /// outputs are read after later programs ran, so no temporary may reuse them.
  void collectPinned() {
    pinned_.assign(p_.tensors_size(), 0);
    for (const plan::Program &prog : p_.programs()) {
      for (const plan::Binding &b : prog.inputs())
        pinned_[rootOf(b.tensor())] = 1;
      for (const plan::Binding &b : prog.outputs())
        pinned_[rootOf(b.tensor())] = 1;
    }
  }

  void placePinned() {
    plan::MemoryStats &m = *p_.mutable_memory();
    uint64_t offset = m.arena_bytes(), bytes = 0;
    for (int id = 0; id < static_cast<int>(pinned_.size()); ++id) {
      if (!pinned_[id])
        continue;
      plan::Tensor &t = *p_.mutable_tensors(id);
      if (t.storage() != plan::ARENA || t.has_view_of())
        continue;
      uint64_t size = (rt::planTensorBytes(t) + kArenaAlignment - 1) / kArenaAlignment *
                      kArenaAlignment;
      t.set_offset(offset);
      offset += std::max<uint64_t>(size, kArenaAlignment);
      bytes += std::max<uint64_t>(size, kArenaAlignment);
    }
    m.set_arena_bytes(offset);
    m.set_io_bytes(bytes);
    m.set_lower_bound_bytes(m.lower_bound_bytes() + bytes);
    m.set_unplanned_bytes(m.unplanned_bytes() + bytes);
  }

  void planArena(const plan::Program &prog) {
    int numSteps = prog.steps_size();
    std::vector<int> start(p_.tensors_size(), -1), end(p_.tensors_size(), -1);
    for (int s = 0; s < numSteps; ++s) {
      for (int id : prog.steps(s).outputs())
        if (id >= 0 && start[rootOf(id)] < 0)
          start[rootOf(id)] = s;
      for (int id : prog.steps(s).inputs())
        if (id >= 0)
          end[rootOf(id)] = std::max(end[rootOf(id)], s);
    }
    for (const plan::Binding &b : prog.inputs())
      start[rootOf(b.tensor())] = 0;
    for (const plan::Binding &b : prog.outputs())
      end[rootOf(b.tensor())] = numSteps;
    for (const plan::StateUpdate &u : prog.updates())
      end[rootOf(u.updated())] = numSteps;
    std::vector<int> soleReaders = rt::planSoleReaders(p_, prog);
    keepNarrowOperands(prog, soleReaders, end);
    keepTransposedResults(prog, soleReaders, start);

    std::vector<BufferRequest> reqs;
    std::vector<int> ids;
    for (int i = 0; i < p_.tensors_size(); ++i) {
      // Only this program's buffers: those it writes or binds.
      if (storage_[i] != plan::ARENA || isViewTensor(i) || start[i] < 0 || pinned_[i])
        continue;
      int s = std::max(start[i], 0);
      int e = std::max(end[i], s);
      reqs.push_back({rt::planTensorBytes(p_.tensors(i)), s, e});
      ids.push_back(i);
    }
    MemoryPlan mp = planMemory(reqs);
    describePeak(prog, reqs, ids);
    countSavedActivations(prog, start, end);
    for (size_t k = 0; k < ids.size(); ++k)
      p_.mutable_tensors(ids[k])->set_offset(mp.offsets[k]);
    // Programs run one after the other: they share the arena.
    plan::MemoryStats &m = *p_.mutable_memory();
    m.set_arena_bytes(std::max(m.arena_bytes(), mp.arenaBytes));
    m.set_lower_bound_bytes(std::max(m.lower_bound_bytes(), mp.lowerBoundBytes));
    m.set_unplanned_bytes(m.unplanned_bytes() + mp.unplannedBytes);
  }

  /// Bytes of arena values written before the step that computes the loss
  /// and read after it: the activations kept for the backward pass. Program
  /// inputs are not among them: they are fed, not computed, and keep their
  /// bytes for the whole program whether the backward pass reads them or not.
  void countSavedActivations(const plan::Program &prog, const std::vector<int> &start,
                             const std::vector<int> &end) {
    auto loss = p_.info().find("output.loss");
    if (loss == p_.info().end())
      return;
    // The loss output's binding: the loss itself, or the narrow value it
    // widens when the loss was reduced in low precision.
    int lossTensor = -1;
    for (const plan::Binding &b : prog.outputs())
      if (b.name() == loss->second)
        lossTensor = rootOf(b.tensor());
    int lossStep = -1;
    for (int s = 0; s < prog.steps_size() && lossStep < 0; ++s)
      for (int id : prog.steps(s).outputs())
        if (id >= 0 && rootOf(id) == lossTensor)
          lossStep = s;
    if (lossStep < 0)
      return;
    std::vector<char> inputs(p_.tensors_size(), 0);
    for (const plan::Binding &b : prog.inputs())
      inputs[rootOf(b.tensor())] = 1;
    uint64_t saved = 0;
    for (int i = 0; i < p_.tensors_size(); ++i) {
      if (storage_[i] != plan::ARENA || isViewTensor(i) || start[i] < 0 || inputs[i])
        continue;
      if (start[i] < lossStep && end[i] > lossStep)
        saved += rt::planTensorBytes(p_.tensors(i));
    }
    plan::MemoryStats &m = *p_.mutable_memory();
    m.set_saved_activation_bytes(std::max(m.saved_activation_bytes(), saved));
  }

  /// info["peak.<program>"]: the step where the most arena bytes are live and
  /// the largest buffers live there, to see what dominates memory.
  void describePeak(const plan::Program &prog, const std::vector<BufferRequest> &reqs,
                    const std::vector<int> &ids) {
    int steps = prog.steps_size();
    // Live bytes per step by a difference array: linear in buffers and steps
    // (summing each buffer over its range is quadratic for long-lived ones).
    std::vector<int64_t> delta(steps + 2, 0);
    for (const BufferRequest &r : reqs) {
      int first = std::min(r.start, steps), last = std::min(r.end, steps);
      delta[first] += static_cast<int64_t>(r.size);
      delta[last + 1] -= static_cast<int64_t>(r.size);
    }
    std::vector<uint64_t> live(steps + 1, 0);
    int64_t running = 0;
    for (int t = 0; t <= steps; ++t)
      live[t] = static_cast<uint64_t>(running += delta[t]);
    int peak = static_cast<int>(std::max_element(live.begin(), live.end()) - live.begin());
    std::vector<std::pair<uint64_t, int>> at;
    for (size_t k = 0; k < reqs.size(); ++k)
      if (reqs[k].start <= peak && peak <= reqs[k].end)
        at.push_back({reqs[k].size, ids[k]});
    std::sort(at.rbegin(), at.rend());
    std::string text = "step " + std::to_string(peak) + ", " + std::to_string(live[peak]) +
                       " bytes live:";
    for (size_t k = 0; k < at.size() && k < 6; ++k)
      text += " '" + p_.tensors(at[k].second).name() + "' " + std::to_string(at[k].first) + ",";
    text.pop_back();
    (*p_.mutable_info())["memory.peak." + prog.name()] = text;
  }

  void finishMemoryStats() {
    plan::MemoryStats &m = *p_.mutable_memory();
    uint64_t state = 0, constants = 0;
    for (const plan::Tensor &t : p_.tensors()) {
      if (t.has_view_of())
        continue;
      if (t.storage() == plan::STATE)
        state += rt::planTensorBytes(t);
      if (t.storage() == plan::CONSTANT)
        constants += rt::planTensorBytes(t);
    }
    m.set_state_bytes(state);
    m.set_constant_bytes(constants);
  }

  void addParameters() {
    for (const std::string &name : opts_.modelParameters) {
      const Value *v = g_.findValue(name);
      if (!v || !states_.contains(v))
        continue;
      plan::Parameter &param = *p_.add_parameters();
      param.set_onnx_name(name);
      param.set_state(tensorOf(v));
      const Value *grad = g_.findValue(name + "_grad");
      param.set_grad(grad && grad->isGraphOutput() ? tensorOf(boundValue(grad)) : -1);
    }
  }

  const Graph &g_;
  const LowerOptions &opts_;
  plan::Plan p_;
  /// Each plan tensor's view_of (-1 for none) and storage, as in p_, kept
  /// flat: the passes over every step's operands read them, and the
  /// tensors' messages lie apart (at 20,000 nodes those reads were a tenth
  /// of the compile's cache misses, growing 4-10x per doubling).
  std::vector<int> viewOf_;
  std::vector<plan::Storage> storage_;
  /// Each value's plan tensor (-1 for none).
  ValueIdMap<int> tensorOf_{-1};
  /// Plan tensors whose graph value is a deferred cast, until markCastStates.
  std::vector<std::pair<int, const Tensor *>> deferredCasts_;
  /// The graph's state inputs, and the updated values that replace them.
  ValueIdMap<char> states_;
  ValueIdMap<char> updatedStates_;
  /// Outputs read widened from a narrow value (findWidenedOutputs), and those values.
  ValueIdMap<const Value *> widenedFrom_{nullptr};
  ValueIdMap<char> widenSources_;
  /// The step that defines each value (-1 for none).
  ValueIdMap<int> stepOf_{-1};
  std::unordered_set<std::string> counterNames_; ///< Dropout run counters named so far
  /// Program inputs and outputs, by tensor (collectPinned).
  std::vector<char> pinned_;
};

} // namespace

llvm::Expected<plan::Plan> lowerToPlan(const Graph &g, const LowerOptions &opts) {
  return Lowering(g, opts).run();
}

llvm::Expected<std::string> serializePlanFile(plan::Plan &p) {
  std::string bytes, error;
  if (!rt::serializePlan(p, bytes, error))
    return makeError(error);
  return bytes;
}

} // namespace ampc
