//===- MemoryPlanner.h - Static placement of arena buffers ------*- C++ -*-===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ampc {

/// A buffer live from step `start` to step `end` (inclusive).
struct BufferRequest {
  uint64_t size;
  int start;
  int end;
};

struct MemoryPlan {
  std::vector<uint64_t> offsets; ///< per request
  uint64_t arenaBytes = 0;
  uint64_t lowerBoundBytes = 0; ///< peak of live bytes
  uint64_t unplannedBytes = 0;  ///< sum of all buffers
};

inline constexpr uint64_t kArenaAlignment = 64;

/// Places buffers so that no two live at the same time overlap: in step
/// order as a run-time allocator would, then, unless that reached the lower
/// bound, by best fit in decreasing size order (the placement of XLA's heap
/// simulator) within a budget; the smallest arena wins.
MemoryPlan planMemory(const std::vector<BufferRequest> &requests);

/// Placement in step order, as an allocator would do it at run time: at
/// each step, buffers that died are released (merged with free neighbours),
/// then each new buffer, largest first, takes the smallest free block that
/// fits, else the top. O(n log n). Fills `offsets` (indexed like
/// `requests`) and returns the arena size.
uint64_t placeInStepOrder(const std::vector<BufferRequest> &requests,
                          std::vector<uint64_t> &offsets);

/// One best-fit placement: takes the requests in `order`, puts each at the
/// lowest-addressed of the smallest gaps that is free during its whole live
/// range, or on top of every buffer live with it. Fills `offsets` (indexed
/// like `requests`) and returns the arena size. Quadratic: it compares
/// each request with every one placed before it.
uint64_t placeBestFit(const std::vector<BufferRequest> &requests, const std::vector<std::size_t> &order,
                      std::vector<uint64_t> &offsets);

inline uint64_t bestFitComparisons(uint64_t requests) {
  return requests < 2 ? 0 : requests * (requests - 1) / 2;
}
/// Comparisons planMemory lets best fit make, in all orders together.
inline constexpr uint64_t kBestFitBudget = uint64_t(1) << 27;

} // namespace ampc
