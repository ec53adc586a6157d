#include "autograd/parallel.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "autograd/gemm.hpp"

namespace headroom {
namespace {

thread_local bool t_in_region = false;

// A fixed set of workers that share the chunks of the current loop with the
// caller's thread. Chunks are claimed one at a time from a counter, not assigned:
// a thread that the OS keeps off its core (another process on it) takes fewer, and
// the others take the rest, so a busy core slows a loop by at most about one chunk.
// Between loops a worker spins for a moment (kSpin) and then sleeps on a condition
// variable; the caller, done with its chunks, spins as long for the others before it
// sleeps. Waking a sleeping thread takes tens of microseconds on a VM, as long as a
// small loop's chunk, while a step's loops follow each other within microseconds; a
// longer spin would take a shared core from whoever else needs it.
class Pool {
 public:
  ~Pool() { resize(0); }

  // Number of workers, besides the caller's thread.
  void resize(std::size_t workers) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
    stop_ = false;
    for (std::size_t i = 0; i < workers; ++i) {
      workers_.emplace_back([this, seen = generation_] { work(seen); });
    }
  }

  std::size_t workers() const { return workers_.size(); }

  // Runs chunk(c) for every c in [0, chunks), on this thread and the workers, or
  // all on this thread while the pool backs off (below).
  void run(std::size_t chunks, const std::function<void(std::size_t)>& chunk) {
    if (serial_left_ > 0) {
      --serial_left_;
      run_here(chunks, chunk);
      return;
    }
    const auto started = Clock::now();
    std::uint32_t generation = 0;
    bool wake = false;
    {
      std::lock_guard lock(mutex_);
      generation = ++generation_;
      job_ = &chunk;
      chunks_ = chunks;
      error_ = nullptr;
      left_.store(chunks, std::memory_order_relaxed);
      next_.store(std::uint64_t{generation} << 32, std::memory_order_release);
      published_.store(generation, std::memory_order_release);
      wake = sleepers_ > 0;  // a worker that goes to sleep after this sees the new generation first
    }
    if (wake) start_.notify_all();
    t_in_region = true;
    drain(generation, chunks, chunk);
    t_in_region = false;
    const auto drained = Clock::now();
    spin_until([this] { return left_.load(std::memory_order_acquire) == 0; });
    std::unique_lock lock(mutex_);
    caller_waiting_ = true;
    done_.wait(lock, [this] { return left_.load(std::memory_order_acquire) == 0; });
    caller_waiting_ = false;
    job_ = nullptr;
    back_off_if_late(drained - started, Clock::now() - drained);
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  using Clock = std::chrono::steady_clock;

  // Every chunk on this thread, in order: the same chunks, so the same results.
  void run_here(std::size_t chunks, const std::function<void(std::size_t)>& chunk) {
    std::exception_ptr error;
    t_in_region = true;
    for (std::size_t c = 0; c < chunks; ++c) {
      try {
        chunk(c);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    t_in_region = false;
    if (error) std::rethrow_exception(error);
  }

  // A worker that claimed a chunk and then lost its core (another process on it)
  // holds the loop up until the OS gives the core back, milliseconds later, while a
  // loop's chunks last microseconds. When the caller waited longer for the others
  // than it worked itself, the next loops run on this thread alone, 16 of them, twice
  // as many each time it happens again (up to 1024), and fewer again as parallel
  // loops come back on time: a shared machine costs about what one thread costs.
  void back_off_if_late(Clock::duration own, Clock::duration waited) {
    if (waited > own + kLate) {
      backoff_ = std::clamp<std::size_t>(2 * backoff_, kMinBackoff, kMaxBackoff);
      serial_left_ = backoff_;
    } else {
      backoff_ /= 2;
    }
  }

  static constexpr std::chrono::microseconds kLate{50};
  static constexpr std::size_t kMinBackoff = 16, kMaxBackoff = 1024;

  // Claims and runs chunks of this generation's loop until none is left. The
  // counter holds the generation beside the next chunk, so a worker that wakes
  // after its loop ended can never claim a chunk of the next one.
  void drain(std::uint32_t generation, std::size_t chunks, const std::function<void(std::size_t)>& chunk) {
    for (;;) {
      std::uint64_t v = next_.load(std::memory_order_acquire);
      do {
        if (static_cast<std::uint32_t>(v >> 32) != generation || (v & 0xffffffffu) >= chunks) return;
      } while (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel));
      try {
        chunk(static_cast<std::size_t>(v & 0xffffffffu));
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mutex_);  // the caller checks left_ under it: no lost wake-up
        if (caller_waiting_) done_.notify_one();
      }
    }
  }

  // Spins until done() or kSpin has passed, whichever is first.
  template <typename Done>
  static void spin_until(Done done) {
    const auto until = Clock::now() + kSpin;
    for (int i = 0; !done(); ++i) {
      if (i % 64 == 63 && Clock::now() >= until) return;
      pause();
    }
  }

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  static constexpr std::chrono::microseconds kSpin{100};

  void work(std::uint32_t seen) {
    t_in_region = true;
    for (;;) {
      const std::function<void(std::size_t)>* job = nullptr;
      std::size_t chunks = 0;
      spin_until([&] { return published_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock lock(mutex_);
        ++sleepers_;
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        --sleepers_;
        if (stop_) return;
        seen = generation_;
        job = job_;
        chunks = chunks_;
      }
      if (job) drain(seen, chunks, *job);
    }
  }

  std::mutex mutex_;
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(std::size_t)>* job_ = nullptr;  // under mutex_
  std::size_t chunks_ = 0;                                  // under mutex_
  std::uint32_t generation_ = 0;                            // under mutex_
  std::exception_ptr error_;                                // under mutex_
  bool stop_ = false;                                       // under mutex_
  bool caller_waiting_ = false;                             // under mutex_
  std::size_t sleepers_ = 0;                                // under mutex_: workers asleep
  std::atomic<std::uint32_t> published_{0};  // generation_, for the spinning workers
  std::size_t serial_left_ = 0, backoff_ = 0;  // the caller's alone
  std::atomic<std::uint64_t> next_{0};  // (generation << 32) | next unclaimed chunk
  std::atomic<std::size_t> left_{0};    // chunks not finished yet
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

std::size_t parallel_chunks(std::size_t n, std::size_t min_chunk, bool calls_gemm) {
  if (n == 0) return 0;
  if (!t_pool || t_in_region || (calls_gemm && !gemm_threads_per_call())) return 1;
  std::size_t chunks = kChunksPerThread * (t_pool->workers() + 1);
  if (min_chunk > 0) chunks = std::min(chunks, std::max<std::size_t>(1, n / min_chunk));
  return std::min(chunks, n);
}

void parallel_for(std::size_t n, std::size_t min_chunk, const std::function<void(std::size_t, std::size_t)>& body,
                  bool calls_gemm) {
  const std::size_t chunks = parallel_chunks(n, min_chunk, calls_gemm);
  if (chunks == 0) return;
  if (chunks == 1) {
    body(0, n);
    return;
  }
  // Chunk c covers [c n / chunks, (c + 1) n / chunks): sizes differ by at most one.
  t_pool->run(chunks, [&](std::size_t c) { body(c * n / chunks, (c + 1) * n / chunks); });
}

}  // namespace headroom
