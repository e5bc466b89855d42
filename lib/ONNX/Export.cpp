//===- Export.cpp - The IR back to ONNX ------------------------------------===//

#include "ampc/ONNX/Export.h"

#include "LargeValues.h"
#include "ampc/rt/Npy.h"

#include "ampc/IR/Printer.h"
#include "ampc/ONNX/ProtoConversion.h"
#include "ampc/ONNX/Schemas.h"
#include "ampc/Support/Error.h"

#include "onnx/checker.h"
#include "onnx/shape_inference/implementation.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <unordered_set>
#include <unistd.h>

namespace ampc {

namespace {

void setType(const TensorType &t, onnx::TypeProto &proto) {
  auto *tt = proto.mutable_tensor_type();
  tt->set_elem_type(dtypeToOnnx(t.dtype));
  auto *shape = tt->mutable_shape();
  for (int64_t d : t.shape)
    shape->add_dim()->set_dim_value(d);
}

void addValueInfo(const Value *v, google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> &list) {
  auto *vi = list.Add();
  vi->set_name(v->name());
  setType(v->type(), *vi->mutable_type());
}

std::string oneLine(std::string s) {
  for (char &c : s)
    if (c == '\n' || c == '\r')
      c = ' ';
  return s;
}

} // namespace

void graphToModelProto(const Graph &g, onnx::ModelProto &model,
                       const std::unordered_set<std::string> *dataless) {
  model.Clear();
  model.set_ir_version(g.irVersion);
  model.set_producer_name(g.producerName.empty() ? "ampc" : g.producerName);
  if (!g.producerVersion.empty())
    model.set_producer_version(g.producerVersion);
  bool usesAmpc = false;
  for (const Node *n : g.nodes())
    usesAmpc = usesAmpc || n->domain() == kAmpcDomain;
  for (const auto &[domain, version] : g.opsets) {
    auto *imp = model.add_opset_import();
    imp->set_domain(domain);
    imp->set_version(version);
  }
  if (usesAmpc && !g.opsets.count(std::string(kAmpcDomain))) {
    auto *imp = model.add_opset_import();
    imp->set_domain(std::string(kAmpcDomain));
    imp->set_version(1);
  }
  // State bindings go to TrainingInfoProto below; the other IR facts to metadata.
  for (const auto &[k, v] : metadataWithIRFacts(g)) {
    if (k == kUpdateBindingKey)
      continue;
    auto *prop = model.add_metadata_props();
    prop->set_key(k);
    prop->set_value(v);
  }

  auto *gp = model.mutable_graph();
  gp->set_name(g.name);
  for (const Value *v : g.initializers()) {
    onnx::TensorProto &init = *gp->add_initializer();
    if (!dataless || !dataless->count(v->name())) {
      tensorToProto(*v->data(), v->name(), init);
      continue;
    }
    init.set_name(v->name());
    init.set_data_type(dtypeToOnnx(v->dtype()));
    for (int64_t d : v->type().shape)
      init.add_dims(d);
  }
  for (const Value *v : g.inputs()) {
    addValueInfo(v, *gp->mutable_input());
    if (v->hasDefault())
      tensorToProto(*v->data(), v->name(), *gp->add_initializer());
  }
  for (const Value *v : g.outputs())
    addValueInfo(v, *gp->mutable_output());
  for (const Node *n : g.nodes()) {
    auto *np = gp->add_node();
    np->set_op_type(n->opType());
    np->set_domain(n->domain());
    if (!n->name().empty())
      np->set_name(n->name());
    for (const Value *v : n->inputs())
      np->add_input(v ? v->name() : "");
    for (unsigned i = 0; i < n->numOutputs(); ++i) {
      const Value *v = n->output(i);
      np->add_output(v ? v->name() : "");
      if (v && !v->isGraphOutput())
        addValueInfo(v, *gp->mutable_value_info());
    }
    for (const auto &[name, a] : n->attributes())
      attributeToProto(name, a, *np->add_attribute());
  }

  if (!g.stateBindings.empty()) {
    // The step is the main graph itself: each binding says which graph output
    // replaces which state initializer (or input) for the next step.
    auto *ti = model.add_training_info();
    ti->mutable_algorithm()->set_name("ampc_training_step_is_the_main_graph");
    for (const StateBinding &b : g.stateBindings) {
      auto *kv = ti->add_update_binding();
      kv->set_key(b.state->name());
      kv->set_value(b.updated->name());
    }
  }
}

llvm::Error checkModelProto(onnx::ModelProto &model) {
  registerAmpcSchemas();
  try {
    checkModelWithStandIns(model);
  } catch (const std::exception &e) {
    return makeError("the ONNX checker rejects the model: " + oneLine(e.what()));
  }
  try {
    onnx::ModelProto copy = model;
    onnx::ShapeInferenceOptions options(true, 1, true);
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception &e) {
    std::string why = oneLine(e.what());
    // bf16 Conv and pooling (autocast's default) are beyond opset 17.
    std::string hint = why.find("tensor(bfloat16)") != std::string::npos
                           ? " (bf16 convolutions and pooling are beyond opset 17: compile with "
                             "--onnx17-types to keep them fp32)"
                           : "";
    return makeError("strict shape inference rejects the model: " + why + hint);
  }
  return llvm::Error::success();
}

llvm::Expected<std::string> serializeModel(const Graph &g, ModelFormat format) {
  if (format == ModelFormat::Text) {
    PrintOptions opts;
    opts.elideLargeData = false;
    return printGraphToString(g, opts);
  }
  onnx::ModelProto model;
  graphToModelProto(g, model);
  if (auto err = checkModelProto(model))
    return std::move(err);
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return makeError("the model could not be serialized (larger than 2 GiB?)");
  return bytes;
}

llvm::Expected<std::string> serializeWithoutData(onnx::ModelProto &model,
                                                 const std::vector<std::string> &dataless) {
  std::unordered_set<std::string> names(dataless.begin(), dataless.end());
  for (auto &init : *model.mutable_graph()->mutable_initializer()) {
    if (!names.count(init.name()))
      continue;
    init.clear_raw_data();
    init.clear_float_data();
    init.clear_int32_data();
    init.clear_int64_data();
    init.clear_double_data();
    init.clear_uint64_data();
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return makeError("the model could not be serialized (larger than 2 GiB?)");
  return bytes;
}

llvm::Error writeFileAtomically(const std::string &path, std::string_view contents) {
  if (path == "-") {
    llvm::outs() << contents;
    llvm::outs().flush();
    return llvm::Error::success();
  }
  // The runtime's writer (temporary and rename; devices, standard streams
  // and symbolic links handled): one implementation for both tools. A
  // compiler's output can be rebuilt: no fsync, as LLVM's tools do.
  llvm::outs().flush();
  std::string error;
  if (!rt::writeFileAtomic(path, std::string(contents), error, rt::Durability::ProcessCrash))
    return makeError(error);
  return llvm::Error::success();
}

llvm::Error exportModel(const Graph &g, const std::string &path, ModelFormat format) {
  auto bytes = serializeModel(g, format);
  if (!bytes)
    return withContext(bytes.takeError(), path);
  return writeFileAtomically(path, *bytes);
}

} // namespace ampc
