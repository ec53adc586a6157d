// small_gemm_bench: attention's per-head GEMMs in the BLAS library (gemm) and in
// headroom's small_gemm, side by side, one thread, float. For each benchmark
// config and each product the fused attention op does per causal block of 32 query
// rows, it prints the FLOP rate of both and their ratio (bench/README.md).
//
// Legend: T = sequence length, d = d_k = d_v, keys = the block's visible keys.
//
// Then the deep products gemm() runs as small_gemm over chunks of k (linear's
// weight gradients, gemm.hpp kDeepGemmChunk) against the library alone.
//
// Last, transpose_into (the contiguous W^T and K^T, V^T copies that linear and
// attention hand these products) against the plain loop it replaced, element by
// element in 16 x 16 tiles, on the shapes of the benchmark configs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/gemm.hpp"
#include "autograd/parallel.hpp"
#include "autograd/random.hpp"
#include "autograd/small_gemm.hpp"

namespace hr = headroom;

namespace {

struct Product {
  std::string what;
  bool trans_a;
  std::size_t m, n, k;
};

// Best time of 15 repetitions of `inner` calls, in seconds per call.
template <typename F>
double best_seconds(F&& f, int inner) {
  double best = 1e300;
  for (int rep = 0; rep < 15; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / inner);
  }
  return best;
}

// One table row: the product through the GEMM library alone (library_gemm) and
// through small_gemm, the FLOP rate of each (billions a second) and their ratio.
void time_product(const char* config, std::size_t x, std::size_t y, const Product& p, const std::vector<float>& a,
                  const std::vector<float>& b, std::vector<float>& c) {
  const std::size_t lda = p.trans_a ? p.m : p.k;
  const double flops = 2.0 * static_cast<double>(p.m * p.n * p.k);
  const int inner = static_cast<int>(std::max(1.0, 2e7 / flops));
  // The two alternate three times, the best of each kept: a VM's speed drifts
  // between phases of a few seconds, and a single timing of each can put one
  // product's ratio on either side of 1.
  double blas = 1e300, small = 1e300;
  for (int round = 0; round < 3; ++round) {
    blas = std::min(blas, best_seconds(
                              [&] {
                                hr::library_gemm<float>(p.trans_a, false, p.m, p.n, p.k, 1.f, a.data(), lda,
                                                        b.data(), p.n, 0.f, c.data(), p.n);
                              },
                              inner));
    small = std::min(small, best_seconds(
                                [&] {
                                  hr::small_gemm<float>(p.trans_a, p.m, p.n, p.k, 1.f, a.data(), lda, b.data(), p.n,
                                                        0.f, c.data(), p.n);
                                },
                                inner));
  }
  std::printf("| %s (%zu, %zu) | %s | %zu x %zu x %zu | %.1f | %.1f | %.2f |\n", config, x, y, p.what.c_str(), p.m,
              p.n, p.k, flops / blas / 1e9, flops / small / 1e9, blas / small);
}

// The element-by-element tile loop transpose_into ran before its register blocks:
// the reference the table compares against.
void transpose_plain(float* dst, const float* src, std::size_t rows, std::size_t cols, std::size_t ld) {
  constexpr std::size_t tile = 16;
  for (std::size_t i0 = 0; i0 < rows; i0 += tile) {
    const std::size_t i1 = std::min(rows, i0 + tile);
    for (std::size_t j0 = 0; j0 < cols; j0 += tile) {
      const std::size_t j1 = std::min(cols, j0 + tile);
      for (std::size_t j = j0; j < j1; ++j) {
        for (std::size_t i = i0; i < i1; ++i) dst[j * rows + i] = src[i * ld + j];
      }
    }
  }
}

struct Transpose {
  std::string what;
  std::size_t rows, cols, ld;
};

// One table row: GB/s (bytes read and written) of the plain loop and of
// transpose_into, and their ratio. The two alternate, 3 times each.
void time_transpose(const Transpose& t, const std::vector<float>& src, std::vector<float>& dst) {
  const double bytes = 2.0 * static_cast<double>(t.rows * t.cols * sizeof(float));
  const int inner = static_cast<int>(std::max(1.0, 2e7 / bytes));
  double plain = 1e300, fast = 1e300;
  for (int round = 0; round < 3; ++round) {
    plain = std::min(plain, best_seconds([&] { transpose_plain(dst.data(), src.data(), t.rows, t.cols, t.ld); }, inner));
    fast = std::min(fast, best_seconds([&] { hr::transpose_into(dst.data(), src.data(), t.rows, t.cols, t.ld); }, inner));
  }
  std::printf("| %s | (%zu, %zu), ld %zu | %.1f | %.1f | %.2f |\n", t.what.c_str(), t.rows, t.cols, t.ld,
              bytes / plain / 1e9, bytes / fast / 1e9, plain / fast);
}

}  // namespace

int main() {
  hr::set_threads(1);
  hr::Rng rng(0);
  std::vector<float> a(2048 * 2048), b(2048 * 2048), c(2048 * 2048);
  for (auto* v : {&a, &b}) {
    for (auto& x : *v) x = static_cast<float>(rng.normal());
  }
  std::printf("| config (T, d) | product | m x n x k | BLAS GFLOP/s | small_gemm GFLOP/s | ratio |\n");
  std::printf("|---|---|---|---:|---:|---:|\n");
  struct Config {
    const char* name;
    std::size_t T, d;
  };
  for (const Config cfg : {Config{"tiny", 32, 16}, Config{"small", 64, 16}, Config{"medium", 128, 32},
                           Config{"large", 256, 64}}) {
    const std::size_t keys = cfg.T;  // the last (largest) causal block
    const std::size_t rows = std::min<std::size_t>(32, cfg.T);
    const std::vector<Product> products{
        {"scores Q K^T", false, rows, keys, cfg.d}, {"out P V", false, rows, cfg.d, keys},
        {"dP = dO V^T", false, rows, keys, cfg.d},  {"dV += P^T dO", true, keys, cfg.d, rows},
        {"dQ = dS K", false, rows, cfg.d, keys},    {"dK += dS^T Q", true, keys, cfg.d, rows}};
    for (const Product& p : products) time_product(cfg.name, cfg.T, cfg.d, p, a, b, c);
  }
  // linear()'s products for tiny, small and medium: rows = B T, C = d_model, F = 4 C.
  std::printf("\n| config (rows, C) | linear product | m x n x k | BLAS GFLOP/s | small_gemm GFLOP/s | ratio |\n");
  std::printf("|---|---|---|---:|---:|---:|\n");
  struct Linear {
    const char* name;
    std::size_t rows, C;
  };
  for (const Linear cfg : {Linear{"tiny", 512, 64}, Linear{"small", 2048, 128}, Linear{"medium", 2048, 256},
                           Linear{"large", 2048, 512}}) {
    const std::size_t r = cfg.rows, C = cfg.C, F = 4 * cfg.C;
    const std::vector<Product> products{
        {"y = x W^T (C -> C)", false, r, C, C},   {"y = x W^T (C -> 4C)", false, r, F, C},
        {"y = x W^T (4C -> C)", false, r, C, F},  {"dx = g W (C -> C)", false, r, C, C},
        {"dx = g W (C -> 4C)", false, r, C, F},   {"dx = g W (4C -> C)", false, r, F, C},
        {"dW = g^T x (C -> C)", true, C, C, r},   {"dW = g^T x (C -> 4C)", true, F, C, r},
        {"dW = g^T x (4C -> C)", true, C, F, r}};
    for (const Product& p : products) time_product(cfg.name, r, C, p, a, b, c);
  }
  // Widths that are not whole 64-byte vectors: llama's SwiGLU (d_ff 344 = 21.5
  // vectors of 16 floats) and an odd model width (72 = 4.5), whose row tails
  // small_gemm runs in half and quarter vectors.
  const std::vector<Product> tails{{"y = x W^T (C -> d_ff 344), dx of the down projection", false, 2048, 344, 128},
                                   {"y = x W^T (72 -> 72)", false, 2048, 72, 72}};
  for (const Product& p : tails) time_product("not whole 64-byte rows", p.m, p.k, p, a, b, c);

  // Deep products: linear's dW = g^T x, (out, rows) x (rows, in), or dW^T = x^T g
  // where the layer narrows (linear's dw_as_transpose), at rows = B T = 2048.
  std::printf("\n| deep product (rows 2048) | m x n x k | library GFLOP/s | gemm() GFLOP/s | ratio |\n");
  std::printf("|---|---|---:|---:|---:|\n");
  // A widening layer's dW and the narrowing one's dW^T are the same product.
  const std::vector<Product> deep{{"small dW (C -> C)", true, 128, 128, 2048},
                                  {"small dW (C -> 4C), dW^T (4C -> C)", true, 512, 128, 2048},
                                  {"llama dW^T (C -> kv 32)", true, 128, 32, 2048},
                                  {"llama dW (C -> d_ff 344), dW^T (d_ff 344 -> C)", true, 344, 128, 2048},
                                  {"medium dW (C -> C)", true, 256, 256, 2048}};
  for (const Product& p : deep) {
    const double flops = 2.0 * static_cast<double>(p.m * p.n * p.k);
    const int inner = static_cast<int>(std::max(1.0, 2e7 / flops));
    double lib = 1e300, ours = 1e300;
    for (int round = 0; round < 3; ++round) {
      lib = std::min(lib, best_seconds([&] { hr::library_gemm<float>(true, false, p.m, p.n, p.k, 1.f, a.data(), p.m,
                                                                      b.data(), p.n, 0.f, c.data(), p.n); }, inner));
      ours = std::min(ours, best_seconds([&] { hr::gemm<float>(true, false, p.m, p.n, p.k, 1.f, a.data(), p.m,
                                                                b.data(), p.n, 0.f, c.data(), p.n); }, inner));
    }
    std::printf("| %s | %zu x %zu x %zu | %.1f | %.1f | %.2f |\n", p.what.c_str(), p.m, p.n, p.k, flops / lib / 1e9,
                flops / ours / 1e9, lib / ours);
  }

  // transpose_into: linear's W^T, (out, in) -> (in, out), and attention's K^T of one
  // kv head, (T, d) of a row of G d -> (d, T). dst's rows are `rows` floats apart;
  // from 256 (1 KiB) on, the copy is staged through a buffer (autograd/gemm.cpp).
  std::printf("\n| copy | src (rows, cols) | plain loop GB/s | transpose_into GB/s | ratio |\n");
  std::printf("|---|---|---:|---:|---:|\n");
  const std::vector<Transpose> copies{{"small W^T (C -> C)", 128, 128, 128},
                                      {"small W^T (C -> 4C)", 512, 128, 128},
                                      {"llama W^T (C -> kv 32)", 32, 128, 128},
                                      {"llama W^T (C -> d_ff 344)", 344, 128, 128},
                                      {"llama W^T (d_ff 344 -> C)", 128, 344, 344},
                                      {"medium W^T (C -> C)", 256, 256, 256},
                                      {"medium W^T (C -> 4C)", 1024, 256, 256},
                                      {"small K^T (T 64, d 16, 8 heads)", 64, 16, 128},
                                      {"llama K^T (T 64, d 16, 2 kv heads)", 64, 16, 32},
                                      {"medium K^T (T 128, d 32, 8 heads)", 128, 32, 256},
                                      {"large K^T (T 256, d 64, 8 heads)", 256, 64, 512}};
  for (const Transpose& t : copies) time_transpose(t, a, c);
  return 0;
}
