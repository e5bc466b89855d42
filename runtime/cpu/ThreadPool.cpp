//===- ThreadPool.cpp - Deterministic parallel loops -----------------------===//

#include "ThreadPool.h"

#include <omp.h>

#include <algorithm>

namespace ampc::rt::cpu {

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {}

int ThreadPool::rangesFor(int64_t n, int64_t minPerRange) const {
  if (n <= 0)
    return 0;
  int64_t per = std::max<int64_t>(minPerRange, 1);
  return static_cast<int>(std::min<int64_t>(threads_, (n + per - 1) / per));
}

static void rangeOf(int64_t n, int ranges, int r, int64_t &begin, int64_t &end) {
  int64_t base = n / ranges, extra = n % ranges;
  begin = r * base + std::min<int64_t>(r, extra);
  end = begin + base + (r < extra ? 1 : 0);
}

void ThreadPool::parallelFor(int64_t n, int64_t minPerRange,
                             const std::function<void(int64_t, int64_t, int)> &fn) {
  int ranges = rangesFor(n, minPerRange);
  if (ranges == 0)
    return;
  if (ranges == 1) {
    fn(0, n, 0);
    return;
  }
#pragma omp parallel num_threads(ranges)
  {
    // OpenMP may start fewer threads than asked: each takes every team-th
    // range, so the ranges (and any partial results) stay the same.
    int team = omp_get_num_threads();
    for (int r = omp_get_thread_num(); r < ranges; r += team) {
      int64_t begin, end;
      rangeOf(n, ranges, r, begin, end);
      fn(begin, end, r);
    }
  }
}

} // namespace ampc::rt::cpu
