//===- channel_reorder.cpp - The convolutions' bf16 activation reorders
//----===//
//
// Times runtime/cpu/ChannelBlockReorder against oneDNN's reorder on the
// activations of the bench's CIFAR ResNet-20 (batch 64: 16 channels at
// 32x32, 32 at 16x16, 64 at 8x8; and the fp32 forward pass's chunks of 8
// images), both directions, bf16 and fp32, warm (median of 41 runs after 5),
// and checks that both wrote the same bytes.
//
//   OMP_NUM_THREADS=2 build/bin/ampc-bench-channel-reorder
//
//===----------------------------------------------------------------------===//

#include "ChannelBlockReorder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

using ampc::rt::cpu::ChannelBlockReorder;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

namespace {

template <typename F> double medianMicros(F f) {
  for (int i = 0; i < 5; ++i)
    f();
  std::vector<double> t;
  for (int i = 0; i < 41; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

} // namespace

int main() {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const int64_t shapes[][4] = {
      {64, 16, 32, 32}, {64, 32, 16, 16}, {64, 64, 8, 8}, {8, 16, 32, 32}, {8, 32, 16, 16}};
  std::printf("| tensor | to blocked: oneDNN | ours | from blocked: oneDNN | "
              "ours | same bytes |\n"
              "|---|---|---|---|---|---|\n");
  int failures = 0;
  for (dt type : {dt::bf16, dt::f32})
    for (const auto &s : shapes) {
      if (type == dt::bf16 && s[0] != 64)
        continue; // the bf16 forward pass runs whole batches
      dnnl::memory::dims dims(s, s + 4);
      dnnl::memory::desc plain(dims, type, tag::abcd), blocked(dims, type, tag::aBcd16b);
      dnnl::memory a(plain, eng), b(blocked, eng);
      size_t bytes = plain.get_size();
      auto *pa = static_cast<uint16_t *>(a.get_data_handle());
      for (size_t i = 0; i < bytes / 2; ++i) // any bits: the reorders only move them
        pa[i] = static_cast<uint16_t>(i * 7 + (i >> 16));
      dnnl::reorder toB(a, b), fromB(b, a);
      auto oursTo = ChannelBlockReorder::match(plain, blocked);
      auto oursFrom = ChannelBlockReorder::match(blocked, plain);
      if (!oursTo || !oursFrom) {
        std::printf("| %s %ldx%ldx%ldx%ld | not taken on this CPU (bf16 needs "
                    "AVX2, fp32 AVX-512) |\n",
                    type == dt::bf16 ? "bf16" : "fp32", (long)s[0], (long)s[1], (long)s[2],
                    (long)s[3]);
        continue;
      }
      // Our outputs in oneDNN's (64-byte aligned) memory too, as the plan's
      // arena and scratch are.
      dnnl::memory mine(blocked, eng), back(plain, eng);
      void *pb = b.get_data_handle(), *pm = mine.get_data_handle(), *pk = back.get_data_handle();
      double t1 = medianMicros([&] { toB.execute(stream, a, b); });
      double u1 = medianMicros([&] { oursTo->run(pa, pm); });
      bool same = std::memcmp(pb, pm, bytes) == 0;
      double t2 = medianMicros([&] { fromB.execute(stream, b, a); });
      double u2 = medianMicros([&] { oursFrom->run(pb, pk); });
      same = same && std::memcmp(pa, pk, bytes) == 0;
      failures += !same;
      std::printf("| %s %ldx%ldx%ldx%ld | %.1f us | %.1f us | %.1f us | %.1f "
                  "us | %s |\n",
                  type == dt::bf16 ? "bf16" : "fp32", (long)s[0], (long)s[1], (long)s[2],
                  (long)s[3], t1, u1, t2, u2, same ? "yes" : "NO");
    }
  return failures ? 1 : 0;
}
