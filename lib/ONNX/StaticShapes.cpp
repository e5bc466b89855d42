//===- StaticShapes.cpp - Static shapes by partial evaluation --------------===//
//
// ONNX's shape inference propagates constant data through a few operators
// only, so the shape subgraphs of torch exports with dynamic axes (Shape,
// Gather, Div, Cast, Concat -> Reshape) often leave results without a static
// shape even after every input is bound. Here the importer evaluates such
// constant subgraphs with the reference interpreter on a scratch copy of the
// model, feeds their values back to ONNX's inference as initializers, and
// copies the completed types into the real model. The model itself is not
// changed: folding is the job of the constant-fold pass.
//
//===----------------------------------------------------------------------===//

#include "StaticShapes.h"

#include "LargeValues.h"

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/ONNX/ProtoConversion.h"
#include "ampc/ONNX/TypeInference.h"
#include "ampc/Support/Error.h"

#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

#include <unordered_map>
#include <unordered_set>

namespace ampc {

bool hasStaticShape(const onnx::TypeProto &t) {
  if (!t.has_tensor_type() || !t.tensor_type().has_shape())
    return false;
  for (const auto &d : t.tensor_type().shape().dim())
    if (!d.has_dim_value())
      return false;
  return true;
}

namespace {

constexpr int64_t kMaxEvaluatedElements = int64_t(1) << 16;
constexpr int kMaxRounds = 64;

bool isStatic(const onnx::TypeProto &t) {
  return hasStaticShape(t) && dtypeFromOnnx(t.tensor_type().elem_type()) != DType::Undefined;
}

TensorType toTensorType(const onnx::TypeProto &t) {
  Shape shape;
  for (const auto &d : t.tensor_type().shape().dim())
    shape.push_back(d.dim_value());
  return TensorType(dtypeFromOnnx(t.tensor_type().elem_type()), shape);
}

using TypeMap = std::unordered_map<std::string, onnx::TypeProto>;

TypeMap collectTypes(const onnx::GraphProto &g) {
  TypeMap types;
  for (const auto *list : {&g.input(), &g.value_info(), &g.output()})
    for (const auto &vi : *list)
      types[vi.name()] = vi.type();
  return types;
}

bool hasUnknownTypes(const onnx::GraphProto &g) {
  TypeMap types = collectTypes(g);
  for (const auto &n : g.node())
    for (const auto &o : n.output()) {
      if (o.empty())
        continue;
      auto it = types.find(o);
      if (it == types.end() || !isStatic(it->second))
        return true;
    }
  return false;
}

/// The operators of shape subgraphs. Only these are evaluated: the rest
/// (Conv, pooling, norms, random ops) never compute a shape, and the
/// interpreter's kernels for them trust operands that only the strict
/// verification after this step guarantees.
bool computesShapes(const onnx::NodeProto &n) {
  static const std::unordered_set<std::string> ops = {
      "Abs", "Add", "And", "Cast", "Ceil", "Clip", "Concat", "Constant", "ConstantOfShape",
      "CumSum", "Div", "Equal", "Expand", "Flatten", "Floor", "Gather", "GatherElements",
      "Greater", "GreaterOrEqual", "Identity", "Less", "LessOrEqual", "Max", "Min", "Mod",
      "Mul", "Neg", "Not", "Or", "Pow", "Range", "ReduceMax", "ReduceMin", "ReduceProd",
      "ReduceSum", "Reshape", "Round", "Shape", "Sign", "Size", "Slice", "Split", "Sqrt",
      "Squeeze", "Sub", "Sum", "Tile", "Transpose", "Unsqueeze", "Where", "Xor"};
  return n.domain().empty() && ops.count(n.op_type());
}

/// Evaluates computable nodes of a scratch model, turning their results into
/// initializers so that ONNX's shape inference sees the data.
class PartialEvaluator {
public:
  explicit PartialEvaluator(onnx::ModelProto &work) : work_(work) {
    for (const auto &imp : work.opset_import())
      scratch_.opsets[imp.domain() == "ai.onnx" ? "" : imp.domain()] = imp.version();
  }

  /// One round: infer, then evaluate what became computable. True on progress.
  llvm::Expected<bool> round() {
    onnx::ShapeInferenceOptions options(/*check_type=*/false, /*strict=*/0, /*data_prop=*/true);
    try {
      onnx::shape_inference::InferShapes(work_, onnx::OpSchemaRegistry::Instance(), options);
    } catch (const std::exception &) {
      return false; // the strict run on the real model reports errors
    }
    types_ = collectTypes(work_.graph());
    auto &graph = *work_.mutable_graph();
    for (const auto &t : graph.initializer()) {
      // A large value taken out of the model computes no shape.
      if (known_.count(t.name()) || hasNoValue(t))
        continue;
      auto tensor = tensorFromProto(t);
      if (!tensor)
        return tensor.takeError();
      known_.emplace(t.name(), std::move(*tensor));
    }
    bool progress = false;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> remaining;
    for (const auto &np : graph.node()) {
      auto results = tryEvaluate(np);
      if (!results)
        return results.takeError();
      if (results->empty()) {
        *remaining.Add() = np;
        continue;
      }
      for (int i = 0; i < np.output_size(); ++i) {
        if (np.output(i).empty())
          continue;
        tensorToProto((*results)[i], np.output(i), *graph.add_initializer());
        known_.emplace(np.output(i), std::move((*results)[i]));
      }
      progress = true;
    }
    graph.mutable_node()->Swap(&remaining);
    return progress;
  }

private:
  /// The node's results when all its operands are known (Shape and Size need
  /// only a static operand type); empty when it cannot be evaluated.
  llvm::Expected<std::vector<Tensor>> tryEvaluate(const onnx::NodeProto &np) {
    if (!computesShapes(np) || !hasKernel("", np.op_type()))
      return std::vector<Tensor>{};
    std::vector<TensorType> outTypes;
    for (const auto &o : np.output()) {
      auto it = types_.find(o);
      if (o.empty() || it == types_.end() || !isStatic(it->second))
        return std::vector<Tensor>{};
      outTypes.push_back(toTensorType(it->second));
      if (outTypes.back().numElements() > kMaxEvaluatedElements)
        return std::vector<Tensor>{};
    }
    bool typeOnly = np.op_type() == "Shape" || np.op_type() == "Size";
    std::vector<Value *> inputs;
    std::vector<Tensor> typeOnlyData;
    std::vector<const Tensor *> data;
    typeOnlyData.reserve(np.input_size());
    for (const auto &in : np.input()) {
      if (in.empty()) {
        inputs.push_back(nullptr);
        data.push_back(nullptr);
        continue;
      }
      if (const Tensor *t = known(in)) {
        // An initializer, so that the schema's inference below sees the data.
        inputs.push_back(scratch_.addInitializer("in", *t, /*constant=*/true));
        data.push_back(t);
        continue;
      }
      auto it = types_.find(in);
      if (!typeOnly || it == types_.end() || !isStatic(it->second) ||
          toTensorType(it->second).numElements() > kMaxEvaluatedElements)
        return std::vector<Tensor>{};
      // Shape and Size read only the type: any data of that type will do.
      typeOnlyData.emplace_back(toTensorType(it->second));
      inputs.push_back(scratch_.addInput("in", typeOnlyData.back().type()));
      data.push_back(&typeOnlyData.back());
    }
    std::map<std::string, Attribute> attrs;
    for (const auto &ap : np.attribute()) {
      llvm::Error err = llvm::Error::success();
      attrs[ap.name()] = attributeFromProto(ap, err);
      if (err)
        return std::move(err);
    }
    Node *n = scratch_.createNode(np.op_type(), inputs, outTypes, std::move(attrs), np.name());
    // The interpreter's kernels trust a verified node (operand ranks, attribute
    // ranges); a malformed model's node that non-strict inference let through
    // is left to the strict run, which reports it.
    llvm::Expected<std::vector<Tensor>> results = std::vector<Tensor>{};
    if (llvm::Error err = verifyNodeTypes(*n))
      results = std::move(err);
    else
      results = evaluateNode(*n, data);
    for (unsigned i = 0; i < n->numInputs(); ++i)
      n->setInput(i, nullptr);
    scratch_.eraseNode(n);
    for (Value *v : inputs)
      if (v)
        scratch_.removeValue(v);
    if (!results) {
      // Leave the failure to the real evaluation (or to the type error).
      llvm::consumeError(results.takeError());
      return std::vector<Tensor>{};
    }
    return results;
  }

  const Tensor *known(const std::string &name) const {
    auto it = known_.find(name);
    return it == known_.end() ? nullptr : &it->second;
  }

  onnx::ModelProto &work_;
  Graph scratch_;
  TypeMap types_;
  std::unordered_map<std::string, Tensor> known_;
};

} // namespace

llvm::Error completeStaticShapes(onnx::ModelProto &model) {
  if (!hasUnknownTypes(model.graph()))
    return llvm::Error::success();
  onnx::ModelProto work = model;
  // ONNX 1.12's convolution inference reads the weight's spatial dims past
  // a lower-rank input's end (a crash found by fuzzing: an input whose shape
  // only partial evaluation reveals); with an explicit kernel_shape it
  // reports the mismatch instead. `work` is a scratch copy: nothing to undo.
  makeConvKernelShapesExplicit(*work.mutable_graph());
  PartialEvaluator evaluator(work);
  for (int i = 0; i < kMaxRounds; ++i) {
    auto progress = evaluator.round();
    if (!progress)
      return progress.takeError();
    if (!*progress)
      break;
  }
  // Copy every static type found into the real model's value_info.
  TypeMap types = collectTypes(work.graph());
  for (const auto &t : work.graph().initializer()) {
    onnx::TypeProto tp;
    auto *tt = tp.mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    auto *shape = tt->mutable_shape();
    for (int64_t d : t.dims())
      shape->add_dim()->set_dim_value(d);
    types.emplace(t.name(), tp);
  }
  // BatchNormalization-9 (opsets 9 to 13) infers no type for its training
  // results (running and saved statistics): they have the scale's type [C].
  for (const auto &n : work.graph().node()) {
    auto scale = n.input_size() > 1 ? types.find(n.input(1)) : types.end();
    if (n.op_type() != "BatchNormalization" || scale == types.end() || !isStatic(scale->second))
      continue;
    for (int i = 1; i < n.output_size(); ++i) {
      auto have = types.find(n.output(i));
      if (!n.output(i).empty() && (have == types.end() || !isStatic(have->second)))
        types[n.output(i)] = scale->second;
    }
  }
  TypeMap existing = collectTypes(model.graph());
  auto &graph = *model.mutable_graph();
  for (const auto &n : graph.node())
    for (const auto &o : n.output()) {
      auto have = existing.find(o);
      auto found = types.find(o);
      if (o.empty() || found == types.end() || !isStatic(found->second))
        continue;
      if (have != existing.end() && isStatic(have->second))
        continue;
      bool replaced = false;
      for (auto &vi : *graph.mutable_value_info())
        if (vi.name() == o) {
          *vi.mutable_type() = found->second;
          replaced = true;
        }
      if (!replaced) {
        auto *vi = graph.add_value_info();
        vi->set_name(o);
        *vi->mutable_type() = found->second;
      }
    }
  return llvm::Error::success();
}

} // namespace ampc
