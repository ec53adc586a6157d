// The residual stream at one position split into the parts that wrote it, each
// carried to the logits: direct logit attribution (`headroom circuits`,
// docs/design.md #21).
//
// Legend: C = d_model, V = vocab, H = n_heads, d_v = per-head value width,
// N = the number of parts.
//
// The unembedding's input at position p is a sum of vectors (C), one per part:
//   embed          tok_emb.weight[token p]
//   pos_embed      P[p], where positions enter the stream (learned or sinusoidal,
//                  without pos_qk_only; rope, none and pos_qk_only add nothing)
//   head (l, h)    head h's output after its slice of W_O: out_proj.weight's columns
//                  [h d_v, (h+1) d_v) times z_h, the head_out hook's value at p
//                  (nn/hooks.hpp); under head_combine sum, the shared W_O times z_h
//   attn_bias l    out_proj.bias (models with bias)
//   mlp l          the feed-forward's output at p (not with attn_only)
//   norm_bias      a LayerNorm's bias (ln_f's; with post-norm also each ln1 and ln2)
// A norm is linear once its scale is frozen, and this is the convention: every
// norm the parts pass through is applied to each part with the scale of the actual
// residual there (the sum of the parts, equal to the forward's residual to
// rounding). LayerNorm: part -> (part - mean(part)) / sqrt(var(x) + eps) * weight,
// with x the full residual and the bias a part of its own; RMSNorm: part -> part /
// sqrt(mean(x^2) + eps) * weight. Pre-norm parts pass through ln_f alone (ln1 and
// ln2 only feed sublayers); post-norm parts pass through every ln1 and ln2 after
// them too, then ln_f. The parts then sum exactly (to rounding) to the unembedding
// input, and their logits, part times W_U^T (head.weight, or tok_emb.weight when
// tied), to the model's logits (tests/test_decompose.cpp, in double, for every model
// variant). A part's logits are its direct effect only: what it does through later
// heads and MLPs is inside their parts.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "autograd/tensor.hpp"
#include "nn/transformer.hpp"

namespace headroom {

enum class PartKind { embed, pos_embed, head, attn_bias, mlp, norm_bias };

std::string to_string(PartKind kind);  // "embed", "pos_embed", "head", ...

struct ResidualPart {
  PartKind kind = PartKind::embed;
  std::size_t layer = 0;  // head, attn_bias, mlp; norm_bias: the layer (n_layers for ln_f)
  std::size_t head = 0;   // head only
  std::string name;       // "embed", "pos_embed", "L0H1", "L0.attn_bias", "L1.mlp", "L0.ln1_bias", "ln_f_bias"
};

template <typename T>
struct ResidualDecomposition {
  std::size_t position = 0;
  std::vector<ResidualPart> parts;  // N, in the order they enter the stream
  xt::xarray<T> vectors;            // (N, C): each part at the unembedding input
  xt::xarray<T> logits;             // (N, V): vectors times W_U^T
  xt::xarray<T> model_logits;       // (V): the forward's logits at `position`
};

// Runs the model on `tokens` (a row (T) or (1, T)) and splits the residual at
// `position` (0 <= position < T; the last when omitted). Throws
// std::invalid_argument naming the value for a position outside the row or a token
// outside the vocabulary. Puts the model in eval mode (no dropout) and runs under
// NoGrad; the model's head gates are used as set.
template <typename T>
ResidualDecomposition<T> decompose_residual(TransformerLM<T>& model, const IndexArray& tokens,
                                            std::optional<std::size_t> position = std::nullopt);

// Direct logit attribution: each part's logit for `answer`, or, with `wrong`, for
// the logit difference answer - wrong (N values; they sum to the model's). Throws
// std::invalid_argument naming an id outside the vocabulary.
template <typename T>
std::vector<double> direct_logit_attribution(const ResidualDecomposition<T>& decomposition, std::size_t answer,
                                             std::optional<std::size_t> wrong = std::nullopt);

}  // namespace headroom
