//===- ChannelBlockReorderTest.cpp - the convolutions' own reorders -------===//
//
// runtime/cpu/ChannelBlockReorder moves activations between the plain layout
// and oneDNN's channel blocks of 16 in place of oneDNN's reorder: it must
// write oneDNN's bytes, for every rank, type, channel count and spatial size
// (whole tiles of 16 and 32 positions, and the positions after them), and
// decline every other pair of layouts.
//
//===----------------------------------------------------------------------===//

#include "ChannelBlockReorder.h"
#include "ChannelLayout.h"
#include "KernelHelpers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

using namespace ampc::rt::cpu;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

dnnl::engine &engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::memory::desc plain(const dnnl::memory::dims &dims, dt type) {
  dnnl::memory::dims strides(dims.size());
  int64_t s = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    strides[d] = s;
    s *= dims[d];
  }
  return dnnl::memory::desc(dims, type, strides);
}

tag blockedTag(size_t rank) {
  return rank == 3 ? tag::aBc16b : rank == 4 ? tag::aBcd16b : tag::aBcde16b;
}
tag channelsLastTag(size_t rank) {
  return rank == 3 ? tag::acb : rank == 4 ? tag::acdb : tag::acdeb;
}

/// Runs oneDNN's reorder and ours from `src` to `dst` on the same distinct
/// bytes, and compares what they wrote.
void expectSameAsOneDnn(const dnnl::memory::desc &src, const dnnl::memory::desc &dst,
                        const std::string &what) {
  auto ours = ChannelBlockReorder::match(src, dst);
  ASSERT_TRUE(ours) << what;
  size_t bytes = src.get_size();
  ASSERT_EQ(bytes, dst.get_size()) << what;
  std::vector<uint8_t> in(bytes), theirs(bytes, 0xAB), mine(bytes, 0xCD);
  for (size_t i = 0; i < bytes; ++i)
    in[i] = static_cast<uint8_t>(i * 131 + (i >> 8) * 7 + (i >> 16));
  dnnl::stream stream(engine());
  dnnl::memory srcMem(src, engine(), in.data()), dstMem(dst, engine(), theirs.data());
  dnnl::reorder(srcMem, dstMem).execute(stream, srcMem, dstMem);
  stream.wait();
  // Both builds: AVX2, and AVX-512VL where this CPU has it.
  for (bool avx512 : {false, true}) {
    if (avx512 && !useAvx512())
      continue;
    std::fill(mine.begin(), mine.end(), 0xCD);
    ours->runWith(avx512, in.data(), mine.data());
    EXPECT_EQ(0, std::memcmp(theirs.data(), mine.data(), bytes))
        << what << (avx512 ? " (AVX-512 build)" : " (AVX2 build)");
  }
}

} // namespace

/// Both directions, bf16 (and fp32 where the CPU has AVX-512), ranks 3 to 5,
/// 16 to 48 channels, and spatial sizes from 1 to past several whole tiles
/// with a remainder.
TEST(ChannelBlockReorder, WritesOneDnnsBytes) {
  const std::vector<dnnl::memory::dims> spatials = {{1},     {7},       {16},     {31},   {32},
                                                    {33},    {100},     {4, 4},   {7, 7}, {8, 8},
                                                    {5, 13}, {2, 3, 5}, {4, 4, 4}};
  for (dt type : {dt::bf16, dt::f32}) {
    if (type == dt::f32 && !useAvx512())
      continue;
    for (int64_t n : {1, 3})
      for (int64_t c : {16, 32, 48})
        for (const auto &sp : spatials) {
          dnnl::memory::dims dims{n, c};
          dims.insert(dims.end(), sp.begin(), sp.end());
          auto p = plain(dims, type);
          dnnl::memory::desc b(dims, type, blockedTag(dims.size()));
          std::string what = (type == dt::bf16 ? "bf16 " : "f32 ") + std::to_string(n) + "x" +
                             std::to_string(c) + " rank " + std::to_string(dims.size()) +
                             " spatial " + std::to_string(p.get_size());
          expectSameAsOneDnn(p, b, what + " to blocked");
          expectSameAsOneDnn(b, p, what + " from blocked");
          if (c == 16) { // channels last is the same bytes
            dnnl::memory::desc cl(dims, type, channelsLastTag(dims.size()));
            expectSameAsOneDnn(p, cl, what + " to channels last");
            expectSameAsOneDnn(cl, p, what + " from channels last");
          }
        }
  }
}

/// Layouts it does not move are left to oneDNN.
TEST(ChannelBlockReorder, DeclinesOtherLayouts) {
  dnnl::memory::dims dims{2, 32, 8, 8};
  auto p = plain(dims, dt::bf16);
  // fp32 only with AVX-512 (in AVX2 registers it was no faster than oneDNN).
  EXPECT_EQ(useAvx512(), ChannelBlockReorder::match(plain(dims, dt::f32),
                                                    dnnl::memory::desc(dims, dt::f32, tag::aBcd16b))
                             .has_value());
  // Channels not a multiple of 16 (oneDNN pads the last block).
  dnnl::memory::dims odd{2, 24, 8, 8};
  EXPECT_FALSE(ChannelBlockReorder::match(plain(odd, dt::bf16),
                                          dnnl::memory::desc(odd, dt::bf16, tag::aBcd16b)));
  // Channels last with more than 16 channels is not the blocked layout.
  EXPECT_FALSE(ChannelBlockReorder::match(p, dnnl::memory::desc(dims, dt::bf16, tag::acdb)));
  // Blocks of 8, weights-style double blocking, plain to plain.
  EXPECT_FALSE(ChannelBlockReorder::match(p, dnnl::memory::desc(dims, dt::bf16, tag::aBcd8b)));
  EXPECT_FALSE(ChannelBlockReorder::match(p, dnnl::memory::desc(dims, dt::bf16, tag::ABcd16b16a)));
  EXPECT_FALSE(ChannelBlockReorder::match(p, p));
  // A change of type is a conversion, not a move.
  EXPECT_FALSE(ChannelBlockReorder::match(p, dnnl::memory::desc(dims, dt::f16, tag::aBcd16b)));
  // Rank 2 (a GEMM's operand, here transposed).
  dnnl::memory::dims mat{32, 32};
  EXPECT_FALSE(
      ChannelBlockReorder::match(plain(mat, dt::bf16), dnnl::memory::desc(mat, dt::bf16, tag::ba)));
}

/// The backend's moves of activations it keeps in channel blocks
/// (ChannelLayout.h): the element-by-element fallback writes oneDNN's bytes
/// too, for 2- and 4-byte elements, both ways.
TEST(ChannelBlockReorder, PortableMoveWritesOneDnnsBytes) {
  for (dt type : {dt::bf16, dt::f32})
    for (const dnnl::memory::dims &dims : std::vector<dnnl::memory::dims>{
             {2, 32, 7, 5}, {1, 16, 33}, {3, 48, 2, 3, 4}}) {
      auto p = plain(dims, type);
      dnnl::memory::desc b(dims, type, blockedTag(dims.size()));
      ASSERT_TRUE(ChannelBlockReorder::sameBytes(b, ChannelBlockReorder::blockedDesc(dims, type)));
      size_t bytes = p.get_size();
      std::vector<uint8_t> in(bytes), theirs(bytes), mine(bytes, 0xCD);
      for (size_t i = 0; i < bytes; ++i)
        in[i] = static_cast<uint8_t>(i * 37 + (i >> 8));
      for (bool toBlocked : {true, false}) {
        dnnl::stream stream(engine());
        dnnl::memory srcMem(toBlocked ? p : b, engine(), in.data());
        dnnl::memory dstMem(toBlocked ? b : p, engine(), theirs.data());
        dnnl::reorder(srcMem, dstMem).execute(stream, srcMem, dstMem);
        stream.wait();
        TensorArg t;
        t.type = type == dt::bf16 ? ampc::plan::BF16 : ampc::plan::F32;
        t.shape.assign(dims.begin(), dims.end());
        t.numel = static_cast<int64_t>(bytes / dnnl::memory::data_type_size(type));
        auto move = channelLayoutMove(t, toBlocked);
        std::fill(mine.begin(), mine.end(), 0xCD);
        move.runPortable(in.data(), mine.data());
        EXPECT_EQ(0, std::memcmp(theirs.data(), mine.data(), bytes))
            << (toBlocked ? "to" : "from") << " blocked, rank " << dims.size();
        std::fill(mine.begin(), mine.end(), 0xCD);
        move.run(in.data(), mine.data());
        EXPECT_EQ(0, std::memcmp(theirs.data(), mine.data(), bytes)) << "run()";
      }
    }
  // Channel blocks of 16 with 16 channels are channels-last's bytes.
  dnnl::memory::dims dims{2, 16, 4, 4};
  EXPECT_TRUE(ChannelBlockReorder::sameBytes(dnnl::memory::desc(dims, dt::f32, tag::acdb),
                                             dnnl::memory::desc(dims, dt::f32, tag::aBcd16b)));
  dnnl::memory::dims wide{2, 32, 4, 4};
  EXPECT_FALSE(ChannelBlockReorder::sameBytes(dnnl::memory::desc(wide, dt::f32, tag::acdb),
                                              dnnl::memory::desc(wide, dt::f32, tag::aBcd16b)));
}
