// The model's configuration: the config keys of docs/design.md, their defaults, their
// validation, and their JSON form (the checkpoint's __metadata__ and config.json).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "nn/attention.hpp"
#include "nn/feed_forward.hpp"

namespace headroom {

// none: no LayerNorm anywhere, ln_f included (docs/design.md #13).
enum class NormPlacement { pre, post, none };
// rope: rotary positions on q and k in every layer, nothing added to the input;
// none: no position information but the causal mask's (docs/design.md #17).
enum class PositionEncoding { learned, sinusoidal, rope, none };
enum class NormType { layernorm, rmsnorm };
// FeedForwardType (mlp | swiglu) is nn/feed_forward.hpp's.

NormPlacement parse_norm(const std::string& name);  // "pre" | "post" | "none"
PositionEncoding parse_pos(const std::string& name);  // "learned" | "sinusoidal" | "rope" | "none"
NormType parse_norm_type(const std::string& name);  // "layernorm" | "rmsnorm"
FeedForwardType parse_ffn(const std::string& name);  // "mlp" | "swiglu"
std::string to_string(NormPlacement norm);
std::string to_string(PositionEncoding pos);
std::string to_string(NormType type);
std::string to_string(FeedForwardType type);

// d_ff when none is given: 4 d_model for the MLP; for SwiGLU the Llama rule of
// 2/3 of that, 8 d_model / 3, rounded up to a multiple of 8: 8 ceil(d_model / 3)
// (docs/design.md #17). Three SwiGLU matrices then hold about as many weights as the
// MLP's two.
std::size_t default_d_ff(std::size_t d_model, FeedForwardType ffn);

class ResolvedModelConfig;

// Each field's key and flag are in nn/config_fields.hpp; adding a field means adding
// it here and there.
struct ModelConfig {
  std::size_t vocab = 0;       // set from the data
  std::size_t d_model = 64;
  std::size_t n_layers = 2;
  std::size_t n_heads = 4;
  std::size_t n_kv_heads = 0;  // 0 means n_heads
  std::size_t d_k = 0;         // 0 means d_model / n_heads
  std::size_t d_v = 0;         // 0 means d_k
  HeadCombine head_combine = HeadCombine::concat;  // sum: heads added, out_proj (d_model, d_v)
  std::size_t d_ff = 0;        // 0 means default_d_ff; with attn_only 0 or that default, resolved to 0
  std::size_t max_len = 128;
  NormPlacement norm = NormPlacement::pre;
  Activation activation = Activation::gelu;
  PositionEncoding pos = PositionEncoding::learned;
  bool causal = true;
  std::optional<double> attn_scale = std::nullopt;  // default 1/sqrt(d_k)
  double ln_eps = 1e-5;
  bool bias = true;
  bool tie_embeddings = false;
  bool attn_only = false;      // blocks without the feed-forward sublayer (docs/design.md #13)
  // Current blocks (docs/design.md #17); the defaults are GPT-2's.
  double rope_base = 10000.0;  // pos = rope only
  NormType norm_type = NormType::layernorm;
  FeedForwardType ffn = FeedForwardType::mlp;
  bool qk_norm = false;        // RMSNorm of each head's q and k over d_k, before RoPE and the scores
  bool key_smear = false;      // k_t <- s k_t + (1 - s) k_{t-1}, s = sigmoid(learned, per kv head)
  bool pos_qk_only = false;    // positions added to the inputs of q_proj and k_proj only, in every layer
  // Initial weights N(0, init_std^2), the residual stream's writers init_std / sqrt(2
  // n_layers) (TransformerLM). GPT-2's 0.02; 1 / sqrt(d_model) gives a pre-norm
  // model queries and keys of unit variance, the variance argument's assumption.
  double init_std = 0.02;
  // The probability, in [0, 1), of dropping a value at each of nanoGPT's dropout sites
  // (the embeddings' sum, the attention weights, the residual branches), in training
  // mode only; 0 drops nothing and draws nothing. No parameter depends on it.
  double dropout = 0.0;

  // Every default filled in and every value checked; a bad value or combination is
  // a std::invalid_argument naming the key and the numbers.
  ResolvedModelConfig resolved() const;

  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

// A ModelConfig that resolved() has made: every value checked, and n_kv_heads, d_k,
// d_v, d_ff (0 with attn_only: there is no feed-forward sublayer) and attn_scale filled in. Only resolved() makes one, so code that takes
// one (TransformerLM, to_json) trusts it instead of resolving again. It reads as a
// const ModelConfig& (`config->d_k`, or pass it where a ModelConfig is wanted); to
// change a field, copy it into a ModelConfig and resolve that.
class ResolvedModelConfig {
 public:
  const ModelConfig& get() const { return config_; }
  const ModelConfig* operator->() const { return &config_; }
  operator const ModelConfig&() const { return config_; }  // NOLINT: reads as its config

  friend bool operator==(const ResolvedModelConfig&, const ResolvedModelConfig&) = default;

 private:
  friend struct ModelConfig;
  explicit ResolvedModelConfig(const ModelConfig& config) : config_(config) {}
  ModelConfig config_;
};

// The options every attention layer of a model with this config uses (resolved
// when the config is).
AttentionOptions attention_options(const ModelConfig& config);

// config.json's model keys, in the field table's order (nn/config_fields.hpp).
std::vector<std::string> model_config_keys();
// The resolved config as a JSON object with every key written explicitly.
std::string model_config_to_json(const ModelConfig& config);
// Strict parse: an unknown key, a wrong type or a bad value is a
// std::invalid_argument naming `source`, the key and the value. Missing keys take
// their defaults. The result is resolved.
ModelConfig model_config_from_json(const std::string& json_text, const std::string& source);

}  // namespace headroom
