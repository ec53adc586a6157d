// The model configs the fuzz target loads into and the seed corpus is made from:
// small enough that building one costs microseconds.
#pragma once

#include "nn/config.hpp"

namespace headroom::fuzz {

// The model every parsed input is loaded into (the seeds tiny_*.safetensors fit it).
inline const ModelConfig kTinyConfig{.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6};

// The other layout: post-norm, sinusoidal positions, tied head, grouped-query
// attention, no biases, d_v != d_k.
inline const ModelConfig kVariantConfig{.vocab = 5, .d_model = 4, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1,
                                        .d_v = 3, .d_ff = 6, .max_len = 4, .norm = NormPlacement::post,
                                        .activation = Activation::gelu_tanh, .pos = PositionEncoding::sinusoidal,
                                        .bias = false, .tie_embeddings = true};

// Current blocks (docs/design.md #17): RoPE with its base, RMSNorm, SwiGLU, QK-norm and
// the key smear, MQA, no biases.
inline const ModelConfig kCurrentConfig{.vocab = 6, .d_model = 8, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1,
                                        .max_len = 5, .pos = PositionEncoding::rope, .bias = false,
                                        .rope_base = 500.0, .norm_type = NormType::rmsnorm,
                                        .ffn = FeedForwardType::swiglu, .qk_norm = true, .key_smear = true};

// Positions into q and k only, attention-only blocks.
inline const ModelConfig kQkPositionsConfig{.vocab = 5, .d_model = 4, .n_layers = 2, .n_heads = 2, .max_len = 4,
                                            .attn_only = true, .pos_qk_only = true};

// A config whose model we build for an input that carries it: every size bounded,
// so a hostile config cannot make the fuzzer spend its time allocating.
inline bool small_enough(const ModelConfig& c) {
  return c.vocab <= 64 && c.d_model <= 32 && c.n_layers <= 3 && c.n_heads <= 8 && c.d_k <= 32 && c.d_v <= 32 &&
         c.d_ff <= 128 && c.max_len <= 32;
}

}  // namespace headroom::fuzz
