//===- MemoryPlanner.cpp - Static placement of arena buffers ---------------===//
//
// Every activation, gradient and temporary gets a fixed offset in one arena.
// Buffers are placed one at a time, largest first, into the smallest gap that
// is free over the buffer's whole live range (best fit); the arena is the
// highest end. The lower bound, the peak of live bytes at any step, shows how
// close the placement is to optimal.
//
//===----------------------------------------------------------------------===//

#include "MemoryPlanner.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>

namespace ampc {

namespace {

uint64_t alignUp(uint64_t v) { return (v + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

/// Places requests in the given order; returns the arena size.
uint64_t place(const std::vector<BufferRequest> &reqs, const std::vector<size_t> &order,
               std::vector<uint64_t> &offsets) {
  offsets.assign(reqs.size(), 0);
  std::vector<size_t> placed;
  placed.reserve(reqs.size());
  uint64_t arena = 0;
  std::vector<std::pair<uint64_t, uint64_t>> busy; // [begin, end) of overlapping buffers
  for (size_t idx : order) {
    const BufferRequest &r = reqs[idx];
    uint64_t size = alignUp(r.size);
    busy.clear();
    for (size_t other : placed) {
      const BufferRequest &o = reqs[other];
      if (o.end < r.start || r.end < o.start)
        continue;
      busy.push_back({offsets[other], offsets[other] + alignUp(o.size)});
    }
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap between busy ranges that holds the buffer.
    uint64_t best = std::numeric_limits<uint64_t>::max(), bestGap = best, cursor = 0;
    for (const auto &[begin, end] : busy) {
      if (begin > cursor && begin - cursor >= size && begin - cursor < bestGap) {
        bestGap = begin - cursor;
        best = cursor;
      }
      cursor = std::max(cursor, end);
    }
    offsets[idx] = best != std::numeric_limits<uint64_t>::max() ? best : cursor;
    arena = std::max(arena, offsets[idx] + size);
    placed.push_back(idx);
  }
  return arena;
}

} // namespace

MemoryPlan planMemory(const std::vector<BufferRequest> &reqs) {
  MemoryPlan plan;
  int lastStep = 0;
  for (const BufferRequest &r : reqs) {
    plan.unplannedBytes += alignUp(r.size);
    lastStep = std::max(lastStep, r.end);
  }
  // Lower bound: a sweep over steps of the live bytes.
  std::vector<int64_t> delta(lastStep + 2, 0);
  for (const BufferRequest &r : reqs) {
    delta[r.start] += static_cast<int64_t>(alignUp(r.size));
    delta[r.end + 1] -= static_cast<int64_t>(alignUp(r.size));
  }
  int64_t live = 0;
  for (int64_t d : delta) {
    live += d;
    plan.lowerBoundBytes = std::max<uint64_t>(plan.lowerBoundBytes, live);
  }

  std::vector<size_t> bySize(reqs.size());
  std::iota(bySize.begin(), bySize.end(), 0);
  std::stable_sort(bySize.begin(), bySize.end(), [&](size_t a, size_t b) {
    return reqs[a].size > reqs[b].size;
  });
  // A second order: longest-lived first among large buffers, which sometimes
  // packs better; keep whichever arena is smaller.
  std::vector<size_t> byArea = bySize;
  std::stable_sort(byArea.begin(), byArea.end(), [&](size_t a, size_t b) {
    auto area = [&](size_t i) {
      return static_cast<double>(reqs[i].size) * (reqs[i].end - reqs[i].start + 1);
    };
    return area(a) > area(b);
  });
  std::vector<uint64_t> offsetsA, offsetsB;
  uint64_t arenaA = place(reqs, bySize, offsetsA);
  uint64_t arenaB = reqs.size() <= 4096 ? place(reqs, byArea, offsetsB)
                                        : std::numeric_limits<uint64_t>::max();
  if (arenaB < arenaA) {
    plan.offsets = std::move(offsetsB);
    plan.arenaBytes = arenaB;
  } else {
    plan.offsets = std::move(offsetsA);
    plan.arenaBytes = arenaA;
  }
  return plan;
}

} // namespace ampc
