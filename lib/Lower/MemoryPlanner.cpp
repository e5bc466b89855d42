//===- MemoryPlanner.cpp - Static placement of arena buffers ---------------===//
//
// Every activation, gradient and temporary gets a fixed offset in one arena.
// Two placements: in step order, as an allocator with merged free blocks
// would do it at run time (O(n log n)); and best fit, buffers placed largest
// first into the smallest gap free over their whole live range (quadratic,
// so it runs within a budget, and only when step order left room). The
// lower bound, the peak of live bytes at any step, shows how close the
// placement is to optimal.
//
//===----------------------------------------------------------------------===//

#include "ampc/Lower/MemoryPlanner.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <set>
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
// time. The walk is linear in the buffers placed so far, so placement is
// quadratic: n (n - 1) / 2 comparisons for n requests, whatever the order,
// hence planMemory's budget. The unit test checks it against the definition.
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

// Free blocks are kept merged and indexed twice: by offset (to merge a
// released block with its neighbours) and by (size, offset) (to find the
// smallest block that fits). A block reaching the top of the arena is not
// kept: the top moves down instead.
namespace {
class FreeBlocks {
public:
  /// The offset of the smallest free block of at least `size` bytes (the
  /// lowest such), taken; the arena's top (raised) when none fits.
  uint64_t take(uint64_t size) {
    auto fit = bySize_.lower_bound({size, 0});
    if (fit == bySize_.end()) {
      uint64_t at = top_;
      top_ += size;
      return at;
    }
    auto [blockSize, at] = *fit;
    bySize_.erase(fit);
    byOffset_.erase(at);
    if (blockSize > size)
      add(at + size, blockSize - size);
    return at;
  }

  void release(uint64_t at, uint64_t size) {
    auto next = byOffset_.lower_bound(at);
    if (next != byOffset_.end() && next->first == at + size) {
      size += next->second;
      bySize_.erase({next->second, next->first});
      next = byOffset_.erase(next);
    }
    if (next != byOffset_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at) {
        at = prev->first;
        size += prev->second;
        bySize_.erase({prev->second, prev->first});
        byOffset_.erase(prev);
      }
    }
    if (at + size == top_) {
      top_ = at;
      return;
    }
    add(at, size);
  }

private:
  void add(uint64_t at, uint64_t size) {
    byOffset_.emplace(at, size);
    bySize_.insert({size, at});
  }

  std::map<uint64_t, uint64_t> byOffset_;
  std::set<std::pair<uint64_t, uint64_t>> bySize_;
  uint64_t top_ = 0;
};
} // namespace

uint64_t placeInStepOrder(const std::vector<BufferRequest> &reqs, std::vector<uint64_t> &offsets) {
  offsets.assign(reqs.size(), 0);
  std::vector<size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reqs[a].start != reqs[b].start ? reqs[a].start < reqs[b].start
                                          : reqs[a].size > reqs[b].size;
  });
  using Ending = std::pair<int, size_t>; // (last step, request)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<Ending>> live;
  FreeBlocks blocks;
  uint64_t arena = 0;
  for (size_t idx : order) {
    const BufferRequest &r = reqs[idx];
    for (; !live.empty() && live.top().first < r.start; live.pop())
      blocks.release(offsets[live.top().second], alignUp(reqs[live.top().second].size));
    uint64_t size = alignUp(r.size);
    offsets[idx] = blocks.take(size);
    arena = std::max(arena, offsets[idx] + size);
    live.push({r.end, idx});
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

  // Step order is O(n log n) and often optimal (it reaches the lower bound
  // on chains, where all saved activations are live together and best fit
  // is quadratic). Best fit in decreasing size order packs better in
  // general (XLA's heap simulator); it runs when it can still gain and its
  // n (n - 1) / 2 comparisons fit the budget (about 0.3 s here, so up to
  // 16,384 buffers for one order, 11,585 for both), so that compile time
  // stays linear. A second order, longest-lived first among large buffers,
  // sometimes packs better still. The smallest arena wins.
  plan.arenaBytes = placeInStepOrder(reqs, plan.offsets);
  uint64_t budget = kBestFitBudget;
  std::vector<size_t> bySize(reqs.size());
  std::iota(bySize.begin(), bySize.end(), 0);
  std::stable_sort(bySize.begin(), bySize.end(), [&](size_t a, size_t b) {
    return reqs[a].size > reqs[b].size;
  });
  std::vector<size_t> byArea = bySize;
  std::stable_sort(byArea.begin(), byArea.end(), [&](size_t a, size_t b) {
    auto area = [&](size_t i) {
      return static_cast<double>(reqs[i].size) * (reqs[i].end - reqs[i].start + 1);
    };
    return area(a) > area(b);
  });
  std::vector<uint64_t> offsets;
  for (const std::vector<size_t> *order : {&bySize, &byArea}) {
    if (plan.arenaBytes == plan.lowerBoundBytes)
      break;
    uint64_t comparisons = bestFitComparisons(reqs.size());
    if (comparisons > budget)
      break;
    budget -= comparisons;
    uint64_t arena = placeBestFit(reqs, *order, offsets);
    if (arena < plan.arenaBytes) {
      plan.arenaBytes = arena;
      plan.offsets.swap(offsets);
    }
  }
  return plan;
}

} // namespace ampc
