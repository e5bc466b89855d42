//===- TypeInference.cpp - Result types from ONNX operator schemas --------===//

#include "ampc/ONNX/TypeInference.h"

#include "CommonTypeInference.h"
#include "LargeValues.h"
#include "ampc/ONNX/ProtoConversion.h"
#include "ampc/ONNX/Schemas.h"
#include "ampc/Support/Error.h"

#include "onnx/defs/data_type_utils.h"
#include "onnx/defs/schema.h"
#include "onnx/defs/shape_inference.h"
#include "onnx/shape_inference/implementation.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>

namespace ampc {

namespace {

std::string label(const Node &n) {
  return "node '" + n.displayName() + "' (" + n.qualifiedOpType() + ")";
}

/// A result type as far as the schema can tell: the element type, and the
/// shape when it does not depend on operand data the node cannot see.
struct PartialType {
  DType dtype = DType::Undefined;
  std::optional<Shape> shape;
};

/// Operands bound to one type parameter of the schema (Concat's T, Where's
/// T) have one element type. Inference functions read the first
/// operand's type only, so Concat(float, int64) would pass them, and the
/// interpreter's kernels (the importer's partial evaluation, constant
/// folding) copy elements on that promise (found by fuzzing).
llvm::Error checkTypeParameters(const onnx::OpSchema &schema, const Node &n) {
  // Few parameters, compared by name: a map would allocate for each node.
  llvm::SmallVector<std::pair<const std::string *, DType>, 4> bound;
  const auto &formals = schema.inputs();
  auto check = [&](unsigned i, const Value *v) -> llvm::Error {
    if (!v || formals.empty())
      return llvm::Error::success();
    const auto &formal = formals[std::min<size_t>(i, formals.size() - 1)];
    const auto &params = schema.typeConstraintParams();
    bool isParameter = std::any_of(params.begin(), params.end(), [&](const auto &p) {
      return p.type_param_str == formal.GetTypeStr();
    });
    // A fixed type is checked by inference; a heterogeneous variadic
    // operand (ampc.AllFinite's) binds nothing.
    if (!isParameter || (formal.GetOption() == onnx::OpSchema::Variadic &&
                         !formal.GetIsHomogeneous()))
      return llvm::Error::success();
    const std::string &param = formal.GetTypeStr();
    auto it = std::find_if(bound.begin(), bound.end(),
                           [&](const auto &b) { return *b.first == param; });
    if (it == bound.end()) {
      bound.emplace_back(&param, v->dtype());
      return llvm::Error::success();
    }
    if (it->second == v->dtype())
      return llvm::Error::success();
    return makeError(label(n) + ": '" + v->name() + "' is " + std::string(dtypeName(v->dtype())) +
                     " but type parameter " + param + " is bound to " +
                     std::string(dtypeName(it->second)));
  };
  for (unsigned i = 0; i < n.numInputs(); ++i)
    if (auto err = check(i, n.input(i)))
      return err;
  // Results are compared with what inference gives (verifyNodeTypes), and
  // hold placeholders while createInferredNode infers them.
  return llvm::Error::success();
}

/// ONNX's interned type of a tensor of `d` ("tensor(float)"), what schema
/// type constraints hold; nullptr for Undefined.
onnx::DataType onnxTensorType(DType d) {
  static const std::array<onnx::DataType, 10> types = [] {
    std::array<onnx::DataType, 10> out{};
    for (unsigned i = 1; i < out.size(); ++i)
      out[i] = onnx::Utils::DataTypeUtils::ToType(
          "tensor(" +
          onnx::Utils::DataTypeUtils::ToDataTypeString(dtypeToOnnx(static_cast<DType>(i))) + ")");
    return out;
  }();
  unsigned i = static_cast<unsigned>(d);
  return i < types.size() ? types[i] : nullptr;
}

/// Whether every operand's element type is one its formal parameter allows
/// (what ONNX's inference checks with check_type), without building the
/// type strings it compares.
bool operandTypesAllowed(const onnx::OpSchema &schema, const Node &n) {
  const auto &formals = schema.inputs();
  for (unsigned i = 0; i < n.numInputs(); ++i) {
    const Value *v = n.input(i);
    if (!v)
      continue;
    if (formals.empty())
      return false;
    const auto &allowed = formals[std::min<size_t>(i, formals.size() - 1)].GetTypes();
    onnx::DataType type = onnxTensorType(v->dtype());
    if (!type || !allowed.count(type))
      return false;
  }
  return true;
}

int schemaVersion(const Node &n) {
  int version = static_cast<int>(n.graph()->opsetVersion(n.domain()));
  return n.domain() == kAmpcDomain && version == 0 ? 1 : version;
}

/// The node's schema at the graph's opset.
const onnx::OpSchema *schemaOf(const Node &n) {
  return lookupSchema(n.opType(), schemaVersion(n), n.domain());
}

/// How a node's types are inferred.
enum class Inference {
  /// The common operators' direct rules, else the schema's function.
  Direct,
  /// The schema's function alone (what tests hold the rules to).
  SchemaOnly,
  /// Direct, after checking each operand's type against the schema as ONNX's
  /// check_type does (the importer's node-by-node inference).
  Imported,
};

llvm::Expected<std::vector<PartialType>> inferPartial(const Node &n,
                                                      Inference how = Inference::Direct) {
  const onnx::OpSchema *schema = schemaOf(n);
  if (!schema)
    return makeError(label(n) + ": no ONNX schema at opset " + std::to_string(schemaVersion(n)));
  if (how == Inference::Imported && !operandTypesAllowed(*schema, n))
    return makeError(label(n) + ": an operand's type is not one the schema allows");
  if (auto err = checkTypeParameters(*schema, n))
    return std::move(err);
  if (how != Inference::SchemaOnly)
    if (std::optional<TensorType> common = inferCommonType(n))
      return std::vector<PartialType>{{common->dtype, common->shape}};

  onnx::NodeProto proto;
  proto.set_op_type(n.opType());
  proto.set_domain(n.domain());
  for (const auto &[name, a] : n.attributes())
    attributeToProto(name, a, *proto.add_attribute());
  std::vector<onnx::TypeProto> inTypes(n.numInputs());
  std::vector<onnx::TensorProto> inData;
  inData.reserve(n.numInputs());
  std::unordered_map<std::string, onnx::TypeProto *> typesByName;
  std::unordered_map<std::string, const onnx::TensorProto *> dataByName;
  for (unsigned i = 0; i < n.numInputs(); ++i) {
    const Value *v = n.input(i);
    if (!v) {
      proto.add_input("");
      continue;
    }
    std::string key = "in" + std::to_string(i);
    proto.add_input(key);
    auto *tt = inTypes[i].mutable_tensor_type();
    tt->set_elem_type(dtypeToOnnx(v->dtype()));
    auto *shape = tt->mutable_shape();
    for (int64_t d : v->shape())
      shape->add_dim()->set_dim_value(d);
    typesByName[key] = &inTypes[i];
    // Inference functions read shapes, axes, pads, scales: small values.
    // A weight is not copied into a TensorProto for them, and ONNX's own
    // inference at import sees none of that size either (LargeValues.h).
    const Tensor *data = constantOperandData(v);
    if (data && data->type().byteSize() < kTakenValueBytes) {
      inData.emplace_back();
      tensorToProto(*data, key, inData.back());
      dataByName[key] = &inData.back();
    }
  }
  for (unsigned i = 0; i < n.numOutputs(); ++i)
    proto.add_output(n.output(i) ? "out" + std::to_string(i) : "");

  onnx::shape_inference::InferenceContextImpl ctx(proto, typesByName, dataByName, {});
  try {
    schema->GetTypeAndShapeInferenceFunction()(ctx);
  } catch (const std::exception &e) {
    std::string msg = e.what();
    for (char &c : msg)
      if (c == '\n')
        c = ' ';
    return makeError(label(n) + ": " + msg);
  }
  std::vector<PartialType> out(n.numOutputs());
  for (unsigned i = 0; i < n.numOutputs(); ++i) {
    const onnx::TypeProto *t = ctx.getOutputType(i);
    if (!n.output(i) || !t->has_tensor_type())
      continue;
    out[i].dtype = dtypeFromOnnx(t->tensor_type().elem_type());
    if (!t->tensor_type().has_shape())
      continue;
    Shape shape;
    bool isStatic = true;
    for (const auto &d : t->tensor_type().shape().dim()) {
      isStatic = isStatic && d.has_dim_value();
      shape.push_back(d.dim_value());
    }
    if (isStatic)
      out[i].shape = std::move(shape);
  }
  return out;
}

llvm::Expected<std::vector<TensorType>> inferStaticTypes(const Node &n, Inference how) {
  auto partial = inferPartial(n, how);
  if (!partial)
    return partial.takeError();
  std::vector<TensorType> out;
  for (unsigned i = 0; i < n.numOutputs(); ++i) {
    const PartialType &p = (*partial)[i];
    if (!n.output(i)) {
      out.emplace_back();
      continue;
    }
    if (p.dtype == DType::Undefined || !p.shape)
      return makeError(label(n) + ": the type of result " + std::to_string(i) +
                       " cannot be inferred statically");
    out.emplace_back(p.dtype, *p.shape);
  }
  return out;
}

} // namespace

llvm::Expected<std::vector<TensorType>> inferNodeTypes(const Node &n) {
  return inferStaticTypes(n, Inference::Direct);
}

llvm::Expected<std::vector<TensorType>> inferNodeTypesWithSchema(const Node &n) {
  return inferStaticTypes(n, Inference::SchemaOnly);
}

llvm::Expected<std::vector<TensorType>> inferImportedNodeTypes(const Node &n) {
  return inferStaticTypes(n, Inference::Imported);
}

llvm::Expected<Node *> createInferredNode(Graph &g, std::string opType,
                                          const std::vector<Value *> &inputs,
                                          std::map<std::string, Attribute> attrs,
                                          std::string name, std::string domain,
                                          unsigned numOutputs,
                                          const std::vector<std::string> &outputNames) {
  // Create with placeholder types, infer, then set the real ones.
  std::vector<TensorType> placeholder(numOutputs, TensorType(DType::F32, {}));
  Node *n = g.createNode(std::move(opType), inputs, placeholder, std::move(attrs),
                         std::move(name), std::move(domain), outputNames);
  auto types = inferNodeTypes(*n);
  if (!types) {
    for (unsigned i = 0; i < n->numInputs(); ++i)
      n->setInput(i, nullptr);
    g.eraseNode(n);
    return types.takeError();
  }
  for (unsigned i = 0; i < numOutputs; ++i)
    if (n->output(i))
      n->output(i)->setType((*types)[i]);
  return n;
}

llvm::Error verifyNodeTypes(const Node &n) {
  auto types = inferPartial(n);
  if (!types)
    return types.takeError();
  for (unsigned i = 0; i < n.numOutputs(); ++i) {
    const Value *v = n.output(i);
    const PartialType &p = (*types)[i];
    if (!v)
      continue;
    bool dtypeOk = p.dtype == DType::Undefined || p.dtype == v->dtype();
    bool shapeOk = !p.shape || *p.shape == v->shape();
    if (!dtypeOk || !shapeOk)
      return makeError(label(n) + ": result '" + v->name() + "' is recorded as " +
                       v->type().str() + " but the operator gives " +
                       std::string(dtypeName(p.dtype)) + (p.shape ? shapeStr(*p.shape) : "[?]"));
  }
  return llvm::Error::success();
}

llvm::Error verifyTypes(const Graph &g) {
  for (const Node *n : g.nodes())
    if (auto err = verifyNodeTypes(*n))
      return err;
  return llvm::Error::success();
}

} // namespace ampc
