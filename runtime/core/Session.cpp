//===- Session.cpp - A loaded plan on a backend ----------------------------===//

#include "ampc/rt/Session.h"

#include "ampc/rt/ElementMath.h"
#include "ampc/rt/PlanFile.h"
#include "ampc/rt/PlanQueries.h"

#include "onnx/onnx_pb.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace ampc::rt {

ElemType elemTypeOf(plan::ElemType t) {
  switch (t) {
  case plan::F16:
    return ElemType::F16;
  case plan::BF16:
    return ElemType::BF16;
  case plan::F64:
    return ElemType::F64;
  case plan::I64:
    return ElemType::I64;
  case plan::I32:
    return ElemType::I32;
  case plan::I8:
    return ElemType::I8;
  case plan::U8:
    return ElemType::U8;
  case plan::BOOL:
    return ElemType::Bool;
  default:
    return ElemType::F32;
  }
}

std::string typeString(plan::ElemType t, const std::vector<int64_t> &shape) {
  std::string s = elemName(elemTypeOf(t));
  s += "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string safeFileName(const std::string &name) {
  std::string out = name;
  for (char &c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      c = '_';
  return out;
}

namespace {

/// "float32[2,3]"
std::string arrayType(ElemType type, const std::vector<int64_t> &shape) {
  std::string s = elemName(type);
  s += "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}
std::string arrayType(const HostArray &a) { return arrayType(a.type, a.shape); }

bool makeDirs(const std::string &dir, std::string &error) {
  std::string path;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/')
    path = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty())
      continue;
    path += part + "/";
    if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST) {
      error = dir + ": cannot create the folder (" + std::strerror(errno) + ")";
      return false;
    }
  }
  return true;
}

HostArray arrayOf(const plan::Tensor &t) {
  HostArray a;
  a.type = elemTypeOf(t.type());
  a.shape.assign(t.shape().begin(), t.shape().end());
  a.bytes.resize(planTensorBytes(t));
  return a;
}

/// fp16 / bf16 to fp32: exact (every narrow value is a float).
void widenToFloat(HostArray &a) {
  if (a.type != ElemType::F16 && a.type != ElemType::BF16)
    return;
  int64_t n = a.numElements();
  std::vector<uint8_t> wide(static_cast<size_t>(n) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    float f = static_cast<float>(a.at(i));
    std::memcpy(wide.data() + i * sizeof(float), &f, sizeof(float));
  }
  a.type = ElemType::F32;
  a.bytes = std::move(wide);
}

} // namespace

std::unique_ptr<Session> Session::fromPlan(plan::Plan p, std::unique_ptr<Backend> backend,
                                           std::string &error) {
  if (!validatePlan(p, error) || !checkStepOperandsApart(p, error))
    return nullptr;
  std::unique_ptr<Session> s(new Session());
  s->plan_ = std::move(p);
  s->backend_ = std::move(backend);
  if (!s->backend_->load(s->plan_, error))
    return nullptr;
  // The backend holds the values now; the session needs the plan's structure.
  dropPlanValues(s->plan_);
  s->fed_.resize(s->plan_.programs_size());
  // Inputs with defaults start out holding them.
  for (const plan::Program &prog : s->plan_.programs())
    for (const plan::Binding &b : prog.inputs())
      if (b.has_default() &&
          !s->backend_->write(b.tensor(), b.default_data().data(), b.default_data().size(), error))
        return nullptr;
  return s;
}

std::unique_ptr<Session> Session::open(const std::string &planPath,
                                       std::unique_ptr<Backend> backend, std::string &error) {
  plan::Plan p;
  if (!readPlanFile(planPath, p, error))
    return nullptr;
  auto s = fromPlan(std::move(p), std::move(backend), error);
  if (!s)
    error = planPath + ": " + error;
  else
    s->planPath_ = planPath;
  return s;
}

int Session::program(const std::string &name) const {
  for (int i = 0; i < plan_.programs_size(); ++i)
    if (plan_.programs(i).name() == name)
      return i;
  return -1;
}

int Session::inputTensor(int program, const std::string &name, ElemType type,
                         const std::vector<int64_t> &shape, const std::string &what,
                         std::string &error) const {
  for (const plan::Binding &b : plan_.programs(program).inputs()) {
    if (b.name() != name)
      continue;
    const plan::Tensor &t = plan_.tensors(b.tensor());
    std::vector<int64_t> want(t.shape().begin(), t.shape().end());
    if (type != elemTypeOf(t.type()) || shape != want) {
      error = what + ": input '" + name + "' expects " + typeString(t.type(), want) + ", got " +
              arrayType(type, shape);
      return -1;
    }
    return b.tensor();
  }
  std::string inputs;
  for (const plan::Binding &b : plan_.programs(program).inputs())
    inputs += (inputs.empty() ? "'" : ", '") + b.name() + "'";
  error = what + ": the plan has no input '" + name + "' (its inputs: " +
          (inputs.empty() ? std::string("none") : inputs) + ")";
  return -1;
}

bool Session::feed(int program, const std::string &name, const HostArray &a,
                   const std::string &what, std::string &error) {
  int tensor = inputTensor(program, name, a.type, a.shape, what, error);
  if (tensor < 0 || !backend_->write(tensor, a.bytes.data(), a.bytes.size(), error))
    return false;
  fed_[program][name] = true;
  return true;
}

bool Session::feedWith(int program, const std::string &name, ElemType type,
                       const std::vector<int64_t> &shape,
                       const std::function<void(uint8_t *)> &fill, HostArray &scratch,
                       const std::string &what, std::string &error) {
  int tensor = inputTensor(program, name, type, shape, what, error);
  if (tensor < 0)
    return false;
  size_t bytes = planTensorBytes(plan_.tensors(tensor));
  if (void *buffer = backend_->inputBuffer(tensor, bytes, error)) {
    fill(static_cast<uint8_t *>(buffer));
    if (!backend_->commitInput(tensor, bytes, error))
      return false;
  } else {
    if (!error.empty())
      return false;
    scratch.type = type;
    scratch.shape = shape;
    scratch.bytes.resize(bytes); // reused: no allocation, no page faults
    fill(scratch.bytes.data());
    if (!backend_->write(tensor, scratch.bytes.data(), bytes, error))
      return false;
  }
  fed_[program][name] = true;
  return true;
}

std::vector<std::string> Session::missingFeeds(int program) const {
  std::vector<std::string> out;
  for (const plan::Binding &b : plan_.programs(program).inputs())
    if (!b.has_default() && !fed_[program].count(b.name()))
      out.push_back(b.name());
  return out;
}

bool Session::run(int program, std::string &error) {
  std::vector<std::string> missing = missingFeeds(program);
  if (!missing.empty()) {
    error = "no feed for input '" + missing.front() + "'";
    return false;
  }
  return backend_->run(program, error);
}

bool Session::readTensor(int tensor, HostArray &out, std::string &error) {
  out = arrayOf(plan_.tensors(tensor));
  return backend_->read(tensor, out.bytes.data(), out.bytes.size(), error);
}

bool Session::writeTensor(int tensor, const HostArray &a, std::string &error) {
  return backend_->write(tensor, a.bytes.data(), a.bytes.size(), error);
}

bool Session::output(int program, const std::string &name, HostArray &out, std::string &error) {
  for (const plan::Binding &b : plan_.programs(program).outputs()) {
    if (b.name() != name)
      continue;
    if (!readTensor(b.tensor(), out, error))
      return false;
    if (b.has_widen_to())
      widenToFloat(out);
    return true;
  }
  error = "the plan has no output '" + name + "'";
  return false;
}

bool Session::saveCheckpoint(const std::string &dir, const std::map<std::string, int64_t> &counters,
                             std::string &error) {
  if (!makeDirs(dir, error))
    return false;
  std::map<std::string, HostArray> arrays;
  for (int i = 0; i < plan_.tensors_size(); ++i) {
    const plan::Tensor &t = plan_.tensors(i);
    if (t.storage() != plan::STATE || t.has_view_of())
      continue;
    HostArray a;
    if (!readTensor(i, a, error))
      return false;
    arrays["state/" + t.name()] = std::move(a);
  }
  for (const auto &[name, value] : counters) {
    HostArray a;
    a.type = ElemType::I64;
    a.bytes.resize(8);
    std::memcpy(a.bytes.data(), &value, 8);
    arrays["counter/" + name] = std::move(a);
  }
  return writeNpz(dir + "/state.npz", arrays, error);
}

bool Session::loadCheckpoint(const std::string &dir, std::map<std::string, int64_t> &counters,
                             std::string &error) {
  std::map<std::string, HostArray> arrays;
  if (!readNpz(dir + "/state.npz", arrays, error))
    return false;
  for (int i = 0; i < plan_.tensors_size(); ++i) {
    const plan::Tensor &t = plan_.tensors(i);
    if (t.storage() != plan::STATE || t.has_view_of())
      continue;
    auto it = arrays.find("state/" + t.name());
    if (it == arrays.end()) {
      error = dir + "/state.npz: no value for state '" + t.name() + "' (a checkpoint of another plan?)";
      return false;
    }
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    if (it->second.type != elemTypeOf(t.type()) || it->second.shape != shape) {
      error = dir + "/state.npz: state '" + t.name() + "' is " + arrayType(it->second) +
              ", the plan has " + typeString(t.type(), shape);
      return false;
    }
    if (!writeTensor(i, it->second, error))
      return false;
  }
  // State the plan does not have means another plan's checkpoint (an AdamW
  // one resumed by an SGD plan of the same model would drop its moments).
  std::set<std::string> planState;
  for (const plan::Tensor &t : plan_.tensors())
    if (t.storage() == plan::STATE && !t.has_view_of())
      planState.insert("state/" + t.name());
  for (const auto &[key, a] : arrays)
    if (key.rfind("state/", 0) == 0 && !planState.count(key)) {
      error = dir + "/state.npz: holds state '" + key.substr(6) +
              "', which the plan does not have (a checkpoint of another plan?)";
      return false;
    }
  for (const auto &[key, a] : arrays)
    if (key.rfind("counter/", 0) == 0 && a.type == ElemType::I64 && a.bytes.size() == 8) {
      int64_t v;
      std::memcpy(&v, a.bytes.data(), 8);
      counters[key.substr(8)] = v;
    }
  return true;
}

bool Session::dumpFileNamesDistinct(const std::string &dir, std::string &error) const {
  std::map<std::string, std::string> owner;
  for (const plan::Parameter &p : plan_.parameters()) {
    auto [it, fresh] = owner.emplace(safeFileName(p.onnx_name()), p.onnx_name());
    if (!fresh) {
      error = dir + ": parameters '" + it->second + "' and '" + p.onnx_name() + "' would both be " +
              it->first + ".npy";
      return false;
    }
  }
  return true;
}

namespace {

/// Writes every array into `dir` or none: the files go to a fresh sibling
/// folder that replaces `dir` by a rename once all are written (a full disk
/// left some files of a dump and not others).
bool writeDumpAllOrNothing(const std::string &dir,
                           const std::vector<std::pair<std::string, HostArray>> &arrays,
                           std::string &error) {
  namespace fs = std::filesystem;
  std::string tmp = dir + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!makeDirs(tmp, error))
    return false;
  for (const auto &[name, a] : arrays)
    if (!writeNpy(tmp + "/" + name + ".npy", a, error)) {
      fs::remove_all(tmp, ec);
      error = dir + ": the dump was not written (" + error + ")";
      return false;
    }
  std::string old = dir + ".old." + std::to_string(::getpid());
  bool hadOld = fs::exists(dir, ec);
  if (hadOld)
    fs::rename(dir, old, ec);
  if (!ec)
    fs::rename(tmp, dir, ec);
  if (ec) {
    fs::remove_all(tmp, ec);
    error = dir + ": cannot put the dump in place (" + ec.message() + ")";
    return false;
  }
  if (hadOld)
    fs::remove_all(old, ec);
  return true;
}

} // namespace

bool Session::dumpParameters(const std::string &dir, std::string &error) {
  if (!dumpFileNamesDistinct(dir, error))
    return false;
  std::vector<std::pair<std::string, HostArray>> arrays;
  for (const plan::Parameter &p : plan_.parameters()) {
    HostArray a;
    if (!readTensor(p.state(), a, error))
      return false;
    arrays.emplace_back(safeFileName(p.onnx_name()), std::move(a));
  }
  return writeDumpAllOrNothing(dir, arrays, error);
}

bool Session::dumpGradients(const std::string &dir, std::string &error) {
  if (!dumpFileNamesDistinct(dir, error))
    return false;
  std::vector<std::pair<std::string, HostArray>> arrays;
  for (const plan::Parameter &p : plan_.parameters()) {
    if (p.grad() < 0)
      continue;
    HostArray a;
    if (!readTensor(p.grad(), a, error))
      return false;
    if (plan_.tensors(p.grad()).type() != plan_.tensors(p.state()).type())
      widenToFloat(a);
    arrays.emplace_back(safeFileName(p.onnx_name()), std::move(a));
  }
  return writeDumpAllOrNothing(dir, arrays, error);
}

namespace {

int onnxDataType(ElemType t) {
  switch (t) {
  case ElemType::F32:
    return onnx::TensorProto::FLOAT;
  case ElemType::F16:
    return onnx::TensorProto::FLOAT16;
  case ElemType::BF16:
    return onnx::TensorProto::BFLOAT16;
  case ElemType::F64:
    return onnx::TensorProto::DOUBLE;
  case ElemType::I64:
    return onnx::TensorProto::INT64;
  case ElemType::I32:
    return onnx::TensorProto::INT32;
  case ElemType::I8:
    return onnx::TensorProto::INT8;
  case ElemType::U8:
    return onnx::TensorProto::UINT8;
  case ElemType::Bool:
    return onnx::TensorProto::BOOL;
  }
  return onnx::TensorProto::UNDEFINED;
}

} // namespace

bool Session::exportOnnx(const std::string &path, std::string &error) {
  onnx::ModelProto model;
  if (plan_.original_model().empty() || !model.ParseFromString(plan_.original_model())) {
    error = planPath_ + ": the plan carries no ONNX model to export";
    return false;
  }
  std::map<std::string, int> trained;
  for (const plan::Parameter &p : plan_.parameters())
    trained[p.onnx_name()] = p.state();
  for (auto &init : *model.mutable_graph()->mutable_initializer()) {
    auto it = trained.find(init.name());
    if (it == trained.end())
      continue;
    HostArray a;
    if (!readTensor(it->second, a, error))
      return false;
    // A plan is only as good as its file: its master copy must still fit
    // the initializer it replaces.
    int64_t elements = 1;
    for (int64_t d : init.dims())
      elements *= d;
    if (a.numElements() != elements || onnxDataType(a.type) != init.data_type()) {
      error = path + ": the trained '" + init.name() + "' (" + elemName(a.type) + ", " +
              std::to_string(a.numElements()) + " elements) does not fit the model's initializer (" +
              "ONNX type " + std::to_string(init.data_type()) + ", " + std::to_string(elements) +
              " elements)";
      return false;
    }
    trained.erase(it);
    // The master copy is the parameter's own type (fp32 for fp32 models).
    init.clear_float_data();
    init.clear_int32_data();
    init.clear_double_data();
    init.clear_external_data();
    init.set_data_location(onnx::TensorProto::DEFAULT);
    init.set_raw_data(std::string(reinterpret_cast<const char *>(a.bytes.data()), a.bytes.size()));
  }
  if (!trained.empty()) {
    error = path + ": the plan trains '" + trained.begin()->first +
            "', which is no initializer of its model";
    return false;
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    error = path + ": the model could not be serialized";
    return false;
  }
  return writeFileAtomic(path, bytes, error);
}

} // namespace ampc::rt
