//===- LargeValues.cpp - Initializer values kept out of the ModelProto ----===//

#include "LargeValues.h"

#include "ampc/ONNX/ProtoConversion.h"
#include "ampc/Support/Error.h"

#include "onnx/checker.h"

#include <vector>

namespace ampc {

namespace {

bool isFloatType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

/// The value's size in bytes from its type and dims (checked before).
int64_t valueBytes(const onnx::TensorProto &t, DType dt) {
  int64_t count = 1;
  for (int64_t d : t.dims())
    count *= d;
  return count * static_cast<int64_t>(dtypeSize(dt));
}

void clearValue(onnx::TensorProto &t) {
  t.clear_raw_data();
  t.clear_float_data();
  t.clear_double_data();
  t.clear_int32_data();
  t.clear_external_data();
  t.clear_data_location();
}

} // namespace

bool hasNoValue(const onnx::TensorProto &t) {
  return !t.has_raw_data() && t.float_data_size() == 0 && t.int32_data_size() == 0 &&
         t.int64_data_size() == 0 && t.double_data_size() == 0 && t.uint64_data_size() == 0 &&
         t.string_data_size() == 0 && t.data_location() != onnx::TensorProto::EXTERNAL;
}

llvm::Error takeLargeValues(onnx::ModelProto &model, const std::string &baseDir,
                            TakenValues &taken) {
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    DType dt = dtypeFromOnnx(t.data_type());
    bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
    bool large = isFloatType(dt) && valueBytes(t, dt) >= kTakenValueBytes;
    if (!large && !external)
      continue;
    auto withName = [&](llvm::Error err) {
      return withContext(std::move(err), "initializer '" + t.name() + "'");
    };
    if (!large) {
      // Small external values (shapes, scales) are inlined: ONNX's shape
      // inference and the partial evaluator may need their data.
      auto tensor = tensorFromProto(t, baseDir);
      if (!tensor)
        return withName(tensor.takeError());
      std::string name = t.name();
      tensorToProto(*tensor, name, t);
      continue;
    }
    TensorType type(dt, Shape(t.dims().begin(), t.dims().end()));
    if (!external && t.has_raw_data() &&
        t.raw_data().size() == static_cast<size_t>(type.byteSize())) {
      taken.insert_or_assign(t.name(), Tensor::adoptBytes(type, std::move(*t.mutable_raw_data())));
    } else {
      auto tensor = tensorFromProto(t, baseDir);
      if (!tensor)
        return withName(tensor.takeError());
      taken.insert_or_assign(t.name(), std::move(*tensor));
    }
    clearValue(t);
  }
  return llvm::Error::success();
}

void checkModelWithStandIns(onnx::ModelProto &model) {
  struct Saved {
    onnx::TensorProto *tensor;
    std::vector<int64_t> dims;
  };
  std::vector<Saved> saved;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    if (!hasNoValue(t))
      continue;
    saved.push_back({&t, std::vector<int64_t>(t.dims().begin(), t.dims().end())});
    DType dt = dtypeFromOnnx(t.data_type());
    t.clear_dims();
    t.set_raw_data(std::string(dt == DType::Undefined ? 8 : dtypeSize(dt), '\0'));
  }
  auto restore = [&] {
    for (Saved &s : saved) {
      s.tensor->clear_raw_data();
      for (int64_t d : s.dims)
        s.tensor->add_dims(d);
    }
  };
  try {
    onnx::checker::check_model(model);
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

} // namespace ampc
