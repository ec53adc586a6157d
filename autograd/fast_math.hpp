// exp and the normal CDF for float loops that the compiler can vectorise: no calls
// into libm, no branches, only multiplies, adds, a rounding trick and integer
// exponent arithmetic. glibc's scalar expf and erff, a call per element, were a
// large part of a small model's training step (bench/README.md). Double keeps the
// exact library functions: it is what gradcheck runs in.
//
// Accuracy (tests/test_fast_math.cpp checks it on dense grids against double):
//   fast::exp(float)     relative error below 3e-7 (about 2 ulp) on [-87.33, 88.3];
//                        exactly 0 below (and for -inf, a masked score), infinity
//                        above 88.3 (a float overflows at 88.72), NaN for NaN.
//   fast::normal_cdf(float) Phi(x) = (1 + erf(x / sqrt 2)) / 2 with absolute error below
//                        3e-7 (Abramowitz and Stegun 7.1.26 for erf, 1.5e-7, plus float
//                        rounding). Absolute, not relative: for GELU, y = x Phi(x), this
//                        is an error below 3e-7 |x|.
#pragma once

#include <bit>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <type_traits>

// Builds a float loop for AVX-512, AVX2 and the baseline (SSE2), one chosen at load
// time from the CPU's features (GCC target_clones). The loop's body must be inlined
// into the cloned function ([[gnu::always_inline]]) to be compiled for each set.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define HEADROOM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HEADROOM_CLONES
#endif

namespace headroom::fast {

// Calls `clone`, a loop built with HEADROOM_CLONES for float, when T is float, and
// `plain`, the same loop for any T, otherwise (double is what gradcheck runs).
template <typename T, typename Clone, typename Plain, typename... Args>
[[gnu::always_inline]] inline void clone_if_float(Clone clone, Plain plain, Args... args) {
  if constexpr (std::is_same_v<T, float>) {
    clone(args...);
  } else {
    plain(args...);
  }
}

[[gnu::always_inline]] inline float exp(float x) {
  // exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 with |r| <= ln2 / 2.
  constexpr float log2e = std::numbers::log2e_v<float>;
  constexpr float ln2_hi = 0.693145752f;        // ln 2 split so that k * ln2_hi is exact
  constexpr float ln2_lo = 1.42860677e-6f;      // ln 2 - ln2_hi
  constexpr float round_magic = 12582912.0f;    // 1.5 * 2^23: adding it rounds to an integer
  // Clamp with comparisons (a NaN compares false and lands on -87.33, so the integer
  // conversion below never sees a NaN), and sort out the special cases at the end.
  float xc = x > -87.33f ? x : -87.33f;
  xc = xc < 88.3f ? xc : 88.3f;
  const float k = (xc * log2e + round_magic) - round_magic;
  const float r = (xc - k * ln2_hi) - k * ln2_lo;
  // Taylor to r^6: the remainder r^7 / 7! is below 1.2e-7 relative at |r| = ln2 / 2.
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const std::int32_t bits = (static_cast<std::int32_t>(k) + 127) << 23;  // 2^k, k in [-126, 127]
  const float result = p * std::bit_cast<float>(bits);
  // NaN stays NaN; above 88.3 is infinity (exp(88.72) is the largest finite float);
  // below -87.33 (and -inf, a masked score) is 0, flushing what would be subnormal.
  // One select per case, so that the loop stays branch-free and vectorises.
  float y = x < -87.33f ? 0.0f : result;
  y = x > 88.3f ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}
inline double exp(double x) { return std::exp(x); }

[[gnu::always_inline]] inline float normal_cdf(float x) {
  // erf(z) = 1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) exp(-z^2), t = 1 / (1 + p z),
  // z = |x| / sqrt 2 (Abramowitz and Stegun 7.1.26), odd in z.
  constexpr float p = 0.3275911f, a1 = 0.254829592f, a2 = -0.284496736f, a3 = 1.421413741f,
                  a4 = -1.453152027f, a5 = 1.061405429f;
  const float z = std::fabs(x) * (1.0f / std::numbers::sqrt2_v<float>);
  const float t = 1.0f / (1.0f + p * z);
  const float poly = t * (a1 + t * (a2 + t * (a3 + t * (a4 + t * a5))));
  const float erf_z = 1.0f - poly * exp(-z * z);
  return 0.5f + 0.5f * std::copysign(erf_z, x);
}
inline double normal_cdf(double x) { return 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2_v<double>)); }

// Sums f(c) over c in [0, n) in 16 interleaved partial sums, which the compiler
// turns into vector adds (a single running sum is a dependency chain it may not
// reorder); the partial sums are then added in a fixed order.
template <typename T, typename F>
[[gnu::always_inline]] inline T lane_sum(std::size_t n, F f) {
  constexpr std::size_t kLanes = 16;
  T acc[kLanes] = {};
  std::size_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) acc[l] += f(c + l);
  }
  T total = 0;
  for (std::size_t l = 0; l < kLanes; ++l) total += acc[l];
  for (; c < n; ++c) total += f(c);
  return total;
}

}  // namespace headroom::fast
