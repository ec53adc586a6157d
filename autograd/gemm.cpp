#include "autograd/gemm.hpp"

#include <cblas.h>  // BLIS's or OpenBLAS's (autograd/CMakeLists.txt)
#ifdef HEADROOM_BLAS_BLIS
#include <blis.h>
#endif

namespace headroom {
namespace {

#ifdef HEADROOM_BLAS_BLIS
using blasint = f77_int;
#endif

CBLAS_TRANSPOSE flag(bool t) { return t ? CblasTrans : CblasNoTrans; }
blasint to_int(std::size_t v) { return static_cast<blasint>(v); }
// BLAS requires leading dimensions of at least 1, even for empty operands.
blasint to_ld(std::size_t v) { return static_cast<blasint>(v == 0 ? 1 : v); }

// Handles the shapes BLAS rejects or need not see: nothing to write (m or n zero),
// or an empty inner dimension, where C = beta * C. Returns true if it did the work.
template <typename T>
bool degenerate_gemm(std::size_t m, std::size_t n, std::size_t k, T beta, T* c, std::size_t ldc) {
  if (m == 0 || n == 0) return true;
  if (k != 0) return false;
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  }
  return true;
}

}  // namespace

template <>
void gemm<float>(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                 float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                 float beta, float* c, std::size_t ldc) {
  if (degenerate_gemm(m, n, k, beta, c, ldc)) return;
  cblas_sgemm(CblasRowMajor, flag(trans_a), flag(trans_b), to_int(m), to_int(n), to_int(k), alpha,
              a, to_ld(lda), b, to_ld(ldb), beta, c, to_ld(ldc));
}

template <>
void gemm<double>(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                  double alpha, const double* a, std::size_t lda, const double* b,
                  std::size_t ldb, double beta, double* c, std::size_t ldc) {
  if (degenerate_gemm(m, n, k, beta, c, ldc)) return;
  cblas_dgemm(CblasRowMajor, flag(trans_a), flag(trans_b), to_int(m), to_int(n), to_int(k), alpha,
              a, to_ld(lda), b, to_ld(ldb), beta, c, to_ld(ldc));
}

#ifdef HEADROOM_BLAS_BLIS
void set_blas_threads(int threads) { bli_thread_set_num_threads(threads); }
#else
void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
#endif

}  // namespace headroom
