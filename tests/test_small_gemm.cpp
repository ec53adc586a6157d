// small_gemm (autograd/small_gemm.hpp) against a plain triple loop in long double,
// on shapes that exercise every edge of its blocking: rows not a multiple of 4,
// columns not a multiple of the vector width, k = 0, padded strides, both layouts
// of A, and beta 0 (C not read) or not.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "autograd/gemm.hpp"
#include "autograd/random.hpp"
#include "autograd/small_gemm.hpp"

namespace hr = headroom;

namespace {

// m in [m_lo, m_lo + m_span), n in [n_lo, n_lo + n_span), k in [0, 21).
template <typename T>
void check_shapes(T tolerance, int trials = 300, std::size_t m_lo = 1, std::size_t m_span = 13, std::size_t n_lo = 1,
                  std::size_t n_span = 40) {
  hr::Rng rng(9);
  for (int trial = 0; trial < trials; ++trial) {
    const std::size_t m = m_lo + rng.below(m_span), n = n_lo + rng.below(n_span), k = rng.below(21);
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

// Tall products with a wide B read B's column panels from a packed copy
// (small_gemm.cpp, pack_panels: at least two panels of two vectors, and 8 blocks of
// rows); these shapes reach it on every instruction set, with panels and tails.
TEST_CASE("small_gemm with B packed equals a triple loop, float and double") {
  check_shapes<float>(2e-5f, 40, 64, 40, 64, 100);
  check_shapes<double>(1e-13, 40, 64, 40, 32, 100);
}

// The packed copy holds the same values and every block rounds alike (small_gemm.cpp,
// add_unfused), so a tall call (packed, in blocks of 8, 6 or 4 rows by instruction
// set) and the same rows in calls of 5 (too few rows to pack; blocks of 4 rows and
// of 1) agree to the bit, in the last, partial columns too (151 columns leave one
// or three after the whole vectors on every instruction set).
TEST_CASE_TEMPLATE("small_gemm's packed path gives the same bits as its unpacked twin", T, float, double) {
  hr::Rng rng(4);
  for (const bool trans_a : {false, true}) {
    const std::size_t m = 136, n = 151, k = 37, lda = trans_a ? m : k, ldb = n + 3, ldc = n;
    std::vector<T> a((trans_a ? k : m) * lda), b(k * ldb), c0(m * ldc), packed(m * ldc), rows(m * ldc);
    for (auto& x : a) x = static_cast<T>(rng.normal());
    for (auto& x : b) x = static_cast<T>(rng.normal());
    for (auto& x : c0) x = static_cast<T>(rng.normal());
    packed = c0;
    rows = c0;
    hr::small_gemm<T>(trans_a, m, n, k, T(0.7), a.data(), lda, b.data(), ldb, T(0.5), packed.data(), ldc);
    for (std::size_t i = 0; i < m; i += 5) {
      const T* ai = trans_a ? a.data() + i : a.data() + i * lda;
      hr::small_gemm<T>(trans_a, std::min<std::size_t>(5, m - i), n, k, T(0.7), ai, lda, b.data(), ldb, T(0.5),
                        rows.data() + i * ldc, ldc);
    }
    CAPTURE(trans_a);
    CHECK(packed == rows);
    CHECK(packed != c0);
  }
}

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

// Where headroom overrides BLIS's own choice of kernels (autograd/gemm.cpp): on
// AVX-512 CPUs that BLIS 0.9 would give slower kernels, AMD's and Intel's whose
// brand string names no model number, and nowhere else.
TEST_CASE("headroom chooses BLIS's skx kernels exactly where BLIS 0.9 would choose slower ones") {
  using headroom::CpuFacts;
  using headroom::skx_kernels_reason;
  const auto facts = [](bool amd, bool intel, bool avx512, const char* brand) {
    CpuFacts c;
    c.amd = amd;
    c.intel = intel;
    c.avx512 = avx512;
    c.brand = brand;
    return c;
  };
  // AMD with AVX-512 (Zen 4, Zen 5): BLIS 0.9 has no kernels of its own for them.
  const char* amd = skx_kernels_reason(facts(true, false, true, "AMD EPYC 9R45 192-Core Processor"));
  REQUIRE(amd != nullptr);
  CHECK(std::string(amd).find("AMD") != std::string::npos);
  CHECK(skx_kernels_reason(facts(true, false, true, "AMD EPYC")) != nullptr);
  // A virtual machine's Xeon: no tier, no model number for BLIS to count FMA units from.
  const char* vm = skx_kernels_reason(facts(false, true, true, "Intel(R) Xeon(R) Processor"));
  REQUIRE(vm != nullptr);
  CHECK(std::string(vm).find("model number") != std::string::npos);
  CHECK(skx_kernels_reason(facts(false, true, true, "Intel Xeon Processor (Icelake)")) != nullptr);
  // A named model: BLIS's count stands, two units or one.
  CHECK(skx_kernels_reason(facts(false, true, true, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz")) == nullptr);
  CHECK(skx_kernels_reason(facts(false, true, true, "Intel(R) Xeon(R) Silver 4114 CPU @ 2.20GHz")) == nullptr);
  CHECK(skx_kernels_reason(facts(false, true, true, "11th Gen Intel(R) Core(TM) i7-1165G7 @ 2.80GHz")) == nullptr);
  // Without AVX-512 skx's instructions would not run at all; other vendors are left alone.
  CHECK(skx_kernels_reason(facts(true, false, false, "AMD EPYC 7763 64-Core Processor")) == nullptr);
  CHECK(skx_kernels_reason(facts(false, true, false, "Intel(R) Xeon(R) Processor")) == nullptr);
  CHECK(skx_kernels_reason(facts(false, false, true, "")) == nullptr);
}

// The facts read from this CPU agree with the compiler's own view of it.
TEST_CASE("this_cpu reads the vendor, AVX-512 and a brand string") {
  const headroom::CpuFacts cpu = headroom::this_cpu();
#if defined(__x86_64__)
  __builtin_cpu_init();
  CHECK(cpu.amd == static_cast<bool>(__builtin_cpu_is("amd")));
  CHECK(cpu.intel == static_cast<bool>(__builtin_cpu_is("intel")));
  CHECK(cpu.avx512 == static_cast<bool>(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                                        __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
                                        __builtin_cpu_supports("avx512vl")));
  CHECK(!cpu.brand.empty());
  CHECK(cpu.brand.size() <= 48);
  CHECK(cpu.brand.front() != ' ');
#else
  CHECK(cpu.brand.empty());
#endif
}

// transpose_into copies in tiles of 8 x 8 (float) or 4 x 4 (double) blocks
// transposed in registers, staged through a buffer when dst's rows are a multiple
// of 1 KiB apart (autograd/gemm.cpp): every shape around the block's and the tile's
// edges, on both paths, with a padded row stride, gives exactly src^T and writes
// nothing else.
TEST_CASE_TEMPLATE("transpose_into gives src transposed on every tile edge", T, float, double) {
  for (const std::size_t rows : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 128, 256, 257, 512}) {
    for (const std::size_t cols : {1, 4, 7, 8, 9, 16, 31, 64}) {
      const std::size_t ld = cols + 5;
      std::vector<T> src(rows * ld);
      for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<T>(i) * T(0.5) - 3;
      std::vector<T> dst(cols * rows + 1, -99);
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

// gemm() runs deep products (k beyond kSmallGemmMaxK, C at most kDeepGemmMaxM rows,
// a chunk of B within half of this core's L2: deep_gemm_fits) as small_gemm over
// chunks of k, each adding into C (gemm.hpp), unless small_gemm's packed path takes
// them whole. The cases' B is narrowed to the widest whose chunk fits this core's L2
// (128 doubles fit a 1 MiB L2, 64 fit Zen 3's 512 KiB), so that the chunks run on
// every CPU: against the library alone, with A stored either way, beta 0 and not,
// and a last chunk shorter than the rest, gemm() gives the same C to rounding (4 k
// epsilon, relative to 1 + |C|), and the bits of small_gemm called as gemm() should.
TEST_CASE_TEMPLATE("gemm's deep products in chunks of k match the library", T, float, double) {
  hr::Rng rng(7);
  struct Case {
    std::size_t m, n, k;
  };
  constexpr std::size_t vector = hr::kSmallGemmRowBytes / sizeof(T);  // rows of whole vectors only
  const std::size_t widest =
      std::min(hr::kSmallGemmMaxN, hr::small_gemm_max_b_bytes() / (hr::kDeepGemmChunk * sizeof(T)) / vector * vector);
  CAPTURE(hr::small_gemm_max_b_bytes());
  REQUIRE(widest >= 16);  // half an L2 of at least 32 KiB (float) or 64 KiB (double)
  for (Case cs : {Case{32, 128, 2048}, Case{128, 32, 2048}, Case{344, 128, 1500}, Case{9, 16, 1025}}) {
    cs.n = std::min(cs.n, widest);
    CAPTURE(cs.m);
    CAPTURE(cs.n);
    CAPTURE(cs.k);
    CHECK(hr::deep_gemm_fits(cs.m, cs.n, cs.k, sizeof(T)));
    for (const bool trans_a : {false, true}) {
      for (const T beta : {T(0), T(0.5)}) {
        std::vector<T> a(cs.m * cs.k), b(cs.k * cs.n), c0(cs.m * cs.n);
        for (auto* v : {&a, &b, &c0}) {
          for (auto& x : *v) x = static_cast<T>(rng.normal());
        }
        const std::size_t lda = trans_a ? cs.m : cs.k;
        std::vector<T> want = c0, got = c0, direct = c0;
        hr::library_gemm<T>(trans_a, false, cs.m, cs.n, cs.k, T(1.5), a.data(), lda, b.data(), cs.n, beta, want.data(),
                            cs.n);
        hr::gemm<T>(trans_a, false, cs.m, cs.n, cs.k, T(1.5), a.data(), lda, b.data(), cs.n, beta, got.data(), cs.n);
        // What gemm() should have run (gemm.cpp, serial_gemm): small_gemm's packed path
        // in one call where it fits (A untransposed and at least kPackedGemmMinM rows),
        // else small_gemm over chunks of k, as every A^T case here does.
        const bool packed = hr::packed_gemm_fits(trans_a, cs.m, cs.n, cs.k, sizeof(T));
        for (std::size_t k0 = 0; k0 < cs.k; k0 += packed ? cs.k : hr::kDeepGemmChunk) {
          const std::size_t kc = packed ? cs.k : std::min(hr::kDeepGemmChunk, cs.k - k0);
          hr::small_gemm<T>(trans_a, cs.m, cs.n, kc, T(1.5), trans_a ? a.data() + k0 * lda : a.data() + k0, lda,
                            b.data() + k0 * cs.n, cs.n, k0 == 0 ? beta : T(1), direct.data(), cs.n);
        }
        CAPTURE(trans_a);
        CAPTURE(packed);
        double worst = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          worst = std::max(worst, std::abs(static_cast<double>(got[i] - want[i])) / (1 + std::abs(double(want[i]))));
        }
        // Both sum k products in different orders: within 4 k epsilon of each other.
        CHECK(worst < 4.0 * static_cast<double>(cs.k) * std::numeric_limits<T>::epsilon());
        CHECK(got == direct);  // the product did go there
      }
    }
  }
  // Outside its bounds the chunks do not run: k within small_gemm's, C too tall, B too
  // wide, and a chunk of B one vector wider than fits this core's L2.
  CHECK_FALSE(hr::deep_gemm_fits(128, 128, hr::kSmallGemmMaxK, sizeof(T)));
  CHECK_FALSE(hr::deep_gemm_fits(hr::kDeepGemmMaxM + 1, 128, 2048, sizeof(T)));
  CHECK_FALSE(hr::deep_gemm_fits(128, hr::kSmallGemmMaxN + 4, 2048, sizeof(T)));
  if (widest + vector <= hr::kSmallGemmMaxN) CHECK_FALSE(hr::deep_gemm_fits(128, widest + vector, 2048, sizeof(T)));
}

// Products beyond small_gemm_fits that its packed path runs (packed_gemm_fits: B up
// to 512 wide and 2048 deep, A untransposed with 64 rows or more) go through gemm()
// to small_gemm, and match the library alone to rounding, beta 0 and not.
TEST_CASE_TEMPLATE("gemm's packed products match the library", T, float, double) {
  hr::Rng rng(9);
  struct Case {
    std::size_t m, n, k;
  };
  for (const Case cs : {Case{200, 512, 512}, Case{64, 256, 1024}, Case{77, 512, 2048}, Case{130, 96, 1500}}) {
    CHECK(hr::packed_gemm_fits(false, cs.m, cs.n, cs.k, sizeof(T)));
    for (const T beta : {T(0), T(0.5)}) {
      std::vector<T> a(cs.m * cs.k), b(cs.k * cs.n), c0(cs.m * cs.n);
      for (auto* v : {&a, &b, &c0}) {
        for (auto& x : *v) x = static_cast<T>(rng.normal());
      }
      std::vector<T> want = c0, got = c0;
      hr::library_gemm<T>(false, false, cs.m, cs.n, cs.k, T(1.5), a.data(), cs.k, b.data(), cs.n, beta, want.data(),
                          cs.n);
      hr::gemm<T>(false, false, cs.m, cs.n, cs.k, T(1.5), a.data(), cs.k, b.data(), cs.n, beta, got.data(), cs.n);
      CAPTURE(cs.m);
      CAPTURE(cs.n);
      CAPTURE(cs.k);
      double worst = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(got[i] - want[i])) / (1 + std::abs(double(want[i]))));
      }
      CHECK(worst < 4.0 * static_cast<double>(cs.k) * std::numeric_limits<T>::epsilon());
      // And the same bits as small_gemm called directly: the product did go there.
      std::vector<T> direct = c0;
      hr::small_gemm<T>(false, cs.m, cs.n, cs.k, T(1.5), a.data(), cs.k, b.data(), cs.n, beta, direct.data(), cs.n);
      CHECK(direct == got);
    }
  }
  // Outside its bounds: A transposed, too few rows, B too narrow or too wide, too deep.
  CHECK_FALSE(hr::packed_gemm_fits(true, 2048, 512, 512, sizeof(T)));
  CHECK_FALSE(hr::packed_gemm_fits(false, hr::kPackedGemmMinM - 1, 512, 512, sizeof(T)));
  CHECK_FALSE(hr::packed_gemm_fits(false, 2048, hr::kPackedGemmMinRowBytes / sizeof(T) - 4, 512, sizeof(T)));
  CHECK_FALSE(hr::packed_gemm_fits(false, 2048, hr::kSmallGemmMaxN + 4, 512, sizeof(T)));
  CHECK_FALSE(hr::packed_gemm_fits(false, 2048, 512, hr::kPackedGemmMaxK + 1, sizeof(T)));
}

namespace {

// `count` elements that end exactly where a page no one may read begins, so that a
// kernel reading one element past its operand dies with SIGSEGV (a failed test), in
// every build, instead of reading a neighbour's memory in silence.
template <typename T>
class PageEndBuffer {
 public:
  explicit PageEndBuffer(std::size_t count) : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
    const std::size_t bytes = count * sizeof(T);
    length_ = (bytes + page_ - 1) / page_ * page_ + page_;
    void* base = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(base != MAP_FAILED);
    base_ = static_cast<char*>(base);
    REQUIRE(mprotect(base_ + length_ - page_, page_, PROT_NONE) == 0);
    data_ = reinterpret_cast<T*>(base_ + length_ - page_ - bytes);
    for (std::size_t i = 0; i < count; ++i) data_[i] = static_cast<T>(1 + i % 3);
  }
  PageEndBuffer(const PageEndBuffer&) = delete;
  PageEndBuffer& operator=(const PageEndBuffer&) = delete;
  ~PageEndBuffer() { munmap(base_, length_); }
  T* data() const { return data_; }

 private:
  std::size_t page_, length_ = 0;
  char* base_ = nullptr;
  T* data_ = nullptr;
};

}  // namespace

// Every GEMM path reads its operands and nothing past them: each of A, B and C in
// turn ends at an unreadable page, on the edge shapes of the library's small-matrix
// kernels (one row or column, k not a multiple of the vector width), both layouts of
// A and of B, through library_gemm and through gemm(). BLIS 0.9.0's small-matrix
// ("sup") kernels for haswell and zen read past B when n = 1 and past A when B is
// transposed and m is small (autograd/gemm.cpp, library_gemm); under AddressSanitizer
// that read crashed a training run whenever the operand ended at a page.
TEST_CASE_TEMPLATE("gemm reads no element past its operands", T, float, double) {
  const std::size_t dims[] = {1, 2, 3, 7, 8, 9, 16, 17, 33};
  int products = 0;
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      for (const std::size_t m : dims) {
        for (const std::size_t n : dims) {
          for (const std::size_t k : dims) {
            for (int guarded = 0; guarded < 3; ++guarded) {
              // A is (m, k), or (k, m) stored when transposed; B (k, n), or (n, k).
              std::vector<T> va(m * k, T(1)), vb(k * n, T(1)), vc(m * n, T(0));
              PageEndBuffer<T> edge(guarded == 0 ? m * k : guarded == 1 ? k * n : m * n);
              const T* a = guarded == 0 ? edge.data() : va.data();
              const T* b = guarded == 1 ? edge.data() : vb.data();
              T* c = guarded == 2 ? edge.data() : vc.data();
              const std::size_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
              CAPTURE(trans_a);
              CAPTURE(trans_b);
              CAPTURE(m);
              CAPTURE(n);
              CAPTURE(k);
              CAPTURE(guarded);
              std::vector<T> want(m * n, T(0));
              for (std::size_t i = 0; i < m; ++i) {
                for (std::size_t j = 0; j < n; ++j) {
                  for (std::size_t p = 0; p < k; ++p) {
                    want[i * n + j] += (trans_a ? a[p * lda + i] : a[i * lda + p]) *
                                       (trans_b ? b[j * ldb + p] : b[p * ldb + j]);
                  }
                }
              }
              hr::library_gemm<T>(trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, T(0), c, n);
              CHECK(std::equal(want.begin(), want.end(), c));  // small integers: exact
              hr::gemm<T>(trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, T(0), c, n);
              CHECK(std::equal(want.begin(), want.end(), c));
              ++products;
            }
          }
        }
      }
    }
  }
  CHECK(products == 4 * 9 * 9 * 9 * 3);
}
