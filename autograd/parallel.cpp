#include "autograd/parallel.hpp"

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "autograd/gemm.hpp"

namespace headroom {
namespace {

thread_local bool t_in_region = false;

// A fixed set of workers that each run one chunk of the current loop. Workers
// sleep on a condition variable between loops (no spinning: on a 2-core machine a
// spinning worker would take the core from the GEMM library's own threads).
class Pool {
 public:
  ~Pool() { resize(0); }

  // Number of workers, besides the caller's thread.
  void resize(std::size_t workers) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      ++generation_;
    }
    start_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
    stop_ = false;
    // A new worker waits for the next loop, not the generation that stopped the old ones.
    for (std::size_t i = 0; i < workers; ++i) {
      workers_.emplace_back([this, i, seen = generation_] { work(i + 1, seen); });
    }
  }

  std::size_t workers() const { return workers_.size(); }

  // Runs chunk(c) for c in [0, chunks): chunk 0 here, the others on workers 1..chunks-1.
  void run(std::size_t chunks, const std::function<void(std::size_t)>& chunk) {
    {
      std::lock_guard lock(mutex_);
      job_ = &chunk;
      chunks_ = chunks;
      pending_ = chunks - 1;
      error_ = nullptr;
      ++generation_;
    }
    start_.notify_all();
    std::exception_ptr mine;
    try {
      t_in_region = true;
      chunk(0);
    } catch (...) {
      mine = std::current_exception();
    }
    t_in_region = false;
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work(std::size_t index, std::size_t seen) {
    t_in_region = true;
    for (;;) {
      const std::function<void(std::size_t)>* job = nullptr;
      {
        std::unique_lock lock(mutex_);
        start_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        if (index >= chunks_) continue;  // this loop has fewer chunks than workers
        job = job_;
      }
      std::exception_ptr error;
      try {
        (*job)(index);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      if (error && !error_) error_ = error;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::size_t chunks_ = 0, pending_ = 0, generation_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

// Each thread that trains has its own pool and count, so that side-by-side
// trainings in one process (headroom ablate --jobs) never share or resize a pool
// another one is using.
thread_local std::unique_ptr<Pool> t_pool;
thread_local int t_threads = 1;

}  // namespace

void set_threads(int threads) {
  if (threads < 1) {
    throw std::invalid_argument("set_threads: threads must be at least 1, got " + std::to_string(threads));
  }
  if (t_in_region) throw std::logic_error("set_threads: called from inside a parallel_for");
  set_blas_threads(threads);
  if (threads == 1) {
    t_pool.reset();
  } else {
    if (!t_pool) t_pool = std::make_unique<Pool>();
    t_pool->resize(static_cast<std::size_t>(threads - 1));
  }
  t_threads = threads;
}

int threads() { return t_threads; }

bool in_parallel_region() { return t_in_region; }

void parallel_for(std::size_t n, std::size_t min_chunk, const std::function<void(std::size_t, std::size_t)>& body,
                  bool calls_gemm) {
  if (n == 0) return;
  std::size_t chunks = t_pool ? std::min<std::size_t>(static_cast<std::size_t>(t_threads), t_pool->workers() + 1) : 1;
  if (min_chunk > 0) chunks = std::min(chunks, std::max<std::size_t>(1, n / min_chunk));
  chunks = std::min(chunks, n);
  if (t_in_region || (calls_gemm && !gemm_threads_per_call())) chunks = 1;
  if (chunks <= 1) {
    body(0, n);
    return;
  }
  // Chunk c covers [c n / chunks, (c + 1) n / chunks): sizes differ by at most one.
  t_pool->run(chunks, [&](std::size_t c) { body(c * n / chunks, (c + 1) * n / chunks); });
}

}  // namespace headroom
