#include "nn/rms_norm.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/ops.hpp"

namespace headroom {

template <typename T>
RMSNorm<T>::RMSNorm(const RMSNormOptions& options) : options_(options) {
  if (options.dim == 0) throw std::invalid_argument("RMSNorm: dim must be positive, got 0");
  if (!(options.eps > 0) || !std::isfinite(options.eps)) {
    throw std::invalid_argument(fmt::format("RMSNorm: eps must be a positive number, got {}", options.eps));
  }
  weight_ = this->register_parameter("weight", constant_init<T>({options.dim}, 1.0));
}

template <typename T>
Tensor<T> RMSNorm<T>::forward(const Tensor<T>& x) const {
  return rms_norm(x, weight_, static_cast<T>(options_.eps));
}

template class RMSNorm<float>;
template class RMSNorm<double>;

}  // namespace headroom
