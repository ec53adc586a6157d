// The fused ops of Llama-style blocks (autograd/ops_modern.cpp) against their
// composed twins (autograd/composed.hpp), in float on one input shape: the median
// time of the forward alone and of forward plus backward (a non-uniform upstream
// gradient) over --reps runs. A benchmark, never a test (bench/README.md).
//
//     cmake --build build -j2 --target modern_ops_bench
//     build/bench/modern_ops_bench --reps 200 [--threads N] [--op rope] [--heads H]
//
// --heads: rope's heads over the 128 channels (default 4, of width 32; 8 is the
// `llama` config's width 16).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/composed.hpp"
#include "autograd/memory.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"

namespace hr = headroom;
using F = hr::Tensor<float>;

namespace {

xt::xarray<float> uniform(const hr::Shape& shape, hr::Rng& rng, double lo, double hi) {
  xt::xarray<float> a = xt::empty<float>(shape);
  for (auto& e : a) e = static_cast<float>(rng.uniform(lo, hi));
  return a;
}

// Median milliseconds of `reps` calls of f, after a few untimed ones.
double median_ms(const std::function<void()>& f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 100, threads = 1;
  std::size_t H = 4;  // rope: heads over the C channels
  std::string only;  // --op NAME: one op only
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--op") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--heads") == 0) H = static_cast<std::size_t>(std::max(1, std::atoi(argv[i + 1])));
  }
  hr::set_threads(threads);
  hr::retain_freed_memory();  // as `headroom train`: no page faults for the same buffers each call
  const std::size_t B = 32, T = 64, C = 128;  // (B, T, C)
  if (C % H != 0 || (C / H) % 2 != 0) {
    std::fprintf(stderr, "modern_ops_bench: --heads %zu must divide %zu channels into heads of even width\n", H, C);
    return 2;
  }
  hr::Rng rng(1);
  const hr::Shape s{B, T, C};
  F x(uniform(s, rng, -3, 3), true), g2(uniform(s, rng, -3, 3), true), w(uniform({C}, rng, 0.5, 1.5), true);
  const xt::xarray<float> up = uniform(s, rng, -1, 1);

  using Op = std::function<F()>;
  struct Row {
    const char* name;
    Op fused, composed;
  };
  const Row rows[] = {
      {"sigmoid", [&] { return hr::sigmoid(x); }, [&] { return hr::composed::sigmoid(x); }},
      {"rms_norm", [&] { return hr::rms_norm(x, w, 1e-5f); }, [&] { return hr::composed::rms_norm(x, w, 1e-5f); }},
      {"swiglu", [&] { return hr::swiglu(x, g2); }, [&] { return hr::composed::swiglu(x, g2); }},
      {"rope", [&] { return hr::rope(x, H, 10000.0, 0); }, [&] { return hr::composed::rope(x, H, 10000.0, 0); }},
  };
  std::printf("input (%zu, %zu, %zu) float, rope %zu heads of %zu, %d threads, median of %d reps, ms\n", B, T, C, H,
              C / H, threads, reps);
  std::printf("%-9s %10s %10s %7s %12s %12s %7s\n", "op", "fused fwd", "comp fwd", "ratio", "fused f+b",
              "comp f+b", "ratio");
  for (const Row& r : rows) {
    if (!only.empty() && only != r.name) continue;
    auto fwd = [](const Op& op) {
      return [&op] {
        hr::NoGrad no_grad;
        op();
      };
    };
    auto fwd_bwd = [&up](const Op& op) {
      return [&op, &up] { op().backward(up); };
    };
    const double ff = median_ms(fwd(r.fused), reps), cf = median_ms(fwd(r.composed), reps);
    const double fb = median_ms(fwd_bwd(r.fused), reps), cb = median_ms(fwd_bwd(r.composed), reps);
    std::printf("%-9s %10.3f %10.3f %7.2f %12.3f %12.3f %7.2f\n", r.name, ff, cf, cf / ff, fb, cb, cb / fb);
  }
  return 0;
}
