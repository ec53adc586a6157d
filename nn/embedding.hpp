// Token and position embeddings.
//
// Learned positions are an Embedding over positions 0..max_len-1 (pos_emb.weight).
// Sinusoidal positions follow Vaswani et al. (2017), section 3.5:
//   PE[p, 2i] = sin(p w_i),  PE[p, 2i+1] = cos(p w_i),  w_i = 10000^(-2i/d_model),
// positions from 0; they are a fixed table, not a parameter.
#pragma once

#include "autograd/ops.hpp"
#include "nn/module.hpp"

namespace headroom {

struct EmbeddingOptions {
  std::size_t num_embeddings = 0;
  std::size_t dim = 0;
  double init_std = 0.02;  // N(0, init_std^2), as GPT-2
};

template <typename T>
class Embedding : public Module<T> {
 public:
  Embedding(const EmbeddingOptions& options, Rng& rng);
  // indices (...) -> (..., dim)
  Tensor<T> forward(const IndexArray& indices) const;
  const Tensor<T>& weight() const { return weight_; }  // (num_embeddings, dim)

 private:
  Tensor<T> weight_;
};

// The (max_len, d_model) sinusoidal table above, as a constant.
template <typename T>
xt::xarray<T> sinusoidal_positions(std::size_t max_len, std::size_t d_model);

}  // namespace headroom
