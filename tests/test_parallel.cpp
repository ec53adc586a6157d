// parallel_for (autograd/parallel.hpp) and the per-op profile (autograd/profile.hpp).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "autograd/gemm.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"
#include "autograd/profile.hpp"
#include "autograd/random.hpp"

namespace hr = headroom;

namespace {
// Standard normal values (nn's normal_init is not linked here).
xt::xarray<float> normal(const hr::Shape& shape, double, hr::Rng& rng) {
  xt::xarray<float> a = xt::empty<float>(shape);
  for (auto& x : a) x = static_cast<float>(rng.normal());
  return a;
}

// Restores one thread when a test ends, whatever it set.
struct ThreadsGuard {
  ~ThreadsGuard() { hr::set_threads(1); }
};
}  // namespace

TEST_CASE("parallel_for covers 0..n-1 once, in parallel_chunks() contiguous chunks, on up to threads() threads") {
  ThreadsGuard guard;
  for (const int threads : {1, 2, 3}) {
    hr::set_threads(threads);
    CHECK(hr::threads() == threads);
    for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{1000}}) {
      CAPTURE(threads);
      CAPTURE(n);
      std::vector<int> hits(n, 0);
      std::mutex m;
      std::set<std::pair<std::size_t, std::size_t>> chunks;
      std::set<std::thread::id> ids;
      hr::parallel_for(n, 1, [&](std::size_t begin, std::size_t end) {
        REQUIRE(begin < end);
        for (std::size_t i = begin; i < end; ++i) ++hits[i];  // chunks are disjoint: no race
        std::lock_guard lock(m);
        chunks.emplace(begin, end);
        ids.insert(std::this_thread::get_id());
      });
      for (std::size_t i = 0; i < n; ++i) CHECK(hits[i] == 1);
      const std::size_t expected =
          std::min(n, threads == 1 ? std::size_t{1} : hr::kChunksPerThread * static_cast<std::size_t>(threads));
      CHECK(hr::parallel_chunks(n, 1) == expected);
      CHECK(chunks.size() == expected);
      // Chunk c is [c n / chunks, (c + 1) n / chunks), whichever thread claimed it.
      std::size_t c = 0;
      for (const auto& [begin, end] : chunks) {
        CHECK(begin == c * n / expected);
        CHECK(end == (c + 1) * n / expected);
        ++c;
      }
      CHECK(ids.size() <= static_cast<std::size_t>(threads));
    }
  }
  hr::set_threads(2);
  CHECK(hr::parallel_chunks(0, 1) == 0);
  CHECK(hr::parallel_chunks(100, 30) == 3);  // none shorter than min_chunk
  CHECK(hr::parallel_chunks(100, 200) == 1);
}

TEST_CASE("a loop's chunks are shared out dynamically: a slow thread takes fewer") {
  // One chunk on the worker sleeps long; the caller's thread claims the rest meanwhile.
  ThreadsGuard guard;
  hr::set_threads(2);
  const auto caller = std::this_thread::get_id();
  bool worker_slept = false;
  for (int attempt = 0; attempt < 100 && !worker_slept; ++attempt) {
    std::atomic<int> on_caller{0}, on_worker{0};
    hr::parallel_for(4, 1, [&](std::size_t, std::size_t) {
      if (std::this_thread::get_id() == caller) {
        ++on_caller;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      } else {
        ++on_worker;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    CHECK(on_caller + on_worker == 4);
    if (on_worker == 1) {
      worker_slept = true;
      CHECK(on_caller == 3);
    }
  }
  CHECK(worker_slept);
}

TEST_CASE("after waiting long for a late worker, the pool keeps the next loops on the caller, then shares again") {
  // The late worker stands for one that another process kept off its core.
  ThreadsGuard guard;
  hr::set_threads(2);
  const auto caller = std::this_thread::get_id();
  // The chunks the worker ran, when the caller ran the other promptly. The pool
  // estimates the loop's time alone from the caller's own chunk, so a loop in which
  // the caller was kept off its core (as under a loaded ctest -j2, or the sanitizers)
  // proves nothing and is tried again: one in which the worker ran both chunks
  // (nothing to estimate from), or one in which the caller's 0.3 ms chunk took more
  // than 2 ms (its sleep woke late: it then estimates a loop alone at over 4 ms, and
  // the worker's 5 ms no longer count as a loss).
  const auto loop = [&](bool worker_late) {
    std::atomic<int> on_worker{0}, on_caller{0};
    std::atomic<bool> caller_prompt{true};
    hr::parallel_for(2, 1, [&](std::size_t, std::size_t) {
      if (std::this_thread::get_id() == caller) {  // slow enough that the worker claims the other chunk
        ++on_caller;
        const auto started = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        if (std::chrono::steady_clock::now() - started > std::chrono::milliseconds(2)) caller_prompt = false;
        return;
      }
      ++on_worker;
      if (worker_late) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
    return on_caller.load() > 0 && caller_prompt.load() ? on_worker.load() : 0;
  };
  // Until the worker takes a chunk and is late with it.
  int late_loops = 0;
  const hr::ParallelStats before = hr::parallel_stats();
  while (late_loops < 1000 && loop(true) == 0) ++late_loops;
  REQUIRE(late_loops < 1000);
  // The late loop lost about 5 ms against the caller's 0.3 ms alone (it had
  // 0.3 ms of its own and would have done 0.6 ms alone), and it was counted.
  const hr::ParallelStats after = hr::parallel_stats();
  CHECK(after.shared > before.shared);
  CHECK(after.lost_ms - before.lost_ms > 3.0);
  // The next 16 loops run every chunk on the caller's thread, with the same chunks.
  for (int i = 0; i < 16; ++i) {
    CAPTURE(i);
    std::vector<std::pair<std::size_t, std::size_t>> chunks;
    hr::parallel_for(10, 1, [&](std::size_t begin, std::size_t end) {
      CHECK(std::this_thread::get_id() == caller);
      CHECK(hr::in_parallel_region());
      chunks.emplace_back(begin, end);
    });
    CHECK(chunks.size() == hr::parallel_chunks(10, 1));
  }
  CHECK(hr::parallel_stats().kept >= after.kept + 16);
  // Then it shares again: the loss decays by half every 10 ms, so within a few
  // hundred loops of 0.3 ms the worker takes chunks.
  int shared = 0;
  for (int i = 0; i < 500 && shared == 0; ++i) shared = loop(false);
  CHECK(shared > 0);
}

TEST_CASE("parallel_stats times the shared loops, the threads' time in their chunks, and the kept loops") {
  ThreadsGuard guard;
  hr::set_threads(1);
  CHECK(hr::parallel_stats().shared_ms == 0);
  CHECK(hr::parallel_stats().busy_ms == 0);
  CHECK(hr::parallel_stats().kept_ms == 0);
  hr::set_threads(2);
  // Two chunks, one of 1 ms and one of 25 ms: they take at least 26 ms of thread time,
  // and the loop's wall time covers each chunk. On two threads the threads wait
  // 2 * wall - busy >= (long chunk) - (short chunk) in it; on one, 2 * wall - busy >=
  // both chunks. Sleeps never end early; they may end late (a loaded machine wakes
  // the short one ms late), so the waiting bound is 4 ms, which a short chunk would
  // have to overrun by 20 ms to break.
  const auto loop = [] {
    hr::parallel_for(2, 1, [](std::size_t begin, std::size_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(begin == 0 ? 1 : 25));
    });
  };
  // Until one loop is shared (the pool may keep a loop on the caller after one lost).
  hr::ParallelStats before, after;
  for (int i = 0; i < 20; ++i) {
    before = hr::parallel_stats();
    loop();
    after = hr::parallel_stats();
    const double shared = after.shared_ms - before.shared_ms, busy = after.busy_ms - before.busy_ms;
    CAPTURE(i);
    CAPTURE(shared);
    CAPTURE(busy);
    if (after.shared > before.shared) {
      CHECK(after.kept_ms == before.kept_ms);
      CHECK(shared >= 25.0);
      CHECK(busy >= 26.0);
      CHECK(busy <= 2 * shared);  // no thread is in a chunk outside the loop
      CHECK(2 * shared - busy >= 4.0);
      return;
    }
    // Kept on the caller: both chunks in one thread's wall time, no shared time.
    CHECK(after.kept_ms - before.kept_ms >= 26.0);
    CHECK(shared == 0);
    CHECK(busy == 0);
  }
  FAIL("no loop of 20 was shared");
}

TEST_CASE("parallel_tasks runs each task once: one per thread when there are no more threads than tasks") {
  ThreadsGuard guard;
  for (const int threads : {1, 2, 3}) {
    CAPTURE(threads);
    hr::set_threads(threads);
    std::vector<std::thread::id> ran_on(2);
    std::vector<int> runs(2, 0);
    std::vector<bool> inside(2, false);
    const auto task = [&](std::size_t i) {
      return [&, i] {
        ++runs[i];
        ran_on[i] = std::this_thread::get_id();
        inside[i] = hr::in_parallel_region();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // long enough for a worker to claim the other
      };
    };
    hr::parallel_tasks({task(0), task(1)});
    CHECK(runs == std::vector<int>{1, 1});
    // Two threads: the tasks are chunks (a gemm() inside one runs unsplit). One or
    // three: one after the other on the caller, each free to use every thread.
    CHECK(inside[0] == (threads == 2));
    CHECK(inside[1] == (threads == 2));
    if (threads != 2) {
      CHECK(ran_on[0] == std::this_thread::get_id());
      CHECK(ran_on[1] == std::this_thread::get_id());
    }
  }
  hr::set_threads(2);
  int runs = 0;
  hr::parallel_tasks({[&] { ++runs; }});  // a single task: on the caller, outside any region
  CHECK(runs == 1);
  hr::parallel_tasks({});
}

TEST_CASE("gemm split into panels on 2 and 3 threads equals gemm on 1 thread, and repeats exactly") {
  // C = alpha op(A) op(B) + beta C over both split directions (tall C: rows; wide C:
  // columns), every transpose, panel edges that are not multiples of 16, in float
  // and double; large enough that every panel holds kMinGemmPanelMacs. The last
  // case has kWholeShareMacs per thread on 2 threads: one panel per thread.
  ThreadsGuard guard;
  struct Case {
    std::size_t m, n, k;
  };
  const Case cases[] = {{1000, 70, 40}, {70, 1000, 40}, {333, 333, 64}, {4, 900, 300}, {1030, 1000, 530}};
  static_assert(1030 * 1000 * 530 >= 2 * hr::kWholeShareMacs && 1030 * 1000 * 530 < 3 * hr::kWholeShareMacs);
  const auto check = [&]<typename T>(T) {
    hr::Rng rng(11);
    for (const Case& s : cases) {
      for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
          CAPTURE(s.m);
          CAPTURE(s.n);
          CAPTURE(s.k);
          CAPTURE(ta);
          CAPTURE(tb);
          const std::size_t lda = ta ? s.m + 3 : s.k + 3, ldb = tb ? s.k + 2 : s.n + 2, ldc = s.n + 1;
          std::vector<T> a((ta ? s.k : s.m) * lda), b((tb ? s.n : s.k) * ldb), c0(s.m * ldc);
          for (auto& x : a) x = static_cast<T>(rng.normal());
          for (auto& x : b) x = static_cast<T>(rng.normal());
          for (auto& x : c0) x = static_cast<T>(rng.normal());
          std::vector<std::vector<T>> results;
          for (const int threads : {1, 2, 3, 2}) {
            hr::set_threads(threads);
            std::vector<T> c = c0;
            hr::gemm<T>(ta, tb, s.m, s.n, s.k, T(0.75), a.data(), lda, b.data(), ldb, T(0.5), c.data(), ldc);
            results.push_back(std::move(c));
          }
          // BLIS may pick other kernels for a panel than for the whole product (its
          // small-matrix path has size thresholds: with the zen3 kernels a float
          // panel of fewer than 512 rows takes it and the whole 1030 rows do not),
          // and they block and order the sum over k differently. So across thread
          // counts the results agree to rounding; with the same count, exactly.
          // The rounding: each result is alpha sum_p a_ip b_pj + beta c_ij, each of
          // whose k + 1 terms passes through at most k + 2 roundings (its product or
          // FMA, the sums it is carried through, the scaling by alpha or beta), in
          // whatever order; so it is within gamma_(k+2) S_ij of the exact value, where
          // S_ij = |alpha| sum_p |a_ip b_pj| + |beta c_ij| and gamma_n = n u / (1 - n u),
          // u = epsilon / 2 (Higham, Accuracy and Stability of Numerical Algorithms,
          // 3.1). Two results differ by at most 2 gamma_(k+2) S_ij, below
          // (k + 3) epsilon S_ij: the extra epsilon S_ij covers 1 / (1 - n u) and the
          // rounding of S itself (a GEMM of absolute values) while k^2 epsilon is
          // well below 1, as it is for these k.
          CHECK(results[1] == results[3]);
          std::vector<T> abs_a = a, abs_b = b, bound = c0;
          for (auto* v : {&abs_a, &abs_b, &bound}) {
            for (auto& x : *v) x = std::abs(x);
          }
          hr::library_gemm<T>(ta, tb, s.m, s.n, s.k, T(0.75), abs_a.data(), lda, abs_b.data(), ldb, T(0.5),
                              bound.data(), ldc);
          for (auto& x : bound) x *= static_cast<T>(s.k + 3) * std::numeric_limits<T>::epsilon();
          for (std::size_t t = 1; t <= 2; ++t) {
            std::size_t beyond = 0, last = 0;  // elements beyond their bound (or NaN), and the last of them
            for (std::size_t i = 0; i < results[0].size(); ++i) {
              if (!(std::abs(results[0][i] - results[t][i]) <= bound[i])) {
                ++beyond;
                last = i;
              }
            }
            CAPTURE(t);
            CAPTURE(last);
            CAPTURE(results[0][last]);
            CAPTURE(results[t][last]);
            CAPTURE(bound[last]);
            CHECK(beyond == 0);
          }
          // And it is the product: one element per row against a plain dot product.
          for (std::size_t i = 0; i < s.m; i += 37) {
            const std::size_t j = (i * 7) % s.n;
            long double dot = 0;
            for (std::size_t p = 0; p < s.k; ++p) {
              const T x = ta ? a[p * lda + i] : a[i * lda + p];
              const T y = tb ? b[j * ldb + p] : b[p * ldb + j];
              dot += static_cast<long double>(x) * y;
            }
            const long double want = 0.75L * dot + 0.5L * c0[i * ldc + j];
            CHECK(std::abs(static_cast<long double>(results[0][i * ldc + j]) - want) <=
                  (sizeof(T) == 4 ? 1e-3L : 1e-10L) * (1 + std::abs(want)));
          }
        }
      }
    }
  };
  check(float{});
  check(double{});
  // The cases split: with 2 threads each has more than one panel.
  hr::set_threads(2);
  CHECK(hr::parallel_chunks((1000 + 15) / 16, 1, true) > 1);
}

TEST_CASE("parallel_for: min_chunk keeps short loops on one thread, and nested loops run serially") {
  ThreadsGuard guard;
  hr::set_threads(2);
  int chunks = 0;
  hr::parallel_for(10, 8, [&](std::size_t begin, std::size_t end) {
    CHECK(begin == 0);
    CHECK(end == 10);
    ++chunks;
  });
  CHECK(chunks == 1);
  std::atomic<int> inner_chunks{0};
  hr::parallel_for(2, 1, [&](std::size_t, std::size_t) {
    CHECK(hr::in_parallel_region());
    hr::parallel_for(100, 1, [&](std::size_t begin, std::size_t end) {
      CHECK(begin == 0);
      CHECK(end == 100);
      ++inner_chunks;
    });
  });
  CHECK(inner_chunks == 2);  // one serial inner loop per outer chunk
  CHECK_FALSE(hr::in_parallel_region());
}

TEST_CASE("parallel_for rethrows a chunk's exception after every chunk finished") {
  ThreadsGuard guard;
  hr::set_threads(2);
  std::atomic<int> finished{0};
  const auto run = [&] {
    hr::parallel_for(2, 1, [&](std::size_t begin, std::size_t) {
      if (begin == 1) throw std::runtime_error("chunk 1 failed");
      ++finished;
    });
  };
  CHECK_THROWS_WITH_AS(run(), "chunk 1 failed", std::runtime_error);
  CHECK(finished == 1);
  // The pool still works afterwards.
  std::atomic<int> again{0};
  hr::parallel_for(2, 1, [&](std::size_t, std::size_t) { ++again; });
  CHECK(again == 2);
}

TEST_CASE("threads that train side by side each have their own pool (ablate --jobs)") {
  // Two trainers in one process, each setting its own thread count and running
  // loops at the same time, as `headroom ablate --jobs 2 --threads 2` does.
  std::atomic<bool> ok{true};
  const auto trainer = [&](int threads) {
    hr::set_threads(threads);
    for (int round = 0; round < 50; ++round) {
      std::vector<int> hits(1000, 0);
      hr::parallel_for(hits.size(), 1, [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) ++hits[i];
      });
      for (int h : hits) ok = ok && h == 1;
      if (round % 10 == 0) hr::set_threads(threads);  // resizing one's pool leaves the other's alone
    }
    hr::set_threads(1);
  };
  std::thread a(trainer, 2), b(trainer, 3);
  a.join();
  b.join();
  CHECK(ok);
  CHECK(hr::threads() == 1);  // this thread's count was never touched
}

TEST_CASE("set_threads refuses fewer than one thread, naming the value") {
  CHECK_THROWS_WITH_AS(hr::set_threads(0), "set_threads: threads must be at least 1, got 0", std::invalid_argument);
  CHECK(hr::threads() >= 1);
}

TEST_CASE("attention gives the same values and gradients on 1 and 2 threads") {
  ThreadsGuard guard;
  using F = hr::Tensor<float>;
  const std::size_t B = 3, T = 40, H = 4, G = 2, dk = 8;
  hr::Rng rng(5);
  const xt::xarray<float> q = normal({B, T, H * dk}, 1.0, rng);
  const xt::xarray<float> k = normal({B, T, G * dk}, 1.0, rng);
  const xt::xarray<float> v = normal({B, T, G * dk}, 1.0, rng);
  const xt::xarray<float> upstream = normal({B, T, H * dk}, 1.0, rng);
  struct Result {
    xt::xarray<float> out, gq, gk, gv;
  };
  const auto run = [&](int threads) {
    hr::set_threads(threads);
    F tq(q, true), tk(k, true), tv(v, true);
    const F out = hr::attention(tq, tk, tv, {.n_heads = H, .n_kv_heads = G, .scale = 0.35f, .causal = true});
    out.backward(upstream);
    return Result{out.value(), tq.grad(), tk.grad(), tv.grad()};
  };
  const Result one = run(1);
  const Result two = run(2);
  // Each (batch, kv head) pair does the same arithmetic on either thread count.
  CHECK(xt::allclose(one.out, two.out, 1e-6, 1e-7));
  CHECK(xt::allclose(one.gq, two.gq, 1e-6, 1e-7));
  CHECK(xt::allclose(one.gk, two.gk, 1e-6, 1e-7));
  CHECK(xt::allclose(one.gv, two.gv, 1e-6, 1e-7));
}

TEST_CASE("linear's bias gradient is the same on 1, 2 and 3 threads, bit for bit, and the column sums") {
  // bias_grad (ops_matmul.cpp) sums fixed blocks of rows, then the blocks in order:
  // the thread count changes who sums a block, never the order of the additions.
  ThreadsGuard guard;
  using F = hr::Tensor<float>;
  const std::size_t rows = 1000, in = 24, out = 40;  // 8 blocks of up to 128 rows
  hr::Rng rng(7);
  const xt::xarray<float> x = normal({rows, in}, 1.0, rng);
  const xt::xarray<float> w = normal({out, in}, 1.0, rng);
  const xt::xarray<float> b = normal({out}, 1.0, rng);
  const xt::xarray<float> upstream = normal({rows, out}, 1.0, rng);
  std::vector<xt::xarray<float>> db;
  for (const int threads : {1, 2, 3}) {
    hr::set_threads(threads);
    F tx(x), tw(w), tb(b, true);
    hr::linear(tx, tw, tb).backward(upstream);
    db.push_back(tb.grad());
  }
  CHECK(db[0] == db[1]);
  CHECK(db[0] == db[2]);
  for (std::size_t o = 0; o < out; ++o) {
    double want = 0;
    for (std::size_t r = 0; r < rows; ++r) want += upstream(r, o);
    CHECK(std::abs(db[0](o) - want) <= 1e-4 * (1 + std::abs(want)));
  }
}

TEST_CASE("OpProfile counts each op's forward and backward calls and times them") {
  using D = hr::Tensor<double>;
  hr::OpProfile profile;
  CHECK(hr::OpProfile::active() == &profile);
  D x(xt::xarray<double>{{1.0, -2.0}, {0.5, 3.0}}, true);
  profile.lap();
  const D y = hr::sum(hr::mul(hr::exp(x), x));
  y.backward();
  profile.section("(outside the tape)", [] {});
  const std::vector<hr::OpTiming> rows = profile.timings();
  const auto find = [&](const std::string& name) {
    for (const auto& r : rows) {
      if (r.name == name) return r;
    }
    FAIL("no row for " << name);
    return hr::OpTiming{};
  };
  for (const char* op : {"exp", "mul", "sum"}) {
    CAPTURE(op);
    const hr::OpTiming r = find(op);
    CHECK(r.forward_calls == 1);
    CHECK(r.backward_calls == 1);
    CHECK(r.forward_ms >= 0);
    CHECK(r.backward_ms >= 0);
  }
  CHECK(find("(outside the tape)").forward_calls == 1);
  CHECK(find("(outside the tape)").backward_calls == 0);
  // Sorted by total time, largest first.
  for (std::size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i - 1].forward_ms + rows[i - 1].backward_ms >= rows[i].forward_ms + rows[i].backward_ms);
  }
  CHECK_THROWS_AS(hr::OpProfile(), std::logic_error);  // one per thread
}

TEST_CASE("without an OpProfile no op is timed") {
  CHECK(hr::OpProfile::active() == nullptr);
}

TEST_CASE("each thread claims its own share of a loop's chunks first: the same rows on the same core") {
  // 2 threads, 4 chunks: the caller owns chunks 0 and 1, the worker 2 and 3; either
  // takes the other's unclaimed chunks once its own are done.
  ThreadsGuard guard;
  hr::set_threads(2);
  const auto caller = std::this_thread::get_id();
  int worker_ran = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::mutex m;
    std::vector<std::size_t> on_worker;
    std::thread::id first_owner;
    hr::parallel_for(4, 1, [&](std::size_t begin, std::size_t) {
      {
        std::lock_guard lock(m);
        if (begin == 0) first_owner = std::this_thread::get_id();
        if (std::this_thread::get_id() != caller) on_worker.push_back(begin);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    });
    CHECK(first_owner == caller);  // the caller starts with its own first chunk
    if (!on_worker.empty()) {
      ++worker_ran;
      CHECK(on_worker.front() >= 2);  // the worker starts in its own share
    }
  }
  CHECK(worker_ran > 0);
}
