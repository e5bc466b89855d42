//===- ModelFileTest.cpp - Reading binary ONNX model files ----------------===//

#include "ampc/ONNX/ModelFile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace ampc;

namespace {

std::string writeTemp(const std::string &bytes) {
  char path[] = "/tmp/ampc-model-file-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

onnx::TensorProto *addWeight(onnx::ModelProto &m, const std::string &name, size_t floats) {
  onnx::TensorProto *t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(static_cast<int64_t>(floats));
  std::string bytes(floats * 4, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 131 + name.size());
  t->set_raw_data(bytes);
  return t;
}

/// A model with large and small initializers, a node, a subgraph attribute
/// with its own large tensor, and fields after the initializers.
onnx::ModelProto sampleModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  m.mutable_graph()->set_name("g");
  addWeight(m, "big", 70000);
  addWeight(m, "small", 3);
  onnx::NodeProto *n = m.mutable_graph()->add_node();
  n->set_op_type("If");
  onnx::AttributeProto *a = n->add_attribute();
  a->set_name("then_branch");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::TensorProto *inner = a->mutable_g()->add_initializer();
  inner->set_name("inner");
  inner->set_raw_data(std::string(100000, 'x'));
  addWeight(m, "big2", 20000);
  m.mutable_graph()->add_output()->set_name("y");
  m.set_producer_name("test");
  return m;
}

/// A length-delimited field's bytes.
std::string lengthDelimited(int field, const std::string &body) {
  std::string out(1, static_cast<char>((field << 3) | 2));
  for (uint64_t v = body.size();; v >>= 7) {
    out += static_cast<char>((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
    if (v < 0x80)
      break;
  }
  return out + body;
}

/// What protobuf itself reads from the bytes, or nothing.
bool protobufParse(const std::string &bytes, onnx::ModelProto &m) {
  return m.ParseFromString(bytes);
}

void expectSameParse(const std::string &bytes) {
  std::string path = writeTemp(bytes);
  onnx::ModelProto want, got;
  bool ok = protobufParse(bytes, want);
  EXPECT_EQ(parseModelFile(path, got), ok);
  if (ok)
    EXPECT_EQ(got.SerializeAsString(), want.SerializeAsString());
  for (uint64_t cutFrom : {uint64_t(1), uint64_t(9), kReadInPlaceBytes}) {
    onnx::ModelProto inMemory;
    EXPECT_EQ(parseModelBytes(bytes, inMemory, cutFrom), ok);
    if (ok)
      EXPECT_EQ(inMemory.SerializeAsString(), want.SerializeAsString());
  }
  std::remove(path.c_str());
}

} // namespace

/// The large raw_data fields read into place give protobuf's message,
/// byte for byte, the subgraph's tensor (left to protobuf) included.
TEST(ModelFile, ReadsWhatProtobufReads) {
  std::string bytes = sampleModel().SerializeAsString();
  expectSameParse(bytes);
  std::string path = writeTemp(bytes);
  onnx::ModelProto got;
  ASSERT_TRUE(parseModelFile(path, got));
  EXPECT_EQ(got.graph().initializer(0).raw_data().size(), 280000u);
  EXPECT_EQ(got.graph().initializer(2).name(), "big2");
  EXPECT_EQ(got.graph().node(0).attribute(0).g().initializer(0).raw_data().size(), 100000u);
  std::remove(path.c_str());
}

/// Thousands of small initializers around the large ones: the scan copies
/// them field by field through its 64 KiB window of the file, so fields
/// straddle the window's edges (about ten windows of them) and each must come
/// out whole.
TEST(ModelFile, SmallFieldsAcrossTheReadWindow) {
  onnx::ModelProto m = sampleModel();
  for (int i = 0; i < 6000; ++i)
    addWeight(m, "w" + std::to_string(i), 1 + i % 41);
  addWeight(m, "big3", 30000);
  std::string bytes = m.SerializeAsString();
  ASSERT_GT(bytes.size(), 16u * 64 * 1024);
  expectSameParse(bytes);
}

/// Two graph fields merge (initializers appended in order), and a tensor
/// with two raw_data fields keeps the last: both as protobuf does.
TEST(ModelFile, MergedAndRepeatedFields) {
  onnx::ModelProto first = sampleModel(), second;
  addWeight(second, "later", 40000);
  expectSameParse(first.SerializeAsString() + second.SerializeAsString());

  onnx::TensorProto t;
  t.set_name("twice");
  t.set_raw_data(std::string(70000, 'a'));
  std::string tensor = t.SerializeAsString();
  onnx::TensorProto again;
  again.set_raw_data(std::string(80000, 'b'));
  tensor += again.SerializeAsString();
  // Written by hand so that both raw_data fields stay in the bytes.
  std::string model = lengthDelimited(7, lengthDelimited(5, tensor));
  expectSameParse(model);
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(model));
  EXPECT_EQ(m.graph().initializer(0).raw_data()[0], 'b');
}

/// Truncated and corrupted files are refused exactly when protobuf refuses
/// them, at every cut of the sample and with bytes overwritten.
TEST(ModelFile, DamagedFilesAsProtobuf) {
  std::string bytes = sampleModel().SerializeAsString();
  for (size_t cut = 0; cut < bytes.size(); cut += bytes.size() / 97 + 1)
    expectSameParse(bytes.substr(0, cut));
  for (size_t at = 0; at < 200 && at < bytes.size(); ++at)
    for (unsigned char v : {0x00, 0x0B, 0x7F, 0xFF}) {
      std::string damaged = bytes;
      damaged[at] = static_cast<char>(v);
      expectSameParse(damaged);
    }
}

/// A missing file is refused.
TEST(ModelFile, MissingFile) {
  onnx::ModelProto m;
  EXPECT_FALSE(parseModelFile("/nonexistent/ampc/model.onnx", m));
}

/// A model whose bulk is not raw_data (a weight in float_data, 68 MB here)
/// is past what the scan copies, and read by protobuf's reader: the same
/// message, raw_data fields beside it included.
TEST(ModelFile, BulkOutsideRawData) {
  onnx::ModelProto m = sampleModel();
  onnx::TensorProto *t = m.mutable_graph()->add_initializer();
  t->set_name("listed");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(17 << 20);
  t->mutable_float_data()->Resize(17 << 20, 0.25f);
  expectSameParse(m.SerializeAsString());
}
