//===- FixtureUtil.cpp - Loading torch fixtures in tests ------------------===//

#include "FixtureUtil.h"

#include "ampc/ONNX/Import.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

namespace ampc::test {

std::string fixturePath(const std::string &name, const std::string &rel) {
  // AMPC_SOURCE_DIR in the environment: the GPU kit runs this binary far from
  // the checkout it was built in, with the fixtures copied beside it.
  const char *root = std::getenv("AMPC_SOURCE_DIR");
  std::string p = std::string(root && *root ? root : AMPC_SOURCE_DIR) + "/test/fixtures/" + name;
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

rt::HostArray toHostArray(const Tensor &t) {
  rt::HostArray a;
  switch (t.dtype()) {
  case DType::F16: a.type = rt::ElemType::F16; break;
  case DType::BF16: a.type = rt::ElemType::BF16; break;
  case DType::F64: a.type = rt::ElemType::F64; break;
  case DType::I64: a.type = rt::ElemType::I64; break;
  case DType::I32: a.type = rt::ElemType::I32; break;
  case DType::I8: a.type = rt::ElemType::I8; break;
  case DType::U8: a.type = rt::ElemType::U8; break;
  case DType::Bool: a.type = rt::ElemType::Bool; break;
  default: a.type = rt::ElemType::F32; break;
  }
  a.shape = t.shape();
  a.bytes.assign(t.data(), t.data() + t.byteSize());
  return a;
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

std::vector<std::string> fixtureKeys(const std::string &name, const std::string &dir) {
  // Parameters plus BatchNormalization running statistics (meta.json lists
  // both; the directory holds one file per key).
  std::ifstream meta(fixturePath(name, "meta.json"));
  std::string text((std::istreambuf_iterator<char>(meta)), std::istreambuf_iterator<char>());
  std::vector<std::string> keys;
  for (const char *field : {"\"params\"", "\"buffers\""}) {
    size_t at = text.find(field);
    size_t open = text.find('[', at), close = text.find(']', open);
    std::string list = text.substr(open + 1, close - open - 1);
    size_t q = 0;
    while ((q = list.find('"', q)) != std::string::npos) {
      size_t e = list.find('"', q + 1);
      keys.push_back(list.substr(q + 1, e - q - 1));
      q = e + 1;
    }
  }
  (void)dir;
  return keys;
}

/// Elements whose torch gradient vanishes analytically and is rounding noise
/// (below 1e-6 of the model's largest gradient): a convolution bias before
/// BatchNormalization, the key bias of attention (softmax ignores a constant
/// shift). Adam turns such noise into +-lr steps whose signs no two
/// implementations share, so AdamW comparisons leave these elements out.
std::map<std::string, std::vector<bool>> noiseGradients(const std::string &name) {
  std::vector<std::string> params;
  for (const std::string &k : fixtureKeys(name, "grads"))
    if (k.find("running_") == std::string::npos)
      params.push_back(k);
  auto grads = loadFixtureArrays(name, "grads", params);
  double largest = 0;
  for (const auto &[k, t] : grads)
    for (int64_t i = 0; i < t.size(); ++i)
      largest = std::max(largest, std::fabs(t.getDouble(i)));
  std::map<std::string, std::vector<bool>> noise;
  for (const auto &[k, t] : grads) {
    noise[k].resize(t.size());
    for (int64_t i = 0; i < t.size(); ++i)
      noise[k][i] = std::fabs(t.getDouble(i)) < 1e-6 * largest;
  }
  return noise;
}

double maskedRelativeError(const Tensor &a, const Tensor &b, const std::vector<bool> &skip) {
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < b.size(); ++i) {
    if (!skip.empty() && skip[i])
      continue;
    diff = std::max(diff, std::fabs(a.getDouble(i) - b.getDouble(i)));
    ref = std::max(ref, std::fabs(b.getDouble(i)));
  }
  return ref ? diff / ref : diff;
}

} // namespace ampc::test
