// Multi-head attention with independent d_model, n_heads, d_k, d_v and n_kv_heads.
//
// Legend: B = batch, T = time, C = d_model, H = n_heads (query heads),
// G = n_kv_heads (key/value heads), g = H / G (query heads per kv head).
//
//   Attention(Q, K, V) = softmax(Q K^T * scale) V,  scale = 1/sqrt(d_k) by default
//   (Vaswani et al., 2017, eq. 1: for unit-variance q and k, q . k has variance d_k;
//   the scale keeps the softmax out of its saturated, small-gradient regime).
//   MultiHead(x) = concat(head_1, ..., head_H) W_O                        (eq. 2)
// head_combine = sum replaces eq. 2 by (head_1 + ... + head_H) W_O with W_O of
// d_v rows instead of H d_v: the mistake tutorials warn about, kept so that its cost
// can be measured. It equals concat with one W_O block shared by every head, so the
// heads can no longer write to different directions of the residual stream.
//
// Conventions (docs/design.md, "Model conventions"): projection rows are head-major (rows [j d_k, (j+1) d_k)
// of q_proj.weight are query head j); with grouped-query attention (Ainslie et al.,
// 2023) query head j reads key/value head j / g, so consecutive query heads share;
// n_kv_heads = 1 is multi-query attention (Shazeer, 2019). The causal mask removes
// keys after the query. A query whose every key is masked attends to nothing: its
// output is zero and its gradients finite.
//
// Order inside attention (docs/design.md, "Model conventions"; #17), with P the
// (T, C) position table passed to forward (pos_qk_only) or 0:
//   q = q_proj(x + P), k = k_proj(x + P), v = v_proj(x);
//   qk_norm:   q_h <- rms_norm(q_h) * q_norm.weight, k_g <- rms_norm(k_g) * k_norm.weight
//              (weights (d_k) shared by the heads, eps qk_norm_eps);
//   key_smear: k_t <- s k_t + (1 - s) k_{t-1}, k_{-1} = 0, s = sigmoid(key_smear) (G), per kv head;
//   rope:      q and k rotated by their position (rotate-half pairing, base rope_base);
// then the scores. v never sees a position.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "autograd/ops.hpp"
#include "nn/dropout.hpp"
#include "nn/hooks.hpp"
#include "nn/kv_cache.hpp"
#include "nn/linear.hpp"
#include "nn/rms_norm.hpp"

namespace headroom {

// How the per-head outputs (each of width d_v) meet out_proj: concatenated (H d_v
// wide, the standard) or added element-wise (d_v wide).
enum class HeadCombine { concat, sum };

HeadCombine parse_head_combine(const std::string& name);  // "concat" | "sum"
std::string to_string(HeadCombine combine);

struct AttentionOptions {
  std::size_t d_model = 0;
  std::size_t n_heads = 1;
  std::size_t d_k = 0;         // per-head query/key width; 0 means d_model / n_heads
  std::size_t d_v = 0;         // per-head value width; 0 means d_k
  std::size_t n_kv_heads = 0;  // 0 means n_heads (full MHA); 1 is MQA
  HeadCombine head_combine = HeadCombine::concat;  // sum: out_proj is (C, d_v)
  bool causal = true;
  bool bias = true;
  std::optional<double> attn_scale = std::nullopt;  // default 1/sqrt(d_k)
  // docs/design.md #17, in the order they apply to q and k ("Order inside attention"):
  bool qk_norm = false;        // RMSNorm over d_k of each head's q and k (q_norm, k_norm)
  double qk_norm_eps = 1e-5;   // their eps (the model's ln_eps)
  bool key_smear = false;      // k_t <- s k_t + (1 - s) k_{t-1}, s = sigmoid(key_smear) per kv head
  bool rope = false;           // rotary positions on q and k (d_k even)
  double rope_base = 10000.0;  // theta_i = rope_base^(-2i/d_k); read with rope only
  double dropout = 0.0;        // on the attention weights, in training mode
  std::uint64_t dropout_site = 0;  // the weights' site under this thread's DropoutSeed (nn/dropout.hpp)
  double init_std = 0.02;
  double out_init_std = 0.02;  // out_proj, which writes into the residual stream

  // The options with every default filled in; throws std::invalid_argument naming
  // the numbers for an invalid combination.
  AttentionOptions resolved() const;
};

// The layer's parameter count in closed form (bias included when options.bias):
// q_proj (C + b) H d_k, k_proj (C + b) G d_k, v_proj (C + b) G d_v, and out_proj
// C W + b C with W = H d_v under concat, d_v under sum (b = 1 with bias, else 0);
// plus 2 d_k with qk_norm (q_norm and k_norm) and G with key_smear.
// Resolves the options first, so it throws as the constructor would.
std::size_t attention_parameter_count(const AttentionOptions& options);
// Floats a key/value cache holds per token and per layer: G (d_k + d_v).
std::size_t kv_cache_floats_per_token(const AttentionOptions& options);

template <typename T>
struct AttentionOutput {
  Tensor<T> out;      // (B, T, d_model)
  Tensor<T> weights;  // (B, H, T, T) when asked for, else undefined
};

// (B, T, H*d) -> (B, H, T, d)
template <typename T>
Tensor<T> split_heads(const Tensor<T>& x, std::size_t heads);
// (B, H, T, d) -> (B, T, H*d)
template <typename T>
Tensor<T> merge_heads(const Tensor<T>& x);
// (T, T), true above the diagonal: key j is hidden from query i when j > i.
Mask causal_mask(std::size_t t);

template <typename T>
class MultiHeadAttention : public Module<T> {
 public:
  MultiHeadAttention(const AttentionOptions& options, Rng& rng);

  // x (B, T, d_model). key_padding_mask (B, T), true where a key is padding and
  // must be ignored (PyTorch's convention). need_weights returns (B, H, T, T).
  // positions (T, d_model), when given, is added to the input of q_proj and k_proj
  // only (pos_qk_only, docs/design.md #17); v_proj reads x alone.
  // hooks, when given, are called at this layer's pattern, head_out and attn_out
  // points (nn/hooks.hpp) with `layer` as the layer.
  AttentionOutput<T> forward(const Tensor<T>& x, const Mask* key_padding_mask = nullptr,
                             bool need_weights = false, const Tensor<T>* positions = nullptr,
                             const ForwardHooks<T>* hooks = nullptr, std::size_t layer = 0);

  // Incremental decoding (docs/design.md #18): x (n, T_new, C) holds the next T_new
  // tokens of cache rows [row0, row0 + n), row r = row0 + b at positions [lengths[r],
  // lengths[r] + T_new) (lengths: every row of the cache). Their keys and values are written into `cache` at those
  // positions (the caller advances the lengths), and each query attends to its row's
  // keys up to and including its own; grouped query heads read their kv head's keys
  // in place. positions (n, T_new, C), when given, as in forward. Values only: no
  // gradient flows (call under NoGrad); dropout is not applied; the head gate is.
  Tensor<T> forward_cached(const Tensor<T>& x, LayerKVCache<T>& cache, const std::vector<std::size_t>& lengths,
                           std::size_t row0, const Tensor<T>* positions = nullptr);

  const AttentionOptions& options() const { return options_; }  // resolved

  // A per-head gate (n_heads,): head j's output (its row of softmax(QK^T) V, before
  // the heads are combined and projected) is multiplied by gate[j]. 0 removes head
  // j's contribution exactly, leaving out_proj's bias where every head is gated out;
  // a gate that requires grad receives d loss / d gate[j], the head importance of
  // Michel et al. (2019). Not a parameter: not saved, not trained, not counted.
  // Throws std::invalid_argument naming the shape unless it is (n_heads,).
  void set_head_gate(const Tensor<T>& gate);
  void clear_head_gate() { head_gate_.reset(); }
  const std::optional<Tensor<T>>& head_gate() const { return head_gate_; }

 private:
  AttentionOptions options_;
  double scale_;
  Linear<T> q_proj_;    // (H d_k, C)
  Linear<T> k_proj_;    // (G d_k, C)
  Linear<T> v_proj_;    // (G d_v, C)
  Linear<T> out_proj_;  // (C, H d_v) under concat, (C, d_v) under sum
  std::unique_ptr<RMSNorm<T>> q_norm_;  // (d_k), qk_norm only
  std::unique_ptr<RMSNorm<T>> k_norm_;  // (d_k), qk_norm only
  Tensor<T> key_smear_;                 // (G), key_smear only; s = sigmoid of it

  // q (B, T, H d_k) and k (B, T, G d_k) through qk_norm, key_smear and rope, as the
  // options ask.
  void transform_qk(Tensor<T>& q, Tensor<T>& k) const;
  std::optional<Tensor<T>> head_gate_;  // (H,), applied to each head's output
};

}  // namespace headroom
