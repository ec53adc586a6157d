// GEMMs too small for the BLAS library to run well: attention's per-head products
// (T up to a few hundred, d_k 8 to 64). BLIS 0.9 spends much of such a call in its
// setup, which this register-blocked loop does not have: a (32, 32) x (32, 16)
// product runs several times as fast here (bench/README.md).
//
// C (m, n) = alpha op(A) B + beta C, row-major, where op(A) is A (m, k), row stride
// lda, or, with trans_a, the transpose of a stored (k, m) A. B is (k, n), row stride
// ldb; C row stride ldc. beta = 0 writes C without reading it.
#pragma once

#include <cstddef>

namespace headroom {

template <typename T>
void small_gemm(bool trans_a, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

}  // namespace headroom
