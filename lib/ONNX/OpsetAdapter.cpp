//===- OpsetAdapter.cpp - Opsets 18 to 22 rewritten to opset 17 -----------===//
//
// The walk over the graph and what rules may ask of it; the rules themselves
// are in OpsetRules.cpp.
//
//===----------------------------------------------------------------------===//

#include "ampc/ONNX/OpsetAdapter.h"

#include "ampc/Support/Error.h"

#include "onnx/defs/schema.h"

#include <algorithm>
#include <map>

namespace ampc {

namespace {

bool isDefaultDomain(const std::string &d) { return d.empty() || d == "ai.onnx"; }

std::string nodeLabel(const onnx::NodeProto &n) {
  std::string name = !n.name().empty() ? n.name() : (n.output_size() ? n.output(0) : "");
  return "node '" + name + "' (" + n.op_type() + ")";
}

/// The version of `op` in force at `opset` among those newer than 17; 0 when
/// the operator has not changed since opset 17.
int newerVersionAt(const std::string &op, int64_t opset) {
  const auto &table = newerOperatorVersions();
  auto it = table.find(op);
  if (it == table.end())
    return 0;
  int version = 0;
  for (int v : it->second)
    if (v <= opset)
      version = std::max(version, v);
  return version;
}

const OpsetRule *findRule(const std::string &op, int version) {
  for (const OpsetRule &r : opsetRules())
    if (op == r.op && version == r.version)
      return &r;
  return nullptr;
}

/// "the newest Foo ampc reads is version 13", for a refused version.
std::string newestKnown(const std::string &op, int refused) {
  int newest = 0;
  for (const OpsetRule &r : opsetRules())
    if (op == r.op && r.version < refused)
      newest = std::max(newest, r.version);
  if (!newest)
    if (const onnx::OpSchema *s = onnx::OpSchemaRegistry::Schema(op, kAdapterTargetOpset, ""))
      newest = s->since_version();
  if (!newest)
    return "ampc reads no version of " + op;
  return "the newest " + op + " ampc reads is version " + std::to_string(newest);
}

} // namespace

AdapterContext::AdapterContext(const onnx::GraphProto &graph) {
  auto use = [&](const std::string &name) { used_.insert(name); };
  for (const auto &t : graph.initializer()) {
    constants_[t.name()] = &t;
    ranks_[t.name()] = t.dims_size();
    use(t.name());
  }
  auto declare = [&](const onnx::ValueInfoProto &v) {
    use(v.name());
    const auto &type = v.type();
    if (type.has_tensor_type() && type.tensor_type().has_shape())
      ranks_.emplace(v.name(), type.tensor_type().shape().dim_size());
  };
  for (const auto &v : graph.input())
    declare(v);
  for (const auto &v : graph.output())
    declare(v);
  for (const auto &v : graph.value_info())
    declare(v);
  for (const auto &n : graph.node()) {
    for (const auto &o : n.output()) {
      use(o);
      producers_[o] = &n;
    }
    if (n.op_type() != "Constant" || !isDefaultDomain(n.domain()) || n.output_size() != 1)
      continue;
    for (const auto &a : n.attribute())
      if (a.name() == "value" && a.has_t()) {
        constants_[n.output(0)] = &a.t();
        ranks_[n.output(0)] = a.t().dims_size();
      }
  }
}

const onnx::TensorProto *AdapterContext::constant(const std::string &name) const {
  auto it = constants_.find(name);
  return it == constants_.end() ? nullptr : it->second;
}

namespace {

bool tensorInts(const onnx::TensorProto &t, std::vector<int64_t> &values) {
  if (t.data_type() != onnx::TensorProto::INT64)
    return false;
  values.clear();
  if (t.has_raw_data()) {
    const std::string &raw = t.raw_data();
    if (raw.size() % sizeof(int64_t))
      return false;
    values.resize(raw.size() / sizeof(int64_t));
    std::copy(raw.begin(), raw.end(), reinterpret_cast<char *>(values.data()));
  } else {
    values.assign(t.int64_data().begin(), t.int64_data().end());
  }
  int64_t expected = 1;
  for (int64_t d : t.dims())
    expected *= d;
  return static_cast<int64_t>(values.size()) == expected;
}

} // namespace

bool AdapterContext::constantInts(const std::string &name, std::vector<int64_t> &values,
                                  int depth) const {
  if (const onnx::TensorProto *t = constant(name))
    return tensorInts(*t, values);
  auto it = producers_.find(name);
  if (it == producers_.end() || depth > 8)
    return false;
  // Exporters without constant folding compute small int64 lists from
  // constants: views of one list, or lists joined end to end.
  const onnx::NodeProto &n = *it->second;
  if (n.op_type() == "Constant") {
    for (const auto &a : n.attribute())
      if (a.name() == "value_ints" || a.name() == "value_int") {
        values.assign(a.ints().begin(), a.ints().end());
        if (a.name() == "value_int")
          values = {a.i()};
        return true;
      }
    return false;
  }
  static const char *const views[] = {"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"};
  if (std::find(std::begin(views), std::end(views), n.op_type()) != std::end(views))
    return n.input_size() > 0 && constantInts(n.input(0), values, depth + 1);
  if (n.op_type() != "Concat")
    return false;
  values.clear();
  for (const std::string &in : n.input()) {
    std::vector<int64_t> part;
    if (!constantInts(in, part, depth + 1))
      return false;
    values.insert(values.end(), part.begin(), part.end());
  }
  return true;
}

int AdapterContext::rank(const std::string &name) const {
  auto it = ranks_.find(name);
  return it == ranks_.end() ? -1 : it->second;
}

std::string AdapterContext::fresh(const std::string &base) {
  std::string name = base;
  for (int i = 1; used_.count(name); ++i)
    name = base + "_" + std::to_string(i);
  used_.insert(name);
  return name;
}

onnx::NodeProto &AdapterContext::emit(std::vector<onnx::NodeProto> &out, const std::string &op,
                                      const std::vector<std::string> &inputs,
                                      const std::vector<std::string> &outputs) {
  onnx::NodeProto &n = out.emplace_back();
  n.set_op_type(op);
  for (const std::string &i : inputs)
    n.add_input(i);
  for (const std::string &o : outputs)
    n.add_output(o);
  if (!outputs.empty())
    n.set_name(outputs.front());
  return n;
}

std::string AdapterContext::int64s(std::vector<onnx::NodeProto> &out, const std::string &base,
                                   const std::vector<int64_t> &values) {
  std::string name = fresh(base);
  onnx::NodeProto &n = emit(out, "Constant", {}, {name});
  onnx::AttributeProto *a = n.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto *t = a->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values)
    t->add_int64_data(v);
  return name;
}

std::string AdapterContext::scalarLike(std::vector<onnx::NodeProto> &out, const std::string &base,
                                       float value, const std::string &like) {
  std::string raw = fresh(base);
  onnx::NodeProto &c = emit(out, "Constant", {}, {raw});
  onnx::AttributeProto *a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_float_data(value);
  std::string name = fresh(base + "/cast");
  emit(out, "CastLike", {raw, like}, {name});
  return name;
}

llvm::Error adaptToOpset17(onnx::ModelProto &model, int64_t opset) {
  if (model.ir_version() > kMaxIrVersion)
    return formatError("IR version {0} is newer than ampc reads (IR versions up to {1})",
                       model.ir_version(), kMaxIrVersion);
  onnx::GraphProto &graph = *model.mutable_graph();
  AdapterContext ctx(graph);
  std::vector<onnx::NodeProto> nodes;
  nodes.reserve(graph.node_size());
  for (const onnx::NodeProto &n : graph.node()) {
    int version = isDefaultDomain(n.domain()) ? newerVersionAt(n.op_type(), opset) : 0;
    if (!version) {
      nodes.push_back(n);
      continue;
    }
    const OpsetRule *rule = findRule(n.op_type(), version);
    if (!rule)
      return formatError("{0}: {1}-{2} (opset {3}) is newer than ampc reads; {4}", nodeLabel(n),
                         n.op_type(), version, opset, newestKnown(n.op_type(), version));
    if (!rule->rewrite) {
      nodes.push_back(n);
      continue;
    }
    // Every rewrite reads the first operand and result; the checker that
    // would catch a node without them runs after (found by fuzzing).
    if (n.input_size() < 1 || n.input(0).empty() || n.output_size() < 1 || n.output(0).empty())
      return formatError("{0}: {1}-{2} needs an operand and a result", nodeLabel(n),
                         n.op_type(), version);
    if (auto err = rule->rewrite(ctx, n, nodes))
      return withContext(std::move(err), nodeLabel(n) + ", " + n.op_type() + "-" +
                                             std::to_string(version));
  }
  graph.clear_node();
  for (onnx::NodeProto &n : nodes)
    *graph.add_node() = std::move(n);
  for (auto &imp : *model.mutable_opset_import())
    if (isDefaultDomain(imp.domain()))
      imp.set_version(kAdapterTargetOpset);
  return llvm::Error::success();
}

} // namespace ampc
