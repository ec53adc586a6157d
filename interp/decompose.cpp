#include "interp/decompose.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "interp/weights.hpp"
#include "nn/hooks.hpp"

namespace headroom {

std::string to_string(PartKind kind) {
  switch (kind) {
    case PartKind::embed: return "embed";
    case PartKind::pos_embed: return "pos_embed";
    case PartKind::head: return "head";
    case PartKind::attn_bias: return "attn_bias";
    case PartKind::mlp: return "mlp";
    case PartKind::norm_bias: return "norm_bias";
  }
  return "?";
}

namespace {

template <typename T>
struct Parts {
  std::vector<ResidualPart> meta;
  std::vector<std::vector<T>> vectors;  // each (C)

  void add(ResidualPart part, std::vector<T> vector) {
    meta.push_back(std::move(part));
    vectors.push_back(std::move(vector));
  }
  // The full residual: the sum of the parts, accumulated in double.
  std::vector<double> sum(std::size_t C) const {
    std::vector<double> x(C, 0.0);
    for (const auto& v : vectors) {
      for (std::size_t c = 0; c < C; ++c) x[c] += static_cast<double>(v[c]);
    }
    return x;
  }
};

// Applies the norm `prefix` ("blocks.0.ln1", "ln_f") to every part with the scale of
// the full residual frozen (the header's convention), then adds its bias as a part.
template <typename T>
void apply_frozen_norm(Parts<T>& parts, const ModelConfig& config, const ModelWeights<T>& weights,
                       const std::string& prefix, ResidualPart bias_part) {
  const std::size_t C = config.d_model;
  const std::vector<double> x = parts.sum(C);
  const xt::xarray<T>& w = weights.at(prefix + ".weight");  // (C)
  const bool layernorm = config.norm_type == NormType::layernorm;
  double mean = 0, second = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(C);
  for (double v : x) second += layernorm ? (v - mean) * (v - mean) : v * v;
  const double inv_scale = 1.0 / std::sqrt(second / static_cast<double>(C) + config.ln_eps);
  for (auto& v : parts.vectors) {
    double part_mean = 0;
    if (layernorm) {
      for (T e : v) part_mean += static_cast<double>(e);
      part_mean /= static_cast<double>(C);
    }
    for (std::size_t c = 0; c < C; ++c) {
      v[c] = static_cast<T>((static_cast<double>(v[c]) - part_mean) * inv_scale * static_cast<double>(w(c)));
    }
  }
  if (layernorm) {
    const xt::xarray<T>& b = weights.at(prefix + ".bias");
    parts.add(std::move(bias_part), std::vector<T>(b.begin(), b.end()));
  }
}

}  // namespace

template <typename T>
ResidualDecomposition<T> decompose_residual(TransformerLM<T>& model, const IndexArray& tokens,
                                            std::optional<std::size_t> position) {
  const ModelConfig& config = model.config();
  const std::size_t C = config.d_model, V = config.vocab, H = config.n_heads, L = model.n_layers();
  const std::size_t d_v = config.d_v;
  IndexArray row;
  if (tokens.dimension() == 1) {
    row = xt::reshape_view(tokens, {std::size_t{1}, tokens.size()});
  } else if (tokens.dimension() == 2 && tokens.shape()[0] == 1) {
    row = tokens;
  } else {
    throw std::invalid_argument(fmt::format("decompose_residual: tokens must be one row (T) or (1, T), got {} dims",
                                            tokens.dimension()));
  }
  const std::size_t T_ = row.shape()[1];
  if (T_ == 0) throw std::invalid_argument("decompose_residual: the input is empty");
  for (std::size_t t = 0; t < T_; ++t) {
    if (row(0, t) < 0 || static_cast<std::size_t>(row(0, t)) >= V) {
      throw std::invalid_argument(
          fmt::format("decompose_residual: token {} at position {} is outside the vocabulary [0, {})", row(0, t), t, V));
    }
  }
  const std::size_t p = position.value_or(T_ - 1);
  if (p >= T_) {
    throw std::invalid_argument(fmt::format("decompose_residual: position {} is outside the input [0, {})", p, T_));
  }

  // One forward, keeping each head's z and each MLP's output at p.
  std::vector<xt::xarray<T>> z(L);    // each (H, d_v)
  std::vector<xt::xarray<T>> mlp(L);  // each (C)
  ForwardHooks<T> hooks;
  hooks.fn = [&](HookPoint point, std::size_t layer, const Tensor<T>& value) {
    const xt::xarray<T>& v = value.value();
    if (point == HookPoint::head_out) {
      z[layer] = xt::xarray<T>::from_shape({H, d_v});
      for (std::size_t h = 0; h < H; ++h) {
        for (std::size_t d = 0; d < d_v; ++d) z[layer](h, d) = v(0, p, h, d);
      }
    } else if (point == HookPoint::mlp_out) {
      mlp[layer] = xt::xarray<T>::from_shape({C});
      for (std::size_t c = 0; c < C; ++c) mlp[layer](c) = v(0, p, c);
    }
    return value;
  };
  model.eval();  // no dropout: the parts of the model's own deterministic forward
  xt::xarray<T> logits_all;
  {
    NoGrad no_grad;
    logits_all = model.forward(row, nullptr, &hooks).value();  // (1, T, V)
  }

  const ModelWeights<T> weights(model);
  Parts<T> parts;
  const xt::xarray<T>& tok = weights.at("tok_emb.weight");  // (V, C)
  const auto token = static_cast<std::size_t>(row(0, p));
  parts.add({.kind = PartKind::embed, .name = "embed"}, std::vector<T>(tok.begin() + token * C, tok.begin() + (token + 1) * C));
  const xt::xarray<T> table = position_table(config, weights);  // (max_len, C) or empty
  if (table.size() != 0 && !config.pos_qk_only) {
    parts.add({.kind = PartKind::pos_embed, .name = "pos_embed"},
              std::vector<T>(table.begin() + p * C, table.begin() + (p + 1) * C));
  }
  const bool post = config.norm == NormPlacement::post;
  const bool sum_heads = config.head_combine == HeadCombine::sum;
  for (std::size_t l = 0; l < L; ++l) {
    const std::string attn = fmt::format("blocks.{}.attn", l);
    const xt::xarray<T>& w_o = weights.at(attn + ".out_proj.weight");  // (C, H d_v), or (C, d_v) under sum
    const std::size_t width = w_o.shape()[1];
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t col0 = sum_heads ? 0 : h * d_v;
      std::vector<T> out(C);
      for (std::size_t c = 0; c < C; ++c) {
        double acc = 0;
        for (std::size_t d = 0; d < d_v; ++d) {
          acc += static_cast<double>(w_o.data()[c * width + col0 + d]) * static_cast<double>(z[l](h, d));
        }
        out[c] = static_cast<T>(acc);
      }
      parts.add({.kind = PartKind::head, .layer = l, .head = h, .name = fmt::format("L{}H{}", l, h)}, std::move(out));
    }
    if (weights.has(attn + ".out_proj.bias")) {
      const xt::xarray<T>& b = weights.at(attn + ".out_proj.bias");
      parts.add({.kind = PartKind::attn_bias, .layer = l, .name = fmt::format("L{}.attn_bias", l)},
                std::vector<T>(b.begin(), b.end()));
    }
    if (post) {
      apply_frozen_norm(parts, config, weights, fmt::format("blocks.{}.ln1", l),
                        {.kind = PartKind::norm_bias, .layer = l, .name = fmt::format("L{}.ln1_bias", l)});
    }
    if (config.attn_only) continue;
    parts.add({.kind = PartKind::mlp, .layer = l, .name = fmt::format("L{}.mlp", l)},
              std::vector<T>(mlp[l].begin(), mlp[l].end()));
    if (post) {
      apply_frozen_norm(parts, config, weights, fmt::format("blocks.{}.ln2", l),
                        {.kind = PartKind::norm_bias, .layer = l, .name = fmt::format("L{}.ln2_bias", l)});
    }
  }
  if (config.norm != NormPlacement::none) {
    apply_frozen_norm(parts, config, weights, "ln_f", {.kind = PartKind::norm_bias, .layer = L, .name = "ln_f_bias"});
  }

  ResidualDecomposition<T> out;
  out.position = p;
  out.parts = parts.meta;
  const std::size_t N = parts.vectors.size();
  out.vectors = xt::xarray<T>::from_shape({N, C});
  for (std::size_t i = 0; i < N; ++i) std::copy(parts.vectors[i].begin(), parts.vectors[i].end(), out.vectors.data() + i * C);
  const xt::xarray<T>& w_u = unembedding(config, weights);  // (V, C)
  out.logits = xt::xarray<T>::from_shape({N, V});
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t v = 0; v < V; ++v) {
      double acc = 0;
      for (std::size_t c = 0; c < C; ++c) {
        acc += static_cast<double>(parts.vectors[i][c]) * static_cast<double>(w_u.data()[v * C + c]);
      }
      out.logits(i, v) = static_cast<T>(acc);
    }
  }
  out.model_logits = xt::xarray<T>::from_shape({V});
  for (std::size_t v = 0; v < V; ++v) out.model_logits(v) = logits_all(0, p, v);
  return out;
}

template <typename T>
std::vector<double> direct_logit_attribution(const ResidualDecomposition<T>& decomposition, std::size_t answer,
                                             std::optional<std::size_t> wrong) {
  const std::size_t V = decomposition.logits.shape()[1];
  if (answer >= V) throw std::invalid_argument(fmt::format("direct_logit_attribution: answer {} is outside the vocabulary [0, {})", answer, V));
  if (wrong && *wrong >= V) {
    throw std::invalid_argument(fmt::format("direct_logit_attribution: wrong answer {} is outside the vocabulary [0, {})", *wrong, V));
  }
  std::vector<double> out(decomposition.parts.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<double>(decomposition.logits(i, answer)) -
             (wrong ? static_cast<double>(decomposition.logits(i, *wrong)) : 0.0);
  }
  return out;
}

template ResidualDecomposition<float> decompose_residual(TransformerLM<float>&, const IndexArray&, std::optional<std::size_t>);
template ResidualDecomposition<double> decompose_residual(TransformerLM<double>&, const IndexArray&, std::optional<std::size_t>);
template std::vector<double> direct_logit_attribution(const ResidualDecomposition<float>&, std::size_t, std::optional<std::size_t>);
template std::vector<double> direct_logit_attribution(const ResidualDecomposition<double>&, std::size_t, std::optional<std::size_t>);

}  // namespace headroom
