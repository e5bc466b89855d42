//===- gemm/GemmPlan.cpp - GEMM records: epilogues, cuBLASLt layouts ------===//
//
// See GemmPlan.h. Everything here is decided from the plan and the launch
// records alone, so it is the same on the GPU, in the host emulator and in
// the tests.
//
//===----------------------------------------------------------------------===//

#include "GemmPlan.h"

#include "../StepLowering.h"
#include "ampc/rt/PlanQueries.h"

#include <algorithm>
#include <climits>

namespace ampc::rt::cuda {

std::vector<int> reluEpilogueSteps(const plan::Plan &p, const plan::Program &prog) {
  std::vector<int> relu(prog.steps_size(), -1);
  for (int s = 0; s + 1 < prog.steps_size(); ++s) {
    const plan::Step &g = prog.steps(s), &t = prog.steps(s + 1);
    if ((g.op() != "MatMul" && g.op() != "Gemm") || g.outputs_size() != 1 || !isReluStep(t))
      continue;
    int h = g.outputs(0), r = t.outputs(0);
    if (h < 0 || r < 0 || t.inputs(0) != h || h >= p.tensors_size() || r >= p.tensors_size())
      continue;
    // The memory planner may run the Relu in place, making the product a
    // view of its result or the other way round: the GEMM then writes those
    // bytes either way.
    const plan::Tensor &ht = p.tensors(h), &rt = p.tensors(r);
    if ((ht.has_view_of() && planBaseTensor(p, h) != planBaseTensor(p, r)) ||
        p.tensors(planBaseTensor(p, h)).storage() != plan::ARENA || rt.type() != ht.type() ||
        planNumElements(rt) != planNumElements(ht) || planNumElements(ht) == 0 ||
        planTensorUses(p, h, r) != 1)
      continue;
    bool ok = true;
    for (int in : g.inputs())
      if (in >= 0)
        ok = ok && planNumElements(p.tensors(in)) > 0 && !planTensorsMayOverlap(p, in, r);
    if (ok)
      relu[s] = s + 1;
  }
  return relu;
}

uint32_t batchAlignment(const void *p, int64_t stride, size_t elemBytes, int64_t batch) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256;
  if (batch > 1)
    bits |= static_cast<uint64_t>(stride) * elemBytes;
  return static_cast<uint32_t>(bits & (~bits + 1)); // the lowest set bit
}

bool describeLtGemm(const GemmCall &g, LtGemm &out, std::string &why) {
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch})
    if (v > INT_MAX || v <= 0) {
      why = "dimensions outside cuBLAS's 32-bit arguments";
      return false;
    }
  if (g.batch > 1 && (g.strideA == 0 || g.strideB == 0 || g.strideC == 0)) {
    why = "a batch broadcast through a zero stride";
    return false;
  }
  size_t ab = g.abType == FusedElem::F32 ? 4 : 2, cb = g.cType == FusedElem::F32 ? 4 : 2;
  auto matrix = [&](uint8_t type, bool trans, int64_t rows, int64_t cols, int64_t ld,
                    int64_t stride, const void *p, size_t bytes) {
    LtMatrix x;
    x.type = type;
    x.rows = static_cast<uint64_t>(trans ? cols : rows);
    x.cols = static_cast<uint64_t>(trans ? rows : cols);
    x.ld = ld;
    x.batch = static_cast<int32_t>(g.batch);
    x.stride = g.batch > 1 ? stride : 0;
    x.align = batchAlignment(p, stride, bytes, g.batch);
    return x;
  };
  out = LtGemm();
  out.transA = g.transA;
  out.transB = g.transB;
  out.a = matrix(g.abType, g.transA, g.m, g.k, g.lda, g.strideA, g.A, ab);
  out.b = matrix(g.abType, g.transB, g.k, g.n, g.ldb, g.strideB, g.B, ab);
  out.c = matrix(g.cType, false, g.m, g.n, g.ldc, g.strideC, g.C, cb);
  out.epilogue = g.epilogue;
  if (hasBias(g.epilogue))
    out.bias = g.bias;
  out.outputTypeReduction = g.cType == FusedElem::F32;
  return true;
}

bool expandGemmEpilogue(const Launch &l, std::vector<Launch> &out, std::string &error) {
  GemmCall g = l.gemm;
  int elem = g.cType == FusedElem::F32 ? 4 : 2;
  if (hasBias(g.epilogue)) {
    if (g.beta != 0.0f) {
      error = "a GEMM bias with beta != 0 has no form without cuBLASLt";
      return false;
    }
    // C[b][j][i] = bias[i], then the GEMM adds the product to it.
    CopyArgs c;
    int64_t threads =
        addCopy({g.batch, g.n, g.m}, {0, 0, 1}, {g.strideC, g.ldc, 1}, g.bias, g.C, elem, c);
    Launch copy = Launch::kernelOf(KernelKind::Copy, c, threads);
    copy.step = l.step;
    out.push_back(copy);
    g.beta = 1;
  }
  bool relu = hasRelu(g.epilogue);
  if (relu && !(g.ldc == g.m && (g.batch == 1 || g.strideC == g.m * g.n))) {
    error = "a GEMM Relu on a strided result has no form without cuBLASLt";
    return false;
  }
  g.epilogue = GemmEpilogue::None;
  g.bias = nullptr;
  g.lt = -1;
  Launch gemm = l;
  gemm.gemm = g;
  out.push_back(gemm);
  if (relu) {
    // Relu of the rounded result, in place: the rounding is monotone and
    // keeps signs, so this is the rounded Relu.
    FusedArgs f;
    f.rank = 1;
    f.shape[0] = g.batch * g.m * g.n;
    f.numInputs = 1;
    f.in[0] = {g.C, g.cType, FusedArgs::Contiguous, {}};
    f.numInstrs = 1;
    f.ins[0].op = FusedOp::Relu;
    f.ins[0].type = g.cType;
    f.numOutputs = 1;
    f.out[0] = {g.C, g.cType, 1};
    Launch act = Launch::kernelOf(KernelKind::Fused, f, f.shape[0]);
    act.step = l.step;
    out.push_back(act);
  }
  return true;
}

bool resolveGemms(std::vector<Launch> &launches,
                  const std::function<int32_t(const GemmCall &)> &planLt, std::string &error) {
  std::vector<Launch> out;
  out.reserve(launches.size());
  for (Launch &l : launches) {
    if (l.kind != Launch::Gemm) {
      out.push_back(l);
      continue;
    }
    l.gemm.lt = planLt ? planLt(l.gemm) : -1;
    if (l.gemm.lt >= 0 || l.gemm.epilogue == GemmEpilogue::None) {
      out.push_back(l);
      continue;
    }
    if (!expandGemmEpilogue(l, out, error)) {
      error = "step " + std::to_string(l.step) + ": " + error;
      return false;
    }
  }
  launches = std::move(out);
  return true;
}

size_t ltWorkspaceBytes(int smMajor) { return size_t(smMajor >= 9 ? 32 : 4) << 20; }

} // namespace ampc::rt::cuda
