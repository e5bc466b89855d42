//===- FixtureUtil.cpp - Loading torch fixtures in tests ------------------===//

#include "FixtureUtil.h"

#include "ampc/ONNX/Import.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ampc::test {

std::string fixturePath(const std::string &name, const std::string &rel) {
  std::string p = std::string(AMPC_SOURCE_DIR) + "/test/fixtures/" + name;
  return rel.empty() ? p : p + "/" + rel;
}

std::unique_ptr<Graph> loadFixtureModel(const std::string &name) {
  auto g = importModelFile(fixturePath(name, "model.onnx"));
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return nullptr;
  }
  return std::move(*g);
}

Tensor loadNpy(const std::string &path) {
  rt::HostArray a;
  std::string error;
  if (!rt::readNpy(path, a, error)) {
    ADD_FAILURE() << error;
    return Tensor();
  }
  DType dt = DType::F32;
  switch (a.type) {
  case rt::ElemType::F32: dt = DType::F32; break;
  case rt::ElemType::F16: dt = DType::F16; break;
  case rt::ElemType::BF16: dt = DType::BF16; break;
  case rt::ElemType::F64: dt = DType::F64; break;
  case rt::ElemType::I64: dt = DType::I64; break;
  case rt::ElemType::I32: dt = DType::I32; break;
  case rt::ElemType::I8: dt = DType::I8; break;
  case rt::ElemType::U8: dt = DType::U8; break;
  case rt::ElemType::Bool: dt = DType::Bool; break;
  }
  return Tensor::fromBytes(TensorType(dt, a.shape), a.bytes.data(), a.bytes.size());
}

std::string safeFileName(const std::string &name) {
  std::string out = name;
  for (char &c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      c = '_';
  return out;
}

std::map<std::string, Tensor> loadFixtureInputs(const std::string &name, const std::string &sub) {
  return {{"input", loadNpy(fixturePath(name, sub + "/input.npy"))},
          {"target", loadNpy(fixturePath(name, sub + "/target.npy"))}};
}

std::map<std::string, Tensor> loadFixtureArrays(const std::string &name, const std::string &dir,
                                                const std::vector<std::string> &keys) {
  std::map<std::string, Tensor> out;
  for (const std::string &k : keys)
    out[k] = loadNpy(fixturePath(name, dir + "/" + safeFileName(k) + ".npy"));
  return out;
}

double relativeError(const Tensor &a, const Tensor &b) {
  if (a.shape() != b.shape())
    return std::numeric_limits<double>::infinity();
  double maxDiff = 0, maxRef = 0;
  for (int64_t i = 0; i < b.size(); ++i) {
    double x = a.getDouble(i), y = b.getDouble(i);
    if (std::isnan(x) != std::isnan(y))
      return std::numeric_limits<double>::infinity();
    maxDiff = std::max(maxDiff, std::fabs(x - y));
    maxRef = std::max(maxRef, std::fabs(y));
  }
  if (maxRef == 0)
    return maxDiff;
  return maxDiff / maxRef;
}

} // namespace ampc::test
