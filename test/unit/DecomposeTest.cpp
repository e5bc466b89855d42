//===- DecomposeTest.cpp - Decompositions compute what the op computes -----===//
//
// The decompose pass rewrites InstanceNormalization and nearest Resize into
// other ops; the reference interpreter runs each op itself, so the rewritten
// graph must give its results (in double, up to the rounding of a different
// order of operations) on random inputs, including every coordinate mapping
// the pass claims picks in[floor(i / s)].
//
//===----------------------------------------------------------------------===//

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/ONNX/Import.h"
#include "ampc/Pass/Pass.h"
#include "ampc/Passes/Passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace ampc;

namespace {

std::unique_ptr<Graph> parse(const std::string &text) {
  auto g = importModelText(text, "test");
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return nullptr;
  }
  return std::move(*g);
}

/// Runs `body` (with input x of `xType` and output y) before and after the
/// decompose pass and compares the results; returns whether the op was
/// rewritten (when it was not, there is nothing to compare).
bool checkDecomposition(const std::string &xType, const std::string &yType,
                        const std::string &body, const std::string &op) {
  std::string text = "<ir_version: 8, opset_import: [\"\" : 17]>\ng (double" + xType +
                     " x) => (double" + yType + " y) {\n" + body + "\n}";
  SCOPED_TRACE(text);
  auto original = parse(text), rewritten = parse(text);
  if (!original || !rewritten)
    return false;
  registerAllPasses();
  PassManager pm;
  PassContext ctx;
  if (auto err = pm.addPipeline("canonicalize,decompose")) {
    ADD_FAILURE() << llvm::toString(std::move(err));
    return false;
  }
  if (auto err = pm.run(*rewritten, ctx)) {
    ADD_FAILURE() << llvm::toString(std::move(err));
    return false;
  }
  bool stillThere = false;
  for (const Node *n : rewritten->nodes())
    stillThere = stillThere || n->is(op);
  if (stillThere)
    return false; // nothing to compare (and the interpreter lacks linear Resize)

  const TensorType &xt = original->inputs()[0]->type();
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  std::vector<double> xs(xt.numElements());
  for (double &v : xs)
    v = normal(rng);
  std::map<std::string, Tensor> feeds{{"x", Tensor::fromDoubles(xt, xs)}};
  auto want = Interpreter(*original).run(feeds);
  auto got = Interpreter(*rewritten).run(feeds);
  if (!want || !got) {
    ADD_FAILURE() << (want ? llvm::toString(got.takeError()) : llvm::toString(want.takeError()));
    return false;
  }
  std::vector<double> a = (*want)[0].toDoubles(), b = (*got)[0].toDoubles();
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-12 * std::max(1.0, std::fabs(a[i]))) << "element " << i;
  return true;
}

} // namespace

TEST(Decompose, InstanceNormalization) {
  EXPECT_TRUE(checkDecomposition(
      "[2,3,4,5]", "[2,3,4,5]",
      "s = Constant <value = double[3] {1.0, 0.5, -2.0}> ()\n"
      "b = Constant <value = double[3] {0.1, 0.2, -0.3}> ()\n"
      "y = InstanceNormalization <epsilon = 0.01> (x, s, b)",
      "InstanceNormalization"));
  EXPECT_TRUE(checkDecomposition("[2,3,7]", "[2,3,7]",
                                 "s = Constant <value = double[3] {1.0, 2.0, 3.0}> ()\n"
                                 "b = Constant <value = double[3] {0.0, 0.0, 1.0}> ()\n"
                                 "y = InstanceNormalization (x, s, b)",
                                 "InstanceNormalization"));
}

TEST(Decompose, ResizeNearestIntegerFactors) {
  struct Mapping {
    const char *ctm, *nearest;
  };
  for (Mapping m : {Mapping{"asymmetric", "floor"}, Mapping{"half_pixel", "round_prefer_floor"}})
    for (int s : {2, 3, 4}) {
      std::string scale = std::to_string(s) + ".0";
      std::string out = "[1,2," + std::to_string(3 * s) + "," + std::to_string(5 * s) + "]";
      EXPECT_TRUE(checkDecomposition(
          "[1,2,3,5]", out,
          "sc = Constant <value = float[4] {1.0, 1.0, " + scale + ", " + scale + "}> ()\n" +
              "y = Resize <mode = \"nearest\", coordinate_transformation_mode = \"" + m.ctm +
              "\", nearest_mode = \"" + m.nearest + "\"> (x, , sc)",
          "Resize"))
          << m.ctm << " " << m.nearest << " x" << s;
    }
  // Sizes instead of scales, one axis only.
  EXPECT_TRUE(checkDecomposition("[1,2,3,5]", "[1,2,3,10]",
                                 "sz = Constant <value = int64[4] {1, 2, 3, 10}> ()\n"
                                 "y = Resize <mode = \"nearest\", coordinate_transformation_mode = "
                                 "\"asymmetric\", nearest_mode = \"floor\"> (x, , , sz)",
                                 "Resize"));
}

/// Other nearest forms and linear interpolation (any scale, every coordinate
/// mapping) become interpolation matrices on the last two axes.
TEST(Decompose, ResizeByMatrices) {
  struct C {
    const char *x, *y, *scales, *attrs;
  };
  const C cases[] = {
      {"[1,2,3,4]", "[1,2,6,8]", "1.0, 1.0, 2.0, 2.0", "mode = \"linear\""},
      {"[1,2,3,4]", "[1,2,6,8]", "1.0, 1.0, 2.0, 2.0",
       "mode = \"linear\", coordinate_transformation_mode = \"pytorch_half_pixel\""},
      {"[1,2,3,4]", "[1,2,6,8]", "1.0, 1.0, 2.0, 2.0",
       "mode = \"linear\", coordinate_transformation_mode = \"align_corners\""},
      {"[1,2,3,4]", "[1,2,4,6]", "1.0, 1.0, 1.5, 1.5",
       "mode = \"linear\", coordinate_transformation_mode = \"asymmetric\""},
      {"[2,1,6,8]", "[2,1,3,4]", "1.0, 1.0, 0.5, 0.5", "mode = \"linear\""},
      {"[1,1,4,6]", "[1,1,4,15]", "1.0, 1.0, 1.0, 2.5", "mode = \"linear\""},
      {"[1,1,2,2]", "[1,1,5,5]", "1.0, 1.0, 2.5, 2.5",
       "mode = \"nearest\", coordinate_transformation_mode = \"asymmetric\", nearest_mode = \"floor\""},
      {"[1,1,3,3]", "[1,1,6,6]", "1.0, 1.0, 2.0, 2.0",
       "mode = \"nearest\", coordinate_transformation_mode = \"asymmetric\", nearest_mode = \"round_prefer_ceil\""},
      {"[1,1,4,4]", "[1,1,7,7]", "1.0, 1.0, 1.75, 1.75",
       "mode = \"nearest\", coordinate_transformation_mode = \"align_corners\", nearest_mode = \"ceil\""},
  };
  for (const C &c : cases)
    EXPECT_TRUE(checkDecomposition(c.x, c.y,
                                   std::string("sc = Constant <value = float[4] {") + c.scales +
                                       "}> ()\ny = Resize <" + c.attrs + "> (x, , sc)",
                                   "Resize"))
        << c.attrs << " scales " << c.scales;
}

/// Forms without a decomposition stay Resize nodes: cubic interpolation, and
/// linear interpolation over a leading axis.
TEST(Decompose, LeavesOtherResizeForms) {
  EXPECT_FALSE(checkDecomposition("[1,1,3,3]", "[1,1,6,6]",
                                  "sc = Constant <value = float[4] {1.0, 1.0, 2.0, 2.0}> ()\n"
                                  "y = Resize <mode = \"cubic\"> (x, , sc)",
                                  "Resize"));
  EXPECT_FALSE(checkDecomposition("[1,2,3,3]", "[1,4,6,6]",
                                  "sc = Constant <value = float[4] {1.0, 2.0, 2.0, 2.0}> ()\n"
                                  "y = Resize <mode = \"linear\"> (x, , sc)",
                                  "Resize"));
}

namespace {
std::string constant(const std::string &name, const std::string &shape, int n) {
  std::string v;
  for (int i = 0; i < n; ++i)
    v += (i ? ", " : "") + std::to_string(std::sin(0.37 * i + 0.5));
  return name + " = Constant <value = double" + shape + " {" + v + "}> ()\n";
}
} // namespace

/// ConvTranspose as a stride-1 Conv of the zero-stuffed, padded input with
/// flipped, channel-swapped weights: strides, pads (also larger than the
/// kernel reach: a crop), output_padding, dilations, groups, SAME padding,
/// output_shape, 1 to 3 spatial axes.
TEST(Decompose, ConvTranspose) {
  struct C {
    const char *x, *w, *y, *attrs;
    int wn;
  };
  const C cases[] = {
      {"[1,2,3,3]", "[2,3,3,3]", "[1,3,5,5]", "", 54},
      {"[2,2,3,4]", "[2,3,3,3]", "[2,3,5,7]", "strides = [2, 2], pads = [1, 1, 1, 1]", 54},
      {"[1,2,3,3]", "[2,3,3,3]", "[1,3,6,6]", "strides = [2, 2], pads = [1, 1, 1, 1], output_padding = [1, 1]", 54},
      {"[1,2,4,4]", "[2,2,3,3]", "[1,2,8,8]", "dilations = [2, 2]", 36},
      {"[1,4,3,3]", "[4,3,2,2]", "[1,6,6,6]", "group = 2, strides = [2, 2]", 48},
      {"[1,2,5,5]", "[2,3,3,3]", "[1,3,3,3]", "pads = [2, 2, 2, 2]", 54},
      {"[1,1,3,3]", "[1,2,3,3]", "[1,2,6,6]", "strides = [2, 2], auto_pad = \"SAME_UPPER\"", 18},
      {"[1,1,3,3]", "[1,2,3,3]", "[1,2,10,8]", "strides = [3, 2], output_shape = [10, 8]", 18},
      {"[2,3,5]", "[3,2,4]", "[2,2,10]", "strides = [2], pads = [1, 1]", 24},
      {"[1,2,2,3,2]", "[2,1,2,2,2]", "[1,1,4,6,4]", "strides = [2, 2, 2]", 16},
  };
  for (const C &c : cases) {
    std::string attrs = c.attrs;
    std::string text = constant("w", c.w, c.wn) + "y = ConvTranspose" +
                       (attrs.empty() ? std::string() : " <" + attrs + ">") + " (x, w)";
    EXPECT_TRUE(checkDecomposition(c.x, c.y, text, "ConvTranspose")) << c.attrs;
  }
  // With a bias.
  EXPECT_TRUE(checkDecomposition("[1,2,3,3]", "[1,3,7,7]",
                                 constant("w", "[2,3,3,3]", 54) + constant("b", "[3]", 3) +
                                     "y = ConvTranspose <strides = [2, 2]> (x, w, b)",
                                 "ConvTranspose"));
}
