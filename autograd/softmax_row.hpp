// The softmax of one row of visible scores, in place: the loop the fused attention
// op (ops_attention.cpp) and cached decoding (nn/attention.cpp) share. Inline, for
// a caller's HEADROOM_CLONES loop to build for each instruction set.
#pragma once

#include <cstddef>

#include "autograd/fast_math.hpp"

namespace headroom {

// Softmax in place over s[0, n), all visible (the common case: no key padding).
// Three branch-free passes the compiler vectorises; the float version is built for
// AVX-512, AVX2 and the baseline.
template <typename T>
[[gnu::always_inline]] inline void softmax_row(T* s, std::size_t n) {
  // The max and the sum in 16 interleaved lanes: a single running max or sum is a
  // dependency chain the compiler will not vectorise.
  constexpr std::size_t kLanes = 16;
  T lanes[kLanes];
  for (std::size_t l = 0; l < kLanes; ++l) lanes[l] = s[0];
  std::size_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) lanes[l] = s[j + l] > lanes[l] ? s[j + l] : lanes[l];
  }
  T max = s[0];
  for (std::size_t l = 0; l < kLanes; ++l) max = lanes[l] > max ? lanes[l] : max;
  for (; j < n; ++j) max = s[j] > max ? s[j] : max;
  for (std::size_t k = 0; k < n; ++k) s[k] = fast::exp(s[k] - max);
  const T inv = T(1) / fast::lane_sum<T>(n, [&](std::size_t k) { return s[k]; });
  for (std::size_t k = 0; k < n; ++k) s[k] *= inv;
}

}  // namespace headroom
