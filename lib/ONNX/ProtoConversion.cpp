//===- ProtoConversion.cpp - Tensors and attributes <-> ONNX protos --------===//

#include "ampc/ONNX/ProtoConversion.h"

#include "ampc/Support/Error.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstring>

namespace ampc {

namespace {

/// The `expected` bytes of a tensor stored in an external file; a length
/// other than that is refused before anything is read.
llvm::Expected<std::string> readExternalData(const onnx::TensorProto &t, const std::string &baseDir,
                                             uint64_t expected) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset")
      offset = std::atoll(kv.value().c_str());
    else if (kv.key() == "length")
      length = std::atoll(kv.value().c_str());
  }
  if (location.empty())
    return makeError("external data without a location");
  if (llvm::sys::path::is_absolute(location) || location.find("..") != std::string::npos)
    return makeError("external data location '" + location + "' must be a relative path inside "
                     "the model's folder");
  llvm::SmallString<256> path(baseDir);
  llvm::sys::path::append(path, location);
  uint64_t fileSize = 0;
  if (std::error_code ec = llvm::sys::fs::file_size(path, fileSize))
    return makeError("cannot read external data file '" + std::string(path) + "': " + ec.message());
  if (offset < 0 || static_cast<uint64_t>(offset) > fileSize)
    return makeError("external data offset is past the end of '" + std::string(path) + "'");
  if (length >= 0 && static_cast<uint64_t>(length) != expected)
    return makeError("external data holds " + std::to_string(length) + " bytes, " +
                     std::to_string(expected) + " are needed");
  if (expected > fileSize - static_cast<uint64_t>(offset))
    return makeError("external data of '" + std::string(path) + "' is shorter than expected");
  // Only the tensor's bytes are read: a model's data file can exceed what
  // fits in memory next to the model (and 4 GiB).
  auto buffer = llvm::MemoryBuffer::getFileSlice(path, expected, static_cast<uint64_t>(offset));
  if (!buffer)
    return makeError("cannot read external data file '" + std::string(path) +
                     "': " + buffer.getError().message());
  return (*buffer)->getBuffer().str();
}

} // namespace

llvm::Expected<Tensor> tensorFromProto(const onnx::TensorProto &t, const std::string &baseDir) {
  DType dt = dtypeFromOnnx(t.data_type());
  if (dt == DType::Undefined)
    return makeError("element type " + std::to_string(t.data_type()) + " is not supported");
  Shape shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape)
    if (d < 0)
      return makeError("negative dimension in " + shapeStr(shape));
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d != 0 && count > kMaxElements / d)
      return makeError("shape " + shapeStr(shape) + " has more than 2^31 elements");
    count *= d;
  }
  TensorType type(dt, shape);
  size_t bytes = static_cast<size_t>(count) * dtypeSize(dt);

  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    auto raw = readExternalData(t, baseDir, bytes);
    if (!raw)
      return raw.takeError();
    return Tensor::adoptBytes(type, std::move(*raw));
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != bytes)
      return makeError("raw data holds " + std::to_string(t.raw_data().size()) + " bytes, " +
                       type.str() + " needs " + std::to_string(bytes));
    return Tensor::fromBytes(type, t.raw_data().data(), bytes);
  }
  Tensor out(type);
  auto sizeMismatch = [&](int have) {
    return makeError("holds " + std::to_string(have) + " values, " + type.str() + " needs " +
                     std::to_string(count));
  };
  switch (dt) {
  case DType::F32:
    if (t.float_data_size() != count)
      return sizeMismatch(t.float_data_size());
    for (int64_t i = 0; i < count; ++i)
      out.setDouble(i, t.float_data(i));
    break;
  case DType::F64:
    if (t.double_data_size() != count)
      return sizeMismatch(t.double_data_size());
    for (int64_t i = 0; i < count; ++i)
      out.setDouble(i, t.double_data(i));
    break;
  case DType::I64:
    if (t.int64_data_size() != count)
      return sizeMismatch(t.int64_data_size());
    for (int64_t i = 0; i < count; ++i)
      out.setInt(i, t.int64_data(i));
    break;
  case DType::F16:
  case DType::BF16: {
    // Stored as 16-bit patterns in int32_data.
    if (t.int32_data_size() != count)
      return sizeMismatch(t.int32_data_size());
    for (int64_t i = 0; i < count; ++i) {
      uint16_t bits = static_cast<uint16_t>(t.int32_data(i));
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
    break;
  }
  default:
    if (t.int32_data_size() != count)
      return sizeMismatch(t.int32_data_size());
    for (int64_t i = 0; i < count; ++i)
      out.setInt(i, t.int32_data(i));
    break;
  }
  return out;
}

void tensorToProto(const Tensor &t, const std::string &name, onnx::TensorProto &proto) {
  proto.Clear();
  proto.set_name(name);
  proto.set_data_type(dtypeToOnnx(t.dtype()));
  for (int64_t d : t.shape())
    proto.add_dims(d);
  proto.set_raw_data(std::string(reinterpret_cast<const char *>(t.data()), t.byteSize()));
}

Attribute attributeFromProto(const onnx::AttributeProto &a, llvm::Error &err) {
  using AP = onnx::AttributeProto;
  switch (a.type()) {
  case AP::FLOAT:
    return Attribute::ofFloat(a.f());
  case AP::INT:
    return Attribute::ofInt(a.i());
  case AP::STRING:
    return Attribute::ofString(a.s());
  case AP::TENSOR: {
    auto t = tensorFromProto(a.t());
    if (!t) {
      err = t.takeError();
      return {};
    }
    return Attribute::ofTensor(std::move(*t));
  }
  case AP::FLOATS:
    return Attribute::ofFloats(std::vector<double>(a.floats().begin(), a.floats().end()));
  case AP::INTS:
    return Attribute::ofInts(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
  case AP::STRINGS:
    return Attribute::ofStrings(std::vector<std::string>(a.strings().begin(), a.strings().end()));
  default:
    err = makeError("attribute type " + std::to_string(a.type()) + " is not supported");
    return {};
  }
}

void attributeToProto(const std::string &name, const Attribute &a, onnx::AttributeProto &proto) {
  using AP = onnx::AttributeProto;
  proto.Clear();
  proto.set_name(name);
  switch (a.kind) {
  case Attribute::Kind::Float:
    proto.set_type(AP::FLOAT);
    proto.set_f(static_cast<float>(a.f));
    break;
  case Attribute::Kind::Int:
    proto.set_type(AP::INT);
    proto.set_i(a.i);
    break;
  case Attribute::Kind::String:
    proto.set_type(AP::STRING);
    proto.set_s(a.s);
    break;
  case Attribute::Kind::Tensor:
    proto.set_type(AP::TENSOR);
    tensorToProto(*a.t, "", *proto.mutable_t());
    break;
  case Attribute::Kind::Floats:
    proto.set_type(AP::FLOATS);
    for (double f : a.floats)
      proto.add_floats(static_cast<float>(f));
    break;
  case Attribute::Kind::Ints:
    proto.set_type(AP::INTS);
    for (int64_t i : a.ints)
      proto.add_ints(i);
    break;
  case Attribute::Kind::Strings:
    proto.set_type(AP::STRINGS);
    for (const auto &s : a.strings)
      proto.add_strings(s);
    break;
  }
}

} // namespace ampc
