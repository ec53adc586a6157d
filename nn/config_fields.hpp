// ModelConfig's field table (nn/config_field.hpp), in docs/design.md's key order: the
// order of the unknown-key message and of the Model flags in --help.
#pragma once

#include "nn/config.hpp"
#include "nn/config_field.hpp"

namespace headroom {

// Calls visit(Field<ModelConfig, V>) for every field, in order.
template <typename Visit>
void for_each_model_field(Visit&& visit) {
  using M = ModelConfig;
  using C = FlagCheck;
  visit(field("vocab", &M::vocab));  // from the data
  visit(field("d_model", &M::d_model, Flag{.help = "Model width (default {})", .check = C::whole_number}));
  visit(field("n_layers", &M::n_layers,
              Flag{.name = "--layers", .help = "Transformer blocks (default {})", .check = C::whole_number}));
  visit(field("n_heads", &M::n_heads,
              Flag{.name = "--heads", .help = "Query heads (default {})", .check = C::whole_number}));
  visit(field("n_kv_heads", &M::n_kv_heads,
              Flag{.name = "--kv-heads",
                   .help = "Key/value heads: 1 is MQA, fewer than --heads is GQA (default --heads)",
                   .check = C::positive_whole_number}));
  visit(field("d_k", &M::d_k,
              Flag{.name = "--dk",
                   .help = "Per-head query/key width (default d_model / heads)",
                   .check = C::positive_whole_number}));
  visit(field("d_v", &M::d_v,
              Flag{.name = "--dv", .help = "Per-head value width (default d_k)", .check = C::positive_whole_number}));
  visit(choice("head_combine", &M::head_combine, parse_head_combine));
  visit(field("d_ff", &M::d_ff,
              Flag{.help = "Feed-forward width (default 4 * d_model; 8 * ceil(d_model / 3) with --ffn swiglu)",
                   .check = C::positive_whole_number}));
  visit(field("max_len", &M::max_len,
              Flag{.help = "Longest sequence the model accepts (default --seq-len)", .check = C::positive_whole_number}));
  visit(choice("norm", &M::norm, parse_norm, Flag{.help = "pre | post | none (default pre)"}));
  visit(choice("activation", &M::activation, parse_activation,
               Flag{.help = "gelu | gelu_tanh | relu (default gelu)"}));
  visit(choice("pos", &M::pos, parse_pos, Flag{.help = "learned | sinusoidal | rope | none (default learned)"}));
  visit(field("causal", &M::causal,
              Flag{.name = "--non-causal", .help = "Let every position attend to every position"}));
  visit(field("attn_scale", &M::attn_scale,
              Flag{.help = "Attention score scale (default 1/sqrt(d_k))", .check = C::positive}));
  visit(field("ln_eps", &M::ln_eps));
  visit(field("bias", &M::bias, Flag{.name = "--no-bias", .help = "Linear layers without bias"}));
  visit(field("tie_embeddings", &M::tie_embeddings,
              Flag{.help = "Share the output head with the token embedding"}));
  visit(field("attn_only", &M::attn_only,
              Flag{.help = "Blocks without the feed-forward sublayer (TransformerLens's attn_only)"}));
  visit(field("rope_base", &M::rope_base,
              Flag{.help = "RoPE's base: head pair i turns at base^(-2i/d_k) per position (default {})",
                   .check = C::positive}));
  visit(choice("norm_type", &M::norm_type, parse_norm_type,
               Flag{.help = "layernorm | rmsnorm (default layernorm)"}));
  visit(choice("ffn", &M::ffn, parse_ffn, Flag{.help = "mlp | swiglu (default mlp)"}));
  visit(field("qk_norm", &M::qk_norm,
              Flag{.help = "RMSNorm on each head's queries and keys before the scores"}));
  visit(field("key_smear", &M::key_smear,
              Flag{.help = "Each key mixes in the previous position's key through a learned gate"}));
  visit(field("pos_qk_only", &M::pos_qk_only,
              Flag{.help = "Positions added to queries and keys in every layer, not to the input (Shortformer)"}));
  visit(field("init_std", &M::init_std,
              Flag{.help = "Initial weights N(0, init_std^2); 1/sqrt(d_model) gives unit-variance queries and keys "
                           "(default {}, GPT-2's)",
                   .check = C::positive}));
  visit(field("dropout", &M::dropout,
              Flag{.help = "Dropout probability on the embeddings, the attention weights and the residual branches, "
                           "in training only (default {}: none)",
                   .check = C::fraction}));
}

}  // namespace headroom
