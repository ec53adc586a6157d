// core_scaling: how much faster this machine runs N independent copies of a loop
// on N threads than one copy on one thread, for three loops that bound what a
// training step at --threads N can gain (bench/README.md).
// A benchmark, never a test.
//
//     cmake --build build -j2 --target core_scaling
//     build/bench/core_scaling [--threads 2] [--reps 9] [--seconds 0.3]
//
// The loops, each thread on its own data, nothing shared:
// - gemm: headroom's small_gemm on a (128, 128) x (128, 128) float product whose
//   operands stay in the core's L2, the products a model's linear layers are made of,
//   at their instruction mix (AVX-512 FMAs here);
// - fma: twelve independent chains of fused multiply-adds in registers, in the widest
//   vectors the CPU has: the arithmetic alone, no memory;
// - stream: c = a + s b over three arrays of 16 MiB per thread (past L3 for two): the
//   memory-bound ops (norms, activations, residual adds, the optimizer).
// Each rep times one thread running the loop `iters` times and N threads each running
// it `iters` times, in swapped order every rep; the speedup is N t_1 / t_N (N for
// perfect scaling). A CPU whose cores share power or frequency headroom, or vCPUs whose
// host shares cores, shows it here.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "autograd/fast_math.hpp"
#include "autograd/small_gemm.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// One copy of a loop: set up its own data, then run `iters` passes when called.
struct Loop {
  std::string name;
  std::function<std::function<void(long)>()> make;  // per thread: allocate, return the pass runner
};

constexpr std::size_t kGemmN = 128;

std::function<void(long)> make_gemm() {
  auto a = std::make_shared<std::vector<float>>(kGemmN * kGemmN, 0.5f);
  auto b = std::make_shared<std::vector<float>>(kGemmN * kGemmN, 0.25f);
  auto c = std::make_shared<std::vector<float>>(kGemmN * kGemmN, 0.0f);
  return [a, b, c](long iters) {
    for (long i = 0; i < iters; ++i) {
      headroom::small_gemm<float>(false, kGemmN, kGemmN, kGemmN, 1.0f, a->data(), kGemmN, b->data(), kGemmN,
                                  0.0f, c->data(), kGemmN);
    }
  };
}

// Twelve chains, each one FMA per iteration: enough independent work to fill the
// FMA pipes, with nothing read from or written to memory.
HEADROOM_CLONES __attribute__((noinline)) float fma_chains(long iters) {
  constexpr int kChains = 12, kLanes = 16;
  float acc[kChains][kLanes];
  for (int i = 0; i < kChains; ++i)
    for (int l = 0; l < kLanes; ++l) acc[i][l] = 1.0f + static_cast<float>(i * kLanes + l) * 1e-7f;
  for (long t = 0; t < iters; ++t)
    for (int i = 0; i < kChains; ++i)
      for (int l = 0; l < kLanes; ++l) acc[i][l] = acc[i][l] * 0.9999999f + 1e-7f;
  float s = 0;
  for (int i = 0; i < kChains; ++i)
    for (int l = 0; l < kLanes; ++l) s += acc[i][l];
  return s;
}

std::function<void(long)> make_fma() {
  return [](long iters) {
    volatile float sink = fma_chains(iters * 1000);
    (void)sink;
  };
}

constexpr std::size_t kStreamFloats = std::size_t(16) << 20 >> 2;  // 16 MiB

std::function<void(long)> make_stream() {
  auto a = std::make_shared<std::vector<float>>(kStreamFloats, 1.0f);
  auto b = std::make_shared<std::vector<float>>(kStreamFloats, 2.0f);
  auto c = std::make_shared<std::vector<float>>(kStreamFloats, 0.0f);
  return [a, b, c](long iters) {
    for (long i = 0; i < iters; ++i) {
      const float* pa = a->data();
      const float* pb = b->data();
      float* pc = c->data();
      for (std::size_t j = 0; j < kStreamFloats; ++j) pc[j] = pa[j] + 0.5f * pb[j];
    }
  };
}

// Seconds for `threads` threads each running its own copy `iters` times, from a common start.
double timed(const std::vector<std::function<void(long)>>& copies, int threads, long iters) {
  std::vector<std::thread> pool;
  const auto t0 = Clock::now();
  for (int t = 1; t < threads; ++t) pool.emplace_back([&copies, t, iters] { copies[t](iters); });
  copies[0](iters);
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"How much faster N threads run N independent copies of a GEMM, an FMA loop and a streaming loop "
               "than one thread runs one: the machine's ceiling for --threads N (bench/README.md)"};
  int threads = 2, reps = 9;
  double seconds = 0.3;
  app.add_option("--threads", threads, "threads to compare with one, 2 to 64 (default 2)")->check(CLI::Range(2, 64));
  app.add_option("--reps", reps, "alternating timings of 1 and N threads per loop, 1 to 1000 (default 9)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--seconds", seconds, "about how long one thread runs a loop per timing, 0.01 to 10 (default 0.3)")
      ->check(CLI::Range(0.01, 10.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "core_scaling: error: %s\n", e.what());
    return 2;
  }

  const std::vector<Loop> loops{{"gemm (small_gemm 128 x 128 x 128, float)", make_gemm},
                                {"fma (12 register chains, widest vectors)", make_fma},
                                {"stream (c = a + s b, 3 x 16 MiB per thread)", make_stream}};
  const unsigned cpus = std::thread::hardware_concurrency();
  std::fprintf(stderr, "core_scaling: %d threads against 1, %d reps per loop, %u CPUs\n", threads, reps, cpus);

  std::vector<std::string> rows;
  for (const Loop& loop : loops) {
    std::vector<std::function<void(long)>> copies;
    for (int t = 0; t < threads; ++t) copies.push_back(loop.make());
    for (auto& c : copies) c(1);  // touch the data, warm the code
    // Passes for about `seconds` on one thread, from a short calibration.
    long iters = 1;
    for (double s = timed(copies, 1, iters); s < seconds / 8; s = timed(copies, 1, iters)) iters *= 2;
    iters = std::max(1L, static_cast<long>(static_cast<double>(iters) * seconds / timed(copies, 1, iters)));
    std::vector<double> one, many, speedup;
    for (int r = 0; r < reps; ++r) {
      double t1, tn;
      if (r % 2 == 0) {
        t1 = timed(copies, 1, iters);
        tn = timed(copies, threads, iters);
      } else {
        tn = timed(copies, threads, iters);
        t1 = timed(copies, 1, iters);
      }
      one.push_back(t1);
      many.push_back(tn);
      speedup.push_back(threads * t1 / tn);
      std::fprintf(stderr, "[%s] rep %d/%d: 1 thread %.3f s, %d threads %.3f s, speedup %.2f\n",
                   loop.name.c_str(), r + 1, reps, t1, threads, tn, speedup.back());
    }
    const auto [lo, hi] = std::minmax_element(speedup.begin(), speedup.end());
    rows.push_back(fmt::format("| {} | {:.3f} | {:.3f} | **{:.2f}** ({:.2f}-{:.2f}) |", loop.name, median(one),
                               median(many), median(speedup), *lo, *hi));
  }
  std::printf("%d threads each running its own copy of a loop against 1 thread running one copy: median over %d "
              "alternating timings (min-max in brackets); %d would be perfect scaling. %u CPUs.\n\n",
              threads, reps, threads, cpus);
  std::printf("| loop | 1 thread s | %d threads s | speedup |\n|---|---:|---:|---:|\n", threads);
  for (const auto& r : rows) std::printf("%s\n", r.c_str());
  return 0;
}
