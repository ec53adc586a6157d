#include "autograd/small_gemm.hpp"

#include <cstring>
#include <vector>

namespace headroom {
namespace {

// Each block of C is R rows by NV vectors of VB bytes: R * NV accumulators stay in
// registers while the loop over k streams NV vectors of one row of B and broadcasts
// R values of A. Each instruction set gets the vector width of its registers and as
// many accumulators as its register file holds beside the B vectors and the
// broadcast (docs/internals.md, "fast loops"): on AVX-512, 8 rows of two 64-byte
// vectors (16 of 32 registers; 4 independent multiply-adds per row are too few to
// hide the FMA latency), on AVX2 with FMA 6 rows of two 32-byte vectors (12 of 16),
// on the SSE2 baseline 4 rows of two 16-byte ones. (A 64-byte vector on AVX2 is
// split by GCC through the stack.)
template <typename T, std::size_t VB>
struct Vec {
  typedef T type __attribute__((vector_size(VB)));
  typedef T unaligned __attribute__((vector_size(VB), aligned(sizeof(T))));
  static constexpr std::size_t lanes = VB / sizeof(T);
};

// out = alpha acc (in `out`) + beta old (in `scaled_old`), the last step of a block
// where beta is not 0, rounded alike in every block: a row of C gets the same bits in
// a block of R rows or of 1, packed or not, and so gemm()'s panels of rows give the
// bits of one call. GCC contracts a product and a sum into one FMA (-ffp-contract=fast,
// its default for GNU C++), and here it had two products to choose from; which one
// it fused depended on how it had optimised the block (whether it had unswitched the
// block's loops on beta != 0), and on AVX2 a row's last, partial columns came out
// differently in a block of 6 rows and in a block of 1. So both products are rounded
// and hidden from GCC (an empty asm, which GCC must assume changes them) before the
// sum. The loop over k has one product per sum, which GCC fuses in every block alike
// wherever the vector width has an FMA (with its default tuning: -mtune=znver* keeps
// a loop that carries a single sum unfused, and a block of one row and one vector then
// rounds differently). Vectors go by reference: GCC warns that a function without
// AVX would pass them by value differently.
template <typename V>
[[gnu::always_inline]] inline void add_unfused(V& out, V& scaled_old) {
  asm("" : "+x"(out), "+x"(scaled_old));
  out += scaled_old;
}

// Rows [i, i + R) and columns [j, j + w) of C, w <= NV lanes; Full: w == NV lanes,
// so whole vectors are loaded and stored (otherwise the partial row is copied in and
// out through zeroed vectors).
template <typename T, std::size_t VB, std::size_t NV, bool TransA, std::size_t R, bool Full>
[[gnu::always_inline]] inline void block(std::size_t i, std::size_t j, std::size_t w, std::size_t k, T alpha,
                                         const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c,
                                         std::size_t ldc) {
  using V = typename Vec<T, VB>::type;
  using U = typename Vec<T, VB>::unaligned;
  constexpr std::size_t L = Vec<T, VB>::lanes;
  V acc[R][NV] = {};
  for (std::size_t p = 0; p < k; ++p) {
    V bv[NV];
    if constexpr (Full) {
      for (std::size_t v = 0; v < NV; ++v) bv[v] = *reinterpret_cast<const U*>(b + p * ldb + j + v * L);
    } else {
      for (std::size_t v = 0; v < NV; ++v) bv[v] = V{};
      std::memcpy(&bv[0], b + p * ldb + j, w * sizeof(T));
    }
    for (std::size_t r = 0; r < R; ++r) {
      const T av = TransA ? a[p * lda + i + r] : a[(i + r) * lda + p];
      for (std::size_t v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
    }
  }
  for (std::size_t r = 0; r < R; ++r) {
    T* cr = c + (i + r) * ldc + j;
    if constexpr (Full) {
      for (std::size_t v = 0; v < NV; ++v) {
        V out = alpha * acc[r][v];
        if (beta != T(0)) {  // (a store in each branch: with one after them, GCC ran beta = 0 slower)
          V scaled_old = beta * static_cast<V>(*reinterpret_cast<const U*>(cr + v * L));
          add_unfused(out, scaled_old);
          *reinterpret_cast<U*>(cr + v * L) = out;
        } else {
          *reinterpret_cast<U*>(cr + v * L) = out;
        }
      }
    } else {
      V out[NV];
      for (std::size_t v = 0; v < NV; ++v) out[v] = alpha * acc[r][v];
      if (beta != T(0)) {
        V old[NV];
        for (std::size_t v = 0; v < NV; ++v) old[v] = V{};
        std::memcpy(&old[0], cr, w * sizeof(T));
        for (std::size_t v = 0; v < NV; ++v) {
          V scaled_old = beta * old[v];
          add_unfused(out[v], scaled_old);
        }
      }
      std::memcpy(cr, &out[0], w * sizeof(T));
    }
  }
}

// Rows [i, i + R) of C: blocks of NV vectors, then one of a single vector where a
// whole one is left, then one of a half and one of a quarter vector (down to 16
// bytes) where they fit, then the partial rest. The narrower whole vectors keep
// widths that are whole 16-byte vectors, such as SwiGLU's d_ff of 344 floats (21
// vectors of 16 and one of 8), off the partial block, whose copies in and out
// for every step of k made that product slower than the library.
// With `packed` (pack_panels), the blocks of NV vectors read their columns of B from
// it, k rows of NV vectors one after the other, instead of from B itself.
template <typename T, std::size_t VB, std::size_t NV, bool TransA, std::size_t R>
[[gnu::always_inline]] inline void row_panel(std::size_t i, std::size_t n, std::size_t k, T alpha, const T* a,
                                             std::size_t lda, const T* b, std::size_t ldb, const T* packed, T beta,
                                             T* c, std::size_t ldc) {
  constexpr std::size_t L = Vec<T, VB>::lanes;
  constexpr std::size_t W = NV * L;
  std::size_t j = 0;
  if (packed != nullptr) {
    for (; j + W <= n; j += W) {
      block<T, VB, NV, TransA, R, true>(i, 0, W, k, alpha, a, lda, packed + j * k, W, beta, c + j, ldc);
    }
  }
  for (; j + W <= n; j += W) block<T, VB, NV, TransA, R, true>(i, j, W, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if constexpr (NV > 1) {
    for (; j + L <= n; j += L) block<T, VB, 1, TransA, R, true>(i, j, L, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  if constexpr (VB >= 32 && VB / 2 >= sizeof(T)) {
    if (j + L / 2 <= n) {
      block<T, VB / 2, 1, TransA, R, true>(i, j, L / 2, k, alpha, a, lda, b, ldb, beta, c, ldc);
      j += L / 2;
    }
  }
  if constexpr (VB >= 64 && VB / 4 >= sizeof(T)) {
    if (j + L / 4 <= n) {
      block<T, VB / 4, 1, TransA, R, true>(i, j, L / 4, k, alpha, a, lda, b, ldb, beta, c, ldc);
      j += L / 4;
    }
  }
  if (j < n) block<T, VB, 1, TransA, R, false>(i, j, n - j, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Every row of C. (A function, not a lambda: a lambda's body is not compiled for the
// target of the function it sits in, and once too large to inline it would run the
// vectors of the generic baseline.)
template <typename T, std::size_t VB, std::size_t NV, std::size_t R, bool TransA>
[[gnu::always_inline]] inline void all_rows(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                                            std::size_t lda, const T* b, std::size_t ldb, const T* packed, T beta,
                                            T* c, std::size_t ldc) {
  std::size_t i = 0;
  for (; i + R <= m; i += R) row_panel<T, VB, NV, TransA, R>(i, n, k, alpha, a, lda, b, ldb, packed, beta, c, ldc);
  if constexpr (R > 4) {
    for (; i + 4 <= m; i += 4) {
      row_panel<T, VB, NV, TransA, 4>(i, n, k, alpha, a, lda, b, ldb, packed, beta, c, ldc);
    }
  }
  for (; i < m; ++i) row_panel<T, VB, NV, TransA, 1>(i, n, k, alpha, a, lda, b, ldb, packed, beta, c, ldc);
}

// B's columns in panels of W, each panel's k rows one after the other (W values
// each), for products where B is wide and read by many blocks of rows: every block
// then streams its panel from consecutive cache lines, where rows of B itself lie
// n values apart. Reading B in place, small_gemm ran medium's products (n = 256,
// B 256 KiB to 1 MiB) a little slower than BLIS's skx kernels, which pack B
// (bench/README.md). Returns nullptr where packing does not pay: fewer than two
// whole panels, or fewer than 8 blocks of rows to read each. The copy holds the
// same values, so the products are the same to the bit.
template <typename T, std::size_t W, std::size_t R>
const T* pack_panels(std::size_t m, std::size_t n, std::size_t k, const T* b, std::size_t ldb) {
  if (n < 2 * W || m < 8 * R) return nullptr;
  thread_local std::vector<T> buffer;
  const std::size_t panels = n / W;
  if (buffer.size() < panels * W * k) buffer.resize(panels * W * k);
  T* out = buffer.data();
  for (std::size_t q = 0; q < panels; ++q) {
    for (std::size_t p = 0; p < k; ++p) std::memcpy(out + (q * k + p) * W, b + p * ldb + q * W, W * sizeof(T));
  }
  return out;
}

template <typename T, std::size_t VB, std::size_t NV, std::size_t R>
[[gnu::always_inline]] inline void kernel(bool trans_a, std::size_t m, std::size_t n, std::size_t k, T alpha,
                                          const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c,
                                          std::size_t ldc) {
  const T* packed = pack_panels<T, NV * Vec<T, VB>::lanes, R>(m, n, k, b, ldb);
  if (trans_a) {
    all_rows<T, VB, NV, R, true>(m, n, k, alpha, a, lda, b, ldb, packed, beta, c, ldc);
  } else {
    all_rows<T, VB, NV, R, false>(m, n, k, alpha, a, lda, b, ldb, packed, beta, c, ldc);
  }
}

#define HEADROOM_SMALL_GEMM_ARGS                                                                                  \
  bool trans_a, std::size_t m, std::size_t n, std::size_t k, T alpha, const T *a, std::size_t lda, const T *b, \
      std::size_t ldb, T beta, T *c, std::size_t ldc
#define HEADROOM_SMALL_GEMM_PASS trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc

template <typename T>
void kernel_baseline(HEADROOM_SMALL_GEMM_ARGS) {
  kernel<T, 16, 2, 4>(HEADROOM_SMALL_GEMM_PASS);
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
template <typename T>
__attribute__((target("avx2,fma"))) void kernel_avx2(HEADROOM_SMALL_GEMM_ARGS) {
  kernel<T, 32, 2, 6>(HEADROOM_SMALL_GEMM_PASS);
}
template <typename T>
__attribute__((target("avx512f"))) void kernel_avx512(HEADROOM_SMALL_GEMM_ARGS) {
  kernel<T, 64, 2, 8>(HEADROOM_SMALL_GEMM_PASS);
}

// The widest kernel the CPU runs, picked once.
template <typename T>
void (*pick_kernel())(HEADROOM_SMALL_GEMM_ARGS) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return &kernel_avx512<T>;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &kernel_avx2<T>;
  return &kernel_baseline<T>;
}
#else
template <typename T>
void (*pick_kernel())(HEADROOM_SMALL_GEMM_ARGS) {
  return &kernel_baseline<T>;
}
#endif

}  // namespace

template <typename T>
void small_gemm(bool trans_a, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  static const auto run = pick_kernel<T>();
  run(trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template void small_gemm(bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t, const float*,
                         std::size_t, float, float*, std::size_t);
template void small_gemm(bool, std::size_t, std::size_t, std::size_t, double, const double*, std::size_t,
                         const double*, std::size_t, double, double*, std::size_t);

}  // namespace headroom
