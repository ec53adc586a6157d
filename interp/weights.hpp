// A model's parameters by name, for the analyses that read weights directly rather
// than run the model (interp/decompose.hpp, interp/circuits.hpp).
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include <xtensor/xarray.hpp>

#include "nn/module.hpp"
#include "nn/transformer.hpp"

namespace headroom {

template <typename T>
class ModelWeights {
 public:
  explicit ModelWeights(const Module<T>& model);
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // The value of parameter `name` ("blocks.0.attn.q_proj.weight"); throws
  // std::invalid_argument naming it when the model has none.
  const xt::xarray<T>& at(const std::string& name) const;

 private:
  NamedTensors<T> params_;  // holds the tensors the references point into
  std::map<std::string, std::size_t> index_;
};

// The (max_len, C) position table P the model adds (learned: pos_emb.weight;
// sinusoidal: the sinusoid table); (0, C) with pos rope or none.
template <typename T>
xt::xarray<T> position_table(const ModelConfig& config, const ModelWeights<T>& weights);

// The unembedding W_U (V, C): head.weight, or tok_emb.weight when tied.
template <typename T>
const xt::xarray<T>& unembedding(const ModelConfig& config, const ModelWeights<T>& weights);

}  // namespace headroom
