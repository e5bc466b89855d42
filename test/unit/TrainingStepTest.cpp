//===- TrainingStepTest.cpp - The training step against PyTorch ------------===//
//
// The whole step (autodiff, loss scaling, optimizer) evaluated with the
// reference interpreter on the torch fixtures, compared with the parameters
// torch.optim produced from the same batch (saved by make_fixtures.py):
// SGD, SGD with momentum and with Nesterov, AdamW over five steps, gradient
// clipping, accumulation; then the loss-scaling state machine: an injected
// overflow skips the update bitwise, growth at the interval, a growth that
// would overflow is refused; and fp16 / bf16 steps stay near fp32.
//
//===----------------------------------------------------------------------===//

#include "FixtureUtil.h"
#include "StepRunner.h"

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/ONNX/Import.h"
#include "ampc/Pass/Pass.h"
#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <fstream>
#include <set>

using namespace ampc;
using namespace ampc::test;

namespace {

const char *kFixtures[] = {"mlp", "cnn", "transformer"};

bool isRunningVar(const std::string &key) { return key.find("running_var") != std::string::npos; }

/// Compares every parameter (and running statistic) after `steps` steps with
/// torch's values in test/fixtures/<name>/<dir>.
void expectMatchesTorch(const std::string &name, const std::string &dir,
                        const std::string &optimizer, int steps) {
  StepRunner r;
  ASSERT_TRUE(r.compile(loadFixtureModel(name), "canonicalize,autodiff,loss-scale{mode=none}," +
                                                    optimizer + ",canonicalize"));
  auto batch = loadFixtureInputs(name);
  for (int s = 0; s < steps; ++s)
    r.step(batch);
  std::vector<std::string> keys = fixtureKeys(name, dir);
  auto torch = loadFixtureArrays(name, dir, keys);
  bool adam = optimizer.find("adamw") != std::string::npos;
  auto noise = adam ? noiseGradients(name) : std::map<std::string, std::vector<bool>>{};
  bool noisy = false;
  for (const auto &[k, mask] : noise)
    noisy = noisy || std::count(mask.begin(), mask.end(), true) > 0;
  double worst = 0;
  for (const std::string &k : keys) {
    ASSERT_TRUE(r.state().count(k)) << k << " is not state of the step";
    // Running statistics follow the activations, which such noise moves.
    if (adam && noisy && k.find("running_") != std::string::npos)
      continue;
    double err = maskedRelativeError(r.state().at(k), torch.at(k), noise[k]);
    // ONNX's BatchNormalization updates the running variance with the
    // population variance, PyTorch with the unbiased one: their updates differ
    // by (1 - momentum) * var / (n - 1), here about 4e-4 relative.
    double tol = isRunningVar(k) ? 2e-3 : 1e-4;
    EXPECT_LE(err, tol) << name << " " << dir << " " << k;
    if (!isRunningVar(k))
      worst = std::max(worst, err);
  }
  std::printf("%s %s: largest relative error against torch %.2e\n", name.c_str(), dir.c_str(),
              worst);
}

class TorchOptimizers : public ::testing::TestWithParam<const char *> {};

/// One SGD step, lr 0.1.
TEST_P(TorchOptimizers, Sgd) {
  expectMatchesTorch(GetParam(), "sgd1", "optimizer{optimizer=sgd lr=0.1}", 1);
}

/// Three SGD steps with momentum, dampening and weight decay.
TEST_P(TorchOptimizers, SgdMomentum) {
  expectMatchesTorch(GetParam(), "sgd_momentum3",
                     "optimizer{optimizer=sgd lr=0.05 momentum=0.9 dampening=0.1 "
                     "weight-decay=0.001}",
                     3);
}

/// Three SGD steps with Nesterov momentum.
TEST_P(TorchOptimizers, SgdNesterov) {
  expectMatchesTorch(GetParam(), "sgd_nesterov3",
                     "optimizer{optimizer=sgd lr=0.05 momentum=0.9 nesterov=true "
                     "weight-decay=0.001}",
                     3);
}

/// Five AdamW steps on the same batch, lr 1e-2, weight decay 0.01.
TEST_P(TorchOptimizers, AdamW) {
  expectMatchesTorch(GetParam(), "adamw5", "optimizer{optimizer=adamw lr=0.01 weight-decay=0.01}",
                     5);
}

/// One SGD step after clip_grad_norm_(max_norm=0.05).
TEST_P(TorchOptimizers, ClipGradNorm) {
  expectMatchesTorch(GetParam(), "sgd1_clip", "optimizer{optimizer=sgd lr=0.1 clip-grad-norm=0.05}",
                     1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TorchOptimizers, ::testing::ValuesIn(kFixtures),
                         [](const auto &info) { return std::string(info.param); });

/// Two micro-batches of 4 accumulated give the update of one batch of 8 (the
/// CNN is left out: BatchNormalization's statistics depend on the batch).
TEST(Accumulation, MatchesLargeBatch) {
  for (auto [name, micro] : {std::pair<const char *, int64_t>{"mlp", 4}, {"transformer", 1}}) {
    ImportOptions io;
    io.batch = micro;
    auto g = importModelFile(fixturePath(name, "model_dynamic.onnx"), io);
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
    StepRunner r;
    ASSERT_TRUE(r.compile(std::move(*g), "canonicalize,autodiff,accumulate{steps=2},"
                                         "loss-scale{mode=none},optimizer{optimizer=sgd lr=0.1},"
                                         "canonicalize"));
    auto accumulate = r.program(true), apply = r.program(false);
    r.run(loadFixtureInputs(name, "accum/inputs_0"), accumulate);
    r.run(loadFixtureInputs(name, "accum/inputs_1"), accumulate);
    r.run({}, apply);
    std::vector<std::string> keys = fixtureKeys(name, "sgd1");
    auto torch = loadFixtureArrays(name, "sgd1", keys);
    for (const std::string &k : keys)
      EXPECT_LE(relativeError(r.state().at(k), torch.at(k)), 1e-4) << name << " " << k;
  }
}

/// A step whose gradients overflow leaves parameters, moments and the step
/// counter bitwise unchanged, halves the scale and resets the tracker.
TEST(LossScale, OverflowSkipsTheStep) {
  StepRunner r;
  ASSERT_TRUE(r.compile(loadFixtureModel("mlp"),
                        "canonicalize,autocast{dtype=fp16},autodiff,loss-scale{mode=dynamic},"
                        "optimizer{optimizer=adamw lr=0.01},canonicalize"));
  auto batch = loadFixtureInputs("mlp");
  r.step(batch); // one clean step so that moments are non-zero
  r.state()["loss_scale.growth_tracker"] = Tensor::scalar(DType::F32, 5);
  auto before = r.state();
  auto bad = batch;
  bad["input"].setDouble(3, INFINITY);
  auto out = r.step(bad);
  EXPECT_EQ(out.at(kFoundInfName).getInt(0), 1);
  for (const auto &[name, t] : before) {
    if (name.rfind("loss_scale.", 0) == 0)
      continue;
    EXPECT_TRUE(r.state().at(name).bitwiseEqual(t)) << name << " changed on an overflow step";
  }
  EXPECT_EQ(r.state().at("loss_scale.scale").getDouble(0), before.at("loss_scale.scale").getDouble(0) / 2);
  EXPECT_EQ(r.state().at("loss_scale.growth_tracker").getDouble(0), 0.0);
  EXPECT_EQ(out.at(kLossScaleOutput).getDouble(0), r.state().at("loss_scale.scale").getDouble(0));
}

/// Clean steps grow the scale at the interval and reset the tracker.
TEST(LossScale, GrowsAtTheInterval) {
  StepRunner r;
  ASSERT_TRUE(r.compile(loadFixtureModel("mlp"),
                        "canonicalize,autocast{dtype=fp16},autodiff,loss-scale{mode=dynamic "
                        "init=1024 growth-interval=2},optimizer{optimizer=sgd lr=0.01},canonicalize"));
  auto batch = loadFixtureInputs("mlp");
  auto out = r.step(batch);
  EXPECT_EQ(out.at(kFoundInfName).getInt(0), 0);
  EXPECT_EQ(r.state().at("loss_scale.scale").getDouble(0), 1024.0);
  EXPECT_EQ(r.state().at("loss_scale.growth_tracker").getDouble(0), 1.0);
  r.step(batch);
  EXPECT_EQ(r.state().at("loss_scale.scale").getDouble(0), 2048.0);
  EXPECT_EQ(r.state().at("loss_scale.growth_tracker").getDouble(0), 0.0);
}

/// A growth that would make the scale infinite is refused; the tracker resets.
TEST(LossScale, RefusesAnOverflowingGrowth) {
  auto g = importModelText(R"(<ir_version: 8, opset_import: ["" : 17]>
tiny (float[2] x) => (float loss) <float[2] w = {1.0, 2.0}> {
  p = Mul (w, x)
  loss = ReduceSum <keepdims = 0> (p)
})",
                           "tiny");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  StepRunner r;
  ASSERT_TRUE(r.compile(std::move(*g), "autodiff,loss-scale{mode=dynamic init=2e38 "
                                       "growth-interval=1},optimizer{optimizer=sgd lr=0}"));
  Tensor x = Tensor::fromDoubles(TensorType(DType::F32, {2}), std::vector<double>{1e-10, 1e-10});
  auto out = r.step({{"x", x}});
  EXPECT_EQ(out.at(kFoundInfName).getInt(0), 0);
  EXPECT_EQ(r.state().at("loss_scale.scale").getDouble(0), static_cast<double>(2e38f));
  EXPECT_EQ(r.state().at("loss_scale.growth_tracker").getDouble(0), 0.0);
}

/// fp16 (dynamic loss scaling) and bf16 steps stay close to the fp32 step:
/// the parameter update of one SGD step (lr * gradient), relative to its
/// largest magnitude. (A first AdamW step is lr * sign(g) elementwise, which
/// flips for near-zero gradients under any rounding: not a useful measure.)
TEST(LowPrecision, StepsStayNearFp32) {
  // Documented in docs/training.md.
  const double tolerance[] = {0.02, 0.1};
  const char *precisions[] = {"fp16", "bf16"};
  double worst[] = {0, 0};
  for (const char *name : kFixtures) {
    auto runWith = [&](const std::string &autocast) {
      StepRunner r;
      std::string pipeline = "canonicalize," + autocast +
                             "autodiff,loss-scale,optimizer{optimizer=sgd lr=0.1},canonicalize";
      EXPECT_TRUE(r.compile(loadFixtureModel(name), pipeline));
      auto initial = r.state();
      r.step(loadFixtureInputs(name));
      std::map<std::string, Tensor> updates;
      for (const auto &[k, t] : r.state()) {
        if (!initial.count(k) || !isFloat(t.dtype()) || t.size() < 2)
          continue;
        std::vector<double> d(t.size());
        for (int64_t i = 0; i < t.size(); ++i)
          d[i] = t.getDouble(i) - initial.at(k).getDouble(i);
        updates[k] = Tensor::fromDoubles(TensorType(DType::F64, t.shape()), d);
      }
      return updates;
    };
    auto fp32 = runWith("");
    // A gradient that vanishes analytically (a convolution bias followed by
    // BatchNormalization) is rounding noise in fp32 too: leave out tensors
    // whose update is below 1e-3 of the model's largest update.
    double largest = 0;
    for (const auto &[k, t] : fp32)
      for (int64_t i = 0; i < t.size(); ++i)
        largest = std::max(largest, std::fabs(t.getDouble(i)));
    for (int p = 0; p < 2; ++p) {
      auto low = runWith(std::string("autocast{dtype=") + precisions[p] + "},");
      for (const auto &[k, t] : fp32) {
        double own = 0;
        for (int64_t i = 0; i < t.size(); ++i)
          own = std::max(own, std::fabs(t.getDouble(i)));
        if (k.find("running_") != std::string::npos || own < 1e-3 * largest)
          continue;
        double err = relativeError(low.at(k), t);
        worst[p] = std::max(worst[p], err);
        EXPECT_LE(err, tolerance[p]) << name << " " << precisions[p] << " " << k;
      }
    }
  }
  std::printf("largest relative difference of an SGD update from fp32: fp16 %.2e, bf16 %.2e\n",
              worst[0], worst[1]);
}

} // namespace
