//===- OpsetAdapterTest.cpp - The opset adapter's rule table ---------------===//
//
// The table's own consistency, which the lit tests (one case per rule kind)
// cannot show for every row: each rule names a version ONNX defined, each
// kept-as-is rule names an operator ONNX 1.12 knows at opset 17 (so the kept
// node is checked against that schema), and the rewrites produce nodes
// ONNX 1.12 knows.
//
//===----------------------------------------------------------------------===//

#include "ampc/ONNX/OpsetAdapter.h"
#include "ampc/ONNX/Schemas.h"

#include "onnx/defs/schema.h"

#include <gtest/gtest.h>

#include <set>

namespace ampc {
namespace {

TEST(OpsetAdapter, EveryRuleNamesAVersionOnnxDefined) {
  const auto &versions = newerOperatorVersions();
  for (const OpsetRule &r : opsetRules()) {
    auto it = versions.find(r.op);
    ASSERT_NE(it, versions.end()) << r.op;
    EXPECT_NE(std::find(it->second.begin(), it->second.end(), r.version), it->second.end())
        << r.op << "-" << r.version;
    EXPECT_GE(r.version, 18);
    EXPECT_LE(r.version, kMaxAdaptedOpset);
    EXPECT_TRUE(r.summary && *r.summary) << r.op;
  }
}

TEST(OpsetAdapter, RulesAreUnique) {
  std::set<std::pair<std::string, int>> seen;
  for (const OpsetRule &r : opsetRules())
    EXPECT_TRUE(seen.insert({r.op, r.version}).second) << r.op << "-" << r.version;
}

TEST(OpsetAdapter, KeptNodesHaveAnOpset17Schema) {
  registerAmpcSchemas();
  for (const OpsetRule &r : opsetRules()) {
    // Rules that rewrite into other ops (Gelu, GroupNormalization, Mish)
    // name operators opset 17 does not have; the others keep the operator.
    bool expands = std::string(r.op) == "Gelu" || std::string(r.op) == "GroupNormalization" ||
                   std::string(r.op) == "Mish";
    if (expands)
      continue;
    EXPECT_NE(onnx::OpSchemaRegistry::Schema(r.op, kAdapterTargetOpset, ""), nullptr) << r.op;
  }
}

/// Every rewrite turns a minimal node of its version into nodes ONNX 1.12
/// knows at opset 17 (a rule that emitted a newer op would fail the checker
/// later, far from its cause).
TEST(OpsetAdapter, RewritesEmitOpset17Operators) {
  registerAmpcSchemas();
  for (const OpsetRule &r : opsetRules()) {
    if (!r.rewrite)
      continue;
    onnx::GraphProto graph;
    onnx::NodeProto node;
    node.set_op_type(r.op);
    node.set_name("n");
    for (const char *in : {"x", "s", "b"})
      node.add_input(in);
    node.add_output("y");
    if (std::string(r.op) == "GroupNormalization") {
      auto *a = node.add_attribute();
      a->set_name("num_groups");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(2);
    }
    if (std::string(r.op).rfind("Reduce", 0) == 0 || std::string(r.op) == "Pad")
      node.mutable_input()->DeleteSubrange(1, 2); // no axes, no pads input
    AdapterContext ctx(graph);
    std::vector<onnx::NodeProto> out;
    llvm::Error err = r.rewrite(ctx, node, out);
    if (err) {
      ADD_FAILURE() << r.op << "-" << r.version << ": " << llvm::toString(std::move(err));
      continue;
    }
    ASSERT_FALSE(out.empty()) << r.op;
    for (const onnx::NodeProto &n : out)
      EXPECT_NE(onnx::OpSchemaRegistry::Schema(n.op_type(), kAdapterTargetOpset, ""), nullptr)
          << r.op << "-" << r.version << " emits " << n.op_type();
  }
}

} // namespace
} // namespace ampc
