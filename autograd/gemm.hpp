// Row-major GEMM through OpenBLAS: C = alpha * op(A) op(B) + beta * C, where op(X)
// is X or X^T. op(A) is (m, k), op(B) is (k, n), C is (m, n); ld* are row strides.
// Kept in its own translation unit so <cblas.h> meets no xtensor-blas header.
#pragma once

#include <cstddef>

namespace headroom {

template <typename T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
          const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

// Threads OpenBLAS may use for each GEMM (the trainer's --threads).
void set_blas_threads(int threads);

}  // namespace headroom
