// small_gemm (autograd/small_gemm.hpp) against a plain triple loop in long double,
// on shapes that exercise every edge of its blocking: rows not a multiple of 4,
// columns not a multiple of the vector width, k = 0, padded strides, both layouts
// of A, and beta 0 (C not read) or not.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "autograd/gemm.hpp"
#include "autograd/random.hpp"
#include "autograd/small_gemm.hpp"

namespace hr = headroom;

namespace {

template <typename T>
void check_shapes(T tolerance) {
  hr::Rng rng(9);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t m = 1 + rng.below(13), n = 1 + rng.below(40), k = rng.below(21);
    const bool trans_a = rng.below(2) == 1;
    const std::size_t lda = (trans_a ? m : k) + rng.below(3), ldb = n + rng.below(3), ldc = n + rng.below(3);
    const T alpha = static_cast<T>(rng.below(2) ? 0.7 : 1.0);
    const T beta = static_cast<T>(rng.below(3) == 0 ? 0.0 : (rng.below(2) ? 1.0 : -0.5));
    std::vector<T> a((trans_a ? k : m) * lda + 1), b(k * ldb + 1), c(m * ldc + 1);
    for (auto& x : a) x = static_cast<T>(rng.normal());
    for (auto& x : b) x = static_cast<T>(rng.normal());
    for (auto& x : c) x = beta == T(0) ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(rng.normal());
    const std::vector<T> c0 = c;
    hr::small_gemm<T>(trans_a, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < ldc; ++j) {
        const std::size_t at = i * ldc + j;
        CAPTURE(trial);
        CAPTURE(std::string(trans_a ? "A^T" : "A"));
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(i);
        CAPTURE(j);
        if (j >= n) {  // padding between rows is never written
          CHECK((std::isnan(c[at]) ? std::isnan(c0[at]) : c[at] == c0[at]));
          continue;
        }
        long double want = 0;
        for (std::size_t p = 0; p < k; ++p) {
          const T av = trans_a ? a[p * lda + i] : a[i * lda + p];
          want += static_cast<long double>(av) * b[p * ldb + j];
        }
        want *= alpha;
        if (beta != T(0)) want += static_cast<long double>(beta) * c0[at];
        CHECK(std::abs(static_cast<long double>(c[at]) - want) <= tolerance * (1 + std::abs(want)));
      }
    }
  }
}

}  // namespace

TEST_CASE("small_gemm equals a triple loop in float, on every blocking edge") { check_shapes<float>(2e-5f); }

TEST_CASE("small_gemm equals a triple loop in double, on every blocking edge") { check_shapes<double>(1e-13); }

// headroom's choice of BLIS's kernels (autograd/gemm.cpp) does not leak into the
// environment of processes started from this one: BLIS_ARCH_TYPE is set only when
// the user set it.
TEST_CASE("choosing BLIS's kernels leaves BLIS_ARCH_TYPE as the user left it") {
  const headroom::GemmLibrary& library = headroom::gemm_library();
  CHECK(!library.name.empty());
  if (library.kernels.empty()) return;  // OpenBLAS
  INFO(library.describe());
  CHECK((std::getenv("BLIS_ARCH_TYPE") != nullptr) == (library.chosen_by == "BLIS_ARCH_TYPE"));
}

// transpose_into copies in tiles (autograd/gemm.cpp): every shape around the tile's
// edges, with a padded row stride, gives exactly src^T and writes nothing else.
TEST_CASE("transpose_into gives src transposed on every tile edge") {
  for (const std::size_t rows : {1, 15, 16, 17, 33, 256}) {
    for (const std::size_t cols : {1, 7, 16, 31, 64}) {
      const std::size_t ld = cols + 5;
      std::vector<double> src(rows * ld);
      for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<double>(i) * 0.5 - 3;
      std::vector<double> dst(cols * rows + 1, -99);
      hr::transpose_into(dst.data(), src.data(), rows, cols, ld);
      CAPTURE(rows);
      CAPTURE(cols);
      bool exact = true;
      for (std::size_t i = 0; i < rows; ++i) {
        for (std::size_t j = 0; j < cols; ++j) exact = exact && dst[j * rows + i] == src[i * ld + j];
      }
      CHECK(exact);
      CHECK(dst.back() == -99);
    }
  }
}
