//===- MpiCollective.cpp - Data-parallel ranks over MPI --------------------===//
//
// The CPU ranks' transport (and the bootstrap of any other): Open MPI or any
// MPI the build found. Every MPI call runs on one worker thread, in the order
// the calls were made (MPI_THREAD_FUNNELED: that thread initialises MPI):
// gradient buckets started by ampc.AllReduce steps travel there while the
// training thread goes on with the backward pass, and the synchronous calls
// queue behind them. Messages larger than an int's count go in pieces.
//
// Timeouts: MPI has no timeout of its own, and a rank that dies between
// collectives can leave the others waiting forever (mpirun notices a death
// and ends the job, but not a hang or a lost node). A watchdog thread
// watches how long the current call has been running and, past the
// timeout, prints one line and aborts the job (MPI_Abort ends every rank).
//
//===----------------------------------------------------------------------===//

#include "ampc/rt/Collective.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ampc::rt {

namespace {

using Clock = std::chrono::steady_clock;

class MpiCollective : public Collective {
public:
  bool init(double timeoutSeconds, std::string &error) {
    timeout_ = timeoutSeconds;
    worker_ = std::thread([this] { work(); });
    error = runOnWorker([this](std::string &e) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        e = "MPI_Init_thread failed";
        return false;
      }
      initialized_ = true;
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
      MPI_Comm_size(MPI_COMM_WORLD, &size_);
      return true;
    });
    if (!error.empty())
      return false;
    watchdog_ = std::thread([this] { watch(); });
    return true;
  }

  ~MpiCollective() override {
    if (initialized_) {
      std::string ignored = runOnWorker([](std::string &) {
        MPI_Finalize();
        return true;
      });
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    {
      // Under the queue's lock: the worker cannot miss it between its check
      // and its wait.
      std::lock_guard<std::mutex> lock(queueMu_);
      quit_ = true;
    }
    cv_.notify_all();
    queueCv_.notify_all();
    if (worker_.joinable())
      worker_.join();
    if (watchdog_.joinable())
      watchdog_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "mpi"; }

  bool allReduceMean(float *data, size_t count, std::string &error) override {
    error = startAllReduceMean(data, count).get();
    return error.empty();
  }

  Pending startAllReduceMean(float *data, size_t count) override {
    return enqueue([this, data, count](std::string &error) {
      Call call(*this, "all-reduce");
      for (size_t done = 0; done < count;) {
        int n = static_cast<int>(std::min<size_t>(count - done, INT_MAX));
        if (!check(MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD),
                   "MPI_Allreduce", error))
          return false;
        done += static_cast<size_t>(n);
      }
      // The same division on every rank of the same sums: the same bits.
      const float inv = 1.0f / static_cast<float>(size_);
      for (size_t i = 0; i < count; ++i)
        data[i] *= inv;
      return true;
    });
  }

  bool broadcast(void *data, size_t bytes, int root, std::string &error) override {
    error = runOnWorker([this, data, bytes, root](std::string &e) {
      Call call(*this, "broadcast");
      auto *p = static_cast<char *>(data);
      for (size_t done = 0; done < bytes;) {
        int n = static_cast<int>(std::min<size_t>(bytes - done, INT_MAX));
        if (!check(MPI_Bcast(p + done, n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast", e))
          return false;
        done += static_cast<size_t>(n);
      }
      return true;
    });
    return error.empty();
  }

  bool barrier(std::string &error) override {
    error = runOnWorker([this](std::string &e) {
      Call call(*this, "barrier");
      return check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", e);
    });
    return error.empty();
  }

  bool allEqual(uint64_t value, bool &equal, std::string &error) override {
    error = runOnWorker([this, value, &equal](std::string &e) {
      Call call(*this, "checksum");
      uint64_t lo = 0, hi = 0;
      if (!check(MPI_Allreduce(&value, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD),
                 "MPI_Allreduce", e) ||
          !check(MPI_Allreduce(&value, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD),
                 "MPI_Allreduce", e))
        return false;
      equal = lo == hi;
      return true;
    });
    return error.empty();
  }

private:
  using Task = std::function<bool(std::string &)>;

  /// Queues `task` for the worker; the future holds "" or its error.
  Pending enqueue(Task task) {
    auto done = std::make_shared<std::promise<std::string>>();
    Pending result = done->get_future().share();
    {
      std::lock_guard<std::mutex> lock(queueMu_);
      queue_.push_back([task = std::move(task), done] {
        std::string error;
        done->set_value(task(error) ? std::string() : error);
      });
    }
    queueCv_.notify_one();
    return result;
  }

  std::string runOnWorker(Task task) { return enqueue(std::move(task)).get(); }

  void work() {
    for (;;) {
      std::function<void()> next;
      {
        std::unique_lock<std::mutex> lock(queueMu_);
        queueCv_.wait(lock, [this] { return !queue_.empty() || quit_; });
        if (queue_.empty())
          return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      next();
    }
  }

  /// Marks a collective call in progress for the watchdog.
  struct Call {
    Call(MpiCollective &c, const char *what) : c(c) {
      std::lock_guard<std::mutex> lock(c.mu_);
      c.what_ = what;
      c.since_ = Clock::now();
      c.busy_ = true;
    }
    ~Call() {
      std::lock_guard<std::mutex> lock(c.mu_);
      c.busy_ = false;
    }
    MpiCollective &c;
  };

  bool check(int rc, const char *what, std::string &error) {
    if (rc == MPI_SUCCESS)
      return true;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    error = "rank " + std::to_string(rank_) + ": " + what + ": " + std::string(text, len);
    return false;
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (!busy_ || stop_)
        continue;
      double waited = std::chrono::duration<double>(Clock::now() - since_).count();
      if (waited < timeout_)
        continue;
      std::fprintf(stderr,
                   "amp-run: error: rank %d: the %s across %d ranks did not finish within %.0f s "
                   "(a rank failed or hangs; AMPC_DIST_TIMEOUT sets the limit); stopping the job\n",
                   rank_, what_, size_, timeout_);
      std::fflush(stderr);
      // MPI_Abort from this thread: the worker is inside MPI, and
      // aborting is the one call MPI allows to end every rank from here.
      MPI_Abort(MPI_COMM_WORLD, 1);
      std::_Exit(1);
    }
  }

  int rank_ = 0, size_ = 1;
  bool initialized_ = false;
  double timeout_ = 600;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread watchdog_, worker_;
  std::mutex queueMu_;
  std::condition_variable queueCv_;
  std::deque<std::function<void()>> queue_;
  bool quit_ = false; // guarded by queueMu_
  bool busy_ = false, stop_ = false;
  const char *what_ = "";
  Clock::time_point since_;
};

} // namespace

std::unique_ptr<Collective> createMpiCollective(double timeoutSeconds, std::string &error) {
  auto c = std::make_unique<MpiCollective>();
  if (!c->init(timeoutSeconds, error))
    return nullptr;
  return c;
}

} // namespace ampc::rt
