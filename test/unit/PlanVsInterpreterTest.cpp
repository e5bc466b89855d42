//===- PlanVsInterpreterTest.cpp - The CPU runtime against the oracle ------===//
//
// Whole training steps (AdamW, loss scaling in fp16) of the three fixtures in
// fp32, fp16 and bf16: lowered to a plan and run by the CPU backend for three
// steps, then compared with the reference interpreter running the same graph.
// This covers what per-kernel tests cannot: fusion, views, in-place state
// updates, the memory plan and state carried from step to step.
//
//===----------------------------------------------------------------------===//

#include "FixtureUtil.h"
#include "StepRunner.h"

#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/rt/PlanFile.h"
#include "ampc/rt/Session.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_set>

using namespace ampc;
using namespace ampc::test;

namespace {

struct Case {
  const char *fixture; ///< test/fixtures/<name>, or "zoo" / "reductions" / "decoder" (below)
  const char *precision;
};

/// "v0, v1, ..." for initializer text: scale * f(freq * i + phase), smooth
/// and deterministic values for the model weights below.
std::string waveValues(int n, double scale, double (*f)(double), double freq, double phase) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += (i ? ", " : "") + std::to_string(scale * f(freq * i + phase));
  return s;
}

/// Every activation whose gradient rule composes elementwise ops (Clip,
/// PRelu, Max, Min, Elu, Selu, HardSigmoid, HardSwish, Softplus, Softsign, Sin, Cos)
/// between two MatMuls, with an MSE loss.
std::string zooModel() {
  auto values = [](int n, double scale) { return waveValues(n, scale, std::sin, 1.7, 0.3); };
  return "<ir_version: 8, opset_import: [\"\" : 17]>\n"
         "zoo (float[4,8] input, float[4,8] target) => (float loss)\n"
         "<float[8,8] w1 = {" + values(64, 0.6) + "}, float[8] slope = {" + values(8, 0.2) +
         "}, float[8,8] w2 = {" + values(64, 0.4) + "}, float lo = {-0.8}, float hi = {0.9}, float cap = {0.6}>\n"
         "{\n"
         "  h = MatMul (input, w1)\n"
         "  a = Clip (h, lo, hi)\n"
         "  b = PRelu (h, slope)\n"
         "  c = Max (a, b)\n"
         "  d = Min (c, cap)\n"
         "  e = Elu <alpha = 0.7> (d)\n"
         "  f = Selu (d)\n"
         "  g = HardSigmoid (d)\n"
         "  p = Softplus (e)\n"
         "  q = Softsign (f)\n"
         "  r = Sin (g)\n"
         "  t = Cos (p)\n"
         "  hs = HardSwish (h)\n"
         "  z = Sum (q, r, t, hs)\n"
         "  y = MatMul (z, w2)\n"
         "  diff = Sub (y, target)\n"
         "  sq = Mul (diff, diff)\n"
         "  loss = ReduceMean <keepdims = 0> (sq)\n"
         "}\n";
}

/// Pad, Tile and every reduction whose gradient reads its result, between
/// two MatMuls.
std::string reductionsModel() {
  auto values = [](int n, double scale) { return waveValues(n, scale, std::cos, 1.3, 0.2); };
  return "<ir_version: 8, opset_import: [\"\" : 17]>\n"
         "reductions (float[4,8] input, float[4,8] target) => (float loss)\n"
         "<float[8,8] w1 = {" + values(64, 0.5) + "}, float[8,8] w2 = {" + values(64, 0.3) +
         "}, int64[4] pads = {0, 1, 0, 1}, float pad_value = {0.25}, int64[2] repeats = {1, 2}>\n"
         "{\n"
         "  h = MatMul (input, w1)\n"
         "  p = Pad (h, pads, pad_value)\n"
         "  t = Tile (p, repeats)\n"
         "  mx = ReduceMax <axes = [1]> (t)\n"
         "  l2 = ReduceL2 <axes = [1]> (t)\n"
         "  ss = ReduceSumSquare <axes = [1]> (h)\n"
         "  l1 = ReduceL1 <axes = [1]> (h)\n"
         "  lse = ReduceLogSumExp <axes = [1]> (h)\n"
         "  mn = ReduceMin <axes = [1]> (h)\n"
         "  z = Sum (mx, l2, ss, l1, lse, mn)\n"
         "  y = Mul (h, z)\n"
         "  o = MatMul (y, w2)\n"
         "  diff = Sub (o, target)\n"
         "  sq = Mul (diff, diff)\n"
         "  loss = ReduceMean <keepdims = 0> (sq)\n"
         "}\n";
}

/// A decoder: Conv, InstanceNormalization, Relu, nearest 2x Resize
/// (PyTorch's nn.Upsample export), Conv, a strided ConvTranspose, MSE: the
/// decompose pass rewrites the normalization, the upsampling and the
/// transposed convolution.
std::string decoderModel() {
  auto values = [](int n, double scale) { return waveValues(n, scale, std::sin, 0.7, 0.1); };
  return "<ir_version: 8, opset_import: [\"\" : 17]>\n"
         "decoder (float[2,3,4,4] input, float[2,2,16,16] target) => (float loss)\n"
         "<float[4,3,3,3] w1 = {" + values(108, 0.4) + "}, float[4] s = {" + values(4, 1.0) +
         "}, float[4] b = {" + values(4, 0.2) + "}, float[2,4,3,3] w2 = {" + values(72, 0.3) +
         "}, float[2,2,3,3] w3 = {" + values(36, 0.5) + "}, float[2] b3 = {0.1, -0.1}>\n"
         "{\n"
         "  c = Conv <pads = [1, 1, 1, 1]> (input, w1)\n"
         "  n = InstanceNormalization <epsilon = 0.001> (c, s, b)\n"
         "  r = Relu (n)\n"
         "  sc = Constant <value = float[4] {1.0, 1.0, 2.0, 2.0}> ()\n"
         "  u = Resize <mode = \"nearest\", coordinate_transformation_mode = \"asymmetric\", "
         "nearest_mode = \"floor\"> (r, , sc)\n"
         "  o = Conv <pads = [1, 1, 1, 1]> (u, w2)\n"
         "  t = ConvTranspose <strides = [2, 2], pads = [1, 1, 1, 1], output_padding = [1, 1]> "
         "(o, w3, b3)\n"
         "  diff = Sub (t, target)\n"
         "  sq = Mul (diff, diff)\n"
         "  loss = ReduceMean <keepdims = 0> (sq)\n"
         "}\n";
}

bool isInline(const Case &c) {
  std::string f = c.fixture;
  return f == "zoo" || f == "reductions" || f == "decoder";
}

std::unique_ptr<Graph> caseModel(const Case &c) {
  if (!isInline(c))
    return loadFixtureModel(c.fixture);
  std::string f = c.fixture;
  auto g = importModelText(f == "zoo" ? zooModel() : f == "reductions" ? reductionsModel()
                                                                         : decoderModel(),
                           c.fixture);
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return nullptr;
  }
  return std::move(*g);
}

std::map<std::string, Tensor> caseBatch(const Case &c) {
  if (!isInline(c))
    return loadFixtureInputs(c.fixture);
  bool decoder = std::string(c.fixture) == "decoder";
  Shape inShape = decoder ? Shape{2, 3, 4, 4} : Shape{4, 8};
  Shape targetShape = decoder ? Shape{2, 2, 16, 16} : Shape{4, 8};
  std::vector<double> in(TensorType(DType::F32, inShape).numElements()),
      target(TensorType(DType::F32, targetShape).numElements());
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = std::cos(0.9 * i) * 1.5;
  for (size_t i = 0; i < target.size(); ++i)
    target[i] = std::sin(0.4 * i);
  return {{"input", Tensor::fromDoubles(TensorType(DType::F32, inShape), in)},
          {"target", Tensor::fromDoubles(TensorType(DType::F32, targetShape), target)}};
}

void PrintTo(const Case &c, std::ostream *os) { *os << c.fixture << "_" << c.precision; }

Tensor fromHost(const rt::HostArray &a, const TensorType &type) {
  return Tensor::fromBytes(type, a.bytes.data(), a.bytes.size());
}

class PlanVsInterpreter : public ::testing::TestWithParam<Case> {};

TEST_P(PlanVsInterpreter, ThreeTrainingSteps) {
  const Case &c = GetParam();
  // "bf16conv": bf16 with Conv and pooling in bf16 too (autocast option bf16-conv).
  std::string precision = c.precision;
  std::string autocast =
      precision == "fp32"        ? ""
      : precision == "bf16conv" ? "autocast{dtype=bf16 bf16-conv=true},"
                                 : "autocast{dtype=" + precision + "},";
  // The --train pipeline: recomputed values and cached casts included.
  std::string pipeline = "canonicalize,decompose," + autocast +
                         "autodiff,loss-scale,optimizer{optimizer=adamw lr=0.01},canonicalize," +
                         (autocast.empty() ? "" : "cast-cache,") +
                         "remat,split-matmul-transposes,fold-matmul-bias";
  StepRunner oracle;
  ASSERT_TRUE(oracle.compile(caseModel(c), pipeline));
  const Graph &g = oracle.graph();

  LowerOptions lo;
  for (const Value *v : g.initializers())
    lo.modelParameters.push_back(v->name());
  auto p = lowerToPlan(g, lo);
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  std::string error;
  auto session = rt::Session::fromPlan(std::move(*p), rt::createCpuBackend({2}), error);
  ASSERT_TRUE(session) << error;
  int prog = session->program("step");
  ASSERT_GE(prog, 0);

  auto batch = caseBatch(c);
  for (const auto &[name, t] : batch)
    ASSERT_TRUE(session->feed(prog, name, toHostArray(t), name, error)) << error;
  std::map<std::string, Tensor> initialState = oracle.state();
  std::map<std::string, Tensor> lastOutputs;
  for (int step = 0; step < 3; ++step) {
    lastOutputs = oracle.step(batch);
    ASSERT_TRUE(session->run(prog, error)) << error;
  }

  // Every state tensor after three steps: parameters, moments, step counter,
  // loss-scale state. The runtime computes in fp32 and the interpreter in
  // double, both rounding every stored value: they may differ by a rounding
  // of intermediate results, which AdamW's normalization amplifies for the
  // smallest gradients, hence the tolerance.
  const double tolerance = std::string(c.precision) == "fp32" ? 1e-4 : 2e-3;
  // Parameters with analytically vanishing gradients (FixtureUtil.h) are
  // driven by rounding noise under AdamW: leave those elements out, and the
  // running statistics they move.
  auto noise = isInline(c) ? std::map<std::string, std::vector<bool>>()
                           : noiseGradients(c.fixture);
  bool noisy = false;
  for (const auto &[k, mask] : noise)
    noisy = noisy || std::count(mask.begin(), mask.end(), true) > 0;
  auto maskOf = [&](const std::string &state) -> std::vector<bool> {
    for (const auto &[param, mask] : noise)
      if (state == param || state == param + "_grad" || state.rfind(param + ".", 0) == 0)
        return mask;
    return {};
  };
  double worst = 0;
  for (int i = 0; i < session->plan().tensors_size(); ++i) {
    const plan::Tensor &t = session->plan().tensors(i);
    if (t.storage() != plan::STATE || t.has_view_of())
      continue;
    rt::HostArray got;
    ASSERT_TRUE(session->readTensor(i, got, error)) << error;
    const Tensor &want = oracle.state().at(t.name());
    if (noisy && t.name().find("running_") != std::string::npos)
      continue;
    double err = maskedRelativeError(fromHost(got, want.type()), want, maskOf(t.name()));
    worst = std::max(worst, err);
    EXPECT_LE(err, tolerance) << c.fixture << " " << c.precision << " state '" << t.name() << "'";
  }
  // The outputs of the last step (loss, fp32 gradients), read through the
  // session: in bf16 the weight gradients are bound narrow and read widened
  // (plan.proto Binding.widen_to), which must give the oracle's fp32 values.
  int widened = 0;
  for (const plan::Binding &b : session->plan().programs(prog).outputs()) {
    rt::HostArray got;
    ASSERT_TRUE(session->output(prog, b.name(), got, error)) << error;
    const Tensor &want = lastOutputs.at(b.name());
    if (want.dtype() == DType::F32) {
      ASSERT_EQ(got.type, rt::ElemType::F32) << b.name();
    }
    widened += b.has_widen_to();
    double err = maskedRelativeError(fromHost(got, want.type()), want, maskOf(b.name()));
    EXPECT_LE(err, tolerance) << c.fixture << " " << c.precision << " output '" << b.name() << "'";
  }
  // Every output computed by an exact widening Cast is bound narrow.
  int widening = 0;
  std::unordered_set<const Value *> updated;
  for (const StateBinding &b : g.stateBindings)
    updated.insert(b.updated);
  for (const Value *v : g.outputs()) {
    const Node *p = v->producer();
    widening += !updated.count(v) && p && p->is("Cast") && v->dtype() == DType::F32 &&
                (p->input(0)->dtype() == DType::F16 || p->input(0)->dtype() == DType::BF16) &&
                p->input(0)->producer();
  }
  EXPECT_EQ(widened, widening);
  if (std::string(c.precision) == "bf16" &&
      (std::string(c.fixture) == "mlp" || std::string(c.fixture) == "transformer")) {
    EXPECT_GT(widened, 0) << "no bf16 gradient is bound narrow";
  }
  // The steps trained (not skipped for overflow, for instance): every model
  // parameter moved.
  for (const std::string &name : lo.modelParameters) {
    auto it = initialState.find(name);
    const Value *grad = g.findValue(name + "_grad");
    if (it == initialState.end() || !grad || !grad->isGraphOutput())
      continue;
    EXPECT_NE(relativeError(oracle.state().at(name), it->second), 0.0)
        << c.fixture << " " << c.precision << ": parameter '" << name << "' did not move";
  }
  std::printf("%s %s: largest relative difference of a state tensor after 3 steps: %.2e; "
              "%d outputs read widened\n",
              c.fixture, c.precision, worst, widened);
}

/// A plan asking to widen an output that is not fp16 / bf16 is refused with
/// a line naming the program and the output.
TEST(PlanValidation, RejectsWideningAFloatOutput) {
  StepRunner oracle;
  ASSERT_TRUE(oracle.compile(loadFixtureModel("mlp"),
                             "canonicalize,autodiff,optimizer{optimizer=sgd lr=0.1},canonicalize"));
  auto p = lowerToPlan(oracle.graph());
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  std::string error;
  ASSERT_TRUE(rt::validatePlan(*p, error)) << error;
  plan::Binding &out = *p->mutable_programs(0)->mutable_outputs(0);
  out.set_widen_to(plan::F32);
  EXPECT_FALSE(rt::validatePlan(*p, error));
  EXPECT_EQ(error, "program 'step': output '" + out.name() +
                       "' widens float to float (only float16 and bfloat16 widen, to float)");
}

/// Tensors fused away (VIRTUAL) have no bytes: a corrupt plan naming one as
/// a state's update or a binding, or a gradient whose size is not its
/// parameter's, is refused at load (the update crashed in a memcpy, the
/// gradient was dumped with the wrong shape).
TEST(PlanValidation, RejectsUpdatesAndGradientsWithoutBytes) {
  auto model = loadFixtureModel("mlp");
  LowerOptions opts;
  for (const Value *v : model->initializers())
    opts.modelParameters.push_back(v->name());
  StepRunner oracle;
  ASSERT_TRUE(oracle.compile(std::move(model),
                             "canonicalize,autodiff,optimizer{optimizer=sgd lr=0.1},canonicalize"));
  auto lowered = lowerToPlan(oracle.graph(), opts);
  ASSERT_TRUE(static_cast<bool>(lowered)) << llvm::toString(lowered.takeError());
  const plan::Plan good = *lowered;
  int virtualTensor = -1, scalarState = -1;
  for (int i = 0; i < good.tensors_size(); ++i) {
    if (good.tensors(i).storage() == plan::VIRTUAL)
      virtualTensor = i;
    if (good.tensors(i).storage() == plan::STATE && rt::planNumElements(good.tensors(i)) == 1)
      scalarState = i;
  }
  ASSERT_NE(virtualTensor, -1);
  ASSERT_GT(good.programs(0).updates_size(), 0);
  ASSERT_GT(good.parameters_size(), 0);
  std::string error;
  ASSERT_TRUE(rt::validatePlan(good, error)) << error;

  plan::Plan p = good;
  p.mutable_programs(0)->mutable_updates(0)->set_updated(virtualTensor);
  EXPECT_FALSE(rt::validatePlan(p, error));
  EXPECT_EQ(error, "program 'step': a state update names a wrong tensor");

  p = good;
  p.mutable_programs(0)->mutable_outputs(0)->set_tensor(virtualTensor);
  EXPECT_FALSE(rt::validatePlan(p, error));
  EXPECT_NE(error.find("names no tensor"), std::string::npos) << error;

  p = good;
  ASSERT_NE(scalarState, -1);
  p.mutable_parameters(0)->set_grad(scalarState);
  EXPECT_FALSE(rt::validatePlan(p, error));
  EXPECT_EQ(error, "parameter '" + good.parameters(0).onnx_name() + "' names a wrong tensor");
}

/// Dropout advances its run counter (operand 3) in place: a plan pointing
/// it at anything but an int64 scalar state (here a constant another step
/// reads) is refused at load instead of corrupting that tensor every step.
TEST(PlanValidation, RejectsDropoutCounterThatIsNotState) {
  auto model = importModelText(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4] x) => (float y) <int64 k = {1}, float[3,4] tab = {0,1,2,3,4,5,6,7,8,9,10,11}> {
  r = Constant <value = float {0.5}> ()
  t = Constant <value = bool {1}> ()
  d = Dropout (x, r, t)
  row = Gather (tab, k)
  p = Mul (d, row)
  y = ReduceSum <keepdims = 0> (p)
})",
                               "dropout-counter");
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  StepRunner oracle;
  ASSERT_TRUE(oracle.compile(std::move(*model), "canonicalize"));
  auto p = lowerToPlan(oracle.graph());
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  std::string error;
  ASSERT_TRUE(rt::validatePlan(*p, error)) << error;
  int constant = -1;
  for (int i = 0; i < p->tensors_size(); ++i)
    if (p->tensors(i).storage() == plan::CONSTANT && p->tensors(i).type() == plan::I64)
      constant = i;
  ASSERT_NE(constant, -1);
  for (plan::Step &step : *p->mutable_programs(0)->mutable_steps())
    if (step.op() == "Dropout") {
      ASSERT_EQ(step.inputs_size(), 4);
      step.set_inputs(3, constant);
    }
  EXPECT_FALSE(rt::validatePlan(*p, error));
  EXPECT_NE(error.find("as its run counter, which must be an int64 scalar state of its own"),
            std::string::npos)
      << error;
}

/// Two Dropout steps advancing one counter would each skip half the runs'
/// masks: a plan doing so is refused.
TEST(PlanValidation, RejectsDropoutsSharingACounter) {
  auto model = importModelText(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4] x) => (float y) {
  r = Constant <value = float {0.5}> ()
  t = Constant <value = bool {1}> ()
  d1 = Dropout (x, r, t)
  d2 = Dropout (d1, r, t)
  y = ReduceSum <keepdims = 0> (d2)
})",
                               "dropout-shared");
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  auto p = lowerToPlan(**model);
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  std::string error;
  ASSERT_TRUE(rt::validatePlan(*p, error)) << error;
  std::vector<plan::Step *> dropouts;
  for (plan::Step &step : *p->mutable_programs(0)->mutable_steps())
    if (step.op() == "Dropout")
      dropouts.push_back(&step);
  ASSERT_EQ(dropouts.size(), 2u);
  dropouts[1]->set_inputs(3, dropouts[0]->inputs(3));
  EXPECT_FALSE(rt::validatePlan(*p, error));
  EXPECT_NE(error.find("which must be an int64 scalar state of its own"), std::string::npos) << error;
}

const Case kCases[] = {{"mlp", "fp32"},         {"mlp", "fp16"},         {"mlp", "bf16"},
                       {"cnn", "fp32"},         {"cnn", "fp16"},         {"cnn", "bf16"},
                       {"transformer", "fp32"}, {"transformer", "fp16"}, {"transformer", "bf16"},
                       {"zoo", "fp32"},         {"zoo", "fp16"},         {"zoo", "bf16"},
                       {"reductions", "fp32"},  {"reductions", "fp16"},  {"reductions", "bf16"},
                       {"decoder", "fp32"},     {"decoder", "fp16"},     {"decoder", "bf16"},
                       {"cnn", "bf16conv"},    {"decoder", "bf16conv"}};

INSTANTIATE_TEST_SUITE_P(Fixtures, PlanVsInterpreter, ::testing::ValuesIn(kCases),
                         [](const auto &info) {
                           return std::string(info.param.fixture) + "_" + info.param.precision;
                         });

} // namespace
