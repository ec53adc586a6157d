// The parameters, KV cache and forward FLOPs of a model, counted from its config
// alone: nothing is allocated, so `headroom params --d-model 4096 --layers 32` answers
// at once. The counts follow the parameter names of docs/design.md group by group, and
// equal what a TransformerLM built from the config registers (tests/test_param_count.cpp).
#pragma once

#include <cstddef>
#include <vector>

#include "nn/config.hpp"

namespace headroom {

// One group of parameters: the weights (Linear and embedding matrices, LayerNorm
// weights) and the biases (Linear biases with `bias`, LayerNorm biases).
struct ParamPart {
  std::size_t weights = 0, biases = 0;
  std::size_t total() const { return weights + biases; }
};

// One block's groups: the four attention projections, the feed-forward sublayer
// (fc1 and fc2; 0 with attn_only), and the block's LayerNorms.
struct LayerParams {
  ParamPart q{}, k{}, v{}, o{}, ffn{}, norms{};  // norms: ln1 + ln2 of the block
  std::size_t attention() const;                 // q + k + v + o, biases included
  std::size_t attention_weights() const;         // q + k + v + o weights only
  std::size_t total() const;
};

struct ModelParams {
  ParamPart tok_emb{}, pos_emb{}, ln_f{}, head{};  // head is 0 when tied; pos_emb 0 when sinusoidal
  std::vector<LayerParams> layers;
  std::size_t total() const;                 // every trainable parameter
  std::size_t kv_cache_bytes_per_token = 0;  // float32 K and V of every layer: sum over layers of n_kv_heads*(d_k+d_v)*4
  // Multiply-adds counted as 2 FLOPs, at the given context length: 2 per weight of
  // every projection, the feed-forward and the output head (tied or not), and
  // 2 n_heads (d_k + d_v) per key attended to (the scores and the weighted sum).
  // Lookups, biases, norms and the softmax are not counted (Kaplan et al., 2020, 2.1).
  double forward_flops_per_token = 0;
};

// Counts from the config alone (resolved first; a bad config throws std::invalid_argument as resolved() does).
// context: tokens of context the FLOPs assume (attention scores and weighted sum grow with it).
// A count beyond std::size_t, or more than kMaxCountedLayers layers (each is listed),
// is a std::invalid_argument too.
inline constexpr std::size_t kMaxCountedLayers = 100'000;
ModelParams count_parameters(const ModelConfig& config, std::size_t context);

}  // namespace headroom
