//===- MemoryPlanner.cpp - Static placement of arena buffers ---------------===//
//
// Every activation, gradient and temporary gets a fixed offset in one arena.
// Buffers are placed one at a time, largest first, into the smallest gap that
// is free over the buffer's whole live range (best fit); the arena is the
// highest end. The lower bound, the peak of live bytes at any step, shows how
// close the placement is to optimal.
//
//===----------------------------------------------------------------------===//

#include "ampc/Lower/MemoryPlanner.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>

namespace ampc {

namespace {

uint64_t alignUp(uint64_t v) { return (v + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

/// A placed buffer: bytes [begin, end) during steps [first, last].
struct Placed {
  uint64_t begin, end;
  int first, last;
};

} // namespace

// Placed buffers are kept in a vector sorted by offset, so finding the best
// gap is one contiguous walk that skips the buffers not live at the same
// time. The walk is linear in the buffers placed so far, so planning is
// quadratic; the unit test checks it against the definition.
uint64_t placeBestFit(const std::vector<BufferRequest> &reqs, const std::vector<size_t> &order,
                      std::vector<uint64_t> &offsets) {
  offsets.assign(reqs.size(), 0);
  std::vector<Placed> placed;
  placed.reserve(reqs.size());
  uint64_t arena = 0;
  for (size_t idx : order) {
    const BufferRequest &r = reqs[idx];
    uint64_t size = alignUp(r.size);
    uint64_t best = std::numeric_limits<uint64_t>::max(), bestGap = best, cursor = 0;
    for (const Placed &o : placed) {
      if (o.last < r.start || r.end < o.first)
        continue;
      if (o.begin > cursor && o.begin - cursor >= size && o.begin - cursor < bestGap) {
        bestGap = o.begin - cursor;
        best = cursor;
      }
      cursor = std::max(cursor, o.end);
    }
    uint64_t at = best != std::numeric_limits<uint64_t>::max() ? best : cursor;
    offsets[idx] = at;
    arena = std::max(arena, at + size);
    Placed p{at, at + size, r.start, r.end};
    auto pos = std::upper_bound(placed.begin(), placed.end(), p,
                                [](const Placed &a, const Placed &b) { return a.begin < b.begin; });
    placed.insert(pos, p);
  }
  return arena;
}

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
  uint64_t arenaA = placeBestFit(reqs, bySize, offsetsA);
  uint64_t arenaB = reqs.size() <= 4096 ? placeBestFit(reqs, byArea, offsetsB)
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
