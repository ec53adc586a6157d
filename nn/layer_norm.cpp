#include "nn/layer_norm.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/ops.hpp"

namespace headroom {

template <typename T>
LayerNorm<T>::LayerNorm(const LayerNormOptions& options) : options_(options) {
  if (options.dim == 0) throw std::invalid_argument("LayerNorm: dim must be positive, got 0");
  if (!(options.eps > 0) || !std::isfinite(options.eps)) {
    throw std::invalid_argument(fmt::format("LayerNorm: eps must be a positive number, got {}", options.eps));
  }
  weight_ = this->register_parameter("weight", constant_init<T>({options.dim}, 1.0));
  bias_ = this->register_parameter("bias", constant_init<T>({options.dim}, 0.0));
}

template <typename T>
Tensor<T> LayerNorm<T>::forward(const Tensor<T>& x) const {
  return layer_norm(x, weight_, bias_, static_cast<T>(options_.eps));
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace headroom
