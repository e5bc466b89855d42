//===- ThreadPool.h - Deterministic parallel loops --------------*- C++ -*-===//
//
// parallelFor splits [0, n) into contiguous ranges decided only by n and the
// thread count, so every reduction that combines per-range partial results in
// range order gives the same bits run after run for a given thread count.
//
// The ranges run on OpenMP's threads: oneDNN (GEMM, convolution) uses OpenMP
// too, and one team of threads for both avoids two sets of threads spinning
// against each other on the same cores (measured: 2.8-3.6x slower steps).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <functional>

namespace ampc::rt::cpu {

class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return threads_; }

  /// Calls fn(begin, end, range) for `ranges` contiguous ranges covering
  /// [0, n) (ranges = min(threads, ceil(n / minPerRange))), in parallel.
  void parallelFor(int64_t n, int64_t minPerRange,
                   const std::function<void(int64_t begin, int64_t end, int range)> &fn);

  /// The number of ranges parallelFor(n, minPerRange) uses.
  int rangesFor(int64_t n, int64_t minPerRange) const;

private:
  int threads_;
};

} // namespace ampc::rt::cpu
