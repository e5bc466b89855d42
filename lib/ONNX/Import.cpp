//===- Import.cpp - ONNX models into the IR --------------------------------===//

#include "ampc/ONNX/Import.h"

#include "LargeValues.h"

#include "ampc/ONNX/ModelFile.h"
#include "ampc/ONNX/OpsetAdapter.h"
#include "ampc/ONNX/ProtoConversion.h"
#include "ampc/ONNX/Schemas.h"
#include "ampc/ONNX/TextFormat.h"
#include "ampc/ONNX/TypeInference.h"
#include "StaticShapes.h"
#include "ampc/Support/Error.h"

#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace ampc {

namespace {

/// ONNX's messages span several lines and can run to 400 characters;
/// ampc's errors are one short line (the node and file come first).
std::string oneLine(std::string msg) {
  constexpr size_t kMaxChars = 200;
  std::string out;
  bool space = false;
  for (char c : msg) {
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      space = !out.empty();
      continue;
    }
    if (space)
      out += ' ';
    space = false;
    out += c;
  }
  if (out.size() > kMaxChars)
    out = out.substr(0, kMaxChars - 3) + "...";
  return out;
}

std::string nodeLabel(const onnx::NodeProto &n) {
  std::string name = !n.name().empty() ? n.name() : (n.output_size() ? n.output(0) : "");
  std::string op = n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type();
  return "node '" + name + "' (" + op + ")";
}

bool isDefaultDomain(const std::string &d) { return d.empty() || d == "ai.onnx"; }

//===----------------------------------------------------------------------===//
// Checks on the ModelProto, before ONNX's checker sees it
//===----------------------------------------------------------------------===//

llvm::Error checkOpsets(onnx::ModelProto &model) {
  int64_t opset = -1;
  for (const auto &imp : model.opset_import()) {
    if (isDefaultDomain(imp.domain()))
      opset = imp.version();
    else if (imp.domain() == kAmpcDomain) {
      if (imp.version() != 1)
        return formatError("unsupported version {0} of the 'ampc' domain (ampc has version 1)",
                           imp.version());
    } else {
      return formatError("unsupported operator domain '{0}' (ampc reads the default ONNX "
                         "domain and 'ampc')",
                         imp.domain());
    }
  }
  if (opset < 0)
    return makeError("the model has no opset_import for the default ONNX domain");
  if (opset > kMaxAdaptedOpset)
    return formatError("opset {0} is not supported (ampc reads opsets {1} to {2})", opset,
                       kMinOpset, kMaxAdaptedOpset);
  if (model.ir_version() > kMaxIrVersion)
    return formatError("IR version {0} is not supported (ampc reads IR versions up to {1})",
                       model.ir_version(), kMaxIrVersion);
  if (opset > kMaxOpset)
    if (auto err = adaptToOpset17(model, opset))
      return err;
  // IR versions 9 and 10 added float8 and int4 types and function overloads,
  // none of which ampc takes (its type checks name them); the rest is IR 8,
  // the newest ONNX 1.12's checker reads.
  if (model.ir_version() > kCheckerIrVersion)
    model.set_ir_version(kCheckerIrVersion);
  if (opset >= kMinOpset)
    return llvm::Error::success();
  // Older models are upgraded with ONNX's version converter when it can.
  // Before IR version 4 every initializer had to be a graph input as well;
  // the converter then reports a missing one only as "Input x is undefined".
  if (model.ir_version() < 4)
    for (const auto &init : model.graph().initializer()) {
      bool listed = false;
      for (const auto &in : model.graph().input())
        listed = listed || in.name() == init.name();
      if (!listed)
        return formatError("initializer '{0}' is not a graph input, which IR version {1} "
                           "requires (IR version 4 lifted that rule)",
                           init.name(), model.ir_version());
    }
  // ONNX 1.12's adapters read the operands their opset's schema requires
  // without checking they are there (Resize 10 -> 11 on a Resize with none:
  // SIGSEGV, found by fuzzing).
  for (const auto &n : model.graph().node()) {
    const onnx::OpSchema *schema =
        n.domain().empty() ? onnx::OpSchemaRegistry::Schema(n.op_type(), opset, "") : nullptr;
    if (schema && n.input_size() < schema->min_input())
      return makeError(nodeLabel(n) + ": " + std::to_string(n.input_size()) +
                       " operands, where opset " + std::to_string(opset) + "'s " + n.op_type() +
                       " takes at least " + std::to_string(schema->min_input()));
  }
  try {
    onnx::ModelProto converted = onnx::version_conversion::ConvertVersion(model, kMinOpset);
    model = std::move(converted);
  } catch (const std::exception &e) {
    return formatError("opset {0} could not be upgraded to opset {1}: {2}", opset, kMinOpset,
                       oneLine(e.what()));
  }
  return llvm::Error::success();
}

llvm::Error rejectSubgraphs(const onnx::GraphProto &graph) {
  for (const auto &n : graph.node())
    for (const auto &a : n.attribute())
      if (a.has_g() || a.graphs_size())
        return makeError(nodeLabel(n) + ": subgraph attributes (control flow) are not supported");
  return llvm::Error::success();
}

/// Names listed in the model's ampc.input_defaults metadata entry.
std::unordered_set<std::string> inputsWithDefaults(const onnx::ModelProto &model) {
  std::unordered_set<std::string> names;
  for (const auto &prop : model.metadata_props()) {
    if (prop.key() != kInputDefaultsKey)
      continue;
    std::stringstream ss(prop.value());
    std::string name;
    while (std::getline(ss, name, ','))
      names.insert(name);
  }
  return names;
}

/// Graph inputs that are also initializers are, in torch exports, parameters
/// (keep_initializers_as_inputs): ampc treats them as initializers, except the
/// inputs with defaults that ampc itself wrote (see kInputDefaultsKey), which
/// are moved out of the initializer list into `defaults`.
void splitInitializerInputs(onnx::ModelProto &model,
                            std::unordered_map<std::string, onnx::TensorProto> &defaults) {
  onnx::GraphProto &graph = *model.mutable_graph();
  std::unordered_set<std::string> keep = inputsWithDefaults(model);
  std::unordered_set<std::string> inits;
  for (const auto &t : graph.initializer())
    inits.insert(t.name());
  auto *inputs = graph.mutable_input();
  for (int i = inputs->size() - 1; i >= 0; --i)
    if (inits.count(inputs->Get(i).name()) && !keep.count(inputs->Get(i).name()))
      inputs->DeleteSubrange(i, 1);
  auto *list = graph.mutable_initializer();
  for (int i = list->size() - 1; i >= 0; --i)
    if (keep.count(list->Get(i).name())) {
      defaults[list->Get(i).name()] = list->Get(i);
      list->DeleteSubrange(i, 1);
    }
}

/// Reports undefined operands and cycles with the node at fault, then sorts
/// the nodes topologically (ONNX requires an order; ampc accepts any order
/// that has one).
llvm::Error checkStructure(onnx::GraphProto &graph) {
  // Each value's producing node, -1 for graph inputs and initializers; one
  // map keyed by the model's own strings (no copies).
  llvm::StringMap<int> producer(graph.input_size() + graph.initializer_size() +
                                graph.node_size());
  for (const auto &v : graph.input())
    producer.try_emplace(v.name(), -1);
  for (const auto &t : graph.initializer())
    producer.try_emplace(t.name(), -1);
  for (int i = 0; i < graph.node_size(); ++i)
    for (const auto &o : graph.node(i).output())
      if (!o.empty() && !producer.try_emplace(o, i).second)
        return makeError(nodeLabel(graph.node(i)) + ": value '" + o +
                         "' is defined more than once");
  // Keep the model's order when it is already valid (the usual case).
  bool sorted = true;
  for (int i = 0; i < graph.node_size(); ++i)
    for (const auto &in : graph.node(i).input()) {
      if (in.empty())
        continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return makeError(nodeLabel(graph.node(i)) + ": input '" + in +
                         "' is not defined by any node, graph input or initializer");
      sorted = sorted && it->second < i;
    }
  for (const auto &o : graph.output())
    if (!producer.count(o.name()))
      return makeError("graph output '" + o.name() + "' is not produced by any node");
  if (sorted)
    return llvm::Error::success();

  // Kahn's algorithm, taking ready nodes in their model order.
  int n = graph.node_size();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i)
    for (const auto &in : graph.node(i).input()) {
      if (in.empty())
        continue;
      int from = producer.lookup(in);
      if (from < 0)
        continue;
      ++pending[i];
      users[from].push_back(i);
    }
  std::vector<int> order;
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i)
    if (!pending[i])
      ready.push(i);
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[i])
      if (--pending[u] == 0)
        ready.push(u);
  }
  if (static_cast<int>(order.size()) != n) {
    for (int i = 0; i < n; ++i)
      if (pending[i])
        return makeError("the graph has a cycle through " + nodeLabel(graph.node(i)));
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i : order)
    *nodes.Add() = graph.node(i);
  graph.mutable_node()->Swap(&nodes);
  return llvm::Error::success();
}

llvm::Error checkKnownOps(const onnx::ModelProto &model) {
  llvm::StringMap<int> versions;
  for (const auto &imp : model.opset_import())
    versions[isDefaultDomain(imp.domain()) ? "" : imp.domain()] = static_cast<int>(imp.version());
  for (const auto &n : model.graph().node()) {
    llvm::StringRef domain = isDefaultDomain(n.domain()) ? "" : llvm::StringRef(n.domain());
    auto it = versions.find(domain);
    if (it == versions.end())
      return makeError(nodeLabel(n) + ": domain '" + domain.str() +
                       "' is not in the model's opset_import");
    if (!lookupSchema(n.op_type(), it->second, domain))
      return makeError(nodeLabel(n) + ": unknown operator '" + n.op_type() + "' in " +
                       (domain.empty() ? std::string("the default domain")
                                       : "domain '" + domain.str() + "'") +
                       " at opset " + std::to_string(it->second));
  }
  return llvm::Error::success();
}

/// Sizes given on the command line are checked before ONNX's shape
/// inference sees them: a dimension of 0 made its data propagation crash
/// (ONNX 1.12, on Shape of an empty tensor), and a huge one overflowed the
/// sizes computed from it.
llvm::Expected<TensorType> staticType(const onnx::TypeProto &type, const std::string &what);

llvm::Error checkBoundSizes(const onnx::GraphProto &graph, const ImportOptions &opts) {
  for (const auto &in : graph.input()) {
    bool bound = opts.shapes.count(in.name()) > 0;
    const auto &dims = in.type().tensor_type().shape().dim();
    for (int d = 0; d < dims.size(); ++d)
      if ((bound || (d == 0 && opts.batch)) && dims[d].dim_value() <= 0)
        return formatError("input '{0}': dimension {1} is bound to {2}; it must be positive",
                           in.name(), d, dims[d].dim_value());
    // The element count, checked as the graph's types will be.
    auto type = staticType(in.type(), "input '" + in.name() + "'");
    if (!type)
      return type.takeError();
  }
  return llvm::Error::success();
}

llvm::Error bindInputShapes(onnx::GraphProto &graph, const ImportOptions &opts) {
  for (const auto &[name, shape] : opts.shapes) {
    bool found = false;
    for (const auto &in : graph.input())
      found = found || in.name() == name;
    if (!found)
      return makeError("--shape names '" + name + "', which is not a graph input");
  }
  for (auto &in : *graph.mutable_input()) {
    if (!in.type().has_tensor_type())
      return makeError("input '" + in.name() + "' is not a tensor");
    auto *tt = in.mutable_type()->mutable_tensor_type();
    auto given = opts.shapes.find(in.name());
    if (given != opts.shapes.end()) {
      const Shape &shape = given->second;
      if (tt->has_shape() && tt->shape().dim_size() != static_cast<int>(shape.size()))
        return formatError("input '{0}': --shape gives rank {1}, the model declares rank {2}",
                           in.name(), shape.size(), tt->shape().dim_size());
      if (tt->has_shape())
        for (int d = 0; d < tt->shape().dim_size(); ++d)
          if (tt->shape().dim(d).has_dim_value() && tt->shape().dim(d).dim_value() != shape[d])
            return formatError("input '{0}': --shape gives {1} for dimension {2}, the model "
                               "fixes it to {3}",
                               in.name(), shape[d], d, tt->shape().dim(d).dim_value());
      tt->mutable_shape()->clear_dim();
      for (int64_t d : shape)
        tt->mutable_shape()->add_dim()->set_dim_value(d);
      continue;
    }
    if (!tt->has_shape())
      return makeError("input '" + in.name() +
                       "' has no shape (unknown rank); give it with --shape " + in.name() + "=...");
    for (int d = 0; d < tt->shape().dim_size(); ++d) {
      auto *dim = tt->mutable_shape()->mutable_dim(d);
      if (dim->has_dim_value()) {
        if (d == 0 && opts.batch && dim->dim_value() != *opts.batch)
          return formatError("input '{0}': --batch={1}, but the model fixes dimension 0 to {2}",
                             in.name(), *opts.batch, dim->dim_value());
        continue;
      }
      if (d == 0 && opts.batch) {
        dim->set_dim_value(*opts.batch);
        continue;
      }
      std::string sym = dim->has_dim_param() ? " ('" + dim->dim_param() + "')" : "";
      return formatError("input '{0}': dimension {1}{2} is dynamic; bind it with {3}--shape "
                         "{0}=d0,d1,...",
                         in.name(), d, sym, d == 0 ? "--batch=N or " : "");
    }
  }
  return checkBoundSizes(graph, opts);
}

/// Whether every node result of the (subgraph-free) graph has a static
/// shape recorded after inference.
bool everyShapeStatic(const onnx::GraphProto &graph) {
  std::unordered_set<std::string_view> known;
  for (const auto *list : {&graph.value_info(), &graph.output(), &graph.input()})
    for (const auto &vi : *list)
      if (hasStaticShape(vi.type()))
        known.insert(vi.name());
  for (const auto &node : graph.node()) {
    for (const auto &a : node.attribute())
      if (a.has_g() || a.graphs_size() > 0)
        return false;
    for (const auto &out : node.output())
      if (!out.empty() && !known.count(out))
        return false;
  }
  return true;
}

llvm::Error runModelChecker(onnx::ModelProto &model) {
  try {
    checkModelWithStandIns(model);
  } catch (const std::exception &e) {
    return makeError("invalid model: " + oneLine(e.what()));
  }
  return llvm::Error::success();
}

/// ONNX's checker (unless it already passed) and strict shape inference.
llvm::Error runChecker(onnx::ModelProto &model, bool checkerPassed) {
  if (!checkerPassed)
    if (auto err = runModelChecker(model))
      return err;
  try {
    // First without data propagation: ONNX 1.12 propagated the data of a
    // Shape whose operand had failed inference and crashed (found by
    // fuzzing); a model that infers cleanly is then propagated.
    onnx::ShapeInferenceOptions types(/*check_type=*/true, /*strict_mode=*/1,
                                      /*data_prop=*/false);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), types);
    // Data propagation only sharpens shapes; when every value already has
    // a static one it has nothing to add (a second pass over a large graph).
    if (everyShapeStatic(model.graph()))
      return llvm::Error::success();
    onnx::ShapeInferenceOptions options(/*check_type=*/true, /*strict_mode=*/1,
                                        /*data_prop=*/true);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception &e) {
    return makeError("shape inference failed: " + oneLine(e.what()));
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Building the IR
//===----------------------------------------------------------------------===//

llvm::Expected<TensorType> staticType(const onnx::TypeProto &type, const std::string &what) {
  if (!type.has_tensor_type())
    return makeError(what + " is not a tensor");
  const auto &tt = type.tensor_type();
  DType dt = dtypeFromOnnx(tt.elem_type());
  if (dt == DType::Undefined)
    return makeError(what + " has element type " + std::to_string(tt.elem_type()) +
                     ", which ampc does not support");
  if (!tt.has_shape())
    return makeError(what + " has no static shape (shape inference could not determine it)");
  Shape shape;
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto &dim = tt.shape().dim(d);
    if (!dim.has_dim_value())
      return makeError(what + ": dimension " + std::to_string(d) +
                       " is not static (shape inference could not determine it)");
    shape.push_back(dim.dim_value());
  }
  // The product could overflow int64 for absurd shapes: check stepwise.
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return makeError(what + " has a negative dimension");
    if (d != 0 && count > kMaxElements / d)
      return makeError(what + " has shape " + shapeStr(shape) + ", more than 2^31 elements");
    count *= d;
  }
  if (count > kMaxElements)
    return makeError(what + " has shape " + shapeStr(shape) + ", more than 2^31 elements");
  return TensorType(dt, std::move(shape));
}

/// ONNX 1.12's shape inference leaves Gemm's operand shapes unchecked (it
/// takes the result's shape from A and B alone); a mismatch would surface
/// later as a wrong gradient shape or a kernel error far from its cause.
llvm::Error checkGemmShapes(const Node &n) {
  if (!n.is("Gemm") || n.numInputs() < 2 || !n.input(0) || !n.input(1))
    return llvm::Error::success();
  const Shape &a = n.input(0)->shape(), &b = n.input(1)->shape();
  if (a.size() != 2 || b.size() != 2)
    return llvm::Error::success(); // the schema's inference checks ranks
  bool transA = n.getInt("transA", 0) != 0, transB = n.getInt("transB", 0) != 0;
  int64_t m = transA ? a[1] : a[0], kA = transA ? a[0] : a[1];
  int64_t kB = transB ? b[1] : b[0], cols = transB ? b[0] : b[1];
  if (kA != kB)
    return makeError("A " + shapeStr(a) + (transA ? " (transposed)" : "") + " and B " +
                     shapeStr(b) + (transB ? " (transposed)" : "") +
                     " have different inner dimensions (" + std::to_string(kA) + " and " +
                     std::to_string(kB) + ")");
  if (n.numInputs() < 3 || !n.input(2))
    return llvm::Error::success();
  const Shape &c = n.input(2)->shape();
  Shape result = {m, cols};
  bool broadcasts = c.size() <= 2;
  for (size_t i = 0; broadcasts && i < c.size(); ++i) {
    int64_t want = result[2 - c.size() + i];
    broadcasts = c[i] == 1 || c[i] == want;
  }
  if (!broadcasts)
    return makeError("C " + shapeStr(c) + " does not broadcast to the result " + shapeStr(result));
  return llvm::Error::success();
}

/// GatherElements reads data at the result's coordinates off the gathered
/// axis: indices larger than the data there (which ONNX 1.12's inference
/// accepts) would read outside it.
llvm::Error checkGatherElementsShapes(const Node &n) {
  if (!n.is("GatherElements") || n.numInputs() < 2 || !n.input(0) || !n.input(1))
    return llvm::Error::success();
  const Shape &data = n.input(0)->shape(), &indices = n.input(1)->shape();
  if (data.size() != indices.size())
    return makeError("indices " + shapeStr(indices) + " and data " + shapeStr(data) +
                     " differ in rank");
  int64_t rank = static_cast<int64_t>(data.size());
  int64_t axis = n.getInt("axis", 0);
  axis = axis < 0 ? axis + rank : axis;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indices[d] > data[d])
      return makeError("indices " + shapeStr(indices) + " exceed data " + shapeStr(data) +
                       " on axis " + std::to_string(d) + ", which is not gathered");
  return llvm::Error::success();
}

/// Transpose's perm must name every axis of its input once (ONNX 1.12's
/// inference accepts a shorter perm, and the gradient rule then indexed past
/// it).
llvm::Error checkTransposePerm(const Node &n) {
  if (!n.is("Transpose") || !n.input(0) || !n.hasAttr("perm"))
    return llvm::Error::success();
  size_t rank = n.input(0)->shape().size();
  std::vector<int64_t> perm = n.getInts("perm");
  if (perm.size() == rank)
    return llvm::Error::success();
  return makeError("perm has " + std::to_string(perm.size()) + " entries for an input of rank " +
                   std::to_string(rank));
}

/// Reshape's shape must hold its operand's elements: ONNX 1.12's inference
/// takes the shape operand as given, and the result, a view, would then
/// claim memory the operand does not have (found by ampc-fuzz-onnxtxt).
llvm::Error checkReshapeCount(const Node &n) {
  if (!n.is("Reshape") || !n.input(0) || !n.output(0))
    return llvm::Error::success();
  const Shape &in = n.input(0)->shape(), &out = n.output(0)->shape();
  if (numElements(in) == numElements(out))
    return llvm::Error::success();
  return makeError("shape " + shapeStr(out) + " does not hold the " +
                   std::to_string(numElements(in)) + " elements of " + shapeStr(in));
}

/// `axis` and `axes` attributes within [-r-1, r] of the first operand's rank r
/// (the widest any operator allows), and within [-r, r) for operators whose
/// axis is one of that operand's: ONNX 1.12's inference of some operators'
/// extra outputs indexed with an axis of 2^63 - 1 and crashed when autodiff
/// asked for them (found by ampc-fuzz-onnx); each operator's own rule still
/// applies.
llvm::Error checkAxisRange(const Node &n) {
  if (!n.numInputs() || !n.input(0))
    return llvm::Error::success();
  int64_t rank = static_cast<int64_t>(n.input(0)->shape().size());
  // Operators whose axis names one of their operand's axes: [-r, r). ONNX
  // 1.12's LayerNormalization inference indexed the operand's dims with
  // axis + r for its mean and inverse deviation (-1 for axis -4 of a rank-3
  // operand: SIGSEGV when autodiff asked for them, found by ampc-fuzz-onnx).
  static const llvm::StringSet<> kOperandAxis = {
      "LayerNormalization", "Softmax",         "LogSoftmax", "Hardmax", "Concat", "Split", "Gather",
      "GatherElements",     "ScatterElements", "ArgMax",     "ArgMin"};
  bool operandAxis = n.domain().empty() && kOperandAxis.contains(n.opType());
  auto inRange = [&](int64_t a) {
    return operandAxis ? a >= -rank && a < rank : a >= -rank - 1 && a <= rank;
  };
  if (n.hasAttr("axis") && !inRange(n.getInt("axis", 0)))
    return makeError("axis " + std::to_string(n.getInt("axis", 0)) +
                     " is out of range for an operand of rank " + std::to_string(rank));
  if (n.hasAttr("axes"))
    for (int64_t a : n.getInts("axes"))
      if (!inRange(a))
        return makeError("axes entry " + std::to_string(a) +
                         " is out of range for an operand of rank " + std::to_string(rank));
  return llvm::Error::success();
}

/// The loss operators' `reduction` is a string the schemas do not check.
llvm::Error checkLossReduction(const Node &n) {
  if (!n.is("SoftmaxCrossEntropyLoss") && !n.is("NegativeLogLikelihoodLoss"))
    return llvm::Error::success();
  std::string reduction = n.getString("reduction", "mean");
  if (reduction == "mean" || reduction == "sum" || reduction == "none")
    return llvm::Error::success();
  return makeError("reduction '" + reduction + "' is none of 'none', 'sum' and 'mean'");
}

/// Float initializers that feed only operands no gradient flows through
/// (Resize's roi and scales, Dropout's ratio, Pad's value) are constants:
/// PyTorch writes them as Python numbers, and exporters that fold constants
/// turn them into initializers, which would otherwise count as parameters.
void markOperandConstants(Graph &g) {
  static const std::map<std::string, std::vector<unsigned>> operands = {
      {"Resize", {1, 2}}, {"Dropout", {1}}, {"Pad", {2}}};
  for (Value *v : g.initializers()) {
    if (!v->isParameter() || !v->hasUses())
      continue;
    bool onlyOperands = true;
    for (const Use &u : v->uses()) {
      auto it = u.user->domain().empty() ? operands.find(u.user->opType()) : operands.end();
      onlyOperands = onlyOperands && it != operands.end() &&
                     std::count(it->second.begin(), it->second.end(), u.operand) > 0;
    }
    if (onlyOperands)
      v->setConstant(true);
  }
}

/// A declared graph output type that ONNX's inference would accept for a
/// value of type `computed`: the same element type and rank, and no static
/// dimension that differs (symbolic ones take the computed size).
bool declaredTypeAdmits(const onnx::TypeProto &declared, const TensorType &computed) {
  if (!declared.has_tensor_type())
    return false;
  const auto &tt = declared.tensor_type();
  if (dtypeFromOnnx(tt.elem_type()) != computed.dtype)
    return false;
  if (!tt.has_shape())
    return true;
  if (tt.shape().dim_size() != static_cast<int>(computed.shape.size()))
    return false;
  for (int d = 0; d < tt.shape().dim_size(); ++d)
    if (tt.shape().dim(d).has_dim_value() && tt.shape().dim(d).dim_value() != computed.shape[d])
      return false;
  return true;
}

/// How buildGraph finds the result types of nodes.
enum class NodeTypes {
  /// From the model's value_info, filled in by ONNX's shape inference.
  FromValueInfo,
  /// Inferred node by node while building (inferImportedNodeTypes): any
  /// failure makes the import fall back to ONNX's inference, which then
  /// names the fault as before.
  InferredWhileBuilding,
};

/// Builds the model's graph into the empty `g`.
llvm::Error fillGraph(const onnx::ModelProto &model, TakenValues &taken,
                      const std::string &baseDir, NodeTypes nodeTypes, Graph *g) {
  bool infer = nodeTypes == NodeTypes::InferredWhileBuilding;
  const auto &gp = model.graph();
  g->name = gp.name().empty() ? "main" : gp.name();
  g->irVersion = model.ir_version();
  g->producerName = model.producer_name();
  g->producerVersion = model.producer_version();
  for (const auto &imp : model.opset_import())
    g->opsets[isDefaultDomain(imp.domain()) ? "" : imp.domain()] = imp.version();
  for (const auto &prop : model.metadata_props())
    g->metadata[prop.key()] = prop.value();

  std::unordered_map<std::string, const onnx::TypeProto *> types;
  if (!infer) {
    for (const auto &v : gp.value_info())
      types[v.name()] = &v.type();
    for (const auto &v : gp.output())
      types[v.name()] = &v.type();
    for (const auto &v : gp.input())
      types[v.name()] = &v.type();
  }

  std::unordered_map<std::string, Value *> values;
  for (const auto &t : gp.initializer()) {
    auto it = taken.find(t.name());
    // While types are inferred, the values taken out of the message stay in
    // `taken` (the graph holds zeros that allocate nothing until
    // buildInferringTypes succeeds), so that a build that gives way leaves
    // them to the next; inference reads no value that large.
    if (infer && it != taken.end()) {
      if (it->second.size() > kMaxElements)
        return makeError("initializer '" + t.name() + "' has more than 2^31 elements");
      values[t.name()] = g->addInitializer(t.name(), Tensor(it->second.type()));
      continue;
    }
    auto tensor = it != taken.end() ? llvm::Expected<Tensor>(std::move(it->second))
                                    : tensorFromProto(t, baseDir);
    if (!tensor)
      return withContext(tensor.takeError(), "initializer '" + t.name() + "'");
    if (tensor->size() > kMaxElements)
      return makeError("initializer '" + t.name() + "' has more than 2^31 elements");
    values[t.name()] = g->addInitializer(t.name(), std::move(*tensor));
  }
  for (const auto &in : gp.input()) {
    auto ty = staticType(in.type(), "input '" + in.name() + "'");
    if (!ty)
      return ty.takeError();
    values[in.name()] = g->addInput(in.name(), *ty);
  }
  for (const auto &np : gp.node()) {
    std::vector<Value *> inputs;
    for (const auto &name : np.input())
      inputs.push_back(name.empty() ? nullptr : values.at(name));
    std::vector<TensorType> outTypes;
    std::vector<std::string> outNames;
    for (const auto &name : np.output()) {
      outNames.push_back(name);
      if (name.empty()) {
        outTypes.emplace_back();
        continue;
      }
      if (infer) {
        outTypes.emplace_back(DType::F32, Shape{}); // inferred below
        continue;
      }
      auto it = types.find(name);
      if (it == types.end())
        return makeError(nodeLabel(np) + ": the type of output '" + name +
                         "' could not be inferred");
      auto ty = staticType(*it->second, nodeLabel(np) + ": output '" + name + "'");
      if (!ty)
        return ty.takeError();
      outTypes.push_back(*ty);
    }
    std::map<std::string, Attribute> attrs;
    for (const auto &ap : np.attribute()) {
      llvm::Error err = llvm::Error::success();
      attrs[ap.name()] = attributeFromProto(ap, err);
      if (err)
        return withContext(std::move(err), nodeLabel(np) + ": attribute '" + ap.name() + "'");
    }
    std::string domain = isDefaultDomain(np.domain()) ? "" : np.domain();
    std::string opType = np.op_type();
    // CastLike (PyTorch's dynamo exports carry it) is a Cast to the type of
    // its second operand, which is static here: one op, one gradient rule.
    if (domain.empty() && opType == "CastLike" && inputs.size() == 2 && inputs[1]) {
      attrs = {{"to", Attribute::ofInt(dtypeToOnnx(inputs[1]->dtype()))}};
      inputs.pop_back();
      opType = "Cast";
    }
    Node *n = g->createNode(opType, inputs, outTypes, std::move(attrs), np.name(), domain,
                            outNames);
    if (infer) {
      auto inferred = inferImportedNodeTypes(*n);
      if (!inferred)
        return inferred.takeError();
      for (unsigned i = 0; i < n->numOutputs(); ++i)
        if (Value *v = n->output(i))
          v->setType((*inferred)[i]);
    }
    // What ONNX 1.12's checker and inference leave unchecked.
    for (auto check : {checkGemmShapes, checkLossReduction, checkGatherElementsShapes,
                       checkTransposePerm, checkReshapeCount, checkAxisRange})
      if (auto err = check(*n))
        return withContext(std::move(err), nodeLabel(np));
    for (unsigned i = 0; i < n->numOutputs(); ++i)
      if (Value *v = n->output(i))
        values[np.output(i)] = v;
  }
  for (const auto &out : gp.output()) {
    Value *v = values.at(out.name());
    if (infer) {
      if (!declaredTypeAdmits(out.type(), v->type()))
        return makeError("graph output '" + out.name() + "' is declared otherwise");
      g->addOutput(v);
      continue;
    }
    auto declared = staticType(out.type(), "graph output '" + out.name() + "'");
    if (!declared)
      return declared.takeError();
    if (*declared != v->type())
      return makeError("graph output '" + out.name() + "' is declared " + declared->str() +
                       " but computed as " + v->type().str());
    g->addOutput(v);
  }
  // State bindings (a training step written by ampc).
  for (const auto &ti : model.training_info())
    for (const auto &b : ti.update_binding()) {
      auto s = values.find(b.key());
      auto u = values.find(b.value());
      if (s == values.end() || u == values.end())
        return makeError("update_binding '" + b.key() + "' <- '" + b.value() +
                         "' names an unknown value");
      g->stateBindings.push_back({s->second, u->second});
    }
  return llvm::Error::success();
}

/// What follows a filled graph: ampc's facts recorded in the model, and the
/// operands that are constants.
llvm::Error finishGraph(Graph &g) {
  if (std::string err = absorbIRFacts(g); !err.empty())
    return makeError(err);
  markOperandConstants(g);
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Graph>> buildGraph(const onnx::ModelProto &model,
                                                  TakenValues &taken,
                                                  const std::string &baseDir) {
  auto g = std::make_unique<Graph>();
  if (auto err = fillGraph(model, taken, baseDir, NodeTypes::FromValueInfo, g.get()))
    return std::move(err);
  if (auto err = finishGraph(*g))
    return std::move(err);
  return g;
}

/// ONNX's checker (unless it already passed) and shape inference over the
/// model, which record every value's type in its value_info (shapes ONNX
/// leaves open completed by partial evaluation); an error names the fault.
llvm::Error inferWithOnnx(onnx::ModelProto &model, bool checkerPassed) {
  onnx::GraphProto &graph = *model.mutable_graph();
  std::vector<int> explicitKernels = makeConvKernelShapesExplicit(graph);
  llvm::Error checked = runChecker(model, checkerPassed);
  removeAddedKernelShapes(graph, explicitKernels);
  if (checked)
    return checked;
  return completeStaticShapes(model);
}

/// Whether the model's types can be inferred while its graph is built: no
/// value_info of its own to reconcile, no Shape or Size, whose data ONNX's
/// inference propagates into the shapes of later nodes, and no convolution,
/// whose inference is safe only with the explicit kernel_shape inferWithOnnx
/// gives it.
bool typesInferableWhileBuilding(const onnx::ModelProto &model) {
  if (model.graph().value_info_size() > 0 || model.functions_size() > 0)
    return false;
  static const llvm::StringSet<> kNeedOnnx = {"Shape", "Size", "Conv", "ConvTranspose",
                                              "ConvInteger", "QLinearConv"};
  for (const auto &n : model.graph().node())
    if (isDefaultDomain(n.domain()) && kNeedOnnx.contains(n.op_type()))
      return false;
  return true;
}

/// The graph with each node's result types inferred as it is created (by
/// the common rules or the node's own schema), which is most of the import's
/// time when ONNX infers the whole model first; a null graph (and `taken`
/// as it was) where any node needs ONNX's inference or is at fault.
/// `checkerPassed` tells whether ONNX's checker ran here and passed.
llvm::Expected<std::unique_ptr<Graph>> buildInferringTypes(onnx::ModelProto &model,
                                                           TakenValues &taken,
                                                           const std::string &baseDir,
                                                           const ImportOptions &opts,
                                                           bool &checkerPassed) {
  checkerPassed = false;
  if (opts.wholeModelInference || !typesInferableWhileBuilding(model))
    return nullptr;
  if (llvm::Error err = runModelChecker(model)) {
    llvm::consumeError(std::move(err));
    return nullptr;
  }
  checkerPassed = true;
  auto g = std::make_unique<Graph>();
  if (llvm::Error err =
          fillGraph(model, taken, baseDir, NodeTypes::InferredWhileBuilding, g.get())) {
    llvm::consumeError(std::move(err));
    return nullptr;
  }
  for (auto &[name, tensor] : taken)
    if (Value *v = g->findValue(name); v && v->isInitializer())
      v->setData(std::move(tensor));
  if (auto err = finishGraph(*g))
    return std::move(err);
  return g;
}

} // namespace

llvm::Expected<std::unique_ptr<Graph>> importModelProto(onnx::ModelProto &model,
                                                        const std::string &displayName,
                                                        const std::string &baseDir,
                                                        const ImportOptions &opts) {
  registerAmpcSchemas();
  auto fail = [&](llvm::Error err) { return withContext(std::move(err), displayName); };
  if (!model.has_graph())
    return fail(makeError("the model has no graph"));
  if (auto err = checkBeforeOnnx(model))
    return fail(std::move(err));
  // Undefined operands and outputs before ONNX's version converter, which
  // crashed on a graph output no node produces (found by fuzzing).
  if (auto err = checkStructure(*model.mutable_graph()))
    return fail(std::move(err));
  if (auto err = checkOpsets(model))
    return fail(std::move(err));
  onnx::GraphProto &graph = *model.mutable_graph();
  TakenValues taken;
  if (auto err = takeLargeValues(model, baseDir, taken))
    return fail(std::move(err));
  if (auto err = rejectSubgraphs(graph))
    return fail(std::move(err));
  std::unordered_map<std::string, onnx::TensorProto> defaults;
  splitInitializerInputs(model, defaults);
  if (auto err = checkStructure(graph))
    return fail(std::move(err));
  if (auto err = checkKnownOps(model))
    return fail(std::move(err));
  if (auto err = bindInputShapes(graph, opts))
    return fail(std::move(err));
  bool checkerPassed;
  llvm::Expected<std::unique_ptr<Graph>> g =
      buildInferringTypes(model, taken, baseDir, opts, checkerPassed);
  if (!g)
    return fail(g.takeError());
  if (!*g) {
    if (auto err = inferWithOnnx(model, checkerPassed))
      return fail(std::move(err));
    g = buildGraph(model, taken, baseDir);
    if (!g)
      return fail(g.takeError());
  }
  for (const auto &[name, proto] : defaults) {
    Value *v = (*g)->findValue(name);
    auto it = taken.find(name);
    auto t = it != taken.end() ? llvm::Expected<Tensor>(std::move(it->second))
                               : tensorFromProto(proto, baseDir);
    if (!t)
      return fail(withContext(t.takeError(), "default of input '" + name + "'"));
    if (!v || !v->isGraphInput() || t->type() != v->type())
      return fail(makeError("the default of input '" + name + "' does not match the input"));
    v->setData(std::move(*t));
  }
  return g;
}

llvm::Expected<std::unique_ptr<Graph>> importModelText(std::string_view text,
                                                       const std::string &displayName,
                                                       const ImportOptions &opts) {
  onnx::ModelProto model;
  if (auto err = parseOnnxText(text, model))
    return withContext(std::move(err), displayName);
  return importModelProto(model, displayName, ".", opts);
}

llvm::Expected<std::unique_ptr<Graph>> importModelFile(const std::string &path,
                                                       const ImportOptions &opts) {
  bool fromStdin = path == "-";
  std::string display = fromStdin ? "<stdin>" : path;
  if (!fromStdin && llvm::sys::fs::is_directory(path))
    return makeError(display + ": is a directory, not a model file");
  auto buffer = fromStdin ? llvm::MemoryBuffer::getSTDIN() : llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return makeError(display + ": cannot read the file: " + buffer.getError().message());
  llvm::StringRef bytes = (*buffer)->getBuffer();
  if (bytes.empty())
    return makeError(display + ": the file is empty");

  llvm::StringRef ext = llvm::sys::path::extension(path);
  bool text = fromStdin || ext == ".onnxtxt" || ext == ".txt";
  if (text)
    return importModelText(std::string_view(bytes.data(), bytes.size()), display, opts);
  // A binary model is parsed from the file, not from the mapping (whose
  // pages would stay resident next to the message).
  size_t size = bytes.size();
  buffer->reset();

  onnx::ModelProto model;
  if (size > static_cast<size_t>(INT32_MAX) || !parseModelFile(path, model))
    return makeError(display + ": not a valid ONNX model (the protobuf could not be parsed; "
                               "truncated or not an .onnx file)");
  std::string baseDir = llvm::sys::path::parent_path(path).str();
  return importModelProto(model, display, baseDir.empty() ? "." : baseDir, opts);
}

llvm::Expected<Shape> parseShapeList(std::string_view text) {
  Shape shape;
  std::string s(text);
  if (s.empty())
    return shape; // a scalar
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char *end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0)
      return makeError("invalid dimension '" + item + "' in shape '" + s + "'");
    shape.push_back(v);
  }
  return shape;
}

} // namespace ampc
