//===- CudaGemmTest.cpp - GEMM records, epilogues, cuBLASLt layouts -------===//
//
// The host side of the CUDA backend's GEMMs (runtime/cuda/gemm/GemmPlan.h),
// checked without a GPU:
//   - the records the fixtures' plans get: Gemm's row-vector C as the bias
//     epilogue, a Relu right after a GEMM as its epilogue (its own step then
//     launches nothing), MatMul's separate bias Add left alone;
//   - when a Relu may run as an epilogue and when not;
//   - the cuBLASLt description of a record: layouts of every transposition,
//     strided batches, alignments, reduction schemes, refusals;
//   - the rewriting without cuBLASLt, which must compute the same values;
//   - epilogue steps emulated against the CPU backend, and on a GPU the real
//     backend with and without cuBLASLt against the CPU backend.
//
//===----------------------------------------------------------------------===//

#include "FixturePlans.h"
#include "FixtureUtil.h"

#include "ampc/IR/Graph.h"
#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/rt/Backend.h"
#include "ampc/rt/FusedEval.h"
#include "ampc/rt/PlanFile.h"
#include "ampc/rt/Session.h"

#include "cuda/Lowering.h"
#include "cuda/gemm/GemmPlan.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <random>

using namespace ampc;
namespace rcuda = ampc::rt::cuda;
namespace fused = ampc::rt::fused;
using rcuda::GemmEpilogue;

namespace {

//===----------------------------------------------------------------------===//
// Plans and their launch lists
//===----------------------------------------------------------------------===//

/// Program 0 of a plan lowered against distinct host addresses laid out as
/// the backend lays out device memory.
struct Lowered {
  plan::Plan p;
  rcuda::MemoryLayout layout;
  std::vector<uint8_t> arena, state, constants, workspace;
  std::vector<rcuda::Launch> launches;

  bool lower() {
    layout = rcuda::MemoryLayout::of(p);
    arena.assign(layout.arenaBytes + 256, 0);
    state.assign(layout.stateBytes + 256, 0);
    constants.assign(layout.constantBytes + 256, 0);
    size_t ws = 0;
    std::string error;
    rcuda::DeviceMemory mem{[this](int id) { return address(id); }, nullptr};
    if (!rcuda::lowerProgram(p, 0, mem, launches, ws, error)) {
      ADD_FAILURE() << error;
      return false;
    }
    workspace.assign(ws + 256, 0);
    mem.workspace = workspace.data();
    EXPECT_TRUE(rcuda::lowerProgram(p, 0, mem, launches, ws, error)) << error;
    return true;
  }
  void *address(int id) {
    return layout.address(p, id, arena.data(), state.data(), constants.data());
  }
  int step(const std::string &name) const {
    for (int s = 0; s < p.programs(0).steps_size(); ++s)
      if (p.programs(0).steps(s).name() == name)
        return s;
    ADD_FAILURE() << "no step '" << name << "'";
    return -1;
  }
  std::vector<rcuda::Launch> of(int step) const {
    std::vector<rcuda::Launch> ls;
    for (const rcuda::Launch &l : launches)
      if (l.step == step)
        ls.push_back(l);
    return ls;
  }
};

/// Whether tensors x and y share arena bytes (views resolved).
bool shareBytes(const plan::Plan &p, int x, int y) {
  while (p.tensors(x).has_view_of())
    x = p.tensors(x).view_of();
  while (p.tensors(y).has_view_of())
    y = p.tensors(y).view_of();
  const plan::Tensor &a = p.tensors(x), &b = p.tensors(y);
  if (x == y)
    return true;
  if (a.storage() != plan::ARENA || b.storage() != plan::ARENA)
    return false;
  return a.offset() < b.offset() + rt::planTensorBytes(b) &&
         b.offset() < a.offset() + rt::planTensorBytes(a);
}

/// MLP: each Linear is a Gemm with a row-vector bias; fc1 and fc2 are
/// followed by their Relu, fc3 by the loss (fp32) or a Cast (fp16, bf16).
/// A Relu whose result the memory planner put on bytes of the GEMM's
/// operands must stay a step of its own: the GEMM would overwrite what it
/// reads (ReluOnTheGemmOperandsBytesStaysAStep).
TEST(CudaGemmRecords, MlpGemmsTakeTheBiasAndReluEpilogues) {
  int fusedRelus = 0, separateRelus = 0;
  for (const char *precision : {"fp32", "fp16", "bf16"}) {
    SCOPED_TRACE(precision);
    Lowered l;
    ASSERT_TRUE(test::compileTrainingPlan("mlp", precision, "adamw", l.p));
    ASSERT_TRUE(l.lower());
    const plan::Program &prog = l.p.programs(0);
    const std::pair<const char *, const char *> layers[] = {
        {"/fc1/Gemm", "/Relu"}, {"/fc2/Gemm", "/Relu_1"}, {"/fc3/Gemm", nullptr}};
    for (const auto &[gemm, relu] : layers) {
      SCOPED_TRACE(gemm);
      int s = l.step(gemm);
      ASSERT_GE(s, 0);
      const plan::Step &st = prog.steps(s);
      ASSERT_EQ(st.inputs_size(), 3);
      std::vector<rcuda::Launch> ls = l.of(s);
      // No copy kernel for C: it is the epilogue's bias.
      ASSERT_EQ(ls.size(), 1u);
      ASSERT_EQ(ls[0].kind, rcuda::Launch::Gemm);
      const rcuda::GemmCall &g = ls[0].gemm;
      EXPECT_EQ(g.bias, l.address(st.inputs(2)));
      EXPECT_EQ(g.beta, 0.0f);
      const plan::Tensor &w = l.p.tensors(st.inputs(1)), &x = l.p.tensors(st.inputs(0));
      int r = relu ? l.step(relu) : -1;
      bool clash = false;
      for (int in : st.inputs())
        clash = clash || (r >= 0 && shareBytes(l.p, in, prog.steps(r).outputs(0)));
      if (relu && !clash) {
        ++fusedRelus;
        ASSERT_EQ(r, s + 1);
        EXPECT_EQ(g.epilogue, GemmEpilogue::BiasRelu);
        EXPECT_TRUE(l.of(r).empty()) << "the Relu step still launches";
        EXPECT_EQ(g.C, l.address(prog.steps(r).outputs(0)));
      } else {
        separateRelus += relu != nullptr;
        if (relu)
          EXPECT_EQ(l.of(r).size(), 1u) << "the Relu step launches nothing";
        EXPECT_EQ(g.epilogue, GemmEpilogue::Bias);
        EXPECT_EQ(g.C, l.address(st.outputs(0)));
      }
      // Y[M,N] = X[M,K] W[N,K]^T as the column-major Y^T = W X^T.
      rcuda::LtGemm d;
      std::string why;
      ASSERT_TRUE(rcuda::describeLtGemm(g, d, why)) << why;
      EXPECT_TRUE(d.transA);
      EXPECT_FALSE(d.transB);
      EXPECT_EQ(d.a.rows, uint64_t(w.shape(1)));
      EXPECT_EQ(d.a.cols, uint64_t(w.shape(0)));
      EXPECT_EQ(d.a.ld, w.shape(1));
      EXPECT_EQ(d.b.rows, uint64_t(x.shape(1)));
      EXPECT_EQ(d.b.cols, uint64_t(x.shape(0)));
      EXPECT_EQ(d.c.rows, uint64_t(w.shape(0)));
      EXPECT_EQ(d.c.cols, uint64_t(x.shape(0)));
      EXPECT_EQ(d.c.ld, w.shape(0));
      EXPECT_EQ(d.c.batch, 1);
      EXPECT_EQ(d.bias, g.bias);
      EXPECT_EQ(d.outputTypeReduction, std::string(precision) == "fp32");
    }
    // The gradients' Gemms have no C and no Relu after them.
    int epilogues = 0;
    for (const rcuda::Launch &ln : l.launches)
      if (ln.kind == rcuda::Launch::Gemm && ln.gemm.epilogue != GemmEpilogue::None)
        ++epilogues;
    EXPECT_EQ(epilogues, 3);
  }
  // Two Relus in each of the three plans; ForcedClash below makes one stay
  // a step of its own whatever the memory planner does.
  EXPECT_EQ(fusedRelus + separateRelus, 6);
  EXPECT_GE(fusedRelus, 5);
}

/// The clash above, made on purpose: fc1's Relu result moved onto the bytes
/// of the GEMM's input X stays a step of its own (the GEMM would overwrite X
/// while it reads it); fc2's still takes the epilogue.
TEST(CudaGemmRecords, ReluOnTheGemmOperandsBytesStaysAStep) {
  Lowered l;
  ASSERT_TRUE(test::compileTrainingPlan("mlp", "fp32", "adamw", l.p));
  const plan::Program &prog = l.p.programs(0);
  int gemm = l.step("/fc1/Gemm"), relu = l.step("/Relu");
  ASSERT_GE(gemm, 0);
  ASSERT_GE(relu, 0);
  int x = prog.steps(gemm).inputs(0), y = prog.steps(relu).outputs(0);
  while (l.p.tensors(x).has_view_of())
    x = l.p.tensors(x).view_of();
  ASSERT_FALSE(l.p.tensors(y).has_view_of());
  ASSERT_EQ(l.p.tensors(x).storage(), plan::ARENA);
  ASSERT_EQ(l.p.tensors(y).storage(), plan::ARENA);
  l.p.mutable_tensors(y)->set_offset(l.p.tensors(x).offset());
  ASSERT_TRUE(l.lower());
  std::vector<rcuda::Launch> g = l.of(gemm);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].gemm.epilogue, GemmEpilogue::Bias);
  EXPECT_EQ(l.of(relu).size(), 1u) << "the Relu step launches its own kernel";
  std::vector<rcuda::Launch> g2 = l.of(l.step("/fc2/Gemm"));
  ASSERT_EQ(g2.size(), 1u);
  EXPECT_EQ(g2[0].gemm.epilogue, GemmEpilogue::BiasRelu);
}

/// The transformer's Linears are MatMuls whose bias Add is a step of its
/// own (fused with what follows): the plan rounds the product, then the
/// sum, so no epilogue may merge them. Attention's MatMuls are strided
/// batches; the projections fold their batch into the rows.
TEST(CudaGemmRecords, TransformerMatMulsKeepTheirOwnRounding) {
  Lowered l;
  ASSERT_TRUE(test::compileTrainingPlan("transformer", "bf16", "adamw", l.p));
  ASSERT_TRUE(l.lower());
  int gemms = 0;
  for (const rcuda::Launch &ln : l.launches) {
    if (ln.kind != rcuda::Launch::Gemm)
      continue;
    ++gemms;
    EXPECT_EQ(ln.gemm.epilogue, GemmEpilogue::None) << "step " << ln.step;
    rcuda::LtGemm d;
    std::string why;
    EXPECT_TRUE(rcuda::describeLtGemm(ln.gemm, d, why)) << "step " << ln.step << ": " << why;
    EXPECT_FALSE(d.outputTypeReduction);
  }
  EXPECT_EQ(gemms, 18);
  // Q K^T: [2,2,8,8] x [2,2,8,8] per (batch, head), one strided batch of 4.
  std::vector<rcuda::Launch> att = l.of(l.step("/MatMul"));
  ASSERT_EQ(att.size(), 1u);
  const rcuda::GemmCall &g = att[0].gemm;
  EXPECT_EQ(g.batch, 4);
  rcuda::LtGemm d;
  std::string why;
  ASSERT_TRUE(rcuda::describeLtGemm(g, d, why)) << why;
  for (const rcuda::LtMatrix *m : {&d.a, &d.b, &d.c}) {
    EXPECT_EQ(m->batch, 4);
    EXPECT_EQ(m->stride, 64);
    EXPECT_EQ(m->rows * m->cols, 64u);
  }
  // qkv: [2,8,16] x W[48,16]^T, the batch folded into 16 rows.
  std::vector<rcuda::Launch> qkv = l.of(l.step("/qkv/MatMul"));
  ASSERT_EQ(qkv.size(), 1u);
  EXPECT_EQ(qkv[0].gemm.batch, 1);
  EXPECT_EQ(qkv[0].gemm.m, 48);
  EXPECT_EQ(qkv[0].gemm.n, 16);
  EXPECT_EQ(qkv[0].gemm.k, 16);
  EXPECT_TRUE(qkv[0].gemm.transA);
}

//===----------------------------------------------------------------------===//
// When a Relu runs as the epilogue
//===----------------------------------------------------------------------===//

std::string model(const char *type, const std::string &body, const std::string &outputs) {
  std::string t = type;
  return "<ir_version: 8, opset_import: [\"\" : 17]>\ng (" + t + "[6,12] a, " + t +
         "[10,12] w, " + t + "[10] c) => (" + outputs + ") {\n" + body + "\n}";
}

TEST(CudaGemmPlan, ReluRunsAsTheEpilogueOnlyWhenNothingElseReadsTheProduct) {
  const std::string gemmRelu = "y = Gemm <transB = 1> (a, w, c)\nr = Relu(y)";
  struct Case {
    std::string body, outputs;
    bool fuse, expected;
  };
  const Case cases[] = {
      {gemmRelu, "float[6,10] r", true, true},
      {gemmRelu, "float[6,10] r", false, true}, // a plain Relu step
      {gemmRelu, "float[6,10] r, float[6,10] y", true, false}, // y is an output
      {"y = MatMul(a, w2)\nr = Relu(y)", "float[6,10] r", true, true},
      {"y = Gemm <transB = 1> (a, w, c)\nr = Relu(y)\nz = Add(y, r)", "float[6,10] z", false,
       false}, // y is read twice
      {"y = Gemm <transB = 1> (a, w, c)\nr = Sigmoid(y)", "float[6,10] r", true, false}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.body + " => " + c.outputs);
    std::string body = c.body;
    if (body.find("w2") != std::string::npos)
      body = "w2 = Transpose(w)\n" + body;
    plan::Plan p;
    ASSERT_TRUE(test::planFromText(model("float", body, c.outputs), c.fuse, p));
    std::vector<int> relu = rcuda::reluEpilogueSteps(p, p.programs(0));
    int fused = 0;
    for (int s = 0; s < static_cast<int>(relu.size()); ++s)
      if (relu[s] >= 0) {
        ++fused;
        EXPECT_EQ(relu[s], s + 1);
      }
    EXPECT_EQ(fused, c.expected ? 1 : 0);
  }
}

/// The memory planner runs a Relu in place by making one of the two tensors
/// a view of the other; either way the GEMM may write the Relu's result. A
/// result on the bytes of an operand may not.
TEST(CudaGemmPlan, InPlaceReluEitherWayButNotOverAnOperand) {
  plan::Plan p;
  ASSERT_TRUE(test::planFromText(
      model("float", "y = Gemm <transB = 1> (a, w, c)\nr = Relu(y)", "float[6,10] r"), true, p));
  const plan::Program &prog = p.programs(0);
  ASSERT_EQ(prog.steps_size(), 2);
  int y = prog.steps(0).outputs(0), r = prog.steps(1).outputs(0);
  auto fusedSteps = [&](const plan::Plan &q) {
    std::vector<int> relu = rcuda::reluEpilogueSteps(q, q.programs(0));
    return relu[0] == 1 ? 1 : 0;
  };
  ASSERT_TRUE(p.tensors(y).has_view_of() && p.tensors(y).view_of() == r)
      << "the planner no longer runs this Relu in place; the flipped case below needs it";
  EXPECT_EQ(fusedSteps(p), 1);
  // The result a view of the product.
  plan::Plan flipped = p;
  plan::Tensor &fy = *flipped.mutable_tensors(y), &fr = *flipped.mutable_tensors(r);
  fy.clear_view_of();
  fy.set_storage(fr.storage());
  fy.set_offset(fr.offset());
  fr.set_view_of(y);
  EXPECT_EQ(fusedSteps(flipped), 1);
  // The result moved onto the bytes of operand a.
  plan::Plan clash = p;
  int a = prog.steps(0).inputs(0);
  clash.mutable_tensors(r)->set_offset(p.tensors(a).offset() + 64);
  EXPECT_EQ(fusedSteps(clash), 0);
  // The product a view of another tensor: its bytes are not the result's.
  plan::Plan other = p;
  other.mutable_tensors(y)->set_view_of(a);
  EXPECT_EQ(fusedSteps(other), 0);
}

//===----------------------------------------------------------------------===//
// cuBLASLt descriptions
//===----------------------------------------------------------------------===//

TEST(CudaGemmLayouts, TransposedAndBatchedCalls) {
  alignas(256) static uint16_t a[4096], b[4096], y[4096], bias[64];
  const int64_t M = 5, N = 7, K = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t batch : {1, 3}) {
        SCOPED_TRACE(std::to_string(ta) + std::to_string(tb) + " batch " + std::to_string(batch));
        rcuda::GemmCall g = rcuda::rowMajorGemm(M, N, K, a, ta ? M : K, ta, b, tb ? K : N, tb, y, N);
        g.batch = batch;
        g.strideA = K * N;
        g.strideB = M * K;
        g.strideC = M * N;
        g.abType = g.cType = fused::F16;
        rcuda::LtGemm d;
        std::string why;
        ASSERT_TRUE(rcuda::describeLtGemm(g, d, why)) << why;
        // Column-major Y^T (N x M) = op(B)^T op(A)^T: A's slot holds B.
        EXPECT_EQ(d.transA, tb);
        EXPECT_EQ(d.transB, ta);
        EXPECT_EQ(d.a.rows, uint64_t(tb ? K : N));
        EXPECT_EQ(d.a.cols, uint64_t(tb ? N : K));
        EXPECT_EQ(d.a.ld, tb ? K : N);
        EXPECT_EQ(d.b.rows, uint64_t(ta ? M : K));
        EXPECT_EQ(d.b.cols, uint64_t(ta ? K : M));
        EXPECT_EQ(d.b.ld, ta ? M : K);
        EXPECT_EQ(d.c.rows, uint64_t(N));
        EXPECT_EQ(d.c.cols, uint64_t(M));
        EXPECT_EQ(d.c.ld, N);
        for (const rcuda::LtMatrix *m : {&d.a, &d.b, &d.c}) {
          EXPECT_EQ(m->batch, batch);
          EXPECT_EQ(m->type, fused::F16);
        }
        EXPECT_EQ(d.a.stride, batch > 1 ? K * N : 0);
        EXPECT_EQ(d.b.stride, batch > 1 ? M * K : 0);
        EXPECT_EQ(d.c.stride, batch > 1 ? M * N : 0);
        // Odd strides of 2-byte elements leave 2-byte alignment.
        EXPECT_EQ(d.a.align, batch > 1 ? 2u : 256u);
        EXPECT_EQ(d.c.align, batch > 1 ? 2u : 256u);
        EXPECT_FALSE(d.outputTypeReduction);
        EXPECT_EQ(d.epilogue, GemmEpilogue::None);
        EXPECT_EQ(d.bias, nullptr);
      }
  // The bias; an unaligned C; fp32 results may reduce split-K partial sums in
  // the output type, fp16 operands with an fp32 result (convolutions) too.
  rcuda::GemmCall g = rcuda::rowMajorGemm(4, 8, 16, a, 16, false, b, 8, false, y + 3, 8);
  g.abType = fused::F16;
  g.cType = fused::F32;
  g.epilogue = GemmEpilogue::BiasRelu;
  g.bias = bias + 4;
  rcuda::LtGemm d;
  std::string why;
  ASSERT_TRUE(rcuda::describeLtGemm(g, d, why)) << why;
  EXPECT_EQ(d.bias, bias + 4);
  EXPECT_EQ(d.c.align, 2u);
  EXPECT_EQ(d.c.type, fused::F32);
  EXPECT_EQ(d.a.type, fused::F16);
  EXPECT_TRUE(d.outputTypeReduction);
  EXPECT_EQ(d.epilogue, GemmEpilogue::BiasRelu);
}

TEST(CudaGemmLayouts, RefusedCallsStayOnCublas) {
  static float a[64], b[64], y[64];
  rcuda::GemmCall g = rcuda::rowMajorGemm(4, 4, 4, a, 4, false, b, 4, false, y, 4);
  g.abType = g.cType = fused::F32;
  g.batch = 2;
  g.strideA = 16;
  g.strideB = 0; // A (row-major) broadcast over the batch
  g.strideC = 16;
  rcuda::LtGemm d;
  std::string why;
  EXPECT_FALSE(rcuda::describeLtGemm(g, d, why));
  EXPECT_EQ(why, "a batch broadcast through a zero stride");
  g.strideB = 16;
  EXPECT_TRUE(rcuda::describeLtGemm(g, d, why)) << why;
  g.k = int64_t(INT_MAX) + 1;
  EXPECT_FALSE(rcuda::describeLtGemm(g, d, why));
  EXPECT_EQ(why, "dimensions outside cuBLAS's 32-bit arguments");
}

TEST(CudaGemmLayouts, AlignmentAndWorkspace) {
  auto at = [](uintptr_t v) { return reinterpret_cast<const void *>(v); };
  EXPECT_EQ(rcuda::batchAlignment(at(0x10000), 0, 2, 1), 256u);
  EXPECT_EQ(rcuda::batchAlignment(at(0x10040), 0, 2, 1), 64u);
  EXPECT_EQ(rcuda::batchAlignment(at(0x10002), 0, 2, 1), 2u);
  EXPECT_EQ(rcuda::batchAlignment(at(0x10000), 24, 2, 4), 16u); // 48-byte batches
  EXPECT_EQ(rcuda::batchAlignment(at(0x10000), 24, 2, 1), 256u); // one batch: no stride
  EXPECT_EQ(rcuda::batchAlignment(at(0x10000), 4096, 4, 2), 256u);
  EXPECT_EQ(rcuda::ltWorkspaceBytes(8), size_t(4) << 20);
  EXPECT_EQ(rcuda::ltWorkspaceBytes(9), size_t(32) << 20);
  EXPECT_EQ(rcuda::ltWorkspaceBytes(10), size_t(32) << 20);
}

//===----------------------------------------------------------------------===//
// Without cuBLASLt: the same values through plain launches
//===----------------------------------------------------------------------===//

std::vector<uint8_t> randomBytes(uint8_t t, int64_t n, std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<uint8_t> v(n * (t == fused::F32 ? 4 : 2));
  for (int64_t i = 0; i < n; ++i)
    fused::storeFromFloat(t, v.data(), i, u(rng));
  return v;
}

TEST(CudaGemmEpilogue, RewritingWithoutCublasLtComputesTheSameValues) {
  std::mt19937 rng(7);
  const int64_t M = 9, N = 13, K = 21, B = 2;
  for (uint8_t t : {fused::F32, fused::F16, fused::BF16})
    for (GemmEpilogue e : {GemmEpilogue::Bias, GemmEpilogue::Relu, GemmEpilogue::BiasRelu}) {
      SCOPED_TRACE("type " + std::to_string(t) + " epilogue " + std::to_string(int(e)));
      std::vector<uint8_t> a = randomBytes(t, B * M * K, rng), b = randomBytes(t, B * K * N, rng),
                           bias = randomBytes(t, N, rng), y1(B * M * N * 4, 0), y2 = y1;
      auto call = [&](void *y) {
        rcuda::Launch l;
        l.kind = rcuda::Launch::Gemm;
        l.step = 3;
        l.gemm = rcuda::rowMajorGemm(M, N, K, a.data(), K, false, b.data(), K, true, y, N);
        l.gemm.batch = B;
        l.gemm.strideA = K * N;
        l.gemm.strideB = M * K;
        l.gemm.strideC = M * N;
        l.gemm.abType = l.gemm.cType = t;
        l.gemm.alpha = 0.75f;
        l.gemm.epilogue = e;
        l.gemm.bias = rcuda::hasBias(e) ? bias.data() : nullptr;
        return l;
      };
      rcuda::emulateLaunch(call(y1.data()));
      std::vector<rcuda::Launch> ls = {call(y2.data())};
      std::string error;
      ASSERT_TRUE(rcuda::resolveGemms(ls, nullptr, error)) << error;
      // [copy of the bias] GEMM [Relu in place], all of step 3.
      size_t expected = 1 + rcuda::hasBias(e) + rcuda::hasRelu(e);
      ASSERT_EQ(ls.size(), expected);
      size_t at = 0;
      if (rcuda::hasBias(e)) {
        EXPECT_EQ(ls[at].kind, rcuda::Launch::Kernel);
        EXPECT_EQ(ls[at++].kernel, rcuda::KernelKind::Copy);
      }
      ASSERT_EQ(ls[at].kind, rcuda::Launch::Gemm);
      EXPECT_EQ(ls[at].gemm.epilogue, GemmEpilogue::None);
      EXPECT_EQ(ls[at].gemm.beta, rcuda::hasBias(e) ? 1.0f : 0.0f);
      EXPECT_EQ(ls[at].gemm.lt, -1);
      if (rcuda::hasRelu(e)) {
        EXPECT_EQ(ls[++at].kind, rcuda::Launch::Kernel);
        EXPECT_EQ(ls[at].kernel, rcuda::KernelKind::Fused);
      }
      for (const rcuda::Launch &l : ls) {
        EXPECT_EQ(l.step, 3);
        rcuda::emulateLaunch(l);
      }
      int differ = 0;
      for (int64_t i = 0; i < B * M * N; ++i)
        differ += fused::loadAsFloat(t, y1.data(), i) != fused::loadAsFloat(t, y2.data(), i);
      EXPECT_EQ(differ, 0);
    }
}

TEST(CudaGemmEpilogue, PlannedCallsKeepTheirEpilogue) {
  static float a[16], b[16], y[16], bias[4];
  rcuda::Launch l;
  l.kind = rcuda::Launch::Gemm;
  l.gemm = rcuda::rowMajorGemm(4, 4, 4, a, 4, false, b, 4, false, y, 4);
  l.gemm.epilogue = GemmEpilogue::BiasRelu;
  l.gemm.bias = bias;
  std::vector<rcuda::Launch> ls = {l};
  std::string error;
  ASSERT_TRUE(rcuda::resolveGemms(ls, [](const rcuda::GemmCall &) { return 5; }, error));
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].gemm.lt, 5);
  EXPECT_EQ(ls[0].gemm.epilogue, GemmEpilogue::BiasRelu);
  // Forms that have no rewriting are refused, naming the step.
  ls = {l};
  ls[0].step = 2;
  ls[0].gemm.beta = 1;
  EXPECT_FALSE(rcuda::resolveGemms(ls, nullptr, error));
  EXPECT_EQ(error, "step 2: a GEMM bias with beta != 0 has no form without cuBLASLt");
  ls = {l};
  ls[0].gemm.epilogue = GemmEpilogue::Relu;
  ls[0].gemm.ldc = 8;
  EXPECT_FALSE(rcuda::resolveGemms(ls, nullptr, error));
}

//===----------------------------------------------------------------------===//
// Epilogue steps against the CPU backend
//===----------------------------------------------------------------------===//

using BackendFactory = std::function<std::unique_ptr<rt::Backend>()>;

/// The plan's outputs after one run on a backend.
std::vector<rt::HostArray> runPlan(const plan::Plan &p, const BackendFactory &make,
                                   const std::map<std::string, Tensor> &feeds) {
  std::string error;
  auto session = rt::Session::fromPlan(p, make(), error);
  if (!session) {
    ADD_FAILURE() << "load: " << error;
    return {};
  }
  int prog = session->program("step");
  for (const auto &[name, t] : feeds)
    EXPECT_TRUE(session->feed(prog, name, test::toHostArray(t), "test", error)) << error;
  EXPECT_TRUE(session->run(prog, error)) << error;
  std::vector<rt::HostArray> outs;
  for (const plan::Binding &b : p.programs(prog).outputs()) {
    rt::HostArray a;
    EXPECT_TRUE(session->output(prog, b.name(), a, error)) << error;
    outs.push_back(std::move(a));
  }
  return outs;
}

/// Gemm + bias + Relu and MatMul + Relu in each type, on `make` against the
/// CPU backend: within one ulp of the result plus sums in another order.
void compareEpilogues(const BackendFactory &make) {
  const std::string bodies[] = {"y = Gemm <transB = 1> (a, w, c)\nr = Relu(y)",
                                "y = Gemm <transB = 1, alpha = 0.5> (a, w, c)\nr = Relu(y)",
                                "w2 = Transpose(w)\ny = MatMul(a, w2)\nr = Relu(y)",
                                "y = Gemm <transB = 1> (a, w, c)\nr = Sigmoid(y)"};
  for (const char *type : {"float", "float16", "bfloat16"})
    for (const std::string &body : bodies) {
      SCOPED_TRACE(std::string(type) + ": " + body);
      plan::Plan p;
      ASSERT_TRUE(test::planFromText(model(type, body, std::string(type) + "[6,10] r"), true, p));
      std::mt19937_64 rng(std::hash<std::string>()(body + type));
      std::uniform_real_distribution<double> u(-1, 1);
      std::map<std::string, Tensor> feeds;
      for (const plan::Binding &b : p.programs(0).inputs()) {
        const plan::Tensor &t = p.tensors(b.tensor());
        std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
        DType dt = std::string(type) == "float" ? DType::F32
                   : std::string(type) == "float16" ? DType::F16 : DType::BF16;
        std::vector<double> v(rt::planNumElements(t));
        for (double &x : v)
          x = u(rng);
        feeds[b.name()] = Tensor::fromDoubles(TensorType(dt, shape), v);
      }
      std::vector<rt::HostArray> cpu = runPlan(p, [] { return rt::createCpuBackend({1}); }, feeds);
      std::vector<rt::HostArray> other = runPlan(p, make, feeds);
      ASSERT_EQ(cpu.size(), 1u);
      ASSERT_EQ(other.size(), 1u);
      double ulp = std::string(type) == "float16" ? std::ldexp(1.0, -10)
                   : std::string(type) == "bfloat16" ? std::ldexp(1.0, -7) : 0;
      int negative = 0, bad = 0;
      for (int64_t i = 0; i < cpu[0].numElements(); ++i) {
        double x = other[0].at(i), y = cpu[0].at(i);
        bad += !(std::fabs(x - y) <= ulp * std::fabs(y) + 2e-5);
        negative += x < 0;
      }
      EXPECT_EQ(bad, 0);
      EXPECT_EQ(negative, 0);
    }
}

TEST(CudaEmulation, GemmEpiloguesMatchTheCpu) {
  compareEpilogues([] { return rcuda::createCudaEmulatorBackend(); });
}

/// On a GPU: the backend's cuBLASLt GEMMs, and its cuBLAS GEMMs with the
/// epilogues rewritten (AMPC_CUBLASLT_PATH at a missing file), against the CPU.
TEST(CudaDevice, GemmEpiloguesMatchTheCpuWithAndWithoutCublasLt) {
  std::string why;
  if (!rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  auto cuda = [] {
    std::string error;
    auto b = rt::createCudaBackend({}, error);
    EXPECT_TRUE(b) << error;
    return b;
  };
  ::unsetenv("AMPC_CUBLASLT_PATH");
  compareEpilogues(cuda);
  ::setenv("AMPC_CUBLASLT_PATH", "/nonexistent/libcublasLt.so.13", 1);
  compareEpilogues(cuda);
  ::unsetenv("AMPC_CUBLASLT_PATH");
}

} // namespace
