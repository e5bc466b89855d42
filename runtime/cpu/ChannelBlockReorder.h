//===- ChannelBlockReorder.h - NCHW <-> channel blocks of 16 ---*- C++ -*-===//
//
// The reorders a convolution runs every step between a plain [N, C, spatial]
// activation and oneDNN's channel-blocked layout (aBcd16b: [N, C/16, spatial,
// 16]; channels-last is the same bytes when C is 16). Within one block of 16
// channels this is a transpose of a 16 x S matrix, which this file does by
// 16 x 16 transposes in vector registers, about 3x as fast as oneDNN 2.6's
// generic reorder for bf16 and 1.0-1.6x for fp32 (docs/benchmarks.md).
// Pure data movement: the bytes are oneDNN's (ChannelBlockReorderTest).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <optional>

namespace ampc::rt::cpu {

struct ChannelBlockReorder {
  int64_t N = 0, C = 0, S = 0; ///< S: the product of the spatial dims
  size_t elemBytes = 2;        ///< 2 (bf16) or 4 (fp32)
  bool toBlocked = true;       ///< plain -> blocked, else blocked -> plain

  /// The reorder from `src` to `dst` when one is the plain layout of their
  /// dims and the other the channel-blocked one, C a multiple of 16, their
  /// type 16-bit (bf16) and the CPU has AVX2, or 32-bit (fp32) and
  /// useAvx512(); nothing otherwise (oneDNN's reorder then runs).
  static std::optional<ChannelBlockReorder> match(const dnnl::memory::desc &src,
                                                  const dnnl::memory::desc &dst);

  /// Whether run() can move elements of this size on this CPU: 16-bit ones
  /// with AVX2, 32-bit ones with useAvx512().
  static bool available(size_t elemBytes);

  /// The channel-blocked layout of `dims` (rank 3 to 5, channels a multiple
  /// of 16): aBc16b, aBcd16b or aBcde16b.
  static dnnl::memory::desc blockedDesc(const dnnl::memory::dims &dims,
                                        dnnl::memory::data_type type);

  /// Whether `a` and `b` lay out the same bytes: equal, or both channel
  /// blocks of 16 (channels-last with 16 channels is the same bytes).
  static bool sameBytes(const dnnl::memory::desc &a, const dnnl::memory::desc &b);

  /// Moves every block, split over the OpenMP threads (those oneDNN's
  /// primitives run on, set by the kernel before it executes); bf16 in the
  /// AVX-512VL build where useAvx512() says so (32 vector registers: no
  /// spills), else the AVX2 one; element by element (runPortable) where
  /// available() says no. The same bytes either way.
  void run(const void *src, void *dst) const;
  /// The element-by-element move, for 2- and 4-byte elements (tests compare
  /// it).
  void runPortable(const void *src, void *dst) const;
  /// run() with the bf16 build chosen by the caller (tests compare both; the
  /// AVX-512 one needs a CPU with AVX-512 F, VL and BW). fp32 has one build.
  void runWith(bool avx512, const void *src, void *dst) const;
};

} // namespace ampc::rt::cpu
