// The parameters, KV cache and forward FLOPs of a model, counted from its config
// alone: nothing is allocated, so `headroom params --d-model 4096 --layers 32` answers
// at once. The counts follow the parameter names of docs/design.md group by group, and
// equal what a TransformerLM built from the config registers (tests/test_param_count.cpp).
#pragma once

#include <cstddef>
#include <vector>

#include "nn/config.hpp"

namespace headroom {

// One group of parameters: the weights (Linear and embedding matrices, LayerNorm and
// RMSNorm weights, the key-smear gates) and the biases (Linear biases with `bias`,
// LayerNorm biases; RMSNorm has none).
struct ParamPart {
  std::size_t weights = 0, biases = 0;
  std::size_t total() const { return weights + biases; }
};

// One block's groups: the four attention projections, QK-norm's two weights and the
// key-smear gates (0 without qk_norm, key_smear), the feed-forward sublayer (fc1 and
// fc2, or SwiGLU's gate_proj, up_proj and down_proj; 0 with attn_only), and the
// block's norms (LayerNorm or RMSNorm).
struct LayerParams {
  ParamPart q{}, k{}, v{}, o{};
  ParamPart qk_norm{};    // attn.q_norm.weight + attn.k_norm.weight: 2 d_k weights with qk_norm
  ParamPart key_smear{};  // attn.key_smear: n_kv_heads weights with key_smear
  ParamPart ffn{};
  ParamPart norms{};      // ln1 + ln2 of the block
  std::size_t attention() const;          // every attn.* parameter: q + k + v + o + qk_norm + key_smear
  std::size_t attention_weights() const;  // q + k + v + o weights only (the projections' matrices)
  std::size_t total() const;
};

struct ModelParams {
  ParamPart tok_emb{}, pos_emb{}, ln_f{}, head{};  // head is 0 when tied; pos_emb 0 unless pos is learned
  std::vector<LayerParams> layers;
  std::size_t total() const;                 // every trainable parameter
  std::size_t kv_cache_bytes_per_token = 0;  // float32 K and V of every layer: sum over layers of n_kv_heads*(d_k+d_v)*4
  // Multiply-adds counted as 2 FLOPs, at the given context length: 2 per weight of
  // every projection, the feed-forward (SwiGLU's three matrices) and the output head
  // (tied or not), and 2 n_heads (d_k + d_v) per key attended to (the scores and the
  // weighted sum). Elementwise work is not counted (Kaplan et al., 2020, 2.1): lookups,
  // biases, norms (QK-norm's too), the softmax, SwiGLU's gating product, the key smear
  // and RoPE's rotations (about 3 (n_heads + n_kv_heads) d_k FLOPs a token per layer).
  double forward_flops_per_token = 0;
};

// Counts from the config alone (resolved first; a bad config throws std::invalid_argument as resolved() does).
// context: tokens of context the FLOPs assume (attention scores and weighted sum grow with it).
// A count beyond std::size_t, or more than kMaxCountedLayers layers (each is listed),
// is a std::invalid_argument too.
inline constexpr std::size_t kMaxCountedLayers = 100'000;
ModelParams count_parameters(const ModelConfig& config, std::size_t context);

}  // namespace headroom
