#include "autograd/small_gemm.hpp"

#include <cstring>
#include <type_traits>

#include "autograd/fast_math.hpp"

namespace headroom {
namespace {

// Each block of C is kRows rows by one vector of 64 bytes (16 floats, 8 doubles):
// kRows accumulators stay in registers while the loop over k streams one row of B
// and broadcasts kRows values of A. GCC lowers the 64-byte vector type to one
// AVX-512 register, two AVX2 ones or four SSE2 ones, whichever the clone targets.
constexpr std::size_t kRows = 4;

template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(64)));
  typedef T unaligned __attribute__((vector_size(64), aligned(sizeof(T))));
  static constexpr std::size_t lanes = 64 / sizeof(T);
};

// Rows [i, i + R) and columns [j, j + w) of C, w <= lanes; Full: w == lanes, so
// whole vectors are loaded and stored (otherwise the partial row is copied in and
// out through a zeroed vector).
template <typename T, bool TransA, std::size_t R, bool Full>
[[gnu::always_inline]] inline void block(std::size_t i, std::size_t j, std::size_t w, std::size_t k, T alpha,
                                         const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c,
                                         std::size_t ldc) {
  using V = typename Vec<T>::type;
  using U = typename Vec<T>::unaligned;
  V acc[R] = {};
  for (std::size_t p = 0; p < k; ++p) {
    V bv;
    if constexpr (Full) {
      bv = *reinterpret_cast<const U*>(b + p * ldb + j);
    } else {
      bv = V{};
      std::memcpy(&bv, b + p * ldb + j, w * sizeof(T));
    }
    for (std::size_t r = 0; r < R; ++r) {
      const T av = TransA ? a[p * lda + i + r] : a[(i + r) * lda + p];
      acc[r] += av * bv;
    }
  }
  for (std::size_t r = 0; r < R; ++r) {
    T* cr = c + (i + r) * ldc + j;
    V out = alpha * acc[r];
    if constexpr (Full) {
      if (beta != T(0)) out += beta * static_cast<V>(*reinterpret_cast<const U*>(cr));
      *reinterpret_cast<U*>(cr) = out;
    } else {
      if (beta != T(0)) {
        V old = V{};
        std::memcpy(&old, cr, w * sizeof(T));
        out += beta * old;
      }
      std::memcpy(cr, &out, w * sizeof(T));
    }
  }
}

template <typename T, bool TransA, std::size_t R>
[[gnu::always_inline]] inline void row_panel(std::size_t i, std::size_t n, std::size_t k, T alpha, const T* a,
                                             std::size_t lda, const T* b, std::size_t ldb, T beta, T* c,
                                             std::size_t ldc) {
  constexpr std::size_t L = Vec<T>::lanes;
  std::size_t j = 0;
  for (; j + L <= n; j += L) block<T, TransA, R, true>(i, j, L, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (j < n) block<T, TransA, R, false>(i, j, n - j, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T, bool TransA>
[[gnu::always_inline]] inline void kernel(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                                          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c,
                                          std::size_t ldc) {
  std::size_t i = 0;
  for (; i + kRows <= m; i += kRows) row_panel<T, TransA, kRows>(i, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  for (; i < m; ++i) row_panel<T, TransA, 1>(i, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

HEADROOM_CLONES void kernel_f32(bool trans_a, std::size_t m, std::size_t n, std::size_t k, float alpha,
                                const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                                std::size_t ldc) {
  if (trans_a) {
    kernel<float, true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    kernel<float, false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

HEADROOM_CLONES void kernel_f64(bool trans_a, std::size_t m, std::size_t n, std::size_t k, double alpha,
                                const double* a, std::size_t lda, const double* b, std::size_t ldb, double beta,
                                double* c, std::size_t ldc) {
  if (trans_a) {
    kernel<double, true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    kernel<double, false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace

template <typename T>
void small_gemm(bool trans_a, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    kernel_f32(trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    kernel_f64(trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

template void small_gemm(bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t, const float*,
                         std::size_t, float, float*, std::size_t);
template void small_gemm(bool, std::size_t, std::size_t, std::size_t, double, const double*, std::size_t,
                         const double*, std::size_t, double, double*, std::size_t);

}  // namespace headroom
