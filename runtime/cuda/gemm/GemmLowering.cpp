//===- gemm/GemmLowering.cpp - MatMul and Gemm ----------------------------===//
//
// Lowers MatMul and Gemm to GEMM records (GemmCall). Gemm's C joins as the
// bias epilogue when it is a row vector added once (beta = 1): the product
// plus the bias in fp32, rounded once, as the plan defines Gemm. Other Cs are
// copied into Y first and added with beta. A Relu step right after the GEMM
// may run as its epilogue (StepLowering::fuseRelu, gemm/GemmPlan.h); the
// backend runs epilogues through cuBLASLt or rewrites them (resolveGemms).
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"
#include "ampc/rt/MatMulShape.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

bool StepLowering::lowerMatMul(std::string &error) {
  Operand a = input(0), b = input(1), y = output(0);
  if (!a.present() || !b.present() || !y.present()) {
    error = "MatMul takes two operands";
    return false;
  }
  if (!sameFloatTypes({a, b}, y, error))
    return false;
  // transA / transB: the operand is stored with its last two axes exchanged
  // (the lowering folded a Transpose into the MatMul); cuBLAS reads it so.
  GemmEpilogue act = relu_.present() ? GemmEpilogue::Relu : GemmEpilogue::None;
  if (relu_.present())
    y.p = relu_.p; // the Relu's result, same type and size (reluEpilogueSteps)
  bool ta = attrInt("transA", 0) != 0, tb = attrInt("transB", 0) != 0;
  if ((ta && a.rank() < 2) || (tb && b.rank() < 2)) {
    error = "a transposed MatMul operand needs rank 2 or more";
    return false;
  }
  auto swapLastTwo = [](std::vector<int64_t> s) {
    if (s.size() >= 2)
      std::swap(s[s.size() - 1], s[s.size() - 2]);
    return s;
  };
  MatMulShape shape;
  if (!matMulShape(ta ? swapLastTwo(a.shape) : a.shape, tb ? swapLastTwo(b.shape) : b.shape,
                   y.numel, argString(a), argString(b), argString(y), shape, error))
    return false;
  int64_t M = shape.M, K = shape.K, N = shape.N, nb = product(shape.batch);
  const std::vector<int64_t> &ba = shape.batchA, &bb = shape.batchB, &batch = shape.batch;
  size_t r = batch.size();
  if (y.numel == 0)
    return true;
  if (K == 0) {
    memset0(y.p, static_cast<size_t>(y.numel) * y.elemBytes());
    return true;
  }
  auto call = [&](int64_t rows, const void *A, const void *B, void *Y, int64_t count,
                  int64_t sA, int64_t sB, int64_t sY) {
    GemmCall g = rowMajorGemm(rows, N, K, A, ta ? rows : K, ta, B, tb ? K : N, tb, Y, N);
    g.batch = count;
    g.strideA = sB; // operands swap in the column-major call
    g.strideB = sA;
    g.strideC = sY;
    g.abType = y.type;
    g.cType = y.type;
    g.epilogue = act;
    gemm(g);
  };
  int64_t pa = product(ba), pb = product(bb);
  if (pb == 1 && !(ta && pa != 1)) {
    // B has no batch: fold A's batch into the rows (one GEMM).
    call(pa * M, a.p, b.p, y.p, 1, 0, 0, 0);
    return true;
  }
  if ((pa == 1 || ba == batch) && bb == batch) {
    call(M, a.p, b.p, y.p, nb, pa == 1 ? 0 : M * K, K * N, M * N);
    return true;
  }
  // Mixed broadcasting: one GEMM per result batch index.
  std::vector<int64_t> sa = stridesOf(ba), sb = stridesOf(bb), idx(r, 0);
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, offA = 0, offB = 0;
    for (size_t d = r; d-- > 0;) {
      int64_t x = rem % batch[d];
      rem /= batch[d];
      offA += (ba[d] == 1 ? 0 : x) * sa[d];
      offB += (bb[d] == 1 ? 0 : x) * sb[d];
    }
    call(M, a.at(offA * M * K), b.at(offB * K * N), y.at(i * M * N), 1, 0, 0, 0);
  }
  return true;
}

bool StepLowering::lowerGemm(std::string &error) {
  Operand a = input(0), b = input(1), c = input(2), y = output(0);
  if (!a.present() || !b.present() || !y.present()) {
    error = "Gemm takes two or three operands";
    return false;
  }
  if (!sameFloatTypes({a, b, c}, y, error))
    return false;
  if (a.rank() != 2 || b.rank() != 2) {
    error = "Gemm operands must be matrices: " + argString(a) + ", " + argString(b);
    return false;
  }
  bool ta = attrInt("transA", 0) != 0, tb = attrInt("transB", 0) != 0;
  int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
  int64_t N = tb ? b.shape[0] : b.shape[1];
  if ((tb ? b.shape[1] : b.shape[0]) != K) {
    error = "inner dimensions differ: " + argString(a) + " x " + argString(b);
    return false;
  }
  if (y.numel != M * N) {
    error = "result " + argString(y) + " does not match the operands";
    return false;
  }
  float alpha = static_cast<float>(attrFloat("alpha", 1.0));
  float beta = static_cast<float>(attrFloat("beta", 1.0));
  if (relu_.present())
    y.p = relu_.p; // the Relu's result, same type and size (reluEpilogueSteps)
  if (y.numel == 0)
    return true;
  // C as the bias epilogue: a row vector (one value per column of Y) added
  // once, the CPU backend's condition for oneDNN's bias.
  bool asBias = false;
  if (c.present() && K > 0 && beta == 1.0f && c.rank() <= 2) {
    std::vector<int64_t> cs = c.shape;
    cs.insert(cs.begin(), 2 - cs.size(), 1);
    asBias = cs[0] == 1 && cs[1] == N;
  }
  if (asBias) {
    beta = 0;
  } else if (c.present()) {
    // C broadcast into Y, then Y = alpha * AB + beta * Y (one rounding).
    std::vector<int64_t> cs = c.shape;
    if (cs.size() > 2) {
      error = "C must have rank <= 2: " + argString(c);
      return false;
    }
    cs.insert(cs.begin(), 2 - cs.size(), 1);
    if ((cs[0] != 1 && cs[0] != M) || (cs[1] != 1 && cs[1] != N)) {
      error = "C " + argString(c) + " does not broadcast to [" + std::to_string(M) + "," +
              std::to_string(N) + "]";
      return false;
    }
    CopyArgs cp;
    int64_t threads = addCopy({M, N}, {cs[0] == 1 ? 0 : cs[1], cs[1] == 1 ? 0 : 1}, {N, 1}, c.p,
                              y.p, static_cast<int>(y.elemBytes()), cp);
    kernel(KernelKind::Copy, cp, threads);
  } else {
    beta = 0;
  }
  if (K == 0) {
    // alpha * 0 + beta * C.
    if (!c.present()) {
      memset0(y.p, static_cast<size_t>(y.numel) * y.elemBytes());
    } else if (beta != 1.0f) {
      error = "Gemm with an empty inner dimension and beta != 1 is not supported on CUDA";
      return false;
    }
    return true;
  }
  GemmCall g = rowMajorGemm(M, N, K, a.p, ta ? M : K, ta, b.p, tb ? K : N, tb, y.p, N);
  g.abType = y.type;
  g.cType = y.type;
  g.alpha = alpha;
  g.beta = beta;
  if (asBias) {
    g.epilogue = GemmEpilogue::Bias;
    g.bias = c.p;
  }
  if (relu_.present())
    g.epilogue = asBias ? GemmEpilogue::BiasRelu : GemmEpilogue::Relu;
  gemm(g);
  return true;
}

} // namespace ampc::rt::cuda
