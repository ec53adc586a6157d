#include "optim/clip.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace headroom {

template <typename T>
double grad_norm(const NamedParameters<T>& params) {
  double sum_sq = 0;
  for (const auto& [name, p] : params) {
    if (!p.defined()) {
      throw std::invalid_argument(
          fmt::format("grad_norm: parameter '{}' is an undefined tensor", name));
    }
    if (!p.has_grad()) continue;
    const xt::xarray<T>& g = p.grad();
    const T* pg = g.data();
    for (std::size_t j = 0, n = g.size(); j < n; ++j) {
      const double x = pg[j];
      sum_sq += x * x;
    }
  }
  return std::sqrt(sum_sq);
}

template <typename T>
double clip_grad_norm(const NamedParameters<T>& params, double max_norm) {
  if (!(max_norm > 0)) {
    throw std::invalid_argument(fmt::format("clip_grad_norm: max_norm must be > 0, got {}", max_norm));
  }
  const double norm = grad_norm(params);
  if (!std::isfinite(norm)) return norm;
  const double scale = max_norm / (norm + 1e-6);
  if (scale >= 1) return norm;
  const T s = static_cast<T>(scale);
  for (auto [name, p] : params) {  // copies of the handles, sharing the tensors
    if (!p.has_grad()) continue;
    xt::xarray<T>& g = p.mutable_grad();
    T* pg = g.data();
    for (std::size_t j = 0, n = g.size(); j < n; ++j) pg[j] *= s;
  }
  return norm;
}

template double grad_norm(const NamedParameters<float>&);
template double grad_norm(const NamedParameters<double>&);
template double clip_grad_norm(const NamedParameters<float>&, double);
template double clip_grad_norm(const NamedParameters<double>&, double);

}  // namespace headroom
