//===- AdamWTest.cpp - ampc.AdamW against the elementwise chain it replaces ===//
//
// The optimizer pass writes one ampc.AdamW node per fp32 parameter where it
// wrote some twenty elementwise nodes; the claim is that nothing changes in
// the numbers. One model holds both: the AdamW node and the elementwise chain
// of the same update (torch.optim.AdamW's formulas, the pass's constants), and
// every backend (the reference interpreter, the CPU backend with 1 and 2
// threads, the CUDA backend's kernels run by the host emulator) must produce
// the chain's results bit for bit, including the skip on found_inf and the
// cast-cache copy (result 3).
//
//===----------------------------------------------------------------------===//

#include "FixtureUtil.h"

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/rt/Backend.h"
#include "ampc/rt/Session.h"

#include "cuda/Lowering.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

using namespace ampc;

namespace {

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kWeightDecay = 0.01;
constexpr int kElements = 40000; // above the CPU kernel's 16,384 grain: both threads work

/// A float as decimal text that parses back to the same float.
std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<float>(v));
  return buf;
}

/// The model: AdamW results p1, m1, v1, c1 and the chain's p2, m2, v2, c2.
std::string model(const std::string &gradType) {
  std::string n = std::to_string(kElements);
  std::string f = "float[" + n + "]";
  return "<ir_version: 8, opset_import: [\"\" : 17, \"ampc\" : 1]>\n"
         "g (" + f + " p, " + gradType + "[" + n + "] grad, " + f + " m, " + f +
         " v, float lr, float t, bool found)\n"
         "  => (" + f + " p1, " + f + " m1, " + f + " v1, bfloat16[" + n + "] c1, " + f + " p2, " +
         f + " m2, " + f + " v2, bfloat16[" + n + "] c2)\n"
         "<float b1 = {" + exact(kBeta1) + "}, float omb1 = {" + exact(1 - kBeta1) +
         "}, float b2 = {" + exact(kBeta2) + "}, float omb2 = {" + exact(1 - kBeta2) +
         "}, float eps = {" + exact(kEps) + "}, float wd = {" + exact(kWeightDecay) +
         "}, float one = {1.0}>\n"
         "{\n"
         "  p1, m1, v1, c1 = ampc.AdamW <beta1 = " + exact(kBeta1) + ", one_minus_beta1 = " +
         exact(1 - kBeta1) + ", beta2 = " + exact(kBeta2) + ", one_minus_beta2 = " +
         exact(1 - kBeta2) + ", epsilon = " + exact(kEps) + ", weight_decay = " +
         exact(kWeightDecay) + "> (p, grad, m, v, lr, t, found)\n"
         "  g = Cast <to = 1> (grad)\n"
         "  lrwd = Mul (lr, wd)\n"
         "  decay = Sub (one, lrwd)\n"
         "  decayed = Mul (p, decay)\n"
         "  ma = Mul (m, b1)\n"
         "  mb = Mul (g, omb1)\n"
         "  mn = Add (ma, mb)\n"
         "  va = Mul (v, b2)\n"
         "  gg = Mul (g, g)\n"
         "  vb = Mul (gg, omb2)\n"
         "  vn = Add (va, vb)\n"
         "  pb1 = Pow (b1, t)\n"
         "  bc1 = Sub (one, pb1)\n"
         "  pb2 = Pow (b2, t)\n"
         "  bc2 = Sub (one, pb2)\n"
         "  stepsize = Div (lr, bc1)\n"
         "  sbc2 = Sqrt (bc2)\n"
         "  root = Sqrt (vn)\n"
         "  scaled = Div (root, sbc2)\n"
         "  denom = Add (scaled, eps)\n"
         "  ratio = Div (mn, denom)\n"
         "  upd = Mul (ratio, stepsize)\n"
         "  pn = Sub (decayed, upd)\n"
         "  p2 = Where (found, p, pn)\n"
         "  m2 = Where (found, m, mn)\n"
         "  v2 = Where (found, v, vn)\n"
         "  c2 = Cast <to = 16> (p2)\n"
         "}\n";
}


std::map<std::string, Tensor> feeds(const Graph &g, bool found) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  std::map<std::string, Tensor> f;
  for (const Value *v : g.inputs()) {
    std::vector<double> x(v->type().numElements());
    for (double &e : x) {
      e = u(rng);
      if (v->name() == "m")
        e *= 0.1;
      if (v->name() == "v")
        e = e * e * 0.01;
    }
    if (v->name() == "lr")
      x = {1e-3};
    if (v->name() == "t")
      x = {3};
    if (v->name() == "found")
      x = {found ? 1.0 : 0.0};
    f[v->name()] = Tensor::fromDoubles(v->type(), x);
  }
  return f;
}

/// Runs the plan once; outputs by name.
std::map<std::string, rt::HostArray> runPlan(const plan::Plan &p, std::unique_ptr<rt::Backend> be,
                                             const std::map<std::string, Tensor> &in,
                                             const Graph &g) {
  std::map<std::string, rt::HostArray> out;
  std::string error;
  auto session = rt::Session::fromPlan(p, std::move(be), error);
  EXPECT_TRUE(session) << error;
  if (!session)
    return out;
  int prog = session->program("step");
  for (const auto &[name, t] : in)
    EXPECT_TRUE(session->feed(prog, name, test::toHostArray(t), "test", error)) << error;
  EXPECT_TRUE(session->run(prog, error)) << error;
  for (const Value *v : g.outputs())
    EXPECT_TRUE(session->output(prog, v->name(), out[v->name()], error)) << error;
  return out;
}

/// AdamW's results equal the chain's, bit for bit.
void expectSameBits(const std::map<std::string, rt::HostArray> &out, const std::string &backend) {
  for (const auto &[fused, chain] :
       {std::pair{"p1", "p2"}, {"m1", "m2"}, {"v1", "v2"}, {"c1", "c2"}}) {
    ASSERT_TRUE(out.count(fused) && out.count(chain)) << backend;
    EXPECT_EQ(out.at(fused).bytes, out.at(chain).bytes) << backend << ": " << fused << " vs " << chain;
  }
}

void checkAllBackends(const std::string &gradType, bool found) {
  SCOPED_TRACE("grad " + gradType + (found ? ", found_inf" : ""));
  auto g = importModelText(model(gradType), "adamw-test");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  std::map<std::string, Tensor> in = feeds(**g, found);

  Interpreter interp(**g);
  auto ref = interp.run(in);
  ASSERT_TRUE(static_cast<bool>(ref)) << llvm::toString(ref.takeError());
  std::vector<std::string> names;
  for (const Value *v : (*g)->outputs())
    names.push_back(v->name());
  for (auto [a, b] : {std::pair{0, 4}, {1, 5}, {2, 6}, {3, 7}}) {
    const Tensor &x = (*ref)[a], &y = (*ref)[b];
    EXPECT_TRUE(x.byteSize() == y.byteSize() &&
                std::memcmp(x.data(), y.data(), x.byteSize()) == 0)
        << "interpreter: " << names[a] << " vs " << names[b];
  }
  if (found)
    EXPECT_EQ((*ref)[0].toDoubles(), in.at("p").toDoubles()) << "found_inf must skip the update";
  else
    EXPECT_NE((*ref)[0].toDoubles(), in.at("p").toDoubles());

  auto p = lowerToPlan(**g, LowerOptions{});
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  for (int threads : {1, 2})
    expectSameBits(runPlan(*p, rt::createCpuBackend({threads}), in, **g),
                   "cpu, " + std::to_string(threads) + " threads");
  expectSameBits(runPlan(*p, rt::cuda::createCudaEmulatorBackend(), in, **g), "cuda emulator");
}

TEST(AdamW, MatchesTheElementwiseChainWithAnFp32Gradient) { checkAllBackends("float", false); }
TEST(AdamW, MatchesTheElementwiseChainWithABf16Gradient) { checkAllBackends("bfloat16", false); }
TEST(AdamW, MatchesTheElementwiseChainWithAnFp16Gradient) { checkAllBackends("float16", false); }
TEST(AdamW, SkipsOnFoundInfAsTheChainDoes) { checkAllBackends("bfloat16", true); }

} // namespace
