#include "nn/dropout.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace headroom {

template <typename T>
Dropout<T>::Dropout(const DropoutOptions& options) : p_(options.p), rng_(options.seed) {
  if (!(options.p >= 0.0 && options.p < 1.0)) {
    throw std::invalid_argument(fmt::format("Dropout: p must be in [0, 1), got {}", options.p));
  }
}

template <typename T>
Tensor<T> Dropout<T>::forward(const Tensor<T>& x) {
  return dropout(x, p_, rng_, this->is_training());
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace headroom
