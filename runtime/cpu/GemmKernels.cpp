//===- GemmKernels.cpp - MatMul and Gemm through oneDNN --------------------===//
//
// Both ops become one oneDNN matmul primitive, created with the kernel:
// - fp32: fp32 operands, fp32 result;
// - bf16: the native bf16 path (bf16 operands, fp32 accumulation, the result
//   rounded to bf16 to nearest even by oneDNN) where the CPU multiplies bf16
//   faster than fp32 (nativeBf16Compute), otherwise as fp16;
// - fp16: operands converted to fp32 (exact) in scratch, an fp32 GEMM, the
//   result rounded to fp16 to nearest even.
// MatMul broadcasts batch dimensions (numpy rules, 1-D operands promoted);
// when B has no batch of its own, A's batch is folded into M (one large GEMM).
// Gemm's transA/transB are strides of the operand descriptors; C joins as the
// primitive's bias when it is a row vector with alpha = beta = 1, otherwise an
// fp32 epilogue computes alpha * AB + beta * C before the single rounding.
// A small transposed A of a native bf16 GEMM (a weight gradient's dY^T) is
// transposed into scratch first (copyTransposedA).
//
//===----------------------------------------------------------------------===//

#include "DnnlHelpers.h"

#include "ampc/rt/MatMulShape.h"

#include <cpuid.h>
#include <cstdlib>
#include <cstring>

namespace ampc::rt::cpu {

bool nativeBf16Compute() {
  static const bool native = [] {
    if (const char *v = std::getenv("AMPC_CPU_BF16")) {
      if (std::strcmp(v, "native") == 0)
        return true;
      if (std::strcmp(v, "fp32") == 0)
        return false;
    }
    unsigned a = 0, b = 0, c = 0, d = 0;
    // CPUID leaf 7: EDX bit 22 is AMX-BF16.
    bool amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22));
    unsigned vendor[4] = {0, 0, 0, 0};
    __get_cpuid(0, &a, &vendor[0], &vendor[2], &vendor[1]);
    bool amd = std::memcmp(vendor, "AuthenticAMD", 12) == 0;
    return amx || (amd && __builtin_cpu_supports("avx512bf16"));
  }();
  return native;
}

bool copyTransposedA(plan::ElemType type, int64_t aBytes) {
  static const bool enabled = [] {
    const char *v = std::getenv("AMPC_CPU_GEMM_COPY_A");
    return !(v && std::strcmp(v, "off") == 0);
  }();
  constexpr int64_t kMaxCopyBytes = 1 << 20;
  return enabled && type == plan::BF16 && nativeBf16Compute() && aBytes <= kMaxCopyBytes;
}

namespace {

using dt = dnnl::memory::data_type;

class GemmKernel : public Kernel {
public:
  // Problem description filled by the factories.
  TensorArg a, b, c, y;
  plan::ElemType type = plan::F32;
  std::vector<int64_t> aDims, bDims, yDims; // oneDNN dims (batch..., rows, cols)
  std::vector<int64_t> aStrides, bStrides;
  /// The result's strides when it is written through them (a transposed
  /// result: TransposedResult.h); empty: dense.
  std::vector<int64_t> yStrides;
  bool aTransposed = false; // aStrides exchange A's last two dims
  int64_t M = 0, N = 0, K = 0;
  // Gemm epilogue.
  bool epilogue = false, cAsBias = false;
  float alpha = 1, beta = 1;
  int64_t cRowStride = 0, cColStride = 0; // C broadcast to [M, N]

  GemmKernel(ThreadPool &pool) : pool_(pool), stream_(dnnlEngine()) {
    scratch_ = SharedScratch::of(pool);
  }

  bool prepare(std::string &error) {
    call_ = DnnlCall(); // prepare may run again after a refusal (createMatMul)
    bool viaF32 = computeViaF32(type);
    dt cdt = dnnlComputeType(type);
    // The GEMM's destination: y itself unless fp16 storage or an epilogue on
    // a bf16 result needs fp32.
    dstInScratch_ = viaF32 || (epilogue && type != plan::F32);
    ScratchLayout layout;
    if (viaF32) {
      offA_ = layout.add<float>(a.numel);
      offB_ = layout.add<float>(b.numel);
      if (cAsBias)
        offC_ = layout.add<float>(c.numel);
    }
    if (dstInScratch_)
      offY_ = layout.add<float>(y.numel);
    copyA_ = aTransposed && aDims.size() == 2 &&
             copyTransposedA(type, a.numel * static_cast<int64_t>(sizeof(uint16_t)));
    try {
      dnnl::memory::desc aMd(toDims(aDims), cdt, toDims(aStrides));
      if (copyA_)
        aMd = prepareCopyA(aMd, layout);
      dnnl::memory::desc bMd(toDims(bDims), cdt, toDims(bStrides));
      dnnl::memory::desc yMd = yStrides.empty()
                                   ? plainDesc(yDims, dstInScratch_ ? dt::f32 : cdt)
                                   : dnnl::memory::desc(toDims(yDims), cdt, toDims(yStrides));
      dnnl::matmul::primitive_desc pd;
      dnnl::memory::desc biasMd;
      if (cAsBias) {
        std::vector<int64_t> biasDims(yDims.size(), 1);
        biasDims.back() = N;
        biasMd = plainDesc(biasDims, cdt);
        pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(aMd, bMd, biasMd, yMd), dnnlAttr(),
                                          dnnlEngine(), /*allow_empty=*/true);
        if (!pd) { // fall back to the epilogue
          cAsBias = false;
          epilogue = true;
          if (!dstInScratch_ && type != plan::F32) {
            dstInScratch_ = true;
            offY_ = layout.add<float>(y.numel);
            yMd = plainDesc(yDims, dt::f32);
          }
        }
      }
      if (!cAsBias)
        pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(aMd, bMd, yMd), dnnlAttr(),
                                          dnnlEngine());
      size_t padBytes = pd.scratchpad_desc().get_size();
      offPad_ = layout.add<uint8_t>(static_cast<int64_t>(padBytes));
      call_.prim = dnnl::matmul(pd);
      auto bind = [&](int arg, const dnnl::memory::desc &md, void *data, size_t scratchOff,
                      bool inScratch) {
        call_.args[arg] = dnnl::memory(md, dnnlEngine(), inScratch ? nullptr : data);
        if (inScratch)
          call_.scratchArgs.push_back({arg, scratchOff});
      };
      bind(DNNL_ARG_SRC, aMd, a.data, copyA_ ? offCopyA_ : offA_, viaF32 || copyA_);
      bind(DNNL_ARG_WEIGHTS, bMd, b.data, offB_, viaF32);
      bind(DNNL_ARG_DST, yMd, y.data, offY_, dstInScratch_);
      if (cAsBias)
        bind(DNNL_ARG_BIAS, biasMd, c.data, offC_, viaF32);
      bind(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), nullptr, offPad_, true);
    } catch (const dnnl::error &e) {
      error = std::string("oneDNN matmul: ") + e.what();
      return false;
    }
    scratch_->reserve(layout.size());
    if (layout.size() && !scratch_->data()) {
      error = "cannot allocate scratch memory";
      return false;
    }
    return true;
  }

  void run() override {
    uint8_t *base = scratch_->data();
    if (computeViaF32(type)) {
      parallelToFloat(pool_, a, at<float>(base, offA_));
      parallelToFloat(pool_, b, at<float>(base, offB_));
      if (cAsBias)
        parallelToFloat(pool_, c, at<float>(base, offC_));
    }
    omp_set_num_threads(pool_.size());
    if (copyA_)
      copyACall_.execute(stream_, base);
    call_.execute(stream_, base);
    finish(base);
  }

private:
  /// Sets up the reorder of the transposed A (`stridedMd`) into a plain
  /// copy in scratch; returns the copy's descriptor, the GEMM's A.
  dnnl::memory::desc prepareCopyA(const dnnl::memory::desc &stridedMd, ScratchLayout &layout) {
    dnnl::memory::desc plainMd = plainDesc(aDims, stridedMd.data_type());
    auto pd =
        dnnl::reorder::primitive_desc(dnnlEngine(), stridedMd, dnnlEngine(), plainMd, dnnlAttr());
    offCopyA_ = layout.add<uint16_t>(a.numel);
    size_t padOff = layout.add<uint8_t>(static_cast<int64_t>(pd.scratchpad_desc().get_size()));
    copyACall_.prim = dnnl::reorder(pd);
    copyACall_.args[DNNL_ARG_FROM] = dnnl::memory(stridedMd, dnnlEngine(), a.data);
    copyACall_.args[DNNL_ARG_TO] = dnnl::memory(plainMd, dnnlEngine(), nullptr);
    copyACall_.args[DNNL_ARG_SCRATCHPAD] =
        dnnl::memory(pd.scratchpad_desc(), dnnlEngine(), nullptr);
    copyACall_.scratchArgs = {{DNNL_ARG_TO, offCopyA_}, {DNNL_ARG_SCRATCHPAD, padOff}};
    return plainMd;
  }

  /// Epilogue and conversion of the fp32 result to the storage type.
  void finish(uint8_t *base) {
    if (!epilogue) {
      if (dstInScratch_)
        parallelFromFloat(pool_, at<float>(base, offY_), y);
      return;
    }
    float *acc = dstInScratch_ ? at<float>(base, offY_) : y.as<float>();
    pool_.parallelFor(M, std::max<int64_t>(1, 4096 / std::max<int64_t>(N, 1)),
                      [&](int64_t r0, int64_t r1, int) {
                        float cRow[256];
                        for (int64_t i = r0; i < r1; ++i) {
                          float *row = acc + i * N;
                          for (int64_t j0 = 0; j0 < N; j0 += 256) {
                            int64_t n = std::min<int64_t>(256, N - j0);
                            if (c.data) {
                              for (int64_t j = 0; j < n; ++j)
                                cRow[j] = loadFloat(c, i * cRowStride + (j0 + j) * cColStride);
                              for (int64_t j = 0; j < n; ++j)
                                row[j0 + j] = alpha * row[j0 + j] + beta * cRow[j];
                            } else {
                              for (int64_t j = 0; j < n; ++j)
                                row[j0 + j] = alpha * row[j0 + j];
                            }
                          }
                          if (dstInScratch_)
                            storeFloats(y, i * N, N, row);
                        }
                      });
  }

  ThreadPool &pool_;
  std::shared_ptr<SharedScratch> scratch_;
  dnnl::stream stream_;
  DnnlCall call_, copyACall_;
  bool dstInScratch_ = false, copyA_ = false;
  size_t offA_ = 0, offB_ = 0, offC_ = 0, offY_ = 0, offPad_ = 0, offCopyA_ = 0;
};

bool sameFloatTypes(const StepContext &ctx, std::initializer_list<int> inputs,
                    std::string &error) {
  if (!requireFloat(ctx, inputs, {0}, error))
    return false;
  plan::ElemType t = ctx.outputs[0].type;
  for (int i : inputs)
    if (ctx.has(i) && ctx.inputs[i].type != t) {
      error = "operand types differ: " + argString(ctx.inputs[i]) + " and result " +
              argString(ctx.outputs[0]);
      return false;
    }
  return true;
}

/// `shape` with its last two dimensions exchanged (a transposed operand).
std::vector<int64_t> swapLastTwo(std::vector<int64_t> shape) {
  if (shape.size() >= 2)
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return shape;
}

/// MatMul; transA / transB (set by the lowering when a Transpose of the last
/// two axes fed the operand) say the operand is stored transposed: oneDNN
/// reads it through exchanged strides instead of a copy.
std::unique_ptr<Kernel> createMatMul(const StepContext &ctx, std::string &error) {
  if (ctx.inputs.size() < 2 || !ctx.has(0) || !ctx.has(1) || ctx.outputs.empty()) {
    error = "MatMul takes two operands";
    return nullptr;
  }
  if (!sameFloatTypes(ctx, {0, 1}, error))
    return nullptr;
  auto k = std::make_unique<GemmKernel>(ctx.pool);
  k->a = ctx.inputs[0];
  k->b = ctx.inputs[1];
  k->y = ctx.outputs[0];
  k->type = k->y.type;
  bool ta = ctx.attrInt("transA", 0) != 0, tb = ctx.attrInt("transB", 0) != 0;
  if ((ta && k->a.rank() < 2) || (tb && k->b.rank() < 2)) {
    error = "a transposed MatMul operand needs rank 2 or more";
    return nullptr;
  }
  std::vector<int64_t> aShape = ta ? swapLastTwo(k->a.shape) : k->a.shape;
  std::vector<int64_t> bShape = tb ? swapLastTwo(k->b.shape) : k->b.shape;
  MatMulShape shape;
  if (!matMulShape(aShape, bShape, k->y.numel, argString(k->a), argString(k->b),
                   argString(k->y), shape, error))
    return nullptr;
  int64_t M = shape.M, K = shape.K, N = shape.N;
  std::vector<int64_t> &ba = shape.batchA, &bb = shape.batchB, &batch = shape.batch;
  k->M = M;
  k->N = N;
  k->K = K;
  if (k->y.numel == 0)
    return std::make_unique<LambdaKernel>([] {});
  if (K == 0) {
    TensorArg y = k->y;
    return std::make_unique<LambdaKernel>([y] {
      for (int64_t i = 0; i < y.numel; ++i)
        storeFloat(y, i, 0.0f);
    });
  }
  // Strides of an operand of logical dims (batch..., r, c), stored as given
  // or with its last two dimensions exchanged.
  auto strides = [](const std::vector<int64_t> &dims, bool transposed) {
    return transposed ? swapLastTwo(stridesOf(swapLastTwo(dims))) : stridesOf(dims);
  };
  bool bBatched = product(bb) != 1;
  if (!bBatched && !(ta && product(ba) != 1)) {
    // Fold A's batch into the rows: one 2-D GEMM.
    int64_t rows = product(ba) * M;
    k->aDims = {rows, K};
    k->bDims = {K, N};
    k->yDims = {rows, N};
    k->M = rows;
  } else {
    ba.push_back(M);
    ba.push_back(K);
    bb.push_back(K);
    bb.push_back(N);
    batch.push_back(M);
    batch.push_back(N);
    k->aDims = ba;
    k->bDims = bb;
    k->yDims = batch;
  }
  k->aStrides = strides(k->aDims, ta);
  k->bStrides = strides(k->bDims, tb);
  k->aTransposed = ta;
  // Offered the Transpose's result: written through strides when the result
  // keeps its own dims (no batch folded into the rows) and oneDNN writes
  // the storage type directly.
  if (ctx.transposedTaken && !computeViaF32(k->type) && k->yDims == ctx.outputs[0].shape &&
      ctx.transposedStrides.size() == k->yDims.size()) {
    k->y = ctx.transposed;
    k->yStrides = ctx.transposedStrides;
    std::string why;
    if (k->prepare(why)) {
      *ctx.transposedTaken = true;
      return k;
    }
    k->y = ctx.outputs[0];
    k->yStrides.clear();
  }
  if (!k->prepare(error))
    return nullptr;
  return k;
}

std::unique_ptr<Kernel> createGemm(const StepContext &ctx, std::string &error) {
  if (ctx.inputs.size() < 2 || !ctx.has(0) || !ctx.has(1) || ctx.outputs.empty()) {
    error = "Gemm takes two or three operands";
    return nullptr;
  }
  if (!sameFloatTypes(ctx, {0, 1, 2}, error))
    return nullptr;
  const TensorArg &a = ctx.inputs[0], &b = ctx.inputs[1];
  if (a.rank() != 2 || b.rank() != 2) {
    error = "Gemm operands must be matrices: " + argString(a) + ", " + argString(b);
    return nullptr;
  }
  bool ta = ctx.attrInt("transA", 0) != 0, tb = ctx.attrInt("transB", 0) != 0;
  int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
  int64_t N = tb ? b.shape[0] : b.shape[1];
  if ((tb ? b.shape[1] : b.shape[0]) != K) {
    error = "inner dimensions differ: " + argString(a) + " x " + argString(b);
    return nullptr;
  }
  const TensorArg &y = ctx.outputs[0];
  if (y.numel != M * N) {
    error = "result " + argString(y) + " does not match the operands";
    return nullptr;
  }
  float alpha = static_cast<float>(ctx.attrFloat("alpha", 1.0));
  float beta = static_cast<float>(ctx.attrFloat("beta", 1.0));
  TensorArg c;
  int64_t cRow = 0, cCol = 0;
  if (ctx.has(2)) {
    c = ctx.inputs[2];
    // Broadcast of C (rank <= 2) to [M, N].
    std::vector<int64_t> cs = c.shape;
    if (cs.size() > 2) {
      error = "C must have rank <= 2: " + argString(c);
      return nullptr;
    }
    cs.insert(cs.begin(), 2 - cs.size(), 1);
    if ((cs[0] != 1 && cs[0] != M) || (cs[1] != 1 && cs[1] != N)) {
      error = "C " + argString(c) + " does not broadcast to [" + std::to_string(M) + "," +
              std::to_string(N) + "]";
      return nullptr;
    }
    cRow = cs[0] == 1 ? 0 : cs[1];
    cCol = cs[1] == 1 ? 0 : 1;
  }
  if (y.numel == 0)
    return std::make_unique<LambdaKernel>([] {});
  if (K == 0) {
    return std::make_unique<LambdaKernel>([=] {
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
          storeFloat(y, i * N + j, c.data ? beta * loadFloat(c, i * cRow + j * cCol) : 0.0f);
    });
  }
  auto k = std::make_unique<GemmKernel>(ctx.pool);
  k->a = a;
  k->b = b;
  k->c = c;
  k->y = y;
  k->type = y.type;
  k->M = M;
  k->N = N;
  k->K = K;
  k->aDims = {M, K};
  k->aStrides = ta ? std::vector<int64_t>{1, M} : std::vector<int64_t>{K, 1};
  k->aTransposed = ta;
  k->bDims = {K, N};
  k->bStrides = tb ? std::vector<int64_t>{1, K} : std::vector<int64_t>{N, 1};
  k->yDims = {M, N};
  k->alpha = alpha;
  k->beta = beta;
  k->cRowStride = cRow;
  k->cColStride = cCol;
  bool rowVector = c.data && cRow == 0 && (cCol == 1 || N == 1) && c.numel == N;
  if (c.data && rowVector && alpha == 1.0f && beta == 1.0f)
    k->cAsBias = true;
  else if (c.data || alpha != 1.0f)
    k->epilogue = true;
  if (!k->prepare(error))
    return nullptr;
  return k;
}

} // namespace

void registerGemmKernels() {
  registerKernel("MatMul", createMatMul);
  registerKernel("Gemm", createGemm);
}

} // namespace ampc::rt::cpu
