#include "autograd/parallel.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
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
    threads_ = workers + 1;
    cursors_ = std::make_unique<Cursor[]>(threads_);
    for (std::size_t i = 0; i < workers; ++i) {
      workers_.emplace_back([this, me = i + 1, seen = generation_] { work(me, seen); });
    }
  }

  std::size_t workers() const { return workers_.size(); }

  // Runs chunk(c) for every c in [0, chunks), on this thread and the workers, or
  // all on this thread while sharing does not pay (below).
  void run(std::size_t chunks, const std::function<void(std::size_t)>& chunk) {
    const auto started = Clock::now();
    if (!sharing_pays(started)) {
      ++stats_.kept;
      run_here(chunks, chunk);
      stats_.kept_ms += ms_since(started);
      return;
    }
    ++stats_.shared;
    std::uint32_t generation = 0;
    bool wake = false;
    {
      std::lock_guard lock(mutex_);
      generation = ++generation_;
      job_ = &chunk;
      chunks_ = chunks;
      error_ = nullptr;
      left_.store(chunks, std::memory_order_relaxed);
      for (std::size_t t = 0; t < threads_; ++t) {
        cursors_[t].next.store(std::uint64_t{generation} << 32 | first_chunk(t, chunks), std::memory_order_release);
      }
      published_.store(generation, std::memory_order_release);
      wake = sleepers_ > 0;  // a worker that goes to sleep after this sees the new generation first
    }
    if (wake) start_.notify_all();
    t_in_region = true;
    const std::size_t own = drain(0, generation, chunks, chunk);
    t_in_region = false;
    const auto drained = Clock::now();
    spin_until([this] { return left_.load(std::memory_order_acquire) == 0; });
    std::unique_lock lock(mutex_);
    caller_waiting_ = true;
    done_.wait(lock, [this] { return left_.load(std::memory_order_acquire) == 0; });
    caller_waiting_ = false;
    job_ = nullptr;
    account(chunks, own, drained - started, Clock::now() - started);
    stats_.shared_ms += ms_since(started);
    for (std::size_t t = 0; t < threads_; ++t) {
      stats_.busy_ms += static_cast<double>(cursors_[t].busy_ns.exchange(0, std::memory_order_relaxed)) / 1e6;
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  ParallelStats stats() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;

  static double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  }

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

  // Whether a second thread pays, measured: after each shared loop we estimate
  // what it would have cost on this thread alone (the caller's own time per chunk
  // times the chunks) and add the time sharing saved, or lost, to a balance that
  // decays by half every kHalfLife. While the balance is below -kTolerance, loops
  // run on this thread alone, with the same chunks and so the same results.
  // Two cases make it negative. A worker that claimed a chunk and then lost its core
  // to another process holds the loop up until the OS gives the core back,
  // milliseconds later, while a loop lasts microseconds: that one loop costs more
  // than hundreds save, and the next few half-lives run on one thread. And loops too
  // short to pay for waking a thread lose a little each, so a model that small runs
  // on one thread with a shared loop now and then to look again. The credit is
  // capped, so that a long run of good loops cannot hide a late one; and so is what
  // one loop can debit, kMaxDebit, so that one long stall of a worker keeps the
  // loops on the caller for log2(kMaxDebit / kTolerance) half-lives, under five, not
  // for as long as the stall was large. Another process on the worker's core stalls
  // loop after loop, and each probe debits again; a VM whose host takes a vCPU away
  // now and then, a few times a second, stalls once.
  bool sharing_pays(Clock::time_point now) {
    const double dt = std::chrono::duration<double>(now - balance_at_).count();
    balance_at_ = now;
    balance_us_ *= std::exp2(-dt / kHalfLife.count());
    return balance_us_ >= -kTolerance.count();
  }

  void account(std::size_t chunks, std::size_t own, Clock::duration own_time, Clock::duration wall) {
    if (own == 0) return;  // the workers took every chunk: nothing to estimate from
    const double alone_us = std::chrono::duration<double, std::micro>(own_time).count() *
                            static_cast<double>(chunks) / static_cast<double>(own);
    const double saved_us = alone_us - std::chrono::duration<double, std::micro>(wall).count();
    balance_us_ = std::min(balance_us_ + std::max(saved_us, -kMaxDebit.count()), kMaxCredit.count());
    if (saved_us < 0) stats_.lost_ms -= saved_us / 1000;
  }

  static constexpr std::chrono::duration<double> kHalfLife{0.010};
  static constexpr std::chrono::duration<double, std::micro> kTolerance{20}, kMaxCredit{200},
      kMaxDebit{500};

  // Thread t's own chunks are [first_chunk(t), first_chunk(t + 1)): the same rows
  // of every loop over the same rows, so that what one op wrote to a core's cache
  // is what the next op reads there (claiming from one shared counter sent each
  // chunk to either thread: a loop's data crossed between the cores' caches at
  // random).
  std::size_t first_chunk(std::size_t t, std::size_t chunks) const { return t * chunks / threads_; }

  // Takes the next chunk of `next`'s range, below `end`, in this generation into c;
  // false when none is left.
  static bool claim(std::atomic<std::uint64_t>& next, std::uint32_t generation, std::size_t end, std::size_t& c) {
    std::uint64_t v = next.load(std::memory_order_acquire);
    do {
      if (static_cast<std::uint32_t>(v >> 32) != generation || (v & 0xffffffffu) >= end) return false;
    } while (!next.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel));
    c = static_cast<std::size_t>(v & 0xffffffffu);
    return true;
  }

  // Claims and runs chunks of this generation's loop until none is left: thread me's
  // own chunks in order, then, from the thread after it on, the others' that their
  // owners have not claimed yet (a thread the OS keeps off its core leaves its chunks
  // to the others). Each counter holds the generation beside the next chunk, so a
  // worker that wakes after its loop ended can never claim a chunk of the next one.
  // Returns how many it ran.
  std::size_t drain(std::size_t me, std::uint32_t generation, std::size_t chunks,
                    const std::function<void(std::size_t)>& chunk) {
    std::size_t ran = 0;
    for (std::size_t k = 0; k < threads_; ++k) {
      const std::size_t owner = (me + k) % threads_;
      std::atomic<std::uint64_t>& next = cursors_[owner].next;
      const std::size_t end = first_chunk(owner + 1, chunks);
      for (std::size_t c = 0; claim(next, generation, end, c); ++ran) {
        const auto started = Clock::now();
        try {
          chunk(c);
        } catch (...) {
          std::lock_guard lock(mutex_);
          if (!error_) error_ = std::current_exception();
        }
        // Before the chunk counts as done: the caller reads it once none is left.
        const auto busy = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - started);
        cursors_[me].busy_ns.fetch_add(busy.count(), std::memory_order_relaxed);
        if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          std::lock_guard lock(mutex_);  // the caller checks left_ under it: no lost wake-up
          if (caller_waiting_) done_.notify_one();
        }
      }
    }
    return ran;
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

  void work(std::size_t me, std::uint32_t seen) {
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
      if (job) drain(me, seen, chunks, *job);
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
  // The caller's alone: sharing_pays()'s balance, when it was last decayed, the counts.
  double balance_us_ = 0;
  Clock::time_point balance_at_ = Clock::now();
  ParallelStats stats_;
  // Per thread (0 the caller, 1.. the workers), on a cache line of its own:
  // (generation << 32) | the next unclaimed chunk of its own range, and the time
  // the thread spent in chunks of the current loop.
  struct alignas(64) Cursor {
    std::atomic<std::uint64_t> next{0};
    std::atomic<std::int64_t> busy_ns{0};
  };
  std::size_t threads_ = 1;
  std::unique_ptr<Cursor[]> cursors_ = std::make_unique<Cursor[]>(1);
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

ParallelStats parallel_stats() { return t_pool ? t_pool->stats() : ParallelStats{}; }

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

int threads_that_pay(int requested, double step_flops, double flops_per_extra_thread) {
  const double paying = 1 + std::floor(std::max(0.0, step_flops) / flops_per_extra_thread);
  return paying >= requested ? requested : std::max(1, static_cast<int>(paying));
}

void parallel_tasks(const std::vector<std::function<void()>>& tasks) {
  if (tasks.size() > 1 && threads() <= static_cast<int>(tasks.size())) {
    parallel_for(tasks.size(), 1, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) tasks[i]();
    }, /*calls_gemm=*/true);
    return;
  }
  for (const auto& task : tasks) task();
}

}  // namespace headroom
