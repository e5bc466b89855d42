//===- NodeTests.cpp - ONNX's backend node tests on the interpreter --------===//
//
// Runs every ONNX backend node test (Debian's libonnx-testdata) whose
// operators all have a reference-interpreter kernel: import the model (older
// opsets go through ONNX's version converter), feed input_*.pb, compare with
// output_*.pb. At the end it prints, per operator, how many cases passed.
//
//===----------------------------------------------------------------------===//

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/ONNX/ProtoConversion.h"

#include "onnx/onnx_pb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

namespace fs = std::filesystem;
using namespace ampc;

namespace {

const char *kNodeTestRoot = "/usr/share/libonnx-testdata/data/node";

struct NodeCase {
  std::string name;
  fs::path dir;
  std::set<std::string> ops;
};

void PrintTo(const NodeCase &c, std::ostream *os) { *os << c.name; }

/// Per-op tallies: passed and total.
std::map<std::string, std::pair<int, int>> &tally() {
  static std::map<std::string, std::pair<int, int>> t;
  return t;
}

bool readProto(const fs::path &path, google::protobuf::MessageLite &msg) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return in.good() || in.eof() ? msg.ParseFromString(bytes) : false;
}

/// ONNX's test data stores bfloat16 tensors as uint16 bit patterns (numpy has
/// no bfloat16): read those as the bfloat16 the model declares.
llvm::Expected<Tensor> readTensor(const onnx::TensorProto &tp, DType declared) {
  if (tp.data_type() != onnx::TensorProto::UINT16 || declared != DType::BF16)
    return tensorFromProto(tp);
  onnx::TensorProto copy = tp;
  copy.set_data_type(onnx::TensorProto::BFLOAT16);
  return tensorFromProto(copy);
}

/// True when a Dropout of the model draws a random mask: numpy's generator
/// produced the expected values, which no other generator reproduces.
bool drawsRandomMask(const onnx::GraphProto &g) {
  for (const auto &n : g.node())
    if (n.op_type() == "Dropout" && n.input_size() > 2 && !n.input(2).empty()) {
      for (const auto &t : g.initializer())
        if (t.name() == n.input(1))
          return true;
      return n.input_size() > 1; // ratio fed at run time: assume non-zero
    }
  return false;
}

bool supportedTypes(const onnx::GraphProto &g) {
  auto ok = [](const onnx::TypeProto &t) {
    return t.has_tensor_type() && dtypeFromOnnx(t.tensor_type().elem_type()) != DType::Undefined;
  };
  for (const auto &v : g.input())
    if (!ok(v.type()))
      return false;
  for (const auto &v : g.output())
    if (!ok(v.type()))
      return false;
  for (const auto &t : g.initializer())
    if (dtypeFromOnnx(t.data_type()) == DType::Undefined)
      return false;
  return true;
}

std::vector<NodeCase> discover() {
  std::vector<NodeCase> cases;
  if (!fs::exists(kNodeTestRoot))
    return cases;
  for (const auto &entry : fs::directory_iterator(kNodeTestRoot)) {
    onnx::ModelProto model;
    if (!readProto(entry.path() / "model.onnx", model))
      continue;
    NodeCase c{entry.path().filename().string(), entry.path(), {}};
    bool all = !model.graph().node().empty();
    for (const auto &n : model.graph().node()) {
      std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
      all = all && hasKernel(domain, n.op_type());
      c.ops.insert(n.op_type());
    }
    if (all && supportedTypes(model.graph()))
      cases.push_back(std::move(c));
  }
  std::sort(cases.begin(), cases.end(),
            [](const NodeCase &a, const NodeCase &b) { return a.name < b.name; });
  return cases;
}

::testing::AssertionResult closeEnough(const Tensor &got, const Tensor &want) {
  if (got.type() != want.type())
    return ::testing::AssertionFailure()
           << "type " << got.type().str() << ", expected " << want.type().str();
  bool low = isLowPrecision(want.dtype());
  double rtol = low ? 1e-2 : 1e-3, atol = low ? 1e-3 : 1e-5;
  for (int64_t i = 0; i < want.size(); ++i) {
    if (!isFloat(want.dtype())) {
      if (got.getInt(i) != want.getInt(i))
        return ::testing::AssertionFailure() << "element " << i << ": " << got.getInt(i)
                                             << ", expected " << want.getInt(i);
      continue;
    }
    double a = got.getDouble(i), b = want.getDouble(i);
    if (std::isnan(a) && std::isnan(b))
      continue;
    if (std::isinf(b) && a == b)
      continue;
    if (!(std::fabs(a - b) <= atol + rtol * std::fabs(b)))
      return ::testing::AssertionFailure() << "element " << i << ": " << a << ", expected " << b;
  }
  return ::testing::AssertionSuccess();
}

class NodeTest : public ::testing::TestWithParam<NodeCase> {};

TEST_P(NodeTest, MatchesReference) {
  const NodeCase &c = GetParam();
  for (const std::string &op : c.ops)
    ++tally()[op].second;
  onnx::ModelProto model;
  ASSERT_TRUE(readProto(c.dir / "model.onnx", model));
  if (drawsRandomMask(model.graph()) && c.name != "test_training_dropout_zero_ratio" &&
      c.name != "test_training_dropout_zero_ratio_mask")
    GTEST_SKIP() << "the expected Dropout mask comes from numpy's random generator";
  for (const onnx::NodeProto &n : model.graph().node())
    if (n.op_type() == "Resize")
      for (const onnx::AttributeProto &a : n.attribute())
        if ((a.name() == "mode" && a.s() == "cubic") ||
            (a.name() == "coordinate_transformation_mode" && a.s() == "tf_crop_and_resize"))
          GTEST_SKIP() << "the reference interpreter's Resize implements modes nearest and "
                          "linear (without tf_crop_and_resize), which training decomposes";
  if (c.name == "test_resize_downsample_scales_linear_align_corners")
    GTEST_SKIP() << "the expected data use ONNX 1.12's reference for align_corners, which divides "
                    "by scale * input length - 1 (2.4 - 1 here); ampc follows the operator's text, "
                    "ONNX Runtime and PyTorch: output length - 1";
  auto graph = importModelProto(model, c.name, c.dir.string());
  if (!graph) {
    std::string msg = llvm::toString(graph.takeError());
    // ampc compiles static shapes; these models size a result by input data.
    if (msg.find("is not static") != std::string::npos)
      GTEST_SKIP() << "a result's shape depends on input values: " << msg;
    FAIL() << msg;
  }

  int sets = 0;
  for (const auto &entry : fs::directory_iterator(c.dir)) {
    if (!entry.is_directory() || entry.path().filename().string().rfind("test_data_set_", 0))
      continue;
    ++sets;
    std::map<std::string, Tensor> feeds;
    const auto &inputs = (*graph)->inputs();
    for (size_t i = 0; i < inputs.size(); ++i) {
      onnx::TensorProto tp;
      ASSERT_TRUE(readProto(entry.path() / ("input_" + std::to_string(i) + ".pb"), tp));
      auto t = readTensor(tp, inputs[i]->dtype());
      ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
      // A few cases of ONNX 1.12's data feed shapes their own model does not
      // declare (castlike's 'like'); ampc's static shapes cannot take them.
      if (t->shape() != inputs[i]->shape())
        GTEST_SKIP() << "test data gives input '" << inputs[i]->name() << "' shape "
                     << shapeStr(t->shape()) << ", the model declares "
                     << inputs[i]->type().str();
      feeds[inputs[i]->name()] = std::move(*t);
    }
    Interpreter interp(**graph);
    auto outs = interp.run(feeds);
    ASSERT_TRUE(static_cast<bool>(outs)) << llvm::toString(outs.takeError());
    for (size_t i = 0; i < outs->size(); ++i) {
      onnx::TensorProto tp;
      ASSERT_TRUE(readProto(entry.path() / ("output_" + std::to_string(i) + ".pb"), tp));
      auto want = readTensor(tp, (*graph)->outputs()[i]->dtype());
      ASSERT_TRUE(static_cast<bool>(want)) << llvm::toString(want.takeError());
      EXPECT_TRUE(closeEnough((*outs)[i], *want))
          << entry.path().filename().string() << " output " << i;
    }
  }
  ASSERT_GT(sets, 0);
  if (!HasFailure())
    for (const std::string &op : c.ops)
      ++tally()[op].first;
}

INSTANTIATE_TEST_SUITE_P(Onnx, NodeTest, ::testing::ValuesIn(discover()),
                         [](const ::testing::TestParamInfo<NodeCase> &info) {
                           return info.param.name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NodeTest);

/// Prints the per-operator table after all cases ran.
class TallyPrinter : public ::testing::Environment {
public:
  void TearDown() override {
    std::cout << "\nONNX backend node tests on the reference interpreter (passed/total per "
                 "operator):\n";
    for (const auto &[op, counts] : tally())
      std::cout << "  " << op << std::string(op.size() < 28 ? 28 - op.size() : 1, ' ')
                << counts.first << "/" << counts.second << "\n";
    std::cout << "  (" << tally().size() << " operators)\n";
  }
};

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new TallyPrinter);
  return RUN_ALL_TESTS();
}
