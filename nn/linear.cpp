#include "nn/linear.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "autograd/ops.hpp"

namespace headroom {

template <typename T>
Linear<T>::Linear(const LinearOptions& options, Rng& rng) : options_(options) {
  if (options.in_features == 0 || options.out_features == 0) {
    throw std::invalid_argument(fmt::format("Linear: in_features={} and out_features={} must be positive",
                                            options.in_features, options.out_features));
  }
  weight_ = this->register_parameter(
      "weight", normal_init<T>({options.out_features, options.in_features}, options.init_std, rng));
  if (options.bias) bias_ = this->register_parameter("bias", constant_init<T>({options.out_features}, 0.0));
}

template <typename T>
Tensor<T> Linear<T>::forward(const Tensor<T>& x) const {
  return linear(x, weight_, bias_);
}

template class Linear<float>;
template class Linear<double>;

}  // namespace headroom
