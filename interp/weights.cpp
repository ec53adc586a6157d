#include "interp/weights.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "nn/embedding.hpp"

namespace headroom {

template <typename T>
ModelWeights<T>::ModelWeights(const Module<T>& model) : params_(model.named_parameters()) {
  for (std::size_t i = 0; i < params_.size(); ++i) index_[params_[i].first] = i;
}

template <typename T>
const xt::xarray<T>& ModelWeights<T>::at(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::invalid_argument(fmt::format("model has no parameter '{}'", name));
  return params_[it->second].second.value();
}

template <typename T>
xt::xarray<T> position_table(const ModelConfig& config, const ModelWeights<T>& weights) {
  if (config.pos == PositionEncoding::learned) return weights.at("pos_emb.weight");
  if (config.pos == PositionEncoding::sinusoidal) return sinusoidal_positions<T>(config.max_len, config.d_model);
  return xt::xarray<T>::from_shape({std::size_t{0}, config.d_model});
}

template <typename T>
const xt::xarray<T>& unembedding(const ModelConfig& config, const ModelWeights<T>& weights) {
  return weights.at(config.tie_embeddings ? "tok_emb.weight" : "head.weight");
}

template class ModelWeights<float>;
template class ModelWeights<double>;
template xt::xarray<float> position_table(const ModelConfig&, const ModelWeights<float>&);
template xt::xarray<double> position_table(const ModelConfig&, const ModelWeights<double>&);
template const xt::xarray<float>& unembedding(const ModelConfig&, const ModelWeights<float>&);
template const xt::xarray<double>& unembedding(const ModelConfig&, const ModelWeights<double>&);

}  // namespace headroom
