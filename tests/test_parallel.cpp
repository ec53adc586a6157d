// parallel_for (autograd/parallel.hpp) and the per-op profile (autograd/profile.hpp).
#include <doctest/doctest.h>

#include <atomic>
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

TEST_CASE("parallel_for covers 0..n-1 once, in contiguous chunks, on up to threads() threads") {
  ThreadsGuard guard;
  for (const int threads : {1, 2, 3}) {
    hr::set_threads(threads);
    CHECK(hr::threads() == threads);
    for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{1000}}) {
      CAPTURE(threads);
      CAPTURE(n);
      std::vector<int> hits(n, 0);
      std::atomic<int> chunks{0};
      std::mutex m;
      std::set<std::thread::id> ids;
      hr::parallel_for(n, 1, [&](std::size_t begin, std::size_t end) {
        REQUIRE(begin < end);
        for (std::size_t i = begin; i < end; ++i) ++hits[i];  // chunks are disjoint: no race
        ++chunks;
        std::lock_guard lock(m);
        ids.insert(std::this_thread::get_id());
      });
      for (std::size_t i = 0; i < n; ++i) CHECK(hits[i] == 1);
      const int expected = static_cast<int>(std::min<std::size_t>(n, static_cast<std::size_t>(threads)));
      CHECK(chunks == expected);
      CHECK(ids.size() == static_cast<std::size_t>(expected));
    }
  }
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
