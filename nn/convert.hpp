// Converting a trained model to fewer key/value heads, as the GQA paper does it
// (Ainslie et al., 2023, section 2.1; docs/design.md #19): each new kv head is the
// mean of the old kv heads of its group, and everything else is kept.
//
// Legend: G0 = the model's n_kv_heads, G = the new one, r = G0 / G (old kv heads per
// new one), H = n_heads, d_k, d_v per head.
//
// Projection rows are head-major (docs/design.md, "Model conventions"): rows
// [g d_k, (g+1) d_k) of k_proj.weight (G0 d_k, C) are kv head g. New kv head g' is the
// mean of old kv heads [g' r, (g'+1) r), row by row, for k_proj.weight and .bias
// (d_k rows per head) and v_proj.weight and .bias (d_v rows per head); key_smear (G0)
// becomes the mean of its raw (pre-sigmoid) entries over the same groups. Query head j
// reads kv head j / (H / G): the query heads that read old kv heads [g' r, (g'+1) r),
// j in [g' r H/G0, (g'+1) r H/G0) = [g' H/G, (g'+1) H/G), all read new head g', so the
// pooling keeps each query head with a mean of the heads it read before.
#pragma once

#include <cstddef>
#include <memory>

#include "nn/config.hpp"
#include "nn/module.hpp"
#include "nn/transformer.hpp"

namespace headroom {

// `config` with n_kv_heads = G, resolved. A std::invalid_argument naming the values
// when G is 0, more than the config's kv heads, or does not divide them.
ResolvedModelConfig pooled_kv_config(const ModelConfig& config, std::size_t n_kv_heads);

// The parameters of a model with config `config` (as state_dict() gives them) pooled
// to `n_kv_heads` kv heads, in the same order; every other tensor is copied. With
// n_kv_heads equal to the config's this is a copy. Throws std::invalid_argument as
// pooled_kv_config does, and for a state whose k_proj/v_proj/key_smear shapes
// disagree with the config (naming the tensor and both shapes).
template <typename T>
StateDict<T> pool_kv_heads(const StateDict<T>& state, const ModelConfig& config, std::size_t n_kv_heads);

// A new model with pooled_kv_config(model.config(), n_kv_heads) holding
// pool_kv_heads of model's parameters.
template <typename T>
std::unique_ptr<TransformerLM<T>> pool_kv_heads(const TransformerLM<T>& model, std::size_t n_kv_heads);

}  // namespace headroom
