//===- CublasLt.cpp - GEMMs through cuBLASLt, opened at run time ----------===//
//
// See CublasLt.h. A planned GEMM keeps its matmul descriptor (compute type
// CUBLAS_COMPUTE_32F with fp32 scales, so fp16/bf16 operands run on tensor
// cores with fp32 accumulation and fp32 stays fp32, no TF32), its three
// layouts (C is D, in place) and the heuristic's first algorithm, all made
// once when the plan is loaded. Preferences tell the heuristic the real
// alignment of the operands (its default assumes 256 bytes, which arena
// offsets and per-batch GEMMs need not have) and, for fp16/bf16 results,
// exclude split-K reductions in the output type, which would round each
// partial sum, and any split-K when there is a bias (rounded twice).
//
//===----------------------------------------------------------------------===//

#include "CublasLt.h"

#include "ampc/rt/DynamicLibrary.h"

#include <cstdlib>

namespace ampc::rt::cuda {

std::vector<std::string> cublasLtCandidates() {
  if (const char *p = std::getenv("AMPC_CUBLASLT_PATH"); p && *p)
    return {p};
  return cudaLibraryCandidates("AMPC_CUBLASLT_PATH", "libcublasLt.so.13");
}

bool openCublasLt(const std::vector<std::string> &names, CublasLtApi &api, std::string &why) {
  api = CublasLtApi();
  std::string tried;
  void *lib = openFirstLibrary(names, tried);
  if (!lib) {
    why = "cuBLASLt not found (tried " + tried +
          "; AMPC_CUBLASLT_PATH names libcublasLt.so.13 when set)";
    return false;
  }
  const char *what = "libcublasLt";
  CublasLtApi a;
  if (!bindSymbol(lib, what, "cublasLtCreate", a.create, why) ||
      !bindSymbol(lib, what, "cublasLtDestroy", a.destroy, why) ||
      !bindSymbol(lib, what, "cublasLtMatmulDescCreate", a.descCreate, why) ||
      !bindSymbol(lib, what, "cublasLtMatmulDescSetAttribute", a.descSet, why) ||
      !bindSymbol(lib, what, "cublasLtMatmulDescDestroy", a.descDestroy, why) ||
      !bindSymbol(lib, what, "cublasLtMatrixLayoutCreate", a.layoutCreate, why) ||
      !bindSymbol(lib, what, "cublasLtMatrixLayoutSetAttribute", a.layoutSet, why) ||
      !bindSymbol(lib, what, "cublasLtMatrixLayoutDestroy", a.layoutDestroy, why) ||
      !bindSymbol(lib, what, "cublasLtMatmulPreferenceCreate", a.prefCreate, why) ||
      !bindSymbol(lib, what, "cublasLtMatmulPreferenceSetAttribute", a.prefSet, why) ||
      !bindSymbol(lib, what, "cublasLtMatmulPreferenceDestroy", a.prefDestroy, why) ||
      !bindSymbol(lib, what, "cublasLtMatmulAlgoGetHeuristic", a.heuristic, why) ||
      !bindSymbol(lib, what, "cublasLtMatmul", a.matmul, why))
    return false;
  api = a;
  why.clear();
  return true;
}

const char *cublasStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR:
    return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR:
    return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cudaDataType_t gemmDataType(uint8_t t) {
  switch (t) {
  case FusedElem::F16:
    return CUDA_R_16F;
  case FusedElem::BF16:
    return CUDA_R_16BF;
  default:
    return CUDA_R_32F;
  }
}

namespace {

cublasLtEpilogue_t ltEpilogue(GemmEpilogue e) {
  switch (e) {
  case GemmEpilogue::Bias:
    return CUBLASLT_EPILOGUE_BIAS;
  case GemmEpilogue::Relu:
    return CUBLASLT_EPILOGUE_RELU;
  case GemmEpilogue::BiasRelu:
    return CUBLASLT_EPILOGUE_RELU_BIAS;
  case GemmEpilogue::None:
    break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

} // namespace

LtGemms::~LtGemms() {
  for (Plan &p : plans_)
    release(p);
  if (handle_)
    api_.destroy(handle_);
}

void LtGemms::release(Plan &p) const {
  if (p.a)
    api_.layoutDestroy(p.a);
  if (p.b)
    api_.layoutDestroy(p.b);
  if (p.c)
    api_.layoutDestroy(p.c);
  if (p.desc)
    api_.descDestroy(p.desc);
  p = Plan();
}

bool LtGemms::open(std::string &why) {
  return api_.matmul || openCublasLt(cublasLtCandidates(), api_, why);
}

bool LtGemms::init(std::string &why) {
  if (!open(why))
    return false;
  cublasStatus_t s = api_.create(&handle_);
  if (s != CUBLAS_STATUS_SUCCESS) {
    handle_ = nullptr;
    why = std::string("cublasLtCreate: ") + cublasStatusString(s);
    return false;
  }
  return true;
}

bool LtGemms::build(const GemmCall &g, Plan &p, cublasLtMatmulPreference_t &pref,
                    std::string &why) {
  LtGemm d;
  if (!describeLtGemm(g, d, why))
    return false;
  // Every call checked; the first failure named.
  auto ok = [&](cublasStatus_t s, const char *call) {
    if (s != CUBLAS_STATUS_SUCCESS && why.empty())
      why = std::string(call) + ": " + cublasStatusString(s);
    return s == CUBLAS_STATUS_SUCCESS;
  };
  why.clear();
  auto layout = [&](const LtMatrix &m, cublasLtMatrixLayout_t &l) {
    if (!ok(api_.layoutCreate(&l, gemmDataType(m.type), m.rows, m.cols, m.ld),
            "cublasLtMatrixLayoutCreate"))
      return false;
    return m.batch == 1 ||
           (ok(api_.layoutSet(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &m.batch, sizeof m.batch),
               "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)") &&
            ok(api_.layoutSet(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &m.stride,
                              sizeof m.stride),
               "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)"));
  };
  int32_t ta = d.transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint32_t epilogue = ltEpilogue(d.epilogue);
  // The heuristic reads the bias pointer's alignment; the bias has C's type.
  int32_t biasType = gemmDataType(d.c.type);
  uint64_t ws = wsBytes_;
  // A split-K kernel with a bias epilogue adds the bias to the product
  // already rounded to the result's type (seen on an H200: a bf16 33x17x129
  // GEMM off by more than one ulp, exactly as that double rounding predicts),
  // so fp16/bf16 records with a bias take no split-K at all.
  uint32_t schemes = d.outputTypeReduction ? uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK)
                     : d.bias              ? uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE)
                                           : uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE) |
                                                 uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  bool built =
      ok(api_.descCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate") &&
      ok(api_.descSet(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
         "cublasLtMatmulDescSetAttribute(TRANSA)") &&
      ok(api_.descSet(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
         "cublasLtMatmulDescSetAttribute(TRANSB)") &&
      ok(api_.descSet(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
         "cublasLtMatmulDescSetAttribute(EPILOGUE)") &&
      (!d.bias ||
       (ok(api_.descSet(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &d.bias, sizeof d.bias),
           "cublasLtMatmulDescSetAttribute(BIAS_POINTER)") &&
        ok(api_.descSet(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType, sizeof biasType),
           "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)"))) &&
      layout(d.a, p.a) && layout(d.b, p.b) && layout(d.c, p.c) &&
      ok(api_.prefCreate(&pref), "cublasLtMatmulPreferenceCreate") &&
      ok(api_.prefSet(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
         "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)") &&
      ok(api_.prefSet(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes),
         "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)") &&
      ok(api_.prefSet(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &d.a.align,
                      sizeof d.a.align),
         "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)") &&
      ok(api_.prefSet(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &d.b.align,
                      sizeof d.b.align),
         "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)") &&
      ok(api_.prefSet(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &d.c.align,
                      sizeof d.c.align),
         "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)") &&
      ok(api_.prefSet(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d.c.align,
                      sizeof d.c.align),
         "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)");
  if (!built) {
    release(p);
    if (pref)
      api_.prefDestroy(pref);
    pref = nullptr;
  }
  return built;
}

bool LtGemms::describe(const GemmCall &g, std::string &why) {
  if (!api_.matmul) {
    why = "cuBLASLt is not open";
    return false;
  }
  Plan p;
  cublasLtMatmulPreference_t pref = nullptr;
  if (!build(g, p, pref, why))
    return false;
  release(p);
  api_.prefDestroy(pref);
  return true;
}

int32_t LtGemms::plan(const GemmCall &g) {
  Plan p;
  cublasLtMatmulPreference_t pref = nullptr;
  std::string why;
  if (!handle_ || !build(g, p, pref, why))
    return -1;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t s = api_.heuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  api_.prefDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found < 1 || result.state != CUBLAS_STATUS_SUCCESS ||
      result.workspaceSize > wsBytes_) {
    release(p);
    return -1;
  }
  p.algo = result.algo;
  p.wsBytes = result.workspaceSize;
  plans_.push_back(p);
  return static_cast<int32_t>(plans_.size() - 1);
}

cublasStatus_t LtGemms::run(const GemmCall &g, cudaStream_t stream) const {
  if (g.lt < 0 || g.lt >= planned())
    return CUBLAS_STATUS_NOT_INITIALIZED;
  const Plan &p = plans_[g.lt];
  return api_.matmul(handle_, p.desc, &g.alpha, g.A, p.a, g.B, p.b, &g.beta, g.C, p.c, g.C, p.c,
                     &p.algo, p.wsBytes ? ws_ : nullptr, p.wsBytes, stream);
}

} // namespace ampc::rt::cuda
