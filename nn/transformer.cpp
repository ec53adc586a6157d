#include "nn/transformer.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace headroom {
namespace {

template <typename T>
std::unique_ptr<Norm<T>> make_norm(NormType type, std::size_t dim, double eps) {
  if (type == NormType::rmsnorm) return std::make_unique<RMSNorm<T>>(RMSNormOptions{.dim = dim, .eps = eps});
  return std::make_unique<LayerNorm<T>>(LayerNormOptions{.dim = dim, .eps = eps});
}

}  // namespace

template <typename T>
TransformerBlock<T>::TransformerBlock(const BlockOptions& options, Rng& rng)
    : norm_(options.norm), dropout_(options.dropout), dropout_site_(options.dropout_site),
      attn_(options.attention, rng) {
  // The members are made in the order the parameters are registered (and drawn:
  // only attn and ffn draw from rng), so that a block with every part keeps the
  // parameter order and the initial values it always had.
  const std::size_t C = options.attention.d_model;
  const bool normed = options.norm != NormPlacement::none;
  if (normed) {
    ln1_ = make_norm<T>(options.norm_type, C, options.ln_eps);
    this->register_module("ln1", *ln1_);
  }
  this->register_module("attn", attn_);
  if (options.attn_only) return;
  if (normed) {
    ln2_ = make_norm<T>(options.norm_type, C, options.ln_eps);
    this->register_module("ln2", *ln2_);
  }
  ffn_ = std::make_unique<FeedForward<T>>(options.ffn, rng);
  this->register_module("ffn", *ffn_);
}

template <typename T>
Tensor<T> TransformerBlock<T>::drop(const Tensor<T>& branch, std::uint64_t site) const {
  return site_dropout(branch, dropout_, site, this->is_training(), "TransformerBlock");
}

template <typename T>
Tensor<T> TransformerBlock<T>::forward(const Tensor<T>& x, const Mask* key_padding_mask, Tensor<T>* weights,
                                       const Tensor<T>* positions, const ForwardHooks<T>* hooks, std::size_t layer) {
  const bool need = weights != nullptr;
  const auto hook = [&](HookPoint point, const Tensor<T>& value) { return apply_hook(hooks, point, layer, value); };
  const Tensor<T> in = hook(HookPoint::resid_pre, x);
  // The hooks see each branch as its layer made it, before dropout.
  const std::uint64_t attn_site = dropout_site_, ffn_site = dropout_site_ + 1;
  if (norm_ == NormPlacement::post) {
    AttentionOutput<T> a = attn_.forward(in, key_padding_mask, need, positions, hooks, layer);
    if (need) *weights = a.weights;
    Tensor<T> h = norm1(hook(HookPoint::resid_mid, add(in, drop(a.out, attn_site))));
    if (!ffn_) return hook(HookPoint::resid_post, h);
    return hook(HookPoint::resid_post,
                norm2(add(h, drop(hook(HookPoint::mlp_out, ffn_->forward(h)), ffn_site))));
  }
  // Pre-norm, and no norm, where norm1 and norm2 pass x through.
  AttentionOutput<T> a = attn_.forward(norm1(in), key_padding_mask, need, positions, hooks, layer);
  if (need) *weights = a.weights;
  Tensor<T> h = hook(HookPoint::resid_mid, add(in, drop(a.out, attn_site)));
  if (!ffn_) return hook(HookPoint::resid_post, h);
  return hook(HookPoint::resid_post, add(h, drop(hook(HookPoint::mlp_out, ffn_->forward(norm2(h))), ffn_site)));
}

template <typename T>
TransformerLM<T>::TransformerLM(const ModelConfig& config, Rng& rng) : TransformerLM(config.resolved(), rng) {}

template <typename T>
TransformerLM<T>::TransformerLM(const ResolvedModelConfig& config, Rng& rng)
    : config_(config),
      tok_emb_({.num_embeddings = config->vocab, .dim = config->d_model, .init_std = config->init_std}, rng) {
  const ModelConfig& c = config_;
  this->register_module("tok_emb", tok_emb_);
  if (c.pos == PositionEncoding::learned) {
    pos_emb_ = std::make_unique<Embedding<T>>(
        EmbeddingOptions{.num_embeddings = c.max_len, .dim = c.d_model, .init_std = c.init_std}, rng);
    this->register_module("pos_emb", *pos_emb_);
  } else if (c.pos == PositionEncoding::sinusoidal) {
    sinusoid_ = sinusoidal_positions<T>(c.max_len, c.d_model);
  }
  const double residual_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    BlockOptions b{
        .attention = attention_options(c),
        .ffn = {.d_model = c.d_model,
                .d_ff = c.d_ff,
                .activation = c.activation,
                .bias = c.bias,
                .init_std = c.init_std,
                .out_init_std = residual_std,
                .type = c.ffn},
        .norm = c.norm,
        .norm_type = c.norm_type,
        .ln_eps = c.ln_eps,
        .attn_only = c.attn_only,
        .dropout = c.dropout,
        .dropout_site = 3 * i + 2};
    b.attention.out_init_std = residual_std;
    b.attention.dropout_site = 3 * i + 1;
    blocks_.push_back(std::make_unique<TransformerBlock<T>>(b, rng));
    this->register_module(fmt::format("blocks.{}", i), *blocks_.back());
  }
  if (c.norm != NormPlacement::none) {
    ln_f_ = make_norm<T>(c.norm_type, c.d_model, c.ln_eps);
    this->register_module("ln_f", *ln_f_);
  }
  if (!c.tie_embeddings) {
    head_ = std::make_unique<Linear<T>>(
        LinearOptions{.in_features = c.d_model, .out_features = c.vocab, .bias = false, .init_std = c.init_std}, rng);
    this->register_module("head", *head_);
  }
}

template <typename T>
Tensor<T> TransformerLM<T>::forward(const IndexArray& tokens, std::vector<Tensor<T>>* attention_weights,
                                    const ForwardHooks<T>* hooks) {
  const Shape& s = tokens.shape();
  if (s.size() != 2) {
    throw ShapeError(fmt::format("TransformerLM: tokens must be (B, T), got {}", format_shape(s)));
  }
  const std::size_t B = s[0], T_ = s[1];
  if (T_ == 0 || T_ > config_->max_len) {
    throw std::invalid_argument(fmt::format(
        "TransformerLM: sequence length {} is not in [1, max_len={}]", T_, config_->max_len));
  }
  (void)B;
  Tensor<T> x = tok_emb_.forward(tokens);  // (B, T, C)
  Tensor<T> table;                         // (T, C), P; undefined with pos rope or none
  if (pos_emb_) {
    IndexArray positions = IndexArray::from_shape({T_});
    for (std::size_t t = 0; t < T_; ++t) positions(t) = static_cast<Index>(t);
    table = pos_emb_->forward(positions);
  } else if (config_->pos == PositionEncoding::sinusoidal) {
    xt::xarray<T> values = xt::xarray<T>::from_shape({T_, config_->d_model});
    std::copy_n(sinusoid_.data(), T_ * config_->d_model, values.data());
    table = Tensor<T>(std::move(values));
  }
  const bool qk_only = config_->pos_qk_only;
  if (table.defined() && !qk_only) x = add(x, table);  // + (T, C), broadcast over the batch
  x = site_dropout(x, config_->dropout, 0, this->is_training(), "TransformerLM");
  const Tensor<T>* positions = table.defined() && qk_only ? &table : nullptr;
  if (attention_weights) attention_weights->assign(blocks_.size(), Tensor<T>());
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    x = blocks_[i]->forward(x, nullptr, attention_weights ? &(*attention_weights)[i] : nullptr, positions, hooks, i);
  }
  if (ln_f_) x = ln_f_->forward(x);
  x = apply_hook(hooks, HookPoint::final, blocks_.size(), x);
  return head_ ? head_->forward(x) : linear(x, tok_emb_.weight());  // (B, T, V)
}

std::pair<IndexArray, IndexArray> shift_tokens(const IndexArray& tokens) {
  const Shape& s = tokens.shape();
  if (s.size() != 2 || s[1] < 2) {
    throw ShapeError(fmt::format("TransformerLM: loss needs tokens (B, T+1) with T >= 1, got {}",
                                 format_shape(s)));
  }
  const std::size_t B = s[0], T_ = s[1] - 1;
  IndexArray inputs = IndexArray::from_shape({B, T_});
  IndexArray targets = IndexArray::from_shape({B, T_});
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t t = 0; t < T_; ++t) {
      inputs(b, t) = tokens(b, t);
      targets(b, t) = tokens(b, t + 1);
    }
  }
  return {std::move(inputs), std::move(targets)};
}

template <typename T>
Tensor<T> TransformerLM<T>::loss(const IndexArray& tokens, const Mask* target_mask) {
  auto [inputs, targets] = shift_tokens(tokens);
  const Tensor<T> logits = forward(inputs);
  if (target_mask == nullptr) return cross_entropy(logits, targets, Mask(xt::ones<bool>(targets.shape())));
  if (Shape(target_mask->shape()) != Shape(targets.shape())) {
    throw ShapeError(fmt::format("TransformerLM: target_mask must be (B, T) = {}, got {}",
                                 format_shape(targets.shape()), format_shape(target_mask->shape())));
  }
  return cross_entropy(logits, targets, *target_mask);
}

template <typename T>
Tensor<T> TransformerBlock<T>::forward_cached(const Tensor<T>& x, LayerKVCache<T>& cache,
                                              const std::vector<std::size_t>& lengths, std::size_t row0,
                                              const Tensor<T>* positions) {
  // forward's lines, with the cached attention and without dropout.
  if (norm_ == NormPlacement::post) {
    Tensor<T> h = norm1(add(x, attn_.forward_cached(x, cache, lengths, row0, positions)));
    return ffn_ ? norm2(add(h, ffn_->forward(h))) : h;
  }
  Tensor<T> h = add(x, attn_.forward_cached(norm1(x), cache, lengths, row0, positions));
  return ffn_ ? add(h, ffn_->forward(norm2(h))) : h;
}

template <typename T>
Tensor<T> TransformerLM<T>::forward_cached(const IndexArray& tokens, KVCache<T>& cache, std::size_t row0) {
  const Shape& s = tokens.shape();
  if (s.size() != 2 || s[1] == 0) {
    throw ShapeError(fmt::format("TransformerLM: tokens must be (n, T_new) with T_new >= 1, got {}", format_shape(s)));
  }
  const std::size_t n = s[0], t_new = s[1];
  if (cache.n_layers() != blocks_.size() || row0 + n > cache.batch()) {
    throw std::invalid_argument(fmt::format(
        "TransformerLM: a KV cache of {} layers and {} rows cannot take rows [{}, {}) of this {}-layer model",
        cache.n_layers(), cache.batch(), row0, row0 + n, blocks_.size()));
  }
  for (std::size_t b = row0; b < row0 + n; ++b) {
    if (cache.length(b) + t_new > cache.capacity()) {
      throw std::invalid_argument(fmt::format("KV cache: row {} holds {} tokens of {}; {} more do not fit", b,
                                              cache.length(b), cache.capacity(), t_new));
    }
  }
  NoGrad no_grad;
  const std::vector<std::size_t>& lengths = cache.lengths();
  Tensor<T> x = tok_emb_.forward(tokens);  // (n, T_new, C)
  // P as forward has it, at each row's positions: (n, T_new, C).
  Tensor<T> table;
  if (pos_emb_) {
    IndexArray positions = IndexArray::from_shape({n, t_new});
    for (std::size_t b = 0; b < n; ++b) {
      for (std::size_t t = 0; t < t_new; ++t) positions(b, t) = static_cast<Index>(lengths[row0 + b] + t);
    }
    table = pos_emb_->forward(positions);
  } else if (config_->pos == PositionEncoding::sinusoidal) {
    const std::size_t C = config_->d_model;
    xt::xarray<T> values = xt::xarray<T>::from_shape({n, t_new, C});
    for (std::size_t b = 0; b < n; ++b) {
      std::copy_n(sinusoid_.data() + lengths[row0 + b] * C, t_new * C, values.data() + b * t_new * C);
    }
    table = Tensor<T>(std::move(values));
  }
  const bool qk_only = config_->pos_qk_only;
  if (table.defined() && !qk_only) x = add(x, table);
  const Tensor<T>* positions = table.defined() && qk_only ? &table : nullptr;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    x = blocks_[i]->forward_cached(x, cache.layer(i), lengths, row0, positions);
  }
  cache.advance(row0, n, t_new);
  if (ln_f_) x = ln_f_->forward(x);
  return head_ ? head_->forward(x) : linear(x, tok_emb_.weight());  // (n, T_new, V)
}

template class TransformerBlock<float>;
template class TransformerBlock<double>;
template class TransformerLM<float>;
template class TransformerLM<double>;

}  // namespace headroom
