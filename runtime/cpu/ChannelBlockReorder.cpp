//===- ChannelBlockReorder.cpp - NCHW <-> channel blocks of 16 -----------===//
//
// One block of 16 channels of one image is a 16 x S matrix in the plain
// layout (a row per channel) and an S x 16 one in the blocked layout (a row
// per position), so each direction is a transpose. 16-bit elements (bf16):
// pairs of rows interleaved make 32-bit units, which two 8 x 8 transposes
// of 32-bit elements put in place (AVX2). 32-bit elements (fp32): one
// 16 x 16 transpose in AVX-512 registers, a 64-byte row in and out each.
// Positions past the last whole tile of 16 move one by one.
//
//===----------------------------------------------------------------------===//

#include "ChannelBlockReorder.h"
#include "KernelHelpers.h"

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AMPC_X86 1
#endif

namespace ampc::rt::cpu {

namespace {

using tag = dnnl::memory::format_tag;

constexpr int64_t kBlock = 16;

template <typename T>
void transposeScalar(const T *src, ptrdiff_t srcStride, T *dst, ptrdiff_t dstStride, int64_t rows,
                     int64_t cols) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      dst[j * dstStride + i] = src[i * srcStride + j];
}

#ifdef AMPC_X86
#define AMPC_AVX2 __attribute__((target("avx2")))
// Inlined and unrolled at any optimization level: the tiles must stay in
// registers (at -O2 GCC kept the loops and spilled them: no faster than
// oneDNN).
#define AMPC_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

/// Transposes the 8 x 8 matrix of 32-bit elements held one row a register.
AMPC_AVX2_INLINE void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

/// The 16 x 16 tile at `src` (16-bit elements) transposed into registers:
/// lo[k] holds destination row colLo[k], hi[k] row colHi[k].
AMPC_AVX2_INLINE void transpose16x16(const uint16_t *src, ptrdiff_t ss, __m256 lo[8],
                                     __m256 hi[8]) {
  __m256i r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i * ss));
    // Rows 2i and 2i+1 interleaved: a 32-bit unit per column, columns 0-3
    // and 8-11 in lo (unpack works within 128-bit lanes), 4-7 and 12-15 in hi.
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    lo[i] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]));
    hi[i] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]));
  }
  transpose8x8(lo);
  transpose8x8(hi);
}

constexpr int kColLo[8] = {0, 1, 2, 3, 8, 9, 10, 11};
constexpr int kColHi[8] = {4, 5, 6, 7, 12, 13, 14, 15};

/// dst[j * ds + i] = src[i * ss + j] for i < 16, j < 16 * tiles (16-bit
/// elements; tiles 1 or 2: two tiles write each destination row's 64 bytes
/// back to back, which the strided rows of the plain layout want).
template <int Tiles>
AMPC_AVX2_INLINE void tile16(const uint16_t *src, ptrdiff_t ss, uint16_t *dst, ptrdiff_t ds) {
  __m256 lo[Tiles][8], hi[Tiles][8];
#pragma GCC unroll 16
  for (int h = 0; h < Tiles; ++h)
    transpose16x16(src + h * 16 * ss, ss, lo[h], hi[h]);
#pragma GCC unroll 16
  for (int k = 0; k < 8; ++k)
#pragma GCC unroll 2
    for (int h = 0; h < Tiles; ++h) {
      _mm256_storeu_ps(reinterpret_cast<float *>(dst + kColLo[k] * ds + h * 16), lo[h][k]);
      _mm256_storeu_ps(reinterpret_cast<float *>(dst + kColHi[k] * ds + h * 16), hi[h][k]);
    }
}

/// Block of 16-bit elements: 16 x S (plain) <-> S x 16 (blocked).
AMPC_AVX2_INLINE void block16(const uint16_t *src, uint16_t *dst, int64_t S, bool toBlocked) {
  int64_t p = 0;
  if (toBlocked) {
    for (; p + 16 <= S; p += 16)
      tile16<1>(src + p, S, dst + p * kBlock, kBlock);
    transposeScalar(src + p, S, dst + p * kBlock, kBlock, kBlock, S - p);
    return;
  }
  for (; p + 32 <= S; p += 32)
    tile16<2>(src + p * kBlock, kBlock, dst + p, S);
  for (; p + 16 <= S; p += 16)
    tile16<1>(src + p * kBlock, kBlock, dst + p, S);
  transposeScalar(src + p * kBlock, kBlock, dst + p, S, S - p, kBlock);
}

#define AMPC_AVX512_INLINE                                                                         \
  __attribute__((target("avx2,avx512f,avx512vl,avx512bw"), always_inline)) inline

// GCC 12 reports the AVX-512 intrinsics' own undefined merge operand
// (_mm512_undefined_ps) as "may be used uninitialized" once inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/// Transposes the 16 x 16 matrix of 32-bit elements held one row a register
/// (within 128-bit lanes, then across them).
AMPC_AVX512_INLINE void transpose16x16(__m512 r[16]) {
  __m512 t[16], u[16], v[16];
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 2; ++i)
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      v[8 * i + m] = _mm512_shuffle_f32x4(u[8 * i + m], u[8 * i + m + 4], 0x88);
      v[8 * i + m + 4] = _mm512_shuffle_f32x4(u[8 * i + m], u[8 * i + m + 4], 0xDD);
    }
#pragma GCC unroll 16
  for (int m = 0; m < 8; ++m) {
    r[m] = _mm512_shuffle_f32x4(v[m], v[m + 8], 0x88);
    r[m + 8] = _mm512_shuffle_f32x4(v[m], v[m + 8], 0xDD);
  }
}

/// dst[j * ds + i] = src[i * ss + j] for i, j < 16 (32-bit elements).
AMPC_AVX512_INLINE void tile32(const float *src, ptrdiff_t ss, float *dst, ptrdiff_t ds) {
  __m512 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = _mm512_loadu_ps(src + i * ss);
  transpose16x16(r);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    _mm512_storeu_ps(dst + i * ds, r[i]);
}

/// Block of 32-bit elements: 16 x S (plain) <-> S x 16 (blocked).
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) void
block32Avx512(const float *src, float *dst, int64_t S, bool toBlocked) {
  int64_t p = 0;
  if (toBlocked) {
    for (; p + 16 <= S; p += 16)
      tile32(src + p, S, dst + p * kBlock, kBlock);
    transposeScalar(src + p, S, dst + p * kBlock, kBlock, kBlock, S - p);
    return;
  }
  for (; p + 16 <= S; p += 16)
    tile32(src + p * kBlock, kBlock, dst + p, S);
  transposeScalar(src + p * kBlock, kBlock, dst + p, S, S - p, kBlock);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

AMPC_AVX2 void block16Avx2(const uint16_t *src, uint16_t *dst, int64_t S, bool toBlocked) {
  block16(src, dst, S, toBlocked);
}
/// The same code where AVX-512VL gives it 32 vector registers instead of 16:
/// two tiles of 16 x 16 no longer spill to the stack.
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) void
block16Avx512(const uint16_t *src, uint16_t *dst, int64_t S, bool toBlocked) {
  block16(src, dst, S, toBlocked);
}

bool haveAvx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#else
bool haveAvx2() { return false; }
#endif

/// oneDNN's tags for ranks 3 to 5: channels in blocks of 16, and channels last.
bool blockedTags(size_t rank, tag &blocked, tag &channelsLast) {
  switch (rank) {
  case 3:
    blocked = tag::aBc16b, channelsLast = tag::acb;
    return true;
  case 4:
    blocked = tag::aBcd16b, channelsLast = tag::acdb;
    return true;
  case 5:
    blocked = tag::aBcde16b, channelsLast = tag::acdeb;
    return true;
  default:
    return false;
  }
}

/// Whether `md` is the plain (row-major) layout of its dims.
bool isPlain(const dnnl::memory::desc &md) {
  dnnl::memory::dims dims = md.dims();
  dnnl::memory::dims strides(dims.size());
  int64_t s = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    strides[d] = s;
    s *= dims[d];
  }
  return md == dnnl::memory::desc(dims, md.data_type(), strides);
}

/// Whether `md` holds channels in blocks of 16 (or channels last, the same
/// bytes, with 16 channels).
bool isChannelBlocked(const dnnl::memory::desc &md) {
  dnnl::memory::dims dims = md.dims();
  tag blocked, channelsLast;
  if (!blockedTags(dims.size(), blocked, channelsLast) || dims[1] % kBlock)
    return false;
  if (md == dnnl::memory::desc(dims, md.data_type(), blocked))
    return true;
  return dims[1] == kBlock && md == dnnl::memory::desc(dims, md.data_type(), channelsLast);
}

} // namespace

bool ChannelBlockReorder::available(size_t elemBytes) {
  // 16-bit elements; 32-bit ones only with AVX-512 (in AVX2 registers the
  // fp32 transposes were no faster than oneDNN's reorder, docs/benchmarks.md).
  return haveAvx2() && (elemBytes == 2 || (elemBytes == 4 && useAvx512()));
}

dnnl::memory::desc ChannelBlockReorder::blockedDesc(const dnnl::memory::dims &dims,
                                                    dnnl::memory::data_type type) {
  tag blocked = tag::undef, channelsLast = tag::undef;
  blockedTags(dims.size(), blocked, channelsLast);
  return dnnl::memory::desc(dims, type, blocked);
}

bool ChannelBlockReorder::sameBytes(const dnnl::memory::desc &a, const dnnl::memory::desc &b) {
  if (a == b)
    return true;
  return a.dims() == b.dims() && a.data_type() == b.data_type() && isChannelBlocked(a) &&
         isChannelBlocked(b);
}

std::optional<ChannelBlockReorder> ChannelBlockReorder::match(const dnnl::memory::desc &src,
                                                              const dnnl::memory::desc &dst) {
  if (src.dims() != dst.dims() || src.data_type() != dst.data_type())
    return std::nullopt;
  size_t bytes = dnnl::memory::data_type_size(src.data_type());
  if (!available(bytes))
    return std::nullopt;
  ChannelBlockReorder r;
  r.elemBytes = bytes;
  if (isPlain(src) && isChannelBlocked(dst))
    r.toBlocked = true;
  else if (isChannelBlocked(src) && isPlain(dst))
    r.toBlocked = false;
  else
    return std::nullopt;
  dnnl::memory::dims dims = src.dims();
  r.N = dims[0];
  r.C = dims[1];
  r.S = 1;
  for (size_t d = 2; d < dims.size(); ++d)
    r.S *= dims[d];
  return r;
}

void ChannelBlockReorder::run(const void *src, void *dst) const {
  if (available(elemBytes))
    runWith(useAvx512(), src, dst);
  else
    runPortable(src, dst);
}

void ChannelBlockReorder::runPortable(const void *src, void *dst) const {
  const int64_t blocks = N * (C / kBlock), blockElems = kBlock * S;
  auto move = [&](auto *from, auto *to) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      if (toBlocked)
        transposeScalar(from + b * blockElems, S, to + b * blockElems, kBlock, kBlock, S);
      else
        transposeScalar(from + b * blockElems, kBlock, to + b * blockElems, S, S, kBlock);
    }
  };
  if (elemBytes == 4)
    move(static_cast<const uint32_t *>(src), static_cast<uint32_t *>(dst));
  else
    move(static_cast<const uint16_t *>(src), static_cast<uint16_t *>(dst));
}

void ChannelBlockReorder::runWith(bool avx512, const void *src, void *dst) const {
#ifdef AMPC_X86
  const int64_t blocks = N * (C / kBlock), blockElems = kBlock * S;
  // Block b of the blocked layout is channels 16 (b % (C/16)) .. of image
  // b / (C/16): in the plain layout too it starts at element b * 16 * S.
  if (elemBytes == 4) {
    // match() took fp32 only with AVX-512.
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b)
      block32Avx512(static_cast<const float *>(src) + b * blockElems,
                    static_cast<float *>(dst) + b * blockElems, S, toBlocked);
    return;
  }
  auto *block = avx512 ? block16Avx512 : block16Avx2;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b)
    block(static_cast<const uint16_t *>(src) + b * blockElems,
          static_cast<uint16_t *>(dst) + b * blockElems, S, toBlocked);
#else
  (void)avx512, (void)src, (void)dst;
#endif
}

} // namespace ampc::rt::cpu
