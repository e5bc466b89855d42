//===- ImportInferenceTest.cpp - Types inferred while importing ------------===//
//
// The importer infers most models' types node by node while it builds the
// graph, and falls back to ONNX's shape inference over the whole model. These
// tests hold the two to the same graph on real models and to the same error
// on faulty ones.
//
//===----------------------------------------------------------------------===//

#include "FixtureUtil.h"

#include "ampc/ONNX/Export.h"
#include "ampc/ONNX/Import.h"

#include <gtest/gtest.h>

namespace ampc {
namespace {

/// The imported graph as ONNX bytes (every value's type is in them), or the
/// error.
std::string importedAs(llvm::Expected<std::unique_ptr<Graph>> g) {
  if (!g)
    return "error: " + llvm::toString(g.takeError());
  auto bytes = serializeModel(**g, ModelFormat::Binary);
  if (!bytes)
    return "export error: " + llvm::toString(bytes.takeError());
  return *bytes;
}

ImportOptions wholeModel(ImportOptions opts = {}) {
  opts.wholeModelInference = true;
  return opts;
}

/// Both imports of the model file, which must agree.
void expectSameImport(const std::string &path, const ImportOptions &opts = {}) {
  std::string nodeByNode = importedAs(importModelFile(path, opts));
  std::string whole = importedAs(importModelFile(path, wholeModel(opts)));
  ASSERT_FALSE(llvm::StringRef(whole).startswith("error")) << path << ": " << whole;
  EXPECT_TRUE(nodeByNode == whole) << path << ": the graphs differ";
}

/// Both imports of the ONNX text, which must agree (as graphs or as errors).
/// Returns the import's result.
std::string expectSameImportOfText(const std::string &text) {
  std::string nodeByNode = importedAs(importModelText(text, "m.onnxtxt"));
  std::string whole = importedAs(importModelText(text, "m.onnxtxt", wholeModel()));
  EXPECT_EQ(nodeByNode, whole) << text;
  return whole;
}

bool isError(llvm::StringRef imported) { return imported.startswith("error: "); }

/// The torch exports the fidelity tests train: the same graph either way.
TEST(ImportInference, FixtureModelsImportAlike) {
  for (const char *name : {"mlp", "cnn", "gpt", "decoder", "transformer"})
    expectSameImport(test::fixturePath(name, "model.onnx"));
  // torch 2's exports: ampc.export's, and the dynamo exporter's (opset 18,
  // value_info for every value, external data).
  for (const char *name : {"cnn_bn", "decoder", "gn_block"})
    for (const char *file : {"ampc.onnx", "dynamo.onnx"})
      expectSameImport(test::fixturePath(std::string("torch2/") + name, file));
}

/// Operators with and without direct rules, constants read by inference
/// (Reshape's shape, ReduceSum's axes), and declared outputs with symbolic
/// dimensions: the same graph either way.
TEST(ImportInference, MixedOperatorsImportAlike) {
  std::string imported = expectSameImportOfText(R"(<ir_version: 8, opset_import: ["" : 17]>
m (float[4,6] x, float[6] s) => (float[4,1] y, float[N,3] z, float[4,3] e)
<float[6,3] w = {1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18}, int64[2] shape = {3, 4}>
{
  a = PRelu (x, s)
  b = Gemm (a, w)
  c = Reshape (b, shape)
  d = Transpose <perm = [1, 0]> (c)
  e = Softmax <axis = -1> (d)
  axes = Constant <value = int64[1] {1}> ()
  y = ReduceSum (x, axes)
  f = LayerNormalization <axis = -1> (b, s3, s3b)
  z = Relu (f)
  s3 = Constant <value = float[3] {1, 1, 1}> ()
  s3b = Constant <value = float[3] {0, 0, 0}> ()
})");
  EXPECT_FALSE(isError(imported)) << imported;
}

/// A shape computed by a node (Concat of constants) makes the node-by-node
/// import give way to ONNX's inference; the weight it had left out of the
/// graph (64 KiB, taken out of the message) is whole in the graph that
/// follows.
TEST(ImportInference, WeightsSurviveTheFallback) {
  std::string values;
  for (int i = 0; i < 128 * 128; ++i)
    values += (i ? "," : "") + std::to_string(i % 7 + 1);
  std::string text = R"(<ir_version: 8, opset_import: ["" : 17]>
m (float[4,128] x) => (float[4,128] y)
<float[128,128] w = {)" + values + R"(}>
{
  a = Constant <value = int64[1] {4}> ()
  b = Constant <value = int64[1] {128}> ()
  s = Concat <axis = 0> (a, b)
  h = MatMul (x, w)
  y = Reshape (h, s)
})";
  std::string imported = expectSameImportOfText(text);
  ASSERT_FALSE(isError(imported)) << imported;
  auto g = importModelText(text, "m.onnxtxt");
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  const Value *w = (*g)->findValue("w");
  ASSERT_TRUE(w && w->data());
  int wrong = 0;
  for (int i = 0; i < 128 * 128; ++i)
    wrong += w->data()->getDouble(i) != i % 7 + 1;
  EXPECT_EQ(wrong, 0);
}

/// Faulty models: the node-by-node import gives way, and the error is the
/// one ONNX's inference over the whole model gives.
TEST(ImportInference, FaultsReportedAlike) {
  auto expectFault = [](const std::string &text) {
    std::string imported = expectSameImportOfText(text);
    EXPECT_TRUE(isError(imported)) << text;
  };
  // Operands that do not broadcast.
  expectFault(R"(<ir_version: 8, opset_import: ["" : 17]>
m (float[4,6] x, float[5] b) => (float[4,6] y) { y = Add (x, b) })");
  // An operand type the schema does not allow (Relu of bool).
  expectFault(R"(<ir_version: 8, opset_import: ["" : 17]>
m (bool[4] x) => (bool[4] y) { y = Relu (x) })");
  // Operands bound to one type parameter with two types.
  expectFault(R"(<ir_version: 8, opset_import: ["" : 17]>
m (float[4] x, int64[4] i) => (float[4] y) { y = Add (x, i) })");
  // Gemm's inner dimensions differ.
  expectFault(R"(<ir_version: 8, opset_import: ["" : 17]>
m (float[4,6] x, float[5,3] w) => (float[4,3] y) { y = Gemm (x, w) })");
  // A declared output that disagrees with the computed one.
  expectFault(R"(<ir_version: 8, opset_import: ["" : 17]>
m (float[4,6] x) => (float[4,7] y) { y = Relu (x) })");
  expectFault(R"(<ir_version: 8, opset_import: ["" : 17]>
m (float[4,6] x) => (double[4,6] y) { y = Relu (x) })");
  // A Gemm operand of rank 3.
  expectFault(R"(<ir_version: 8, opset_import: ["" : 17]>
m (float[2,4,6] x, float[6,3] w) => (float[4,3] y) { y = Gemm (x, w) })");
  // A Transpose whose perm is not a permutation (checked after inference).
  expectFault(R"(<ir_version: 8, opset_import: ["" : 17]>
m (float[4,6] x) => (float[6,4] y) { y = Transpose <perm = [1, 1]> (x) })");
}

} // namespace
} // namespace ampc
