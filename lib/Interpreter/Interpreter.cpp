//===- Interpreter.cpp - The reference interpreter -------------------------===//

#include "ampc/Interpreter/Interpreter.h"

#include "Kernels.h"

#include "llvm/ADT/SmallString.h"

#include <algorithm>

namespace ampc {
namespace interp {

Tensor KernelContext::out(unsigned i) const { return Tensor(outType(i)); }

const TensorType &KernelContext::outType(unsigned i) const {
  static const TensorType none;
  const Value *v = node.output(i);
  return v ? v->type() : none;
}

llvm::Error KernelContext::error(const llvm::Twine &msg) const {
  return makeError("node '" + node.displayName() + "' (" + node.qualifiedOpType() + "): " + msg);
}

std::vector<std::string> KernelTable::names() const {
  std::vector<std::string> out;
  for (const auto &entry : kernels_)
    out.push_back(entry.getKey().str());
  std::sort(out.begin(), out.end());
  return out;
}

const KernelTable &kernelTable() {
  static const KernelTable table = [] {
    KernelTable t;
    registerElementwiseKernels(t);
    registerTensorKernels(t);
    registerReductionKernels(t);
    registerNNKernels(t);
    registerLossKernels(t);
    registerAmpcKernels(t);
    return t;
  }();
  return table;
}

std::vector<int64_t> stridesOf(const Shape &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

bool broadcastShapes(const Shape &a, const Shape &b, Shape &out) {
  size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

std::vector<int64_t> broadcastIndexMap(const Shape &src, const Shape &dst) {
  int64_t n = numElements(dst);
  std::vector<int64_t> map(static_cast<size_t>(n));
  size_t offset = dst.size() - src.size();
  std::vector<int64_t> srcStrides = stridesOf(src);
  // Effective stride per destination axis (0 where broadcast).
  std::vector<int64_t> eff(dst.size(), 0);
  for (size_t i = 0; i < src.size(); ++i)
    eff[i + offset] = src[i] == 1 ? 0 : srcStrides[i];
  std::vector<int64_t> idx(dst.size(), 0);
  int64_t srcFlat = 0;
  for (int64_t f = 0; f < n; ++f) {
    map[f] = srcFlat;
    // Increment the multi-index like an odometer.
    for (int64_t d = static_cast<int64_t>(dst.size()) - 1; d >= 0; --d) {
      if (++idx[d] < dst[d]) {
        srcFlat += eff[d];
        break;
      }
      srcFlat -= eff[d] * (dst[d] - 1);
      idx[d] = 0;
    }
  }
  return map;
}

int64_t normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return -1;
  return axis < 0 ? axis + rank : axis;
}

void unravel(int64_t flat, const Shape &shape, std::vector<int64_t> &idx) {
  idx.resize(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
}

int64_t ravel(const std::vector<int64_t> &idx, const std::vector<int64_t> &strides) {
  int64_t f = 0;
  for (size_t d = 0; d < idx.size(); ++d)
    f += idx[d] * strides[d];
  return f;
}

llvm::Expected<std::vector<int64_t>> readAxes(const KernelContext &ctx, int fromInput,
                                              int64_t rank, bool &given) {
  std::vector<int64_t> raw;
  given = false;
  if (fromInput >= 0 && ctx.in(fromInput)) {
    raw = ctx.in(fromInput)->toInt64s();
    given = true;
  } else if (ctx.node.hasAttr("axes")) {
    raw = ctx.node.getInts("axes");
    given = true;
  }
  std::vector<int64_t> axes;
  for (int64_t a : raw) {
    int64_t n = normalizeAxis(a, rank);
    if (n < 0)
      return ctx.error("axis " + llvm::Twine(a) + " is out of range for rank " + llvm::Twine(rank));
    axes.push_back(n);
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

} // namespace interp

using namespace interp;

bool hasKernel(const std::string &domain, const std::string &opType) {
  llvm::SmallString<48> storage;
  return kernelTable().lookup(qualifiedOpTypeIn(domain, opType, storage)) != nullptr;
}

bool hasKernel(const Node &n) { return hasKernel(n.domain(), n.opType()); }

std::vector<std::string> interpretedOps() { return kernelTable().names(); }

llvm::Expected<std::vector<Tensor>> evaluateNode(const Node &n,
                                                 const std::vector<const Tensor *> &inputs,
                                                 const InterpreterOptions &opts) {
  KernelFn fn = kernelTable().lookup(n.qualifiedOpType());
  KernelContext ctx{n, inputs, opts};
  if (!fn)
    return ctx.error("the reference interpreter has no kernel for this operator");
  auto results = fn(ctx);
  if (!results)
    return results.takeError();
  // Results the model omits come back empty; the rest must match their types.
  results->resize(n.numOutputs());
  for (unsigned i = 0; i < n.numOutputs(); ++i) {
    const Value *v = n.output(i);
    if (v && (*results)[i].type() != v->type())
      return ctx.error("kernel produced " + (*results)[i].type().str() + " for result '" +
                       v->name() + "' typed " + v->type().str());
  }
  return results;
}

llvm::Expected<std::vector<Tensor>> Interpreter::run(const std::map<std::string, Tensor> &feeds) {
  std::vector<const Value *> outputs(g_.outputs().begin(), g_.outputs().end());
  return execute(feeds, outputs, /*onlyNeeded=*/false);
}

llvm::Expected<std::vector<Tensor>>
Interpreter::runFor(const std::map<std::string, Tensor> &feeds,
                    const std::vector<const Value *> &wanted) {
  return execute(feeds, wanted, /*onlyNeeded=*/true);
}

llvm::Expected<std::vector<Tensor>>
Interpreter::execute(const std::map<std::string, Tensor> &feeds,
                     const std::vector<const Value *> &wanted, bool onlyNeeded) {
  env_.clear();
  for (const auto &[name, t] : feeds) {
    const Value *v = g_.findValue(name);
    if (!v || (!v->isGraphInput() && !v->isInitializer()))
      return makeError("feed '" + name + "' is not a graph input or initializer");
    if (t.type() != v->type())
      return makeError("feed '" + name + "' is " + t.type().str() + " but the input is " +
                       v->type().str());
  }
  auto lookupFeed = [&](const Value *v) -> const Tensor * {
    auto it = feeds.find(v->name());
    return it == feeds.end() ? nullptr : &it->second;
  };

  // The nodes to run: all, or those the wanted values depend on.
  std::vector<const Node *> nodes;
  if (onlyNeeded) {
    std::unordered_map<const Node *, bool> needed;
    std::vector<const Value *> work(wanted.begin(), wanted.end());
    while (!work.empty()) {
      const Value *v = work.back();
      work.pop_back();
      const Node *n = v ? v->producer() : nullptr;
      if (!n || needed[n])
        continue;
      needed[n] = true;
      for (const Value *in : n->inputs())
        work.push_back(in);
    }
    for (const Node *n : g_.nodes())
      if (needed.count(n))
        nodes.push_back(n);
  } else {
    for (const Node *n : g_.nodes())
      nodes.push_back(n);
  }

  auto valueTensor = [&](const Value *v) -> const Tensor * {
    if (const Tensor *t = lookupFeed(v))
      return t;
    if (v->isInitializer() || v->hasDefault())
      return v->data();
    auto it = env_.find(v);
    return it == env_.end() ? nullptr : &it->second;
  };
  auto missingFeed = [&](const Value *v) {
    return v->isGraphInput() && !lookupFeed(v) && !v->hasDefault();
  };
  if (!onlyNeeded)
    for (const Value *v : g_.inputs())
      if (missingFeed(v))
        return makeError("no feed for graph input '" + v->name() + "'");

  // Remaining uses per value, to free intermediates early.
  std::unordered_map<const Value *, size_t> remaining;
  for (const Node *n : nodes)
    for (const Value *v : n->inputs())
      if (v)
        ++remaining[v];
  std::unordered_map<const Value *, bool> keep;
  for (const Value *v : wanted)
    keep[v] = true;

  for (const Node *n : nodes) {
    std::vector<const Tensor *> operands;
    for (const Value *v : n->inputs()) {
      if (v && missingFeed(v))
        return makeError("no feed for graph input '" + v->name() + "'");
      const Tensor *t = v ? valueTensor(v) : nullptr;
      if (v && !t)
        return makeError("value '" + v->name() + "' is used before it is computed");
      operands.push_back(t);
    }
    auto results = evaluateNode(*n, operands, opts_);
    if (!results)
      return results.takeError();
    for (unsigned i = 0; i < n->numOutputs(); ++i)
      if (const Value *v = n->output(i))
        env_[v] = std::move((*results)[i]);
    if (!opts_.keepAll)
      for (const Value *v : n->inputs())
        if (v && --remaining[v] == 0 && !keep.count(v) && !v->isGraphOutput() && v->producer())
          env_.erase(v);
  }
  std::vector<Tensor> outputs;
  for (const Value *v : wanted) {
    if (v && missingFeed(v))
      return makeError("no feed for graph input '" + v->name() + "'");
    const Tensor *t = valueTensor(v);
    if (!t)
      return makeError("value '" + v->name() + "' was not computed");
    outputs.push_back(*t);
  }
  return outputs;
}

const Tensor *Interpreter::valueOf(const Value *v) const {
  if (v->isInitializer())
    return v->data();
  auto it = env_.find(v);
  return it == env_.end() ? nullptr : &it->second;
}

} // namespace ampc
