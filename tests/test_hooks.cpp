// The forward pass's hook points (nn/hooks.hpp, docs/design.md #20): an observing
// hook changes nothing and sees every point in the documented order and shape; a
// hook's return value is what the forward continues with (a patched embedding gives
// the other input's logits, a patched pattern is the one the heads read); gradients
// reach a delta added at any point, against finite differences in double; removing
// a head with the gate equals zeroing its slice at head_out; a wrong shape is refused.
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <xtensor/xview.hpp>

#include "support.hpp"
#include "nn/hooks.hpp"
#include "nn/transformer.hpp"

namespace hr = headroom;

namespace {

using hr::FeedForwardType, hr::HeadCombine, hr::HookPoint, hr::NormPlacement, hr::NormType, hr::PositionEncoding;

template <typename T>
void scramble(hr::TransformerLM<T>& model, std::uint64_t seed) {
  hr::Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) p.mutable_value() = hr::normal_init<T>(p.shape(), 0.4, rng);
}

struct Case {
  std::string name;
  hr::ModelConfig config;
};

std::vector<Case> cases() {
  const hr::ModelConfig base{.vocab = 11, .d_model = 16, .n_layers = 2, .n_heads = 4, .max_len = 7};
  std::vector<Case> out;
  const auto add = [&](const std::string& name, auto edit) {
    hr::ModelConfig c = base;
    edit(c);
    out.push_back({name, c});
  };
  add("MHA, learned, pre-norm", [](hr::ModelConfig&) {});
  add("GQA kv 2, sinusoidal, post-norm", [](hr::ModelConfig& c) {
    c.n_kv_heads = 2;
    c.pos = PositionEncoding::sinusoidal;
    c.norm = NormPlacement::post;
  });
  add("MQA, rope, rmsnorm, swiglu, no bias", [](hr::ModelConfig& c) {
    c.n_kv_heads = 1;
    c.pos = PositionEncoding::rope;
    c.norm_type = NormType::rmsnorm;
    c.ffn = FeedForwardType::swiglu;
    c.bias = false;
  });
  add("no norm, attn_only, pos_qk_only, key_smear", [](hr::ModelConfig& c) {
    c.norm = NormPlacement::none;
    c.attn_only = true;
    c.pos_qk_only = true;
    c.key_smear = true;
  });
  add("head_combine sum, d_k 5, d_v 3, tied, qk_norm", [](hr::ModelConfig& c) {
    c.head_combine = HeadCombine::sum;
    c.d_k = 5;
    c.d_v = 3;
    c.tie_embeddings = true;
    c.qk_norm = true;
  });
  return out;
}

hr::IndexArray tokens_of(std::size_t B, std::size_t T, std::size_t vocab, std::uint64_t seed) {
  hr::Rng rng(seed);
  hr::IndexArray a = hr::IndexArray::from_shape({B, T});
  for (auto& id : a) id = static_cast<hr::Index>(rng.below(vocab));
  return a;
}

double max_gap(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  REQUIRE(a.shape() == b.shape());
  double gap = 0;
  for (std::size_t i = 0; i < a.size(); ++i) gap = std::max(gap, std::abs(a.data()[i] - b.data()[i]));
  return gap;
}

using Seen = std::vector<std::tuple<HookPoint, std::size_t, hr::Shape>>;

// The points the forward must reach, in order, with their shapes (nn/hooks.hpp).
Seen expected_points(const hr::ModelConfig& c, std::size_t B, std::size_t T, bool pattern) {
  const std::size_t C = c.d_model, H = c.n_heads, dv = c.d_v;
  Seen out;
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    out.emplace_back(HookPoint::resid_pre, l, hr::Shape{B, T, C});
    if (pattern) out.emplace_back(HookPoint::pattern, l, hr::Shape{B, H, T, T});
    out.emplace_back(HookPoint::head_out, l, hr::Shape{B, T, H, dv});
    out.emplace_back(HookPoint::attn_out, l, hr::Shape{B, T, C});
    out.emplace_back(HookPoint::resid_mid, l, hr::Shape{B, T, C});
    if (!c.attn_only) out.emplace_back(HookPoint::mlp_out, l, hr::Shape{B, T, C});
    out.emplace_back(HookPoint::resid_post, l, hr::Shape{B, T, C});
  }
  out.emplace_back(HookPoint::final, c.n_layers, hr::Shape{B, T, C});
  return out;
}

}  // namespace

TEST_CASE("an observing hook changes nothing and sees every point in order, with its shape") {
  for (const Case& k : cases()) {
    CAPTURE(k.name);
    hr::Rng rng(1);
    hr::TransformerLM<double> model(k.config, rng);
    scramble(model, 2);
    model.eval();
    const hr::ModelConfig& c = model.config();
    const hr::IndexArray tokens = tokens_of(3, c.max_len, c.vocab, 4);
    const xt::xarray<double> plain = model.forward(tokens).value();
    for (const bool pattern : {false, true}) {
      CAPTURE(pattern);
      Seen seen;
      hr::ForwardHooks<double> hooks{
          .fn = [&](HookPoint p, std::size_t l, const hr::Tensor<double>& v) {
            seen.emplace_back(p, l, v.shape());
            return v;
          },
          .pattern = pattern};
      std::vector<hr::Tensor<double>> weights;
      const xt::xarray<double> hooked = model.forward(tokens, &weights, &hooks).value();
      CHECK(seen == expected_points(c, 3, c.max_len, pattern));
      // The fused path with hooks only reshapes: bit for bit. The composed path
      // (pattern hooks) is another summation order.
      if (!pattern) {
        CHECK(max_gap(hooked, plain) == 0.0);
      } else {
        CHECK(max_gap(hooked, plain) < 1e-12);
      }
      // The weights handed back are the pattern the heads used.
      std::vector<hr::Tensor<double>> plain_weights;
      model.forward(tokens, &plain_weights);
      for (std::size_t l = 0; l < c.n_layers; ++l) CHECK(max_gap(weights[l].value(), plain_weights[l].value()) < 1e-12);
    }
  }
}

TEST_CASE("a hook's return value is what the forward continues with") {
  for (const Case& k : cases()) {
    CAPTURE(k.name);
    hr::Rng rng(1);
    hr::TransformerLM<double> model(k.config, rng);
    scramble(model, 3);
    model.eval();
    const hr::ModelConfig& c = model.config();
    const hr::IndexArray a = tokens_of(2, c.max_len, c.vocab, 5);
    const hr::IndexArray b = tokens_of(2, c.max_len, c.vocab, 6);
    // Record every activation of input a.
    std::map<std::pair<HookPoint, std::size_t>, hr::Tensor<double>> cache;
    hr::ForwardHooks<double> record{.fn = [&](HookPoint p, std::size_t l, const hr::Tensor<double>& v) {
                                      cache[{p, l}] = v;
                                      return v;
                                    },
                                    .pattern = true};
    const xt::xarray<double> logits_a = model.forward(a, nullptr, &record).value();
    const xt::xarray<double> logits_b = model.forward(b).value();
    REQUIRE(max_gap(logits_a, logits_b) > 1e-2);
    // Input b with a's residual stream patched in at any block's entry, or a's final
    // stream: a's logits (the positions of pos_qk_only are the same for both).
    for (std::size_t l = 0; l <= c.n_layers; ++l) {
      const HookPoint point = l < c.n_layers ? HookPoint::resid_pre : HookPoint::final;
      CAPTURE(l);
      hr::ForwardHooks<double> patch{.fn = [&](HookPoint p, std::size_t at, const hr::Tensor<double>& v) {
        return p == point && at == l ? cache.at({p, l}) : v;
      }};
      CHECK(max_gap(model.forward(b, nullptr, &patch).value(), logits_a) < 1e-12);
    }
    // Patching only the patterns with a's changes b's logits: the heads read them.
    hr::ForwardHooks<double> patterns{.fn = [&](HookPoint p, std::size_t l, const hr::Tensor<double>& v) {
                                        return p == HookPoint::pattern ? cache.at({p, l}) : v;
                                      },
                                      .pattern = true};
    CHECK(max_gap(model.forward(b, nullptr, &patterns).value(), logits_b) > 1e-3);
  }
}

TEST_CASE("a pattern hook sets the weights each head reads: uniform weights average the values") {
  // One layer, no norm, no positions: head h's output at query t is the mean of its
  // kv head's values over keys 0..t, v = x W_v^T + b_v with x the token embeddings.
  hr::ModelConfig config{.vocab = 9, .d_model = 8, .n_layers = 1, .n_heads = 4, .n_kv_heads = 2, .max_len = 5,
                         .norm = NormPlacement::none, .pos = PositionEncoding::none};
  hr::Rng rng(1);
  hr::TransformerLM<double> model(config, rng);
  scramble(model, 4);
  const hr::ModelConfig& c = model.config();
  const std::size_t T = c.max_len, H = c.n_heads, G = c.n_kv_heads, dv = c.d_v, C = c.d_model;
  const hr::IndexArray tokens = tokens_of(1, T, c.vocab, 7);
  hr::Tensor<double> heads;
  hr::ForwardHooks<double> hooks{.fn = [&](HookPoint p, std::size_t, const hr::Tensor<double>& v) {
                                   if (p == HookPoint::pattern) {
                                     xt::xarray<double> u = xt::zeros<double>(v.shape());
                                     for (std::size_t h = 0; h < H; ++h) {
                                       for (std::size_t q = 0; q < T; ++q) {
                                         for (std::size_t k = 0; k <= q; ++k) u(0, h, q, k) = 1.0 / double(q + 1);
                                       }
                                     }
                                     return hr::Tensor<double>(std::move(u));
                                   }
                                   if (p == HookPoint::head_out) heads = v;
                                   return v;
                                 },
                                 .pattern = true};
  model.forward(tokens, nullptr, &hooks);
  std::map<std::string, xt::xarray<double>> params;
  for (const auto& [name, p] : model.named_parameters()) params[name] = p.value();
  const xt::xarray<double>& emb = params.at("tok_emb.weight");
  const xt::xarray<double>& wv = params.at("blocks.0.attn.v_proj.weight");
  const xt::xarray<double>& bv = params.at("blocks.0.attn.v_proj.bias");
  double worst = 0;
  for (std::size_t h = 0; h < H; ++h) {
    const std::size_t g = h / (H / G);
    for (std::size_t q = 0; q < T; ++q) {
      for (std::size_t j = 0; j < dv; ++j) {
        double mean = 0;
        for (std::size_t k = 0; k <= q; ++k) {
          double v = bv(g * dv + j);
          for (std::size_t i = 0; i < C; ++i) v += emb(static_cast<std::size_t>(tokens(0, k)), i) * wv(g * dv + j, i);
          mean += v / double(q + 1);
        }
        worst = std::max(worst, std::abs(heads.value()(0, q, h, j) - mean));
      }
    }
  }
  CHECK(worst < 1e-12);
}

TEST_CASE("concatenated heads times W_O equal the sum of each head times its slice of W_O, and summed heads share W_O") {
  // Claim 3's identity (docs/cli/claims.md): [z_1 ... z_H] W_O^T = sum_h z_h W_O[:, h]^T,
  // with W_O[:, h] the d_v columns that head h's slice of the concatenation meets. So
  // concatenation is a sum of per-head projections; summing the heads *before* one
  // shared (d_model, d_v) W_O is the different model, sum_h z_h W_O^T.
  for (const HeadCombine combine : {HeadCombine::concat, HeadCombine::sum}) {
    CAPTURE(hr::to_string(combine));
    hr::ModelConfig config{.vocab = 9, .d_model = 12, .n_layers = 1, .n_heads = 3, .max_len = 6,
                           .norm = NormPlacement::none, .attn_only = true};
    config.d_k = 4;
    config.d_v = 5;
    config.head_combine = combine;
    hr::Rng rng(3);
    hr::TransformerLM<double> model(config, rng);
    scramble(model, 8);
    const std::size_t B = 2, T = 6, H = 3, dv = 5, C = 12;
    hr::Tensor<double> heads, out;
    hr::ForwardHooks<double> hooks{.fn = [&](HookPoint p, std::size_t, const hr::Tensor<double>& v) {
      if (p == HookPoint::head_out) heads = v;
      if (p == HookPoint::attn_out) out = v;
      return v;
    }};
    model.forward(tokens_of(B, T, config.vocab, 5), nullptr, &hooks);
    std::map<std::string, xt::xarray<double>> params;
    for (const auto& [name, p] : model.named_parameters()) params[name] = p.value();
    const xt::xarray<double>& w = params.at("blocks.0.attn.out_proj.weight");  // (C, H dv) or (C, dv)
    const xt::xarray<double>& bias = params.at("blocks.0.attn.out_proj.bias");
    REQUIRE(w.shape(1) == (combine == HeadCombine::concat ? H * dv : dv));
    double worst = 0, scale = 0;
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t t = 0; t < T; ++t) {
        for (std::size_t o = 0; o < C; ++o) {
          double y = bias(o);
          for (std::size_t h = 0; h < H; ++h) {
            const std::size_t column = combine == HeadCombine::concat ? h * dv : 0;
            for (std::size_t j = 0; j < dv; ++j) y += heads.value()(b, t, h, j) * w(o, column + j);
          }
          worst = std::max(worst, std::abs(out.value()(b, t, o) - y));
          scale = std::max(scale, std::abs(y));
        }
      }
    }
    CHECK(scale > 0.1);
    CHECK(worst <= 1e-13 * scale);
  }
}

TEST_CASE("gradients reach a delta added at every hook point, against finite differences") {
  for (const Case& k : cases()) {
    CAPTURE(k.name);
    hr::Rng rng(1);
    hr::TransformerLM<double> model(k.config, rng);
    scramble(model, 8);
    model.eval();
    const hr::ModelConfig& c = model.config();
    const hr::IndexArray tokens = tokens_of(2, c.max_len, c.vocab, 9);
    // A non-uniform upstream gradient: the loss is sum(logits * W), W drawn.
    hr::Rng wrng(10);
    const xt::xarray<double> W = hr::normal_init<double>({2, c.max_len, c.vocab}, 1.0, wrng);
    const auto objective = [&](const hr::ForwardHooks<double>* hooks) {
      return hr::sum(hr::mul(model.forward(tokens, nullptr, hooks), hr::Tensor<double>(W)));
    };
    for (const HookPoint point : {HookPoint::resid_pre, HookPoint::pattern, HookPoint::head_out, HookPoint::attn_out,
                                  HookPoint::resid_mid, HookPoint::resid_post, HookPoint::final}) {
      const std::size_t layer = point == HookPoint::final ? c.n_layers : 1;
      CAPTURE(hr::to_string(point));
      hr::Tensor<double> delta;
      const auto at = [&](double eps, std::size_t index) {
        return hr::ForwardHooks<double>{.fn = [&, eps, index](HookPoint p, std::size_t l, const hr::Tensor<double>& v) {
                                          if (p != point || l != layer) return v;
                                          if (eps == 0) {  // the gradient run
                                            delta = hr::Tensor<double>(xt::zeros<double>(v.shape()), true);
                                            return hr::add(v, delta);
                                          }
                                          xt::xarray<double> shifted = v.value();
                                          shifted.data()[index] += eps;
                                          return hr::Tensor<double>(std::move(shifted));
                                        },
                                        .pattern = true};
      };
      const auto grad_hooks = at(0.0, 0);
      objective(&grad_hooks).backward();
      const xt::xarray<double> grad = delta.grad();
      model.zero_grad();
      hr::Rng pick(11);
      for (int trial = 0; trial < 6; ++trial) {
        const std::size_t index = pick.below(grad.size());
        const double h = 1e-5;
        const auto plus = at(h, index), minus = at(-h, index);
        const double numeric = (objective(&plus).value()() - objective(&minus).value()()) / (2 * h);
        CHECK(std::abs(numeric - grad.data()[index]) <= 1e-6 * std::max(1.0, std::abs(numeric)));
      }
    }
  }
}

TEST_CASE("the head gate at zero equals zeroing that head's slice at head_out") {
  for (const Case& k : cases()) {
    CAPTURE(k.name);
    hr::Rng rng(1);
    hr::TransformerLM<double> model(k.config, rng);
    scramble(model, 12);
    model.eval();
    const hr::ModelConfig& c = model.config();
    const hr::IndexArray tokens = tokens_of(2, c.max_len, c.vocab, 13);
    const std::size_t layer = 1, head = 2;
    xt::xarray<double> gate = xt::ones<double>({c.n_heads});
    gate(head) = 0.0;
    model.block(layer).attention().set_head_gate(hr::Tensor<double>(gate));
    const xt::xarray<double> gated = model.forward(tokens).value();
    model.block(layer).attention().clear_head_gate();
    hr::ForwardHooks<double> zero{.fn = [&](HookPoint p, std::size_t l, const hr::Tensor<double>& v) {
      if (p != HookPoint::head_out || l != layer) return v;
      xt::xarray<double> z = v.value();
      xt::view(z, xt::all(), xt::all(), head, xt::all()) = 0.0;
      return hr::Tensor<double>(std::move(z));
    }};
    const xt::xarray<double> zeroed = model.forward(tokens, nullptr, &zero).value();
    CHECK(max_gap(gated, zeroed) < 1e-13);
    CHECK(max_gap(gated, model.forward(tokens).value()) > 1e-3);
  }
}

TEST_CASE("a hook that returns another shape is refused, naming the point and the layer") {
  hr::Rng rng(1);
  hr::TransformerLM<double> model(cases()[0].config, rng);
  const hr::IndexArray tokens = tokens_of(1, 4, 11, 1);
  hr::ForwardHooks<double> bad{.fn = [](HookPoint p, std::size_t l, const hr::Tensor<double>& v) {
    return p == HookPoint::attn_out && l == 1 ? hr::Tensor<double>(xt::zeros<double>({2, 2})) : v;
  }};
  CHECK(error_of([&] { model.forward(tokens, nullptr, &bad); }) ==
        "hook at attn_out of layer 1 returned (2, 2), expected the value's shape (1, 4, 16)");
}
