//===- ThreadPool.h - Deterministic parallel loops --------------*- C++ -*-===//
//
// A fixed set of workers. parallelFor splits [0, n) into one contiguous range
// per thread, decided only by n and the thread count, so that every reduction
// that combines per-range partial results in range order gives the same bits
// run after run for a given thread count.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ampc::rt::cpu {

class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
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
  void worker(int index);

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t, int)> *job_ = nullptr;
  int64_t n_ = 0;
  int ranges_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

} // namespace ampc::rt::cpu
