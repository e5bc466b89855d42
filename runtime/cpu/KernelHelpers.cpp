//===- KernelHelpers.cpp - Shared pieces of the CPU kernels ----------------===//

#include "KernelHelpers.h"

#include <cpuid.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AMPC_X86 1
#endif

namespace ampc::rt::cpu {

namespace {

/// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports knows no "f16c").
bool hasF16C() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

} // namespace

bool useAvx512() {
  static const bool yes = [] {
    const char *isa = std::getenv("AMPC_CPU_ISA");
    if (isa && std::strcmp(isa, "baseline") == 0)
      return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx2") && hasF16C() && __builtin_cpu_supports("fma");
  }();
  return yes;
}

std::string argString(const TensorArg &t) {
  std::string s = elemTypeName(t.type);
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "]";
}

int64_t product(const std::vector<int64_t> &v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < std::min(end, v.size()); ++i)
    p *= v[i];
  return p;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    s[d - 1] = s[d] * shape[d];
  return s;
}

bool isConstantInput(const StepContext &ctx, unsigned i) {
  if (!ctx.has(i))
    return false;
  int id = ctx.step.inputs(static_cast<int>(i));
  return ctx.plan.tensors(id).storage() == plan::CONSTANT;
}

std::vector<int64_t> readInts(const TensorArg &t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel));
  for (int64_t i = 0; i < t.numel; ++i)
    v[i] = loadInt(t, i);
  return v;
}

double readScalar(const TensorArg &t) {
  if (t.type == plan::F64)
    return static_cast<const double *>(t.data)[0];
  if (isFloatType(t.type))
    return loadFloat(t, 0);
  return static_cast<double>(loadInt(t, 0));
}

bool requireFloat(const StepContext &ctx, std::initializer_list<int> inputs,
                  std::initializer_list<int> outputs, std::string &error) {
  for (int i : inputs)
    if (ctx.has(i) && !isFloatType(ctx.inputs[i].type)) {
      error = "operand " + std::to_string(i) + " is " + argString(ctx.inputs[i]) +
              "; the CPU kernel takes float, float16 or bfloat16";
      return false;
    }
  for (int i : outputs)
    if (i < static_cast<int>(ctx.outputs.size()) && ctx.outputs[i].data &&
        !isFloatType(ctx.outputs[i].type)) {
      error = "result " + std::to_string(i) + " is " + argString(ctx.outputs[i]) +
              "; the CPU kernel produces float, float16 or bfloat16";
      return false;
    }
  return true;
}

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

namespace {

void halfToFloatPortable(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = math::halfToFloat(src[i]);
}

void floatToHalfPortable(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = math::floatToHalf(src[i]);
}

#ifdef AMPC_X86
// F16C conversions are exact IEEE conversions (round to nearest even towards
// fp16, subnormals kept); only NaN encodings differ from ElementMath.h, so
// blocks holding a NaN are redone with the scalar code.
__attribute__((target("avx2,f16c"))) void halfToFloatF16C(const uint16_t *src, float *dst,
                                                           int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i));
    // Exponent all ones: inf or NaN; redo NaNs with the payload-exact code.
    __m128i e = _mm_and_si128(h, _mm_set1_epi16(0x7C00));
    __m128i m = _mm_and_si128(h, _mm_set1_epi16(0x03FF));
    __m128i nan = _mm_andnot_si128(_mm_cmpeq_epi16(m, _mm_setzero_si128()),
                                   _mm_cmpeq_epi16(e, _mm_set1_epi16(0x7C00)));
    if (_mm_movemask_epi8(nan)) {
      halfToFloatPortable(src + i, dst + i, 8);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  halfToFloatPortable(src + i, dst + i, n - i);
}

__attribute__((target("avx2,f16c"))) void floatToHalfF16C(const float *src, uint16_t *dst,
                                                           int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
      floatToHalfPortable(src + i, dst + i, 8);
      continue;
    }
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i), h);
  }
  floatToHalfPortable(src + i, dst + i, n - i);
}

bool haveF16C() {
  // CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports knows no "f16c").
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  }();
  return yes;
}
#endif

void halfToFloatBlock(const uint16_t *src, float *dst, int64_t n) {
#ifdef AMPC_X86
  if (haveF16C())
    return halfToFloatF16C(src, dst, n);
#endif
  halfToFloatPortable(src, dst, n);
}

void floatToHalfBlock(const float *src, uint16_t *dst, int64_t n) {
#ifdef AMPC_X86
  if (haveF16C())
    return floatToHalfF16C(src, dst, n);
#endif
  floatToHalfPortable(src, dst, n);
}

// bf16: branch-free integer code that the compiler vectorizes.
void bf16ToFloatBlock(const uint16_t *src, float *dst, int64_t n) {
  uint32_t *d = reinterpret_cast<uint32_t *>(dst);
  for (int64_t i = 0; i < n; ++i)
    d[i] = static_cast<uint32_t>(src[i]) << 16;
}

inline void floatToBf16Portable(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = math::floatToBFloat16(src[i]);
}

#ifdef AMPC_X86
// The same integer code vectorized for AVX-512BW (unsigned compares and the
// 32- to 16-bit narrowing SSE2 lacks): the same bits for all 2^32 inputs,
// about 3x faster (the bf16 results of BatchNormalization and its gradient).
__attribute__((target("avx512f,avx512bw"))) void floatToBf16Avx512(const float *src,
                                                                   uint16_t *dst, int64_t n) {
  floatToBf16Portable(src, dst, n);
}
#endif

void floatToBf16Block(const float *src, uint16_t *dst, int64_t n) {
#ifdef AMPC_X86
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (avx512)
    return floatToBf16Avx512(src, dst, n);
#endif
  floatToBf16Portable(src, dst, n);
}

} // namespace

void toFloat(plan::ElemType t, const void *src, float *dst, int64_t n) {
  switch (t) {
  case plan::F32:
    if (src != dst)
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  case plan::F16:
    return halfToFloatBlock(static_cast<const uint16_t *>(src), dst, n);
  case plan::BF16:
    return bf16ToFloatBlock(static_cast<const uint16_t *>(src), dst, n);
  default: {
    TensorArg a;
    a.data = const_cast<void *>(src);
    a.type = t;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = loadFloat(a, i);
  }
  }
}

void fromFloat(plan::ElemType t, const float *src, void *dst, int64_t n) {
  switch (t) {
  case plan::F32:
    if (src != dst)
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  case plan::F16:
    return floatToHalfBlock(src, static_cast<uint16_t *>(dst), n);
  case plan::BF16:
    return floatToBf16Block(src, static_cast<uint16_t *>(dst), n);
  default: {
    TensorArg a;
    a.data = dst;
    a.type = t;
    for (int64_t i = 0; i < n; ++i)
      storeFloat(a, i, src[i]);
  }
  }
}

void parallelToFloat(ThreadPool &pool, const TensorArg &t, float *dst) {
  pool.parallelFor(t.numel, 1 << 14, [&](int64_t b, int64_t e, int) {
    loadFloats(t, b, e - b, dst + b);
  });
}

void parallelFromFloat(ThreadPool &pool, const float *src, const TensorArg &t) {
  pool.parallelFor(t.numel, 1 << 14, [&](int64_t b, int64_t e, int) {
    storeFloats(t, b, e - b, src + b);
  });
}

//===----------------------------------------------------------------------===//
// Sums
//===----------------------------------------------------------------------===//

namespace {
inline float combine16(float *acc) {
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j)
      acc[j] += acc[j + w];
  return acc[0];
}
} // namespace

float maxFloats(const float *x, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float lane[16];
  for (float &l : lane)
    l = kNegInf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  for (int j = 0; i < n; ++i, ++j)
    lane[j] = x[i] > lane[j] ? x[i] : lane[j];
  float m = kNegInf;
  for (float l : lane)
    m = l > m ? l : m;
  return m;
}

float sumFloats(const float *p, int64_t n) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      acc[j] += p[i + j];
  for (int j = 0; i < n; ++i, ++j)
    acc[j] += p[i];
  return combine16(acc);
}

float dotFloats(const float *p, const float *q, int64_t n) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      acc[j] += p[i + j] * q[i + j];
  for (int j = 0; i < n; ++i, ++j)
    acc[j] += p[i] * q[i];
  return combine16(acc);
}

float sumSquaredDiff(const float *p, float c, int64_t n) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      float d = p[i + j] - c;
      acc[j] += d * d;
    }
  for (int j = 0; i < n; ++i, ++j) {
    float d = p[i] - c;
    acc[j] += d * d;
  }
  return combine16(acc);
}

//===----------------------------------------------------------------------===//
// Scratch
//===----------------------------------------------------------------------===//

std::shared_ptr<SharedScratch> SharedScratch::of(ThreadPool &pool) {
  static std::mutex mutex;
  static std::map<ThreadPool *, std::weak_ptr<SharedScratch>> all;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = all.begin(); it != all.end();)
    it = it->second.expired() ? all.erase(it) : std::next(it);
  std::weak_ptr<SharedScratch> &w = all[&pool];
  std::shared_ptr<SharedScratch> s = w.lock();
  if (!s) {
    s = std::make_shared<SharedScratch>();
    w = s;
  }
  return s;
}

SharedScratch::~SharedScratch() { std::free(data_); }

void SharedScratch::reserve(size_t bytes) {
  if (bytes <= size_)
    return;
  size_t rounded = (bytes + 4095) / 4096 * 4096;
  void *p = std::aligned_alloc(64, rounded);
  if (!p)
    return; // the caller checks data() / size through the kernel's own test
  std::free(data_);
  data_ = static_cast<uint8_t *>(p);
  size_ = rounded;
}

//===----------------------------------------------------------------------===//
// Windows
//===----------------------------------------------------------------------===//

bool windowGeometry(const StepContext &ctx, const std::vector<int64_t> &inSp,
                    const std::vector<int64_t> &outSp, const std::vector<int64_t> &kernel,
                    WindowGeometry &w, std::string &error) {
  size_t s = kernel.size();
  if (inSp.size() != s || outSp.size() != s) {
    error = "kernel_shape does not match the spatial rank";
    return false;
  }
  w.kernel = kernel;
  w.inSp = inSp;
  w.outSp = outSp;
  w.strides = ctx.attrInts("strides", std::vector<int64_t>(s, 1));
  w.dilations = ctx.attrInts("dilations", std::vector<int64_t>(s, 1));
  w.pads = ctx.attrInts("pads", std::vector<int64_t>(2 * s, 0));
  if (w.strides.size() != s || w.dilations.size() != s || w.pads.size() != 2 * s) {
    error = "strides, dilations or pads do not match the spatial rank";
    return false;
  }
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  w.padBegin.assign(w.pads.begin(), w.pads.begin() + s);
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < s; ++i) {
      int64_t eff = (kernel[i] - 1) * w.dilations[i] + 1;
      int64_t total = std::max<int64_t>(0, (outSp[i] - 1) * w.strides[i] + eff - inSp[i]);
      w.padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    }
  } else if (autoPad == "VALID") {
    std::fill(w.padBegin.begin(), w.padBegin.end(), 0);
  }
  for (size_t i = 0; i < s; ++i)
    if (w.strides[i] <= 0 || w.dilations[i] <= 0 || kernel[i] <= 0) {
      error = "strides, dilations and kernel_shape must be positive";
      return false;
    }
  return true;
}

} // namespace ampc::rt::cpu
