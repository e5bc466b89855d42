//===- PassTest.cpp - Pass options and pipelines --------------------------===//

#include "ampc/Pass/Pass.h"
#include "ampc/Passes/Passes.h"

#include <gtest/gtest.h>

using namespace ampc;

namespace {
std::vector<OptionSpec> specs() {
  return {{"dtype", OptionType::Enum, "", "fp16", {"fp16", "bf16"}},
          {"limit", OptionType::Int, "", "3", {}},
          {"ops", OptionType::List, "", "", {}}};
}
} // namespace

/// Defaults apply, typed values are checked, a bare value sets the main option.
TEST(PassOptions, ParseAndValidate) {
  auto o = PassOptions::parse("p", specs(), "dtype", "");
  ASSERT_TRUE(static_cast<bool>(o));
  EXPECT_EQ(o->getString("dtype"), "fp16");
  EXPECT_EQ(o->getInt("limit"), 3);
  auto bare = PassOptions::parse("p", specs(), "dtype", "bf16");
  ASSERT_TRUE(static_cast<bool>(bare));
  EXPECT_EQ(bare->getString("dtype"), "bf16");
  auto list = PassOptions::parse("p", specs(), "dtype", "ops=[A,B] limit=5");
  ASSERT_TRUE(static_cast<bool>(list)) << llvm::toString(list.takeError());
  EXPECT_EQ(list->getList("ops"), (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(list->getInt("limit"), 5);
  auto bad = PassOptions::parse("p", specs(), "dtype", "dtype=fp8");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("one of fp16, bf16"), std::string::npos);
  auto unknown = PassOptions::parse("p", specs(), "dtype", "nope=1");
  ASSERT_FALSE(static_cast<bool>(unknown));
  llvm::consumeError(unknown.takeError());
}

/// Pipelines name registered passes; unknown names are errors.
TEST(PassManager, Pipeline) {
  registerAllPasses();
  PassManager pm;
  ASSERT_FALSE(static_cast<bool>(pm.addPipeline("canonicalize, cse,dce")));
  EXPECT_EQ(pm.size(), 3u);
  llvm::Error err = pm.addPipeline("nosuchpass");
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("unknown pass 'nosuchpass'"), std::string::npos);
}
