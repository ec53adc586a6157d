#include "autograd/gemm.hpp"

#include "autograd/fast_math.hpp"
#include "autograd/parallel.hpp"
#include "autograd/small_gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cblas.h>  // BLIS's or OpenBLAS's (autograd/CMakeLists.txt)
#ifdef HEADROOM_BLAS_BLIS
#include <blis.h>
#endif

namespace headroom {
namespace {

#ifdef HEADROOM_BLAS_BLIS
// BLIS picks its kernels (a "sub-configuration") once, at its first call, from the
// CPU's vendor, family and model. Debian 12's BLIS 0.9.0 picks slow ones on two
// kinds of CPU with AVX-512 (skx_kernels_reason): so where this BLIS has no AMD
// AVX-512 sub-configuration of its own (a build with zen4 or zen5 chooses alone),
// skx_kernels_reason gives a reason, and the user has not chosen with
// BLIS_ARCH_TYPE, we choose skx through that variable before BLIS reads it.
// It runs during static initialisation, before any code can call BLIS: we set the
// variable, initialise BLIS, which reads it then, and remove it again, so that a
// process started from this one (a Slurm job on another node, a test) chooses for
// its own CPU; a CPU without AVX-512 would die on skx's instructions.
const char* choose_blis_kernels() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(BLIS_CONFIG_SKX) && !defined(BLIS_CONFIG_ZEN4) && \
    !defined(BLIS_CONFIG_ZEN5)
  if (std::getenv("BLIS_ARCH_TYPE") != nullptr) return nullptr;
  const char* reason = skx_kernels_reason(this_cpu());
  if (reason == nullptr) return nullptr;
  if (setenv("BLIS_ARCH_TYPE", std::to_string(static_cast<int>(BLIS_ARCH_SKX)).c_str(), 0) != 0) return nullptr;
  bli_init();
  unsetenv("BLIS_ARCH_TYPE");
  return reason;
#else
  return nullptr;
#endif
}

const char* const g_blis_kernels_chosen = choose_blis_kernels();
#else
CBLAS_TRANSPOSE flag(bool t) { return t ? CblasTrans : CblasNoTrans; }
blasint to_int(std::size_t v) { return static_cast<blasint>(v); }
// BLAS requires leading dimensions of at least 1, even for empty operands.
blasint to_ld(std::size_t v) { return static_cast<blasint>(v == 0 ? 1 : v); }
#endif

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

// One GEMM on this thread alone: small_gemm where it runs faster than the library
// (small_gemm_fits, packed_gemm_fits), else library_gemm.
template <typename T>
void serial_gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                 std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (!trans_b && (small_gemm_fits(n, k, sizeof(T)) || packed_gemm_fits(trans_a, m, n, k, sizeof(T)))) {
    small_gemm<T>(trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (!trans_b && deep_gemm_fits(m, n, k, sizeof(T))) {  // C += op(A)[:, k0:k1] B[k0:k1, :], chunk by chunk
    for (std::size_t k0 = 0; k0 < k; k0 += kDeepGemmChunk) {
      const std::size_t kc = std::min(kDeepGemmChunk, k - k0);
      small_gemm<T>(trans_a, m, n, kc, alpha, trans_a ? a + k0 * lda : a + k0, lda, b + k0 * ldb, ldb,
                    k0 == 0 ? beta : T(1), c, ldc);
    }
    return;
  }
  library_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// C's rows (or columns, when C is wider than tall) in panels of this many, each
// panel one single-threaded GEMM: the split dimension's panels pack their own A (or
// B) rows and share nothing but the read-only other operand.
constexpr std::size_t kPanelUnit = 16;

// One GEMM, split into panels of C that the threads of parallel_for claim one at a
// time (parallel.hpp) when there are several threads and the GEMM is large enough
// for a panel to pay for its claim. Each panel is one serial_gemm, whichever thread
// claims it, so the result depends on the thread count only through the panels.
// With OpenBLAS, whose threads cannot be set per call, only small_gemm's products
// (deep ones included) are split; the library threads the others itself.
template <typename T>
void split_gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  const bool rows = m >= n;  // split the larger side: the other operand is the one every panel re-packs
  const std::size_t side = rows ? m : n, other = rows ? n : m;
  const std::size_t units = (side + kPanelUnit - 1) / kPanelUnit;
  const std::size_t unit_macs = kPanelUnit * other * k;
  std::size_t min_units = std::max<std::size_t>(1, (kMinGemmPanelMacs + unit_macs - 1) / unit_macs);
  // Large products go in one panel per thread, not kChunksPerThread: every panel
  // packs the other operand again, which BLIS does element by element when it is
  // transposed (gemm.hpp, kWholeShareMacs).
  const std::size_t thread_count = static_cast<std::size_t>(threads());
  if (thread_count > 1 && units * unit_macs >= thread_count * kWholeShareMacs) {
    min_units = std::max(min_units, (units + thread_count - 1) / thread_count);
  }
  const bool ours = gemm_threads_per_call() ||
                    (!trans_b &&
                     (small_gemm_fits(n, k, sizeof(T)) || deep_gemm_fits(m, n, k, sizeof(T)) ||
                      packed_gemm_fits(trans_a, m, n, k, sizeof(T))) &&
                     rows);
  if (!ours || in_parallel_region() || parallel_chunks(units, min_units) <= 1) {
    serial_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  parallel_for(units, min_units, [&](std::size_t u0, std::size_t u1) {
    const std::size_t p0 = u0 * kPanelUnit, p1 = std::min(side, u1 * kPanelUnit);
    if (rows) {  // C rows [p0, p1): op(A)'s rows, stored as rows of A or, transposed, its columns
      serial_gemm(trans_a, trans_b, p1 - p0, n, k, alpha, trans_a ? a + p0 : a + p0 * lda, lda, b, ldb, beta,
                  c + p0 * ldc, ldc);
    } else {  // C columns [p0, p1): op(B)'s columns, stored as columns of B or, transposed, its rows
      serial_gemm(trans_a, trans_b, m, p1 - p0, k, alpha, a, lda, trans_b ? b + p0 * ldb : b + p0, ldb, beta,
                  c + p0, ldc);
    }
  });
}

}  // namespace

// The library alone, on this thread (BLIS: a per-call thread count of one) or, with
// OpenBLAS, on its own threads. op(A) is (m, k), so a stored A (row-major, row
// stride lda) is (m, k) or, transposed, (k, m).
template <typename T>
void library_gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                  std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (degenerate_gemm(m, n, k, beta, c, ldc)) return;
#ifdef HEADROOM_BLAS_BLIS
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(1, &rntm);
  // BLIS 0.9.0's small-matrix ("sup") kernels for haswell and zen, which it runs
  // unpacked on products with a small dimension, read past the end of B when n = 1
  // and past A when B is transposed and m is small: a crash whenever the operand ends
  // at a page (tests/test_small_gemm.cpp, "gemm reads no element past its
  // operands"). Its packed path reads exactly the operands; small_gemm already runs
  // most small products ahead of BLIS.
  bli_rntm_disable_l3_sup(&rntm);
  const auto dim = [](std::size_t v) { return static_cast<dim_t>(v); };
  const auto stride = [](std::size_t v) { return static_cast<inc_t>(v == 0 ? 1 : v); };
  T* pa = const_cast<T*>(a);
  T* pb = const_cast<T*>(b);
  const trans_t ta = trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb = trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE;
  if constexpr (std::is_same_v<T, float>) {
    bli_sgemm_ex(ta, tb, dim(m), dim(n), dim(k), &alpha, pa, stride(lda), 1, pb, stride(ldb), 1, &beta, c,
                 stride(ldc), 1, nullptr, &rntm);
  } else {
    bli_dgemm_ex(ta, tb, dim(m), dim(n), dim(k), &alpha, pa, stride(lda), 1, pb, stride(ldb), 1, &beta, c,
                 stride(ldc), 1, nullptr, &rntm);
  }
#else
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, flag(trans_a), flag(trans_b), to_int(m), to_int(n), to_int(k), alpha, a, to_ld(lda),
                b, to_ld(ldb), beta, c, to_ld(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, flag(trans_a), flag(trans_b), to_int(m), to_int(n), to_int(k), alpha, a, to_ld(lda),
                b, to_ld(ldb), beta, c, to_ld(ldc));
  }
#endif
}

template void library_gemm(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,
                           const float*, std::size_t, float, float*, std::size_t);
template void library_gemm(bool, bool, std::size_t, std::size_t, std::size_t, double, const double*, std::size_t,
                           const double*, std::size_t, double, double*, std::size_t);

std::size_t small_gemm_max_b_bytes() {
  static const std::size_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? static_cast<std::size_t>(l2) / 2 : std::size_t{512} * 1024;
  }();
  return bytes;
}

bool small_gemm_fits(std::size_t n, std::size_t k, std::size_t element_bytes) {
  return n <= kSmallGemmMaxN && k <= kSmallGemmMaxK && n * k * element_bytes <= small_gemm_max_b_bytes() &&
         n * element_bytes % kSmallGemmRowBytes == 0;
}

bool packed_gemm_fits(bool trans_a, std::size_t m, std::size_t n, std::size_t k, std::size_t element_bytes) {
  return !trans_a && m >= kPackedGemmMinM && n * element_bytes >= kPackedGemmMinRowBytes && n <= kSmallGemmMaxN &&
         k <= kPackedGemmMaxK && n * element_bytes % kSmallGemmRowBytes == 0;
}

bool deep_gemm_fits(std::size_t m, std::size_t n, std::size_t k, std::size_t element_bytes) {
  return k > kSmallGemmMaxK && m <= kDeepGemmMaxM && small_gemm_fits(n, kDeepGemmChunk, element_bytes);
}

CpuFacts this_cpu() {
  CpuFacts cpu;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  cpu.amd = __builtin_cpu_is("amd");
  cpu.intel = __builtin_cpu_is("intel");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
  unsigned int top = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000u, &top, &ebx, &ecx, &edx) && top >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned int leaf = 0; leaf < 3; ++leaf) {
      unsigned int r[4] = {};
      __get_cpuid(0x80000002u + leaf, &r[0], &r[1], &r[2], &r[3]);
      std::memcpy(brand + 16 * leaf, r, sizeof r);
    }
    cpu.brand = brand;
    const auto first = cpu.brand.find_first_not_of(' ');
    cpu.brand.erase(0, first == std::string::npos ? cpu.brand.size() : first);
  }
#endif
  return cpu;
}

// On AMD: BLIS 0.9 has no sub-configuration for AMD's AVX-512 CPUs and selects its
// reference 'generic' kernels, which run a large float GEMM several times slower
// than skx, and slower than its AVX2 zen3 ones too. On Intel: BLIS 0.9 takes skx
// only where it counts two AVX-512 FMA units, and counts them from the brand
// string's tier and model number (Gold 6xxx: two, Silver 4xxx: one); a virtual
// machine's "Intel(R) Xeon(R) Processor" names neither, and BLIS falls back to
// haswell, whose AVX2 kernels use half the vector width the CPU has. A brand string
// with a digit in it names a model, and BLIS's count stands. bench/README.md has
// the numbers of both.
const char* skx_kernels_reason(const CpuFacts& cpu) {
  if (!cpu.avx512) return nullptr;
  if (cpu.amd) {
    return "headroom: this BLIS has no kernels for AMD CPUs with AVX-512 and would run its generic ones; "
           "BLIS_ARCH_TYPE overrides";
  }
  if (cpu.intel && cpu.brand.find_first_of("0123456789") == std::string::npos) {
    return "headroom: this Intel CPU's name gives no model number, from which this BLIS counts its AVX-512 "
           "units, and it would run its AVX2 kernels; BLIS_ARCH_TYPE overrides";
  }
  return nullptr;
}

const GemmLibrary& gemm_library() {
  static const GemmLibrary library = [] {
    GemmLibrary l;
#ifdef HEADROOM_BLAS_BLIS
    l.name = std::string("BLIS ") + bli_info_get_version_str();
    bli_init();  // bli_arch_query_id() before BLIS's first call aborts
    const arch_t id = bli_arch_query_id();
    l.kernels = bli_arch_string(id);
    l.kernels_id = static_cast<int>(id);
    l.chosen_by = g_blis_kernels_chosen != nullptr            ? g_blis_kernels_chosen
                  : std::getenv("BLIS_ARCH_TYPE") != nullptr ? "BLIS_ARCH_TYPE"
                                                              : "BLIS";
#else
    l.name = "OpenBLAS";
    l.chosen_by = "OpenBLAS";
#endif
    return l;
  }();
  return library;
}

std::string GemmLibrary::describe() const {
  if (kernels.empty()) return name;
  return name + ", " + kernels + " kernels (chosen by " + chosen_by + ")";
}

bool gemm_threads_per_call() {
#ifdef HEADROOM_BLAS_BLIS
  return true;
#else
  return false;
#endif
}

template <typename T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (degenerate_gemm(m, n, k, beta, c, ldc)) return;
  split_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template void gemm(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t, const float*,
                   std::size_t, float, float*, std::size_t);
template void gemm(bool, bool, std::size_t, std::size_t, std::size_t, double, const double*, std::size_t,
                   const double*, std::size_t, double, double*, std::size_t);

namespace {

// In tiles of kTransposeTile x kTransposeTile elements, so that the tile's lines of
// src and of dst stay in L1 while it is copied. The plain double loop wrote every
// element of a src row to another row of dst, `rows` elements apart: for attention's
// K^T at T = 256 (1 KiB apart) those lines fell into a few L1 sets and were evicted
// before the next column came back to them, and a copy ran several times slower
// than in tiles of 16.
constexpr std::size_t kTransposeTile = 16;

// Inside a tile, whole blocks of kBlock x kBlock elements, one 32-byte vector per
// row (8 floats, 4 doubles), are transposed in registers: log2(kBlock) stages, each
// swapping one bit of the row index with the same bit of the column index (stage S
// trades the upper-right S x S sub-blocks of rows r and r + S, in every 2S x 2S
// block, for the lower-left ones). Element by element the tile loop moves one
// element per load and store; a block moves a vector per load and store
// (bench/small_gemm_bench.cpp's last table compares the two). Rows and columns the
// blocks leave over go element by element.
template <typename T>
struct TransposeBlock {
  static constexpr std::size_t kBlock = 32 / sizeof(T);
  typedef T Vec __attribute__((vector_size(32)));

  // Rows a = r and b = r + S after stage S: a keeps its elements where column bit S
  // is clear and takes b's (shifted up by S columns) where it is set; b takes a's
  // (shifted down by S) where the bit is clear and keeps its own where set. Indices
  // from kBlock on select from b. (Vectors go by reference, never by value: GCC
  // warns that the default clone, without AVX, would pass them differently.)
  template <std::size_t S, std::size_t... I>
  [[gnu::always_inline]] static void trade(Vec& a, Vec& b, std::index_sequence<I...>) {
    const Vec low = __builtin_shufflevector(a, b, ((I & S) ? I - S + kBlock : I)...);
    b = __builtin_shufflevector(a, b, ((I & S) ? I + kBlock : I + S)...);
    a = low;
  }
  template <std::size_t S>
  [[gnu::always_inline]] static void stage(Vec* v) {
    for (std::size_t r = 0; r < kBlock; ++r) {
      if ((r & S) == 0) trade<S>(v[r], v[r + S], std::make_index_sequence<kBlock>{});
    }
    if constexpr (S > 1) stage<S / 2>(v);
  }
  // dst (kBlock, kBlock) with row stride ldd = the block of src, row stride lds, transposed.
  [[gnu::always_inline]] static void copy(T* dst, std::size_t ldd, const T* src, std::size_t lds) {
    Vec v[kBlock];
    for (std::size_t r = 0; r < kBlock; ++r) std::memcpy(&v[r], src + r * lds, sizeof(Vec));
    stage<kBlock / 2>(v);
    for (std::size_t r = 0; r < kBlock; ++r) std::memcpy(dst + r * ldd, &v[r], sizeof(Vec));
  }
};

// Where dst's rows lie a multiple of this many bytes apart, a block's rows of dst
// fall into a few of L1's sets (64 sets of 64 bytes) and each whole tile is first
// transposed into a local buffer and then copied out a row (one 64-byte line) at a
// time. Written straight into dst, rows a multiple of 1 KiB apart share 4 sets or
// fewer and evict each other, and staging wins; rows 512 bytes apart spread over 8,
// and there the extra copy makes staging the slower one. (The benchmark's medium
// W^T (C -> 4C) row, 4 KiB apart, is the staged case.)
constexpr std::size_t kTransposeStagedStride = 1024;

template <typename T>
[[gnu::always_inline]] inline void transpose_tiles(T* dst, const T* src, std::size_t rows, std::size_t cols,
                                                   std::size_t ld) {
  constexpr std::size_t kBlock = TransposeBlock<T>::kBlock;
  static_assert(kTransposeTile % kBlock == 0);
  const bool staged = rows * sizeof(T) % kTransposeStagedStride == 0;
  for (std::size_t i0 = 0; i0 < rows; i0 += kTransposeTile) {
    const std::size_t i1 = std::min(rows, i0 + kTransposeTile);
    const std::size_t i_blocks = i0 + (i1 - i0) / kBlock * kBlock;  // rows [i0, i_blocks) go in blocks
    for (std::size_t j0 = 0; j0 < cols; j0 += kTransposeTile) {
      const std::size_t j1 = std::min(cols, j0 + kTransposeTile);
      const std::size_t j_blocks = j0 + (j1 - j0) / kBlock * kBlock;
      if (staged && i1 - i0 == kTransposeTile && j1 - j0 == kTransposeTile) {
        alignas(64) T tile[kTransposeTile * kTransposeTile];
        for (std::size_t j = 0; j < kTransposeTile; j += kBlock) {
          for (std::size_t i = 0; i < kTransposeTile; i += kBlock) {
            TransposeBlock<T>::copy(tile + j * kTransposeTile + i, kTransposeTile, src + (i0 + i) * ld + j0 + j, ld);
          }
        }
        for (std::size_t j = 0; j < kTransposeTile; ++j) {
          std::memcpy(dst + (j0 + j) * rows + i0, tile + j * kTransposeTile, kTransposeTile * sizeof(T));
        }
        continue;
      }
      for (std::size_t j = j0; j < j_blocks; j += kBlock) {
        for (std::size_t i = i0; i < i_blocks; i += kBlock) {
          TransposeBlock<T>::copy(dst + j * rows + i, rows, src + i * ld + j, ld);
        }
      }
      // What the blocks leave: the tile's last columns for every row, its last rows
      // for the blocks' columns.
      for (std::size_t j = j_blocks; j < j1; ++j) {
        for (std::size_t i = i0; i < i1; ++i) dst[j * rows + i] = src[i * ld + j];
      }
      for (std::size_t j = j0; j < j_blocks; ++j) {
        for (std::size_t i = i_blocks; i < i1; ++i) dst[j * rows + i] = src[i * ld + j];
      }
    }
  }
}

HEADROOM_CLONES void transpose_f32(float* dst, const float* src, std::size_t rows, std::size_t cols,
                                   std::size_t ld) {
  transpose_tiles(dst, src, rows, cols, ld);
}
HEADROOM_CLONES void transpose_f64(double* dst, const double* src, std::size_t rows, std::size_t cols,
                                   std::size_t ld) {
  transpose_tiles(dst, src, rows, cols, ld);
}

}  // namespace

template <typename T>
void transpose_into(T* dst, const T* src, std::size_t rows, std::size_t cols, std::size_t ld) {
  if constexpr (std::is_same_v<T, float>) {
    transpose_f32(dst, src, rows, cols, ld);
  } else {
    transpose_f64(dst, src, rows, cols, ld);
  }
}

template void transpose_into(float*, const float*, std::size_t, std::size_t, std::size_t);
template void transpose_into(double*, const double*, std::size_t, std::size_t, std::size_t);

#ifdef HEADROOM_BLAS_BLIS
// headroom splits its GEMMs itself (split_gemm), so BLIS's own threads, whose
// barriers spin, stay at one.
void set_blas_threads(int) { bli_thread_set_num_threads(1); }
#else
void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
#endif

}  // namespace headroom
