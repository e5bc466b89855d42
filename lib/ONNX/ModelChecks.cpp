//===- ModelChecks.cpp - What ONNX 1.12 would trust, checked first --------===//
//
// ONNX's checker and shape inference run on untrusted models, and version
// 1.12 crashes on some malformed ones (found by fuzzing, issue #15): a
// tensor whose data is shorter than its dims (a memmove out of bounds), dims
// whose product overflows (a ConvTranspose weight of [2^40]), convolution or
// pooling strides of 0 (a division by zero), a convolution weight of rank 1
// (read past its dims), a graph output named like a graph input. These
// checks run before the library sees the model, so each of those is a
// one-line error naming the tensor or node.
//
//===----------------------------------------------------------------------===//

#include "ampc/ONNX/Import.h"
#include "ampc/Support/Error.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace ampc {

namespace {

std::string nodeLabel(const onnx::NodeProto &n) {
  std::string name = !n.name().empty() ? n.name() : (n.output_size() ? n.output(0) : "");
  return "node '" + name + "' (" + n.op_type() + ")";
}

/// Bytes of one element of an ONNX data type; 0 for types whose data is not
/// fixed-size (strings) or that ampc does not know.
int64_t elementBytes(int32_t type) {
  switch (type) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
  case onnx::TensorProto::COMPLEX64:
    return 8;
  case onnx::TensorProto::COMPLEX128:
    return 16;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    return 1;
  default:
    return 0;
  }
}

/// Values stored in the typed field that holds `type`'s data.
int64_t typedValues(const onnx::TensorProto &t) {
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    return t.float_data_size();
  case onnx::TensorProto::COMPLEX64:
    return t.float_data_size() / 2;
  case onnx::TensorProto::DOUBLE:
    return t.double_data_size();
  case onnx::TensorProto::COMPLEX128:
    return t.double_data_size() / 2;
  case onnx::TensorProto::INT64:
    return t.int64_data_size();
  case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT64:
    return t.uint64_data_size();
  case onnx::TensorProto::STRING:
    return t.string_data_size();
  default: // int32_data holds the narrower integer, bool and 16-bit float types
    return t.int32_data_size();
  }
}

/// Dims that are non-negative with at most kMaxElements elements, and data
/// that holds exactly that many (external data is checked when it is read).
llvm::Error checkTensor(const onnx::TensorProto &t, const std::string &what) {
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return makeError(what + " has a negative dimension");
    if (d != 0 && count > kMaxElements / d)
      return makeError(what + " has more than 2^31 elements");
    count *= d;
  }
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return llvm::Error::success();
  if (t.has_raw_data()) {
    int64_t bytes = elementBytes(t.data_type());
    if (bytes && static_cast<int64_t>(t.raw_data().size()) != count * bytes)
      return makeError(what + " has " + std::to_string(t.raw_data().size()) +
                       " bytes of data but its dims need " + std::to_string(count * bytes));
    return llvm::Error::success();
  }
  int64_t values = typedValues(t);
  if (values != count)
    return makeError(what + " has " + std::to_string(values) + " values but its dims need " +
                     std::to_string(count));
  return llvm::Error::success();
}

llvm::Error checkAttributeTensors(const onnx::NodeProto &n) {
  for (const auto &a : n.attribute()) {
    if (a.has_t())
      if (auto err = checkTensor(a.t(), nodeLabel(n) + ": attribute '" + a.name() + "'"))
        return err;
    for (const auto &t : a.tensors())
      if (auto err = checkTensor(t, nodeLabel(n) + ": attribute '" + a.name() + "'"))
        return err;
  }
  return llvm::Error::success();
}

/// Convolution and pooling windows: positive strides, dilations, kernel
/// sizes and groups, non-negative pads, per-axis lists of one length.
llvm::Error checkWindowAttributes(const onnx::NodeProto &n) {
  static const std::unordered_set<std::string> kWindowOps = {
      "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "ConvInteger", "QLinearConv"};
  if (!kWindowOps.count(n.op_type()))
    return llvm::Error::success();
  int axes = -1;
  for (const auto &a : n.attribute()) {
    bool positive = a.name() == "strides" || a.name() == "dilations" || a.name() == "kernel_shape";
    bool nonNegative = a.name() == "pads" || a.name() == "output_padding";
    if (a.name() == "group" && a.i() <= 0)
      return makeError(nodeLabel(n) + ": group must be positive, got " + std::to_string(a.i()));
    if (!positive && !nonNegative)
      continue;
    for (int64_t v : a.ints())
      if (positive ? v <= 0 : v < 0)
        return makeError(nodeLabel(n) + ": " + a.name() + " must be " +
                         (positive ? "positive" : "non-negative") + ", got " + std::to_string(v));
    int count = a.name() == "pads" ? a.ints_size() / 2 : a.ints_size();
    if (a.name() == "pads" && a.ints_size() % 2)
      return makeError(nodeLabel(n) + ": pads must hold a begin and an end per axis");
    if (a.name() == "output_padding")
      continue;
    if (axes >= 0 && count != axes)
      return makeError(nodeLabel(n) + ": " + a.name() + " covers " + std::to_string(count) +
                       " axes, another window attribute " + std::to_string(axes));
    axes = count;
  }
  return llvm::Error::success();
}

/// Transpose's perm: a permutation of 0..n-1 (its length against the input's
/// rank is checked once types are known).
llvm::Error checkPerm(const onnx::NodeProto &n) {
  if (n.op_type() != "Transpose")
    return llvm::Error::success();
  for (const auto &a : n.attribute()) {
    if (a.name() != "perm")
      continue;
    std::vector<bool> seen(a.ints_size(), false);
    for (int64_t p : a.ints()) {
      if (p < 0 || p >= a.ints_size() || seen[p])
        return makeError(nodeLabel(n) + ": perm is not a permutation of 0.." +
                         std::to_string(a.ints_size() - 1));
      seen[p] = true;
    }
  }
  return llvm::Error::success();
}

/// The operand that is a convolution's weight, or -1 for other ops.
int convWeightOperand(const onnx::NodeProto &n) {
  static const std::unordered_map<std::string, int> kWeightOperand = {
      {"Conv", 1}, {"ConvTranspose", 1}, {"ConvInteger", 1}, {"QLinearConv", 3}};
  auto op = kWeightOperand.find(n.op_type());
  return n.domain().empty() && op != kWeightOperand.end() ? op->second : -1;
}

/// A convolution's weight is [out, in, kernel...] (ConvTranspose: [in, out,
/// kernel...]): ONNX 1.12's ConvTranspose inference read the dims of a rank-1
/// weight past its end (SIGSEGV). `ranks` holds the ranks the model states
/// (initializers, graph inputs with a shape).
llvm::Error checkConvWeightRank(const onnx::NodeProto &n,
                                const std::unordered_map<std::string, int> &ranks) {
  int w = convWeightOperand(n);
  if (w < 0 || n.input_size() <= w)
    return llvm::Error::success();
  auto rank = ranks.find(n.input(w));
  if (rank == ranks.end() || rank->second >= 3)
    return llvm::Error::success();
  return makeError(nodeLabel(n) + ": weight '" + n.input(w) + "' has rank " +
                   std::to_string(rank->second) +
                   "; a convolution's weight needs 3 or more (channels, channels, kernel...)");
}

} // namespace

std::vector<int> makeConvKernelShapesExplicit(onnx::GraphProto &graph) {
  std::vector<int> added;
  std::unordered_map<std::string, const onnx::TensorProto *> initializers;
  for (const auto &t : graph.initializer())
    initializers[t.name()] = &t;
  for (int i = 0; i < graph.node_size(); ++i) {
    onnx::NodeProto &n = *graph.mutable_node(i);
    int weight = convWeightOperand(n);
    if (weight < 0 || n.input_size() <= weight)
      continue;
    bool hasKernel = std::any_of(n.attribute().begin(), n.attribute().end(),
                                 [](const auto &a) { return a.name() == "kernel_shape"; });
    auto w = initializers.find(n.input(weight));
    if (hasKernel || w == initializers.end() || w->second->dims_size() < 2)
      continue;
    onnx::AttributeProto &a = *n.add_attribute();
    a.set_name("kernel_shape");
    a.set_type(onnx::AttributeProto::INTS);
    for (int d = 2; d < w->second->dims_size(); ++d)
      a.add_ints(w->second->dims(d));
    added.push_back(i);
  }
  return added;
}

void removeAddedKernelShapes(onnx::GraphProto &graph, const std::vector<int> &nodes) {
  for (int i : nodes) {
    auto &attrs = *graph.mutable_node(i)->mutable_attribute();
    if (!attrs.empty() && attrs.rbegin()->name() == "kernel_shape")
      attrs.RemoveLast();
  }
}

llvm::Error checkBeforeOnnx(const onnx::ModelProto &model) {
  const onnx::GraphProto &g = model.graph();
  std::unordered_set<std::string> inputs;
  for (const auto &in : g.input())
    inputs.insert(in.name());
  for (const auto &out : g.output())
    if (inputs.count(out.name()))
      return makeError("graph output '" + out.name() +
                       "' has the name of a graph input (outputs must be computed)");
  std::unordered_map<std::string, int> ranks; // stated ranks, for the weight check
  for (const auto &t : g.initializer()) {
    if (auto err = checkTensor(t, "initializer '" + t.name() + "'"))
      return err;
    ranks[t.name()] = t.dims_size();
  }
  for (const auto &in : g.input())
    if (in.type().has_tensor_type() && in.type().tensor_type().has_shape() &&
        !ranks.count(in.name()))
      ranks[in.name()] = in.type().tensor_type().shape().dim_size();
  for (const auto &n : g.node()) {
    for (auto check : {checkAttributeTensors, checkWindowAttributes, checkPerm})
      if (auto err = check(n))
        return err;
    if (auto err = checkConvWeightRank(n, ranks))
      return err;
  }
  return llvm::Error::success();
}

} // namespace ampc
