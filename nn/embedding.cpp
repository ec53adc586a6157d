#include "nn/embedding.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace headroom {

template <typename T>
Embedding<T>::Embedding(const EmbeddingOptions& options, Rng& rng) {
  if (options.num_embeddings == 0 || options.dim == 0) {
    throw std::invalid_argument(fmt::format("Embedding: num_embeddings={} and dim={} must be positive",
                                            options.num_embeddings, options.dim));
  }
  weight_ = this->register_parameter("weight", normal_init<T>({options.num_embeddings, options.dim},
                                                              options.init_std, rng));
}

template <typename T>
Tensor<T> Embedding<T>::forward(const IndexArray& indices) const {
  return embedding(weight_, indices);
}

template <typename T>
xt::xarray<T> sinusoidal_positions(std::size_t max_len, std::size_t d_model) {
  xt::xarray<T> pe = xt::xarray<T>::from_shape({max_len, d_model});  // (max_len, d_model)
  for (std::size_t p = 0; p < max_len; ++p) {
    for (std::size_t c = 0; c < d_model; ++c) {
      const std::size_t i = c / 2;  // pair index: columns 2i and 2i+1 share w_i
      const double w = std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d_model));
      const double angle = static_cast<double>(p) * w;
      pe(p, c) = static_cast<T>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
  return pe;
}

template class Embedding<float>;
template class Embedding<double>;
template xt::xarray<float> sinusoidal_positions<float>(std::size_t, std::size_t);
template xt::xarray<double> sinusoidal_positions<double>(std::size_t, std::size_t);

}  // namespace headroom
