#include "nn/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/fast_math.hpp"
#include "autograd/parallel.hpp"
#include "autograd/softmax_row.hpp"

namespace headroom {

HeadCombine parse_head_combine(const std::string& name) {
  if (name == "concat") return HeadCombine::concat;
  if (name == "sum") return HeadCombine::sum;
  throw std::invalid_argument(fmt::format("head_combine must be 'concat' or 'sum', got '{}'", name));
}

std::string to_string(HeadCombine combine) { return combine == HeadCombine::concat ? "concat" : "sum"; }

AttentionOptions AttentionOptions::resolved() const {
  AttentionOptions r = *this;
  if (d_model == 0) throw std::invalid_argument("MultiHeadAttention: d_model must be positive, got 0");
  if (n_heads == 0) throw std::invalid_argument("MultiHeadAttention: n_heads must be positive, got 0");
  if (r.d_k == 0) {
    if (d_model % n_heads != 0) {
      throw std::invalid_argument(fmt::format(
          "MultiHeadAttention: d_model={} is not a multiple of n_heads={}; give d_k explicitly",
          d_model, n_heads));
    }
    r.d_k = d_model / n_heads;
  }
  if (r.d_v == 0) r.d_v = r.d_k;
  if (r.n_kv_heads == 0) r.n_kv_heads = n_heads;
  if (n_heads % r.n_kv_heads != 0) {
    throw std::invalid_argument(fmt::format(
        "MultiHeadAttention: n_heads={} is not a multiple of n_kv_heads={}", n_heads, r.n_kv_heads));
  }
  if (!r.attn_scale) r.attn_scale = 1.0 / std::sqrt(static_cast<double>(r.d_k));
  if (!std::isfinite(*r.attn_scale)) {
    throw std::invalid_argument(fmt::format("MultiHeadAttention: attn_scale must be finite, got {}", *r.attn_scale));
  }
  if (qk_norm && (!(qk_norm_eps > 0) || !std::isfinite(qk_norm_eps))) {
    throw std::invalid_argument(
        fmt::format("MultiHeadAttention: qk_norm_eps must be a positive number, got {}", qk_norm_eps));
  }
  if (rope && r.d_k % 2 != 0) {
    throw std::invalid_argument(
        fmt::format("MultiHeadAttention: rope turns pairs of q/k channels, so d_k must be even, got {}", r.d_k));
  }
  if (rope && (!(rope_base > 1) || !std::isfinite(rope_base))) {
    throw std::invalid_argument(
        fmt::format("MultiHeadAttention: rope_base must be a number above 1, got {}", rope_base));
  }
  if (!(dropout >= 0.0 && dropout < 1.0)) {
    throw std::invalid_argument(fmt::format("MultiHeadAttention: dropout must be in [0, 1), got {}", dropout));
  }
  return r;
}

std::size_t attention_parameter_count(const AttentionOptions& options) {
  const AttentionOptions o = options.resolved();
  const std::size_t C = o.d_model, b = o.bias ? 1 : 0;
  const std::size_t out_in = o.head_combine == HeadCombine::concat ? o.n_heads * o.d_v : o.d_v;
  return (C + b) * o.n_heads * o.d_k      // q_proj
         + (C + b) * o.n_kv_heads * o.d_k  // k_proj
         + (C + b) * o.n_kv_heads * o.d_v  // v_proj
         + C * out_in + b * C              // out_proj
         + (o.qk_norm ? 2 * o.d_k : 0)     // q_norm, k_norm
         + (o.key_smear ? o.n_kv_heads : 0);
}

std::size_t kv_cache_floats_per_token(const AttentionOptions& options) {
  const AttentionOptions o = options.resolved();
  return o.n_kv_heads * (o.d_k + o.d_v);
}

template <typename T>
Tensor<T> split_heads(const Tensor<T>& x, std::size_t heads) {
  const Shape& s = x.shape();
  if (s.size() != 3 || heads == 0 || s[2] % heads != 0) {
    throw ShapeError(fmt::format("split_heads: cannot split {} into {} heads along the last axis",
                                 format_shape(s), heads));
  }
  return permute(reshape(x, {s[0], s[1], heads, s[2] / heads}), {0, 2, 1, 3});
}

template <typename T>
Tensor<T> merge_heads(const Tensor<T>& x) {
  const Shape& s = x.shape();
  if (s.size() != 4) throw ShapeError("merge_heads: expected (B, H, T, d), got " + format_shape(s));
  return reshape(permute(x, {0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
}

Mask causal_mask(std::size_t t) {
  Mask m = xt::zeros<bool>(Shape{t, t});
  for (std::size_t i = 0; i < t; ++i) {
    for (std::size_t j = i + 1; j < t; ++j) m(i, j) = true;
  }
  return m;
}

template <typename T>
MultiHeadAttention<T>::MultiHeadAttention(const AttentionOptions& options, Rng& rng)
    : options_(options.resolved()),
      scale_(*options_.attn_scale),
      q_proj_({.in_features = options_.d_model, .out_features = options_.n_heads * options_.d_k,
               .bias = options_.bias, .init_std = options_.init_std},
              rng),
      k_proj_({.in_features = options_.d_model, .out_features = options_.n_kv_heads * options_.d_k,
               .bias = options_.bias, .init_std = options_.init_std},
              rng),
      v_proj_({.in_features = options_.d_model, .out_features = options_.n_kv_heads * options_.d_v,
               .bias = options_.bias, .init_std = options_.init_std},
              rng),
      out_proj_({.in_features = options_.head_combine == HeadCombine::concat ? options_.n_heads * options_.d_v
                                                                             : options_.d_v,
                 .out_features = options_.d_model,
                 .bias = options_.bias, .init_std = options_.out_init_std},
                rng) {
  // Neither the norms nor the smear draw from rng: the projections keep the values
  // they have without them.
  if (options_.key_smear) {
    key_smear_ = this->register_parameter("key_smear", constant_init<T>({options_.n_kv_heads}, 0.0));
  }
  this->register_module("q_proj", q_proj_);
  this->register_module("k_proj", k_proj_);
  this->register_module("v_proj", v_proj_);
  if (options_.qk_norm) {
    q_norm_ = std::make_unique<RMSNorm<T>>(RMSNormOptions{.dim = options_.d_k, .eps = options_.qk_norm_eps});
    k_norm_ = std::make_unique<RMSNorm<T>>(RMSNormOptions{.dim = options_.d_k, .eps = options_.qk_norm_eps});
    this->register_module("q_norm", *q_norm_);
    this->register_module("k_norm", *k_norm_);
  }
  this->register_module("out_proj", out_proj_);
}

template <typename T>
void MultiHeadAttention<T>::transform_qk(Tensor<T>& q, Tensor<T>& k) const {
  const Shape qs = q.shape();  // (B, T, H dk)
  const std::size_t B = qs[0], T_ = qs[1];
  const std::size_t H = options_.n_heads, G = options_.n_kv_heads, dk = options_.d_k;
  if (q_norm_) {
    // Each head's d_k channels normed on their own: the last axis split into heads.
    q = reshape(q_norm_->forward(reshape(q, {B, T_, H, dk})), {B, T_, H * dk});
    k = reshape(k_norm_->forward(reshape(k, {B, T_, G, dk})), {B, T_, G * dk});
  }
  if (options_.key_smear) {
    // prev_t = k_{t-1}, prev_0 = 0; k_t <- prev_t + s (k_t - prev_t) = s k_t + (1 - s) k_{t-1}.
    const Tensor<T> zeros(xt::xarray<T>(xt::zeros<T>(Shape{B, 1, G * dk})));
    Tensor<T> prev = T_ == 1 ? zeros : concat(std::vector<Tensor<T>>{zeros, slice(k, 1, 0, T_ - 1)}, 1);
    Tensor<T> s = reshape(sigmoid(key_smear_), {1, 1, G, 1});
    Tensor<T> prev4 = reshape(prev, {B, T_, G, dk});
    k = reshape(add(prev4, mul(s, sub(reshape(k, {B, T_, G, dk}), prev4))), {B, T_, G * dk});
  }
  if (options_.rope) {
    q = rope(q, H, options_.rope_base, 0);
    k = rope(k, G, options_.rope_base, 0);
  }
}

template <typename T>
AttentionOutput<T> MultiHeadAttention<T>::forward(const Tensor<T>& x, const Mask* key_padding_mask,
                                                  bool need_weights, const Tensor<T>* positions,
                                                  const ForwardHooks<T>* hooks, std::size_t layer) {
  const Shape& xs = x.shape();
  if (xs.size() != 3 || xs[2] != options_.d_model) {
    throw ShapeError(fmt::format("MultiHeadAttention: input must be (B, T, {}), got {}", options_.d_model,
                                 format_shape(xs)));
  }
  const std::size_t B = xs[0], T_ = xs[1];
  const std::size_t H = options_.n_heads, G = options_.n_kv_heads, g = H / G;
  const std::size_t dk = options_.d_k, dv = options_.d_v;
  if (key_padding_mask && Shape(key_padding_mask->shape()) != Shape{B, T_}) {
    throw ShapeError(fmt::format("MultiHeadAttention: key_padding_mask must be (B, T) = {}, got {}",
                                 format_shape({B, T_}), format_shape(key_padding_mask->shape())));
  }
  if (positions && positions->shape() != Shape{T_, options_.d_model}) {
    throw ShapeError(fmt::format("MultiHeadAttention: positions must be (T, d_model) = {}, got {}",
                                 format_shape({T_, options_.d_model}), format_shape(positions->shape())));
  }
  const bool sum_heads = options_.head_combine == HeadCombine::sum;
  // docs/design.md, "Order inside attention": positions into q and k only, then
  // qk_norm, key_smear and rope on them; v reads x alone.
  const Tensor<T> qk_in = positions ? add(x, *positions) : x;
  Tensor<T> q_packed = q_proj_.forward(qk_in);  // (B, T, H dk)
  Tensor<T> k_packed = k_proj_.forward(qk_in);  // (B, T, G dk)
  transform_qk(q_packed, k_packed);
  const Tensor<T> v_packed = v_proj_.forward(x);  // (B, T, G dv)
  const bool hooked = hooks != nullptr && hooks->fn;
  if (!(options_.dropout > 0.0 && this->is_training()) && !(hooked && hooks->pattern)) {
    // The fused op (autograd/ops_attention.cpp): every head in one pass, reading the
    // packed projections in place. Dropout on the weights, and a hook on them
    // (nn/hooks.hpp), need the composed form.
    xt::xarray<T> weights;
    Tensor<T> ctx = attention(q_packed, k_packed, v_packed,
                              {.n_heads = H,
                               .n_kv_heads = G,
                               .scale = static_cast<T>(scale_),
                               .causal = options_.causal,
                               .key_padding = key_padding_mask,
                               .weights = need_weights ? &weights : nullptr});  // (B, T, H dv)
    if (head_gate_ || sum_heads || hooked) {
      Tensor<T> heads = reshape(ctx, {B, T_, H, dv});
      if (head_gate_) heads = mul(heads, reshape(*head_gate_, {1, 1, H, 1}));
      heads = apply_hook(hooks, HookPoint::head_out, layer, heads);
      ctx = sum_heads ? sum(heads, {2}) : reshape(heads, {B, T_, H * dv});
    }
    AttentionOutput<T> result{apply_hook(hooks, HookPoint::attn_out, layer, out_proj_.forward(ctx)),
                              Tensor<T>()};  // (B, T, C)
    if (need_weights) result.weights = Tensor<T>(std::move(weights));
    return result;
  }

  // The composed form, for attention dropout in training. Grouped heads as a 5-D
  // batch: query head j = kv * g + r sits at (kv, r), so one broadcast matmul lets
  // the g query heads of a group share their key/value head.
  Tensor<T> q = reshape(split_heads(q_packed, H), {B, G, g, T_, dk});  // (B, G, g, T, dk)
  Tensor<T> k = reshape(split_heads(k_packed, G), {B, G, 1, T_, dk});  // (B, G, 1, T, dk)
  Tensor<T> v = reshape(split_heads(v_packed, G), {B, G, 1, T_, dv});  // (B, G, 1, T, dv)

  Tensor<T> weights_out;  // (B, H, T, T), need_weights only
  Tensor<T> scores = mul_scalar(matmul(q, transpose(k)), static_cast<T>(scale_));  // (B, G, g, T, T)
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  if (options_.causal) scores = masked_fill(scores, causal_mask(T_), neg_inf);
  if (key_padding_mask) {
    Mask keys = *key_padding_mask;
    keys.reshape({B, 1, 1, 1, T_});  // broadcast over heads and queries
    scores = masked_fill(scores, keys, neg_inf);
  }
  Tensor<T> attn = softmax(scores, -1);  // (B, G, g, T, T)
  if (hooked && hooks->pattern) {
    attn = reshape(apply_hook(hooks, HookPoint::pattern, layer, reshape(attn, {B, H, T_, T_})), {B, G, g, T_, T_});
  }
  attn = site_dropout(attn, options_.dropout, options_.dropout_site, this->is_training(), "MultiHeadAttention");
  if (need_weights) weights_out = reshape(attn, {B, H, T_, T_});  // after dropout, as PyTorch returns them

  Tensor<T> ctx = reshape(matmul(attn, v), {B, H, T_, dv});  // (B, H, T, dv)
  if (head_gate_) ctx = mul(ctx, reshape(*head_gate_, {1, H, 1, 1}));
  Tensor<T> combined;
  if (hooked) {
    // The hook sees (B, T, H, dv), as on the fused path.
    Tensor<T> heads = apply_hook(hooks, HookPoint::head_out, layer, reshape(merge_heads(ctx), {B, T_, H, dv}));
    combined = sum_heads ? sum(heads, {2}) : reshape(heads, {B, T_, H * dv});
  } else {
    combined = sum_heads ? sum(ctx, {1})      // (B, T, dv)
                         : merge_heads(ctx);  // (B, T, H dv)
  }
  AttentionOutput<T> result{apply_hook(hooks, HookPoint::attn_out, layer, out_proj_.forward(combined)),
                            Tensor<T>()};  // (B, T, C)
  if (need_weights) result.weights = weights_out;
  return result;
}

template <typename T>
void MultiHeadAttention<T>::set_head_gate(const Tensor<T>& gate) {
  if (gate.shape() != Shape{options_.n_heads}) {
    throw std::invalid_argument(fmt::format("MultiHeadAttention: the head gate must be (n_heads) = ({}), got {}",
                                            options_.n_heads, format_shape(gate.shape())));
  }
  head_gate_ = gate;
}

namespace {

// y[0, n) += a x[0, n), the two not overlapping: one vector loop.
template <typename T>
[[gnu::always_inline]] inline void axpy(T* __restrict y, const T* __restrict x, T a, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) y[j] += a * x[j];
}

// One (row, kv head) pair of cached attention: query t of the new tokens, at
// position p = L + t, attends to keys [0, p] of the cache. Kt (d_k, N) keys
// transposed, rows N apart (the padded stride), and V (capacity, d_v) of the kv
// head; q (T_new rows of stride ldq) and out (stride ldo) point at the group's first query head, whose heads follow at d_k and
// d_v. s is scratch of g N. Per query: the scores of the g heads as d_k vector
// updates along the keys (each key row read once for the group), a softmax each,
// and the outputs as p + 1 vector updates along d_v (each value row read once for
// the group).
template <typename T>
[[gnu::always_inline]] inline void cached_head_group(const T* q, std::size_t ldq, const T* kt, const T* v,
                                                     std::size_t N, std::size_t g, std::size_t dk, std::size_t dv,
                                                     T scale, std::size_t L, std::size_t t_new, T* out,
                                                     std::size_t ldo, T* s) {
  for (std::size_t t = 0; t < t_new; ++t) {
    const std::size_t n = L + t + 1;  // keys visible to this query
    const T* qt = q + t * ldq;
    T* ot = out + t * ldo;
    for (std::size_t r = 0; r < g; ++r) std::fill(s + r * N, s + r * N + n, T(0));
    for (std::size_t d = 0; d < dk; ++d) {
      for (std::size_t r = 0; r < g; ++r) axpy(s + r * N, kt + d * N, qt[r * dk + d] * scale, n);
    }
    for (std::size_t r = 0; r < g; ++r) {
      softmax_row(s + r * N, n);
      std::fill(ot + r * dv, ot + (r + 1) * dv, T(0));
    }
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t r = 0; r < g; ++r) axpy(ot + r * dv, v + j * dv, s[r * N + j], dv);
    }
  }
}

HEADROOM_CLONES void cached_head_group_f32(const float* q, std::size_t ldq, const float* kt, const float* v,
                                           std::size_t N, std::size_t g, std::size_t dk, std::size_t dv,
                                           float scale, std::size_t L, std::size_t t_new, float* out,
                                           std::size_t ldo, float* s) {
  cached_head_group(q, ldq, kt, v, N, g, dk, dv, scale, L, t_new, out, ldo, s);
}

}  // namespace

template <typename T>
Tensor<T> MultiHeadAttention<T>::forward_cached(const Tensor<T>& x, LayerKVCache<T>& cache,
                                                const std::vector<std::size_t>& lengths, std::size_t row0,
                                                const Tensor<T>* positions) {
  const Shape& xs = x.shape();
  const std::size_t H = options_.n_heads, G = options_.n_kv_heads, g = H / G;
  const std::size_t dk = options_.d_k, dv = options_.d_v;
  if (xs.size() != 3 || xs[2] != options_.d_model || xs[1] == 0) {
    throw ShapeError(fmt::format("MultiHeadAttention: input must be (n, T_new, {}) with T_new >= 1, got {}",
                                 options_.d_model, format_shape(xs)));
  }
  const std::size_t n = xs[0], t_new = xs[1];
  if (!options_.causal) {
    throw std::invalid_argument(
        "MultiHeadAttention: a non-causal layer cannot decode from a KV cache (earlier tokens would read later ones)");
  }
  const Shape& ks = cache.k.shape();
  if (ks.size() != 4 || ks[1] != G || ks[2] != dk || cache.v.shape()[3] != dv || ks[3] < cache.v.shape()[2] ||
      row0 + n > ks[0] ||
      lengths.size() != ks[0]) {
    throw std::invalid_argument(fmt::format(
        "MultiHeadAttention: the KV cache's keys {} and values {} do not hold rows [{}, {}) of n_kv_heads {}, "
        "d_k {}, d_v {}",
        format_shape(ks), format_shape(cache.v.shape()), row0, row0 + n, G, dk, dv));
  }
  const std::size_t N = cache.v.shape()[2], ldk = ks[3];  // capacity, and K^T's padded row stride
  for (std::size_t b = 0; b < n; ++b) {
    if (lengths[row0 + b] + t_new > N) {
      throw std::invalid_argument(fmt::format("KV cache: row {} holds {} tokens of {}; {} more do not fit",
                                              row0 + b, lengths[row0 + b], N, t_new));
    }
  }
  if (positions && positions->shape() != Shape{n, t_new, options_.d_model}) {
    throw ShapeError(fmt::format("MultiHeadAttention: positions must be (n, T_new, d_model) = {}, got {}",
                                 format_shape({n, t_new, options_.d_model}), format_shape(positions->shape())));
  }
  // The same ops as forward, in the same order, on the new rows only (docs/design.md
  // #18): only the scores read the cache.
  const Tensor<T> qk_in = positions ? add(x, *positions) : x;
  Tensor<T> q = q_proj_.forward(qk_in);  // (n, T_new, H dk)
  Tensor<T> k = k_proj_.forward(qk_in);  // (n, T_new, G dk)
  const Tensor<T> v = v_proj_.forward(x);  // (n, T_new, G dv)
  if (q_norm_) {
    q = reshape(q_norm_->forward(reshape(q, {n, t_new, H, dk})), {n, t_new, H * dk});
    k = reshape(k_norm_->forward(reshape(k, {n, t_new, G, dk})), {n, t_new, G * dk});
  }
  if (options_.key_smear) {
    // prev_0 is the row's newest cached key before the smear (0 for an empty row).
    xt::xarray<T> first = xt::zeros<T>(Shape{n, 1, G * dk});
    for (std::size_t b = 0; b < n; ++b) {
      if (lengths[row0 + b] == 0) continue;
      std::copy_n(cache.k_last.data() + (row0 + b) * G * dk, G * dk, first.data() + b * G * dk);
    }
    const Tensor<T> first_t(std::move(first));
    Tensor<T> prev = t_new == 1 ? first_t : concat(std::vector<Tensor<T>>{first_t, slice(k, 1, 0, t_new - 1)}, 1);
    for (std::size_t b = 0; b < n; ++b) {  // this call's newest keys, before the smear
      std::copy_n(k.value().data() + (b * t_new + t_new - 1) * G * dk, G * dk,
                  cache.k_last.data() + (row0 + b) * G * dk);
    }
    Tensor<T> s = reshape(sigmoid(key_smear_), {1, 1, G, 1});
    Tensor<T> prev4 = reshape(prev, {n, t_new, G, dk});
    k = reshape(add(prev4, mul(s, sub(reshape(k, {n, t_new, G, dk}), prev4))), {n, t_new, G * dk});
  }
  if (options_.rope) {
    // One call when every row is at the same position (the common case), else row by row.
    const bool same = std::all_of(lengths.begin() + row0, lengths.begin() + row0 + n,
                                  [&](std::size_t l) { return l == lengths[row0]; });
    if (same) {
      q = rope(q, H, options_.rope_base, lengths[row0]);
      k = rope(k, G, options_.rope_base, lengths[row0]);
    } else {
      std::vector<Tensor<T>> qs, kss;
      for (std::size_t b = 0; b < n; ++b) {
        qs.push_back(rope(slice(q, 0, b, b + 1), H, options_.rope_base, lengths[row0 + b]));
        kss.push_back(rope(slice(k, 0, b, b + 1), G, options_.rope_base, lengths[row0 + b]));
      }
      q = concat(qs, 0);
      k = concat(kss, 0);
    }
  }
  // The new keys (transposed) and values into the cache at their positions.
  const T* pk = k.value().data();
  const T* pv = v.value().data();
  for (std::size_t b = 0; b < n; ++b) {
    const std::size_t r = row0 + b, L = lengths[r];
    for (std::size_t gi = 0; gi < G; ++gi) {
      T* kt = cache.k.data() + (r * G + gi) * dk * ldk;
      T* vg = cache.v.data() + (r * G + gi) * N * dv;
      for (std::size_t t = 0; t < t_new; ++t) {
        const T* kr = pk + (b * t_new + t) * G * dk + gi * dk;
        for (std::size_t d = 0; d < dk; ++d) kt[d * ldk + L + t] = kr[d];
        std::copy_n(pv + (b * t_new + t) * G * dv + gi * dv, dv, vg + (L + t) * dv);
      }
    }
  }
  xt::xarray<T> ctx_values = xt::empty<T>(Shape{n, t_new, H * dv});
  const T* pq = q.value().data();
  T* po = ctx_values.data();
  const T scale = static_cast<T>(scale_);
  parallel_for(n * G, 1, [&](std::size_t begin, std::size_t end) {
    std::vector<T> scratch(g * ldk);
    for (std::size_t bg = begin; bg < end; ++bg) {
      const std::size_t b = bg / G, gi = bg % G, r = row0 + b;
      fast::clone_if_float<T>(cached_head_group_f32, [](auto... a) { cached_head_group(a...); },
                              pq + b * t_new * H * dk + gi * g * dk, H * dk,
                              static_cast<const T*>(cache.k.data() + (r * G + gi) * dk * ldk),
                              static_cast<const T*>(cache.v.data() + (r * G + gi) * N * dv), ldk, g, dk, dv, scale,
                              lengths[r], t_new, po + b * t_new * H * dv + gi * g * dv, H * dv, scratch.data());
    }
  });
  Tensor<T> ctx(std::move(ctx_values));  // (n, T_new, H dv)
  if (head_gate_ || options_.head_combine == HeadCombine::sum) {
    Tensor<T> heads = reshape(ctx, {n, t_new, H, dv});
    if (head_gate_) heads = mul(heads, reshape(*head_gate_, {1, 1, H, 1}));
    ctx = options_.head_combine == HeadCombine::sum ? sum(heads, {2}) : reshape(heads, {n, t_new, H * dv});
  }
  return out_proj_.forward(ctx);  // (n, T_new, C)
}

template Tensor<float> split_heads(const Tensor<float>&, std::size_t);
template Tensor<double> split_heads(const Tensor<double>&, std::size_t);
template Tensor<float> merge_heads(const Tensor<float>&);
template Tensor<double> merge_heads(const Tensor<double>&);
template class MultiHeadAttention<float>;
template class MultiHeadAttention<double>;

}  // namespace headroom
