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

/// Places buffers so that no two live at the same time overlap: best fit in
/// decreasing size order (the placement of XLA's heap simulator), trying a
/// few orders and keeping the smallest arena.
MemoryPlan planMemory(const std::vector<BufferRequest> &requests);

/// One best-fit placement: takes the requests in `order`, puts each at the
/// lowest-addressed of the smallest gaps that is free during its whole live
/// range, or on top of every buffer live with it. Fills `offsets` (indexed
/// like `requests`) and returns the arena size.
uint64_t placeBestFit(const std::vector<BufferRequest> &requests, const std::vector<std::size_t> &order,
                      std::vector<uint64_t> &offsets);

} // namespace ampc
