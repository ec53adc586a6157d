#include "optim/clip.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "autograd/fast_math.hpp"
#include "autograd/parallel.hpp"

namespace headroom {
namespace {

// The gradients are summed and scaled in blocks of this many elements (the
// parallel loops' smallest chunk): each block's sum of squares in lanes
// (fast::lane_sum, vector adds), and the blocks' sums in order. A single running sum
// in double is a dependency chain the compiler may not reorder (that would change
// the rounding), so it neither vectorises nor overlaps its adds.
// The blocks, not the threads, fix the order, so the norm is the same on any number
// of threads.
constexpr std::size_t kBlock = kMinChunkElements;

template <typename T>
[[gnu::always_inline]] inline double sum_squares(const T* p, std::size_t n) {
  return fast::lane_sum<double>(n, [&](std::size_t j) {
    const double x = p[j];
    return x * x;
  });
}

template <typename T>
[[gnu::always_inline]] inline void scale_by(T* p, std::size_t n, T s) {
  for (std::size_t j = 0; j < n; ++j) p[j] *= s;
}

HEADROOM_CLONES double sum_squares_f32(const float* p, std::size_t n) { return sum_squares(p, n); }
HEADROOM_CLONES void scale_by_f32(float* p, std::size_t n, float s) { scale_by(p, n, s); }

double block_sum_squares(const float* p, std::size_t n) { return sum_squares_f32(p, n); }
double block_sum_squares(const double* p, std::size_t n) { return sum_squares(p, n); }

// Every gradient's elements as blocks of at most kBlock: (start, length).
template <typename T>
std::vector<std::pair<T*, std::size_t>> gradient_blocks(const NamedParameters<T>& params, const char* who) {
  std::vector<std::pair<T*, std::size_t>> blocks;
  for (auto [name, p] : params) {  // copies of the handles, sharing the tensors
    if (!p.defined()) throw std::invalid_argument(fmt::format("{}: parameter '{}' is an undefined tensor", who, name));
    if (!p.has_grad()) continue;
    xt::xarray<T>& g = p.mutable_grad();
    for (std::size_t j = 0; j < g.size(); j += kBlock) blocks.emplace_back(g.data() + j, std::min(kBlock, g.size() - j));
  }
  return blocks;
}

template <typename T>
double norm_of(const std::vector<std::pair<T*, std::size_t>>& blocks) {
  std::vector<double> sums(blocks.size());
  parallel_for(blocks.size(), 1, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) sums[i] = block_sum_squares(blocks[i].first, blocks[i].second);
  });
  double sum_sq = 0;
  for (const double s : sums) sum_sq += s;
  return std::sqrt(sum_sq);
}

}  // namespace

template <typename T>
double grad_norm(const NamedParameters<T>& params) {
  return norm_of(gradient_blocks(params, "grad_norm"));
}

template <typename T>
double clip_grad_norm(const NamedParameters<T>& params, double max_norm) {
  if (!(max_norm > 0)) {
    throw std::invalid_argument(fmt::format("clip_grad_norm: max_norm must be > 0, got {}", max_norm));
  }
  const auto blocks = gradient_blocks(params, "clip_grad_norm");
  const double norm = norm_of(blocks);
  if (!std::isfinite(norm)) return norm;
  const double scale = max_norm / (norm + 1e-6);
  if (scale >= 1) return norm;
  const T s = static_cast<T>(scale);
  parallel_for(blocks.size(), 1, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      fast::clone_if_float<T>(scale_by_f32, [](auto... a) { scale_by(a...); }, blocks[i].first, blocks[i].second, s);
    }
  });
  return norm;
}

template double grad_norm(const NamedParameters<float>&);
template double grad_norm(const NamedParameters<double>&);
template double clip_grad_norm(const NamedParameters<float>&, double);
template double clip_grad_norm(const NamedParameters<double>&, double);

}  // namespace headroom
