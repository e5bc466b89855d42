//===- ChannelLayout.cpp - Activations kept in channel blocks of 16 -------===//
//
// The choice is a union-find over tensors: a step's Shared operands must
// share a layout, so they join one group; a group is kept blocked when every
// tensor in it can be (chooseChannelBlocked's conditions) and its
// convolution operands, each of which would otherwise cost a reorder, are
// more than its plain-only uses, each of which costs a conversion.
//
//===----------------------------------------------------------------------===//

#include "ChannelLayout.h"

#include "KernelHelpers.h"

#include <cstdlib>
#include <cstring>
#include <numeric>

namespace ampc::rt::cpu {

namespace {

constexpr int64_t kBlock = 16;

std::vector<int64_t> shapeOf(const plan::Tensor &t) {
  return std::vector<int64_t>(t.shape().begin(), t.shape().end());
}

/// A fused step works on either layout when each input is the result's
/// shape or one element: no input is broadcast along some dimensions only.
bool fusedIsElementwise(const plan::Plan &plan, const plan::Step &step) {
  if (step.outputs_size() == 0 || step.outputs(0) < 0 || step.outputs(0) >= plan.tensors_size())
    return false;
  std::vector<int64_t> shape = shapeOf(plan.tensors(step.outputs(0)));
  for (int id : step.outputs())
    if (id < 0 || id >= plan.tensors_size() || shapeOf(plan.tensors(id)) != shape)
      return false;
  for (int id : step.inputs()) {
    if (id < 0 || id >= plan.tensors_size())
      return false;
    const plan::Tensor &t = plan.tensors(id);
    if (shapeOf(t) != shape && planNumElements(t) != 1)
      return false;
  }
  return true;
}

/// Tensor `id` is a view of another tensor of its type and shape: the same
/// values at the same places (an elementwise step computed in place), which
/// can share that tensor's layout whatever it is.
bool isAliasView(const plan::Plan &plan, int id) {
  const plan::Tensor &t = plan.tensors(id);
  if (!t.has_view_of() || t.view_of() < 0 || t.view_of() >= plan.tensors_size())
    return false;
  const plan::Tensor &base = plan.tensors(t.view_of());
  return !base.has_view_of() && base.type() == t.type() && shapeOf(base) == shapeOf(t);
}

bool mayBeBlocked(const plan::Plan &plan, int id) {
  const plan::Tensor &t = plan.tensors(id);
  if (t.storage() != plan::ARENA || (t.has_view_of() && !isAliasView(plan, id)))
    return false;
  if (t.type() != plan::F32 && t.type() != plan::BF16 && t.type() != plan::F16)
    return false;
  if (t.shape_size() < 3 || t.shape_size() > 5 || t.shape(1) <= 0 || t.shape(1) % kBlock)
    return false;
  return planNumElements(t) > 0;
}

/// Tensors the host reads or writes (program inputs and outputs, state
/// updates, parameter gradients) and views or their bases keep the plain
/// layout whatever their steps prefer, except views of their base's type and
/// shape (isAliasView), which take their base's.
void excludeHostVisible(const plan::Plan &plan, std::vector<uint8_t> &candidate) {
  auto exclude = [&](int id) {
    if (id >= 0 && id < static_cast<int>(candidate.size()))
      candidate[id] = 0;
  };
  for (int i = 0; i < plan.tensors_size(); ++i)
    if (plan.tensors(i).has_view_of() && !isAliasView(plan, i)) {
      exclude(i);
      exclude(plan.tensors(i).view_of());
    }
  for (const plan::Program &prog : plan.programs()) {
    for (const plan::Binding &b : prog.inputs())
      exclude(b.tensor());
    for (const plan::Binding &b : prog.outputs())
      exclude(b.tensor());
    for (const plan::StateUpdate &u : prog.updates()) {
      exclude(u.state());
      exclude(u.updated());
    }
  }
  for (const plan::Parameter &p : plan.parameters())
    exclude(p.grad());
}

struct Groups {
  std::vector<int> parent;
  explicit Groups(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int i) {
    while (parent[i] != i)
      i = parent[i] = parent[parent[i]];
    return i;
  }
  void unite(int a, int b) { parent[find(a)] = find(b); }
};

/// Calls fn(id, layout) for every tensor operand of `step`.
template <typename Fn> void forEachOperand(const plan::Plan &plan, const plan::Step &step, Fn fn) {
  for (int i = 0; i < step.inputs_size(); ++i)
    if (step.inputs(i) >= 0 && step.inputs(i) < plan.tensors_size())
      fn(step.inputs(i), operandLayout(plan, step, false, i));
  for (int i = 0; i < step.outputs_size(); ++i)
    if (step.outputs(i) >= 0 && step.outputs(i) < plan.tensors_size())
      fn(step.outputs(i), operandLayout(plan, step, true, i));
}

} // namespace

OperandLayout operandLayout(const plan::Plan &plan, const plan::Step &step, bool output,
                            int index) {
  const std::string &op = step.op();
  // Conv: X in, Y out. ConvGrad: dY and X in, dX out.
  if (op == "Conv")
    return index == 0 ? OperandLayout::Free : OperandLayout::Plain;
  if (op == "ampc.ConvGrad")
    return index == 0 || (!output && index == 1) ? OperandLayout::Free : OperandLayout::Plain;
  // BatchNormalization: X in, Y out. Its gradient: dY and X in, dX out.
  if (op == "BatchNormalization")
    return index == 0 ? OperandLayout::Shared : OperandLayout::Plain;
  if (op == "ampc.BatchNormalizationGrad")
    return index == 0 || (!output && index == 1) ? OperandLayout::Shared : OperandLayout::Plain;
  if (op == "ampc.Fused" && fusedIsElementwise(plan, step)) {
    int id = output ? step.outputs(index) : step.inputs(index);
    return planNumElements(plan.tensors(id)) == 1 &&
                   planNumElements(plan.tensors(step.outputs(0))) != 1
               ? OperandLayout::Plain
               : OperandLayout::Shared;
  }
  return OperandLayout::Plain;
}

std::vector<uint8_t> chooseChannelBlocked(const plan::Plan &plan) {
  const int n = plan.tensors_size();
  std::vector<uint8_t> blocked(n, 0);
  if (const char *env = std::getenv("AMPC_CPU_LAYOUT"); env && std::strcmp(env, "plain") == 0)
    return blocked;
  std::vector<uint8_t> candidate(n, 0);
  for (int i = 0; i < n; ++i)
    candidate[i] = mayBeBlocked(plan, i);
  excludeHostVisible(plan, candidate);

  Groups groups(n);
  // An alias view and its base are the same bytes: one layout.
  for (int i = 0; i < n; ++i)
    if (isAliasView(plan, i))
      groups.unite(i, plan.tensors(i).view_of());
  for (const plan::Program &prog : plan.programs())
    for (const plan::Step &step : prog.steps()) {
      int first = -1;
      forEachOperand(plan, step, [&](int id, OperandLayout layout) {
        if (layout != OperandLayout::Shared)
          return;
        if (first < 0)
          first = id;
        else
          groups.unite(first, id);
      });
    }
  // Per group: convolution operands (reorders saved) and plain-only uses
  // (conversions paid); one tensor that cannot be blocked rules it out.
  std::vector<int64_t> convUses(n, 0), plainUses(n, 0);
  std::vector<uint8_t> ruledOut(n, 0);
  for (const plan::Program &prog : plan.programs())
    for (const plan::Step &step : prog.steps())
      forEachOperand(plan, step, [&](int id, OperandLayout layout) {
        int g = groups.find(id);
        convUses[g] += layout == OperandLayout::Free;
        plainUses[g] += layout == OperandLayout::Plain;
      });
  for (int i = 0; i < n; ++i)
    if (!candidate[i])
      ruledOut[groups.find(i)] = 1;
  for (int i = 0; i < n; ++i) {
    int g = groups.find(i);
    blocked[i] = candidate[i] && !ruledOut[g] && convUses[g] > plainUses[g];
  }
  return blocked;
}

//===----------------------------------------------------------------------===//
// Copies in the plain layout
//===----------------------------------------------------------------------===//

ChannelBlockReorder channelLayoutMove(const TensorArg &t, bool toBlocked) {
  ChannelBlockReorder r;
  r.N = t.shape[0];
  r.C = t.shape[1];
  r.S = t.numel / (r.N * r.C);
  r.elemBytes = cpu::elemBytes(t.type);
  r.toBlocked = toBlocked;
  return r;
}

void ChannelLayoutKernel::run() {
  for (const Copy &c : before_)
    c.move.run(c.src, c.dst);
  inner_->run();
  if (!inner_->asynchronous())
    for (const Copy &c : after_)
      c.move.run(c.src, c.dst);
}

void ChannelLayoutKernel::finish() {
  if (!inner_->asynchronous())
    return;
  inner_->finish();
  for (const Copy &c : after_)
    c.move.run(c.src, c.dst);
}

} // namespace ampc::rt::cpu
