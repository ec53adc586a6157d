// Row-major GEMM through the BLAS library (BLIS or OpenBLAS): C = alpha * op(A) op(B) + beta * C, where op(X)
// is X or X^T. op(A) is (m, k), op(B) is (k, n), C is (m, n); ld* are row strides.
// Kept in its own translation unit so <cblas.h> meets no xtensor-blas header.
#pragma once

#include <cstddef>
#include <string>

namespace headroom {

template <typename T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
          const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

// The same product through the GEMM library alone, on this thread (BLIS) or on
// OpenBLAS's threads: never small_gemm, never split. For benchmarks against it.
template <typename T>
void library_gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                  std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

// dst (cols, rows) = src^T for src (rows, cols) with row stride ld: a contiguous
// transposed operand, for products the GEMM code runs faster on it than on a
// transposed flag (attention's K^T and V^T, linear's W^T for narrow inputs).
template <typename T>
void transpose_into(T* dst, const T* src, std::size_t rows, std::size_t cols, std::size_t ld);

// With BLIS, gemm() on several threads (set_threads) splits C into panels that the
// threads claim one by one (parallel.hpp), each a serial BLIS GEMM, when every
// panel gets at least this many multiply-adds: below it, handing a panel to another
// thread costs more than it saves. With OpenBLAS, the library threads each GEMM.
inline constexpr std::size_t kMinGemmPanelMacs = std::size_t{1} << 19;

// A GEMM with at least this many multiply-adds per thread is split into one panel
// per thread instead of parallel.hpp's kChunksPerThread: each panel re-packs the
// operand it shares, and for products this large fewer, larger panels pack it less
// often and run faster (large's forward products; bench/README.md). A thread slowed
// by another process then cannot hand over part of its panel; the pool's balance
// (design.md#threads) keeps such loops on one thread instead.
inline constexpr std::size_t kWholeShareMacs = std::size_t{1} << 28;

// gemm() hands a product with an untransposed B to small_gemm (small_gemm.hpp)
// instead of the library when B (k, n) is at most kSmallGemmMaxK x kSmallGemmMaxN
// and fills at most half of this core's L2 cache (small_gemm_max_b_bytes): there
// its register-blocked loop, reading B from cache for every block of rows, runs
// linear's products of the tiny, small and medium configs faster than BLIS 0.9.
// A larger B is evicted between blocks of rows, and the library, which packs B into
// panels, wins (bench/small_gemm_bench.cpp, bench/README.md).
// And when B's rows are whole 16-byte vectors: small_gemm copies what is left after
// them in and out for every step of k, and is slower than the library there.
// (A row's tail runs in half and quarter vectors, so any width of whole 16-byte
// vectors, such as SwiGLU's d_ff of 344 floats, stays on the fast path.)
inline constexpr std::size_t kSmallGemmMaxN = 512, kSmallGemmMaxK = 1024, kSmallGemmRowBytes = 16;
std::size_t small_gemm_max_b_bytes();  // half the L2 cache (sysconf), 512 KiB when unknown
bool small_gemm_fits(std::size_t n, std::size_t k, std::size_t element_bytes);
// Deep products, k beyond kSmallGemmMaxK with C at most kDeepGemmMaxM x
// kSmallGemmMaxN, go to small_gemm in chunks of kDeepGemmChunk of k, each adding
// into C, when a chunk of B fits (small_gemm_fits). These are linear's weight
// gradients, summed over all B T rows: each chunk of B stays in cache while every
// block of C's rows reads it, and the chunks run faster than BLIS alone
// (bench/small_gemm_bench.cpp, "deep products", bench/README.md). A wider C, and
// chunks of 1024 rows, ran slower than the library: hence both limits.
inline constexpr std::size_t kDeepGemmChunk = 512, kDeepGemmMaxM = 512;
bool deep_gemm_fits(std::size_t m, std::size_t n, std::size_t k, std::size_t element_bytes);
// Products whose B is beyond half of L2 go to small_gemm too, when its packed path
// runs them (small_gemm.cpp, pack_panels: B's column panels, two vectors wide,
// copied once per product, so that a block of rows reads only its panel, k x 32
// floats, not B): A untransposed with at least kPackedGemmMinM rows, B's rows at
// least kPackedGemmMinRowBytes and at most kSmallGemmMaxN wide, k at most kPackedGemmMaxK.
// There (medium's and large's forward and dx products, B 1 to 4 MiB) it runs at
// least as fast as BLIS's skx kernels (small_gemm_bench, linear's tables;
// bench/README.md). A wider B was not faster on every CPU, and a transposed A (the
// weight gradients, summed over k = B T rows) was slower: both stay with BLIS.
inline constexpr std::size_t kPackedGemmMinM = 64, kPackedGemmMinRowBytes = 256, kPackedGemmMaxK = 2048;
bool packed_gemm_fits(bool trans_a, std::size_t m, std::size_t n, std::size_t k, std::size_t element_bytes);

// What headroom reads of the CPU to choose BLIS's kernels (autograd/gemm.cpp).
struct CpuFacts {
  bool amd = false, intel = false;
  bool avx512 = false;  // AVX-512 F, DQ, CD, BW and VL: the subsets BLIS's skx kernels use
  std::string brand;    // CPUID's brand string, e.g. "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"
};
CpuFacts this_cpu();  // empty facts off x86

// Why headroom chooses BLIS 0.9's AVX-512 'skx' kernels on a CPU with these facts,
// where BLIS itself would run slower ones, or nullptr where BLIS's own choice
// stands: an AMD CPU with AVX-512 (BLIS 0.9 runs its generic kernels), and an Intel
// one with AVX-512 whose brand string names no model number (BLIS counts the FMA
// units from it, finds none and runs its AVX2 haswell kernels). bench/README.md
// has the numbers.
const char* skx_kernels_reason(const CpuFacts& cpu);

// The GEMM library and the kernels it runs, for reports and benchmarks: e.g.
// "BLIS 0.9.0, skx kernels (chosen by headroom: ...)". Initialises the library.
struct GemmLibrary {
  std::string name;         // "BLIS 0.9.0" or "OpenBLAS"
  std::string kernels;      // BLIS's sub-configuration ("skx", "zen3", "generic"); empty for OpenBLAS
  int kernels_id = -1;      // BLIS's arch_t value of it, the number BLIS_ARCH_TYPE takes; -1 for OpenBLAS
  std::string chosen_by;    // why these kernels: "BLIS" (its own detection), "BLIS_ARCH_TYPE" or headroom's reason
  std::string describe() const;
};
const GemmLibrary& gemm_library();

// Threads the GEMM library may use for each GEMM. set_threads() (parallel.hpp)
// calls it; call that instead.
void set_blas_threads(int threads);

// Whether the library can run one GEMM on one thread while others use more: BLIS
// can (a per-call thread count), OpenBLAS 0.3.21 cannot. Inside a parallel_for
// chunk gemm() runs single-threaded where it can.
bool gemm_threads_per_call();

}  // namespace headroom
