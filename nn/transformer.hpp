// The transformer block and the decoder-only language model of docs/design.md.
//
// Legend: B = batch, T = time, C = d_model, V = vocab, P = the (T, C) position table.
//   pre-norm:  x = x + attn(ln1(x));  x = x + ffn(ln2(x))
//   post-norm: x = ln1(x + attn(x));  x = ln2(x + ffn(x))   (Vaswani et al., 2017)
//   no norm:   x = x + attn(x);       x = x + ffn(x)
// ln_f follows the last block (except with no norm), then head (or tok_emb.weight,
// tied). An attention-only block (attn_only) has no ffn and no ln2: only the first
// half of each line runs (docs/design.md #13). ln1, ln2 and ln_f are LayerNorm or,
// with norm_type rmsnorm, RMSNorm; ffn is the MLP or SwiGLU (docs/design.md #17).
// The input is tok_emb[token] + P, without sqrt(d_model) scaling, where P is
// pos_emb.weight[:T] (learned) or the sinusoid table (sinusoidal). pos rope and none
// add nothing (rope turns q and k inside attention); with pos_qk_only the input is
// tok_emb[token] alone and P goes to every layer's attention, into q and k only.
// Dropout (config.dropout = p > 0, in training mode only), where nanoGPT has it: on
// the input (the embeddings' sum), on each layer's attention weights, and on each
// residual branch before it is added: drop(attn(...)) and drop(ffn(...)). Each of
// these is a site of nn/dropout.hpp, numbered 0 for the input and, for layer l,
// 3 l + 1 (attention weights), 3 l + 2 (attention output) and 3 l + 3 (ffn output),
// so that a DropoutSeed gives each its own generator. At p = 0 nothing is drawn
// and the forward is the one without dropout, the fused attention included.
#pragma once

#include <memory>
#include <vector>

#include "nn/attention.hpp"
#include "nn/config.hpp"
#include "nn/embedding.hpp"
#include "nn/feed_forward.hpp"
#include "nn/kv_cache.hpp"
#include "nn/layer_norm.hpp"
#include "nn/norm.hpp"
#include "nn/rms_norm.hpp"

namespace headroom {

struct BlockOptions {
  AttentionOptions attention;
  FeedForwardOptions ffn;
  NormPlacement norm = NormPlacement::pre;
  NormType norm_type = NormType::layernorm;  // ln1 and ln2: LayerNorm or RMSNorm
  double ln_eps = 1e-5;
  bool attn_only = false;  // no feed-forward sublayer (and no ln2); `ffn` is then unused
  // On the attention's and the feed-forward's outputs before each joins the residual
  // stream, in training mode, at sites dropout_site and dropout_site + 1 of this
  // thread's DropoutSeed (nn/dropout.hpp). The attention weights' own dropout is
  // attention.dropout.
  double dropout = 0.0;
  std::uint64_t dropout_site = 0;
};

template <typename T>
class TransformerBlock : public Module<T> {
 public:
  TransformerBlock(const BlockOptions& options, Rng& rng);
  // x (B, T, C) -> (B, T, C). key_padding_mask (B, T) as in MultiHeadAttention.
  // With weights non-null, the attention weights (B, H, T, T) are stored there.
  // positions (T, C), when given, goes to the attention's q and k inputs
  // (pos_qk_only; MultiHeadAttention::forward).
  // hooks, when given, are called at this block's points (nn/hooks.hpp) as layer `layer`.
  Tensor<T> forward(const Tensor<T>& x, const Mask* key_padding_mask = nullptr,
                    Tensor<T>* weights = nullptr, const Tensor<T>* positions = nullptr,
                    const ForwardHooks<T>* hooks = nullptr, std::size_t layer = 0);

  // Incremental decoding (docs/design.md #18): x (n, T_new, C) are the next T_new
  // tokens of cache rows [row0, row0 + n), each row b at positions [L_b, L_b + T_new);
  // their keys and values join `cache` (this layer's), and each attends to its row's
  // cached tokens and to its own predecessors. positions (n, T_new, C) as in forward.
  // Values only (call under NoGrad).
  Tensor<T> forward_cached(const Tensor<T>& x, LayerKVCache<T>& cache, const std::vector<std::size_t>& lengths,
                           std::size_t row0, const Tensor<T>* positions = nullptr);

  MultiHeadAttention<T>& attention() { return attn_; }

 private:
  Tensor<T> norm1(const Tensor<T>& x) const { return ln1_ ? ln1_->forward(x) : x; }
  Tensor<T> norm2(const Tensor<T>& x) const { return ln2_ ? ln2_->forward(x) : x; }

  // A residual branch through this block's dropout (BlockOptions::dropout).
  Tensor<T> drop(const Tensor<T>& branch, std::uint64_t site) const;

  NormPlacement norm_;
  double dropout_;
  std::uint64_t dropout_site_;
  std::unique_ptr<Norm<T>> ln1_;  // absent with no norm
  MultiHeadAttention<T> attn_;
  std::unique_ptr<Norm<T>> ln2_;  // absent with no norm or attn_only
  std::unique_ptr<FeedForward<T>> ffn_;  // absent with attn_only
};

template <typename T>
class TransformerLM : public Module<T> {
 public:
  // Initialisation (GPT-2, as nanoGPT, with s = config.init_std, 0.02 by default):
  // weights N(0, s^2), the two projections that write into the residual stream
  // (attn.out_proj, ffn.fc2 or ffn.down_proj) N(0, (s / sqrt(2 n_layers))^2), biases 0, LayerNorm and RMSNorm weights 1
  // (q_norm and k_norm too), LayerNorm bias 0, attn.key_smear 0.
  // A plain ModelConfig is resolved first (and may throw); a resolved one is used as is.
  TransformerLM(const ModelConfig& config, Rng& rng);
  TransformerLM(const ResolvedModelConfig& config, Rng& rng);

  // tokens (B, T) with T <= max_len -> logits (B, T, V). With attention_weights
  // non-null, it receives each layer's attention weights (B, H, T, T), in order.
  // With hooks non-null, hooks.fn is called at every hook point (nn/hooks.hpp) and
  // the forward continues with what it returns.
  Tensor<T> forward(const IndexArray& tokens, std::vector<Tensor<T>>* attention_weights = nullptr,
                    const ForwardHooks<T>* hooks = nullptr);
  // Mean next-token cross-entropy: inputs tokens[:, :T], targets tokens[:, 1:].
  // tokens (B, T+1); target_mask (B, T) picks the targets that count (all when
  // omitted).
  Tensor<T> loss(const IndexArray& tokens, const Mask* target_mask = nullptr);
  // Incremental decoding with a KV cache (docs/design.md #18): tokens (n, T_new) are
  // the next tokens of cache rows [row0, row0 + n); row b's are at positions
  // [L_b, L_b + T_new) where L_b = cache.length(b). Returns their logits
  // (n, T_new, V), equal to forward's on each row's whole sequence up to float
  // rounding (tests/test_kv_cache.cpp), and advances those rows by T_new. A prefill
  // is a call with the prompt, a decode step one with T_new = 1. Runs under NoGrad
  // and never drops, whatever mode the model is in: decoding is evaluation.
  // Throws std::invalid_argument naming the row when L_b + T_new passes the cache's
  // capacity, and for a cache made for another config.
  Tensor<T> forward_cached(const IndexArray& tokens, KVCache<T>& cache, std::size_t row0 = 0);

  const ModelConfig& config() const { return config_.get(); }  // resolved
  const ResolvedModelConfig& resolved_config() const { return config_; }
  std::size_t n_layers() const { return blocks_.size(); }
  TransformerBlock<T>& block(std::size_t i) { return *blocks_.at(i); }

 private:
  ResolvedModelConfig config_;
  Embedding<T> tok_emb_;
  std::unique_ptr<Embedding<T>> pos_emb_;  // learned positions only
  xt::xarray<T> sinusoid_;                 // (max_len, C), sinusoidal positions only
  std::vector<std::unique_ptr<TransformerBlock<T>>> blocks_;
  std::unique_ptr<Norm<T>> ln_f_;  // absent with no norm
  std::unique_ptr<Linear<T>> head_;  // absent when tied
};

// Splits (B, T+1) tokens into inputs (B, T) and next-token targets (B, T).
std::pair<IndexArray, IndexArray> shift_tokens(const IndexArray& tokens);

}  // namespace headroom
