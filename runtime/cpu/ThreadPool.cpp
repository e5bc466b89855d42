//===- ThreadPool.cpp - Deterministic parallel loops -----------------------===//

#include "ThreadPool.h"

#include <algorithm>

namespace ampc::rt::cpu {

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  for (int i = 1; i < threads_; ++i)
    workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto &t : workers_)
    t.join();
}

int ThreadPool::rangesFor(int64_t n, int64_t minPerRange) const {
  if (n <= 0)
    return 0;
  int64_t byWork = (n + std::max<int64_t>(minPerRange, 1) - 1) / std::max<int64_t>(minPerRange, 1);
  return static_cast<int>(std::min<int64_t>(threads_, byWork));
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    n_ = n;
    ranges_ = ranges;
    pending_ = ranges - 1;
    ++generation_;
  }
  wake_.notify_all();
  int64_t begin, end;
  rangeOf(n, ranges, 0, begin, end);
  fn(begin, end, 0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)> *job;
    int64_t n;
    int ranges;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_)
        return;
      seen = generation_;
      job = job_;
      n = n_;
      ranges = ranges_;
    }
    if (index < ranges) {
      int64_t begin, end;
      rangeOf(n, ranges, index, begin, end);
      (*job)(begin, end, index);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0)
        done_.notify_all();
    }
  }
}

} // namespace ampc::rt::cpu
