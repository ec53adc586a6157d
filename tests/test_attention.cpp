// MultiHeadAttention: an independent plain-loop reference for the head-major layout,
// the GQA grouping and both head combinations, masks, and the closed-form parameter
// counts. The gradient
// checks over head configurations are in test_module_gradcheck.cpp.
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include <doctest/doctest.h>

#include "gradcheck_doctest.hpp"
#include "nn/attention.hpp"

namespace hr = headroom;
using D = hr::Tensor<double>;

namespace {

D random_input(const hr::Shape& shape, hr::Rng& rng) {
  return D(hr::normal_init<double>(shape, 1.0, rng), true);
}

hr::GradcheckReport check_attention(hr::AttentionOptions options, const hr::Shape& x_shape,
                                    const hr::Mask* padding = nullptr) {
  hr::Rng rng(42);
  options.init_std = 0.5;  // larger than training's 0.02, so every path carries signal
  options.out_init_std = 0.5;
  hr::MultiHeadAttention<double> attn(options, rng);
  D x = random_input(x_shape, rng);
  auto inputs = attn.named_parameters();
  inputs.emplace_back("x", x);
  return hr::gradcheck([&] { return std::vector<D>{attn.forward(x, padding).out}; }, inputs);
}

// Attention written out with loops, from the conventions in docs/design.md alone
// ("Order inside attention": positions into q and k, then qk_norm, the key smear and
// RoPE on them, then the scores).
xt::xarray<double> reference_attention(const hr::MultiHeadAttention<double>& attn, const xt::xarray<double>& x,
                                       const hr::Mask* padding, const xt::xarray<double>* positions = nullptr) {
  const auto& o = attn.options();
  const std::size_t B = x.shape()[0], T = x.shape()[1], C = o.d_model;
  const std::size_t H = o.n_heads, G = o.n_kv_heads, dk = o.d_k, dv = o.d_v;
  std::map<std::string, xt::xarray<double>> p;
  for (const auto& [name, t] : attn.named_parameters()) p[name] = t.value();
  auto project = [&](const std::string& name, bool with_positions, std::size_t b, std::size_t t, std::size_t row) {
    double s = o.bias ? p[name + ".bias"](row) : 0.0;
    for (std::size_t c = 0; c < C; ++c) {
      const double in = x(b, t, c) + (with_positions && positions ? (*positions)(t, c) : 0.0);
      s += p[name + ".weight"](row, c) * in;
    }
    return s;
  };
  xt::xarray<double> q = xt::zeros<double>({B, T, H, dk});
  xt::xarray<double> k = xt::zeros<double>({B, T, G, dk});
  xt::xarray<double> v = xt::zeros<double>({B, T, G, dv});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < T; ++t) {
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t d = 0; d < dk; ++d) q(b, t, h, d) = project("q_proj", true, b, t, h * dk + d);
      for (std::size_t g = 0; g < G; ++g) {
        for (std::size_t d = 0; d < dk; ++d) k(b, t, g, d) = project("k_proj", true, b, t, g * dk + d);
        for (std::size_t d = 0; d < dv; ++d) v(b, t, g, d) = project("v_proj", false, b, t, g * dv + d);
      }
    }
  // Each head's d_k channels: y = x / sqrt(mean(x^2) + eps) * weight.
  auto rms_norm = [&](xt::xarray<double>& a, const xt::xarray<double>& weight) {
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < a.shape()[2]; ++h) {
          double ms = 0;
          for (std::size_t d = 0; d < dk; ++d) ms += a(b, t, h, d) * a(b, t, h, d) / static_cast<double>(dk);
          for (std::size_t d = 0; d < dk; ++d) a(b, t, h, d) *= weight(d) / std::sqrt(ms + o.qk_norm_eps);
        }
  };
  if (o.qk_norm) {
    rms_norm(q, p["q_norm.weight"]);
    rms_norm(k, p["k_norm.weight"]);
  }
  if (o.key_smear) {
    const xt::xarray<double> k0 = k;
    for (std::size_t g = 0; g < G; ++g) {
      const double s = 1.0 / (1.0 + std::exp(-p["key_smear"](g)));
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t t = 0; t < T; ++t)
          for (std::size_t d = 0; d < dk; ++d) k(b, t, g, d) = s * k0(b, t, g, d) + (1 - s) * (t ? k0(b, t - 1, g, d) : 0.0);
    }
  }
  // Channel i turns with i + d_k/2 by t theta_i, theta_i = base^(-2i/d_k).
  auto rotate = [&](xt::xarray<double>& a) {
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < a.shape()[2]; ++h)
          for (std::size_t i = 0; i < dk / 2; ++i) {
            const double angle = static_cast<double>(t) * std::pow(o.rope_base, -2.0 * static_cast<double>(i) / dk);
            const double u = a(b, t, h, i), w = a(b, t, h, i + dk / 2);
            a(b, t, h, i) = u * std::cos(angle) - w * std::sin(angle);
            a(b, t, h, i + dk / 2) = w * std::cos(angle) + u * std::sin(angle);
          }
  };
  if (o.rope) {
    rotate(q);
    rotate(k);
  }
  // concat: head h fills columns [h dv, (h+1) dv); sum: every head adds into [0, dv).
  const bool summed = o.head_combine == hr::HeadCombine::sum;
  const std::size_t width = summed ? dv : H * dv;
  xt::xarray<double> combined = xt::zeros<double>({B, T, width});
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t kv = h / (H / G);  // query head h reads kv head h / g
      for (std::size_t i = 0; i < T; ++i) {
        std::vector<double> score(T, -std::numeric_limits<double>::infinity());
        double best = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < T; ++j) {
          if ((o.causal && j > i) || (padding && (*padding)(b, j))) continue;
          double s = 0;
          for (std::size_t d = 0; d < dk; ++d) s += q(b, i, h, d) * k(b, j, kv, d);
          score[j] = s * *o.attn_scale;
          best = std::max(best, score[j]);
        }
        if (best == -std::numeric_limits<double>::infinity()) continue;  // attends to nothing
        double z = 0;
        for (std::size_t j = 0; j < T; ++j) z += std::exp(score[j] - best);
        for (std::size_t j = 0; j < T; ++j) {
          const double w = std::exp(score[j] - best) / z;
          const std::size_t column = summed ? 0 : h * dv;
          for (std::size_t d = 0; d < dv; ++d) combined(b, i, column + d) += w * v(b, j, kv, d);
        }
      }
    }
  }
  xt::xarray<double> out = xt::zeros<double>({B, T, C});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t c = 0; c < C; ++c) {
        double s = o.bias ? p["out_proj.bias"](c) : 0.0;
        for (std::size_t k = 0; k < width; ++k) s += p["out_proj.weight"](c, k) * combined(b, t, k);
        out(b, t, c) = s;
      }
  return out;
}

// Every parameter drawn afresh (biases, norm weights and the smear too), so each one
// shows in the output.
void scramble(hr::MultiHeadAttention<double>& attn, hr::Rng& rng) {
  for (auto& [name, t] : attn.named_parameters()) t.mutable_value() = hr::normal_init<double>(t.shape(), 0.4, rng);
}

void check_against_reference(const hr::AttentionOptions& options, const hr::Mask* padding = nullptr,
                             bool with_positions = false) {
  hr::Rng rng(7);
  hr::AttentionOptions o = options;
  o.init_std = 0.4;
  o.out_init_std = 0.4;
  hr::MultiHeadAttention<double> attn(o, rng);
  const xt::xarray<double> x = hr::normal_init<double>({2, 5, o.d_model}, 1.0, rng);
  const bool extras = o.qk_norm || o.key_smear || with_positions;
  if (extras) scramble(attn, rng);
  const xt::xarray<double> table = hr::normal_init<double>({5, o.d_model}, 1.0, rng);
  const D positions(table);
  const xt::xarray<double> got =
      attn.forward(D(x), padding, false, with_positions ? &positions : nullptr).out.value();
  const xt::xarray<double> want = reference_attention(attn, x, padding, with_positions ? &table : nullptr);
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE_MESSAGE(std::abs(got.data()[i] - want.data()[i]) < 1e-12,
                    "flat index " << i << ": got " << got.data()[i] << ", reference " << want.data()[i]);
  }
}

}  // namespace

TEST_CASE("attention matches a plain-loop reference for every head layout") {
  SUBCASE("MHA, 4 heads") { check_against_reference({.d_model = 8, .n_heads = 4}); }
  SUBCASE("one head") { check_against_reference({.d_model = 8, .n_heads = 1}); }
  SUBCASE("d_k != d_model / n_heads, d_v != d_k") {
    check_against_reference({.d_model = 6, .n_heads = 3, .d_k = 5, .d_v = 3});
  }
  SUBCASE("GQA: 4 query heads over 2 kv heads") {
    check_against_reference({.d_model = 8, .n_heads = 4, .n_kv_heads = 2});
  }
  SUBCASE("MQA") { check_against_reference({.d_model = 8, .n_heads = 4, .n_kv_heads = 1}); }
  SUBCASE("not causal, no bias, scale 1") {
    check_against_reference({.d_model = 8, .n_heads = 2, .causal = false, .bias = false, .attn_scale = 1.0});
  }
  SUBCASE("key padding with a fully masked row") {
    hr::Mask pad = xt::zeros<bool>({2, 5});
    pad(0, 0) = true;  // batch 0: query 0 (causal) sees only key 0, which is padding
    pad(1, 3) = true;
    check_against_reference({.d_model = 8, .n_heads = 2}, &pad);
  }
  SUBCASE("heads summed") {
    check_against_reference({.d_model = 8, .n_heads = 4, .head_combine = hr::HeadCombine::sum});
  }
  SUBCASE("heads summed, GQA, d_k != d_v, no bias") {
    check_against_reference({.d_model = 6, .n_heads = 4, .d_k = 3, .d_v = 2, .n_kv_heads = 2,
                             .head_combine = hr::HeadCombine::sum, .bias = false});
  }
  SUBCASE("heads summed, with key padding") {
    hr::Mask pad = xt::zeros<bool>({2, 5});
    pad(0, 0) = true;
    pad(1, 2) = true;
    check_against_reference({.d_model = 8, .n_heads = 2, .head_combine = hr::HeadCombine::sum}, &pad);
  }
  // docs/design.md #17
  SUBCASE("qk_norm, eps 0.1") { check_against_reference({.d_model = 8, .n_heads = 2, .qk_norm = true, .qk_norm_eps = 0.1}); }
  SUBCASE("qk_norm, GQA, d_k != d_model / n_heads") {
    check_against_reference({.d_model = 6, .n_heads = 4, .d_k = 3, .n_kv_heads = 2, .qk_norm = true});
  }
  SUBCASE("key smear, GQA") { check_against_reference({.d_model = 8, .n_heads = 4, .n_kv_heads = 2, .key_smear = true}); }
  SUBCASE("key smear, not causal, with key padding") {
    hr::Mask pad = xt::zeros<bool>({2, 5});
    pad(1, 2) = true;
    check_against_reference({.d_model = 8, .n_heads = 2, .causal = false, .key_smear = true}, &pad);
  }
  SUBCASE("rope") { check_against_reference({.d_model = 8, .n_heads = 2, .rope = true}); }
  SUBCASE("rope, GQA, base 50, d_v != d_k") {
    check_against_reference({.d_model = 8, .n_heads = 4, .d_k = 4, .d_v = 3, .n_kv_heads = 2, .rope = true,
                             .rope_base = 50.0});
  }
  SUBCASE("positions into q and k only") { check_against_reference({.d_model = 8, .n_heads = 2}, nullptr, true); }
  SUBCASE("everything: positions, qk_norm, key smear, rope, MQA, heads summed") {
    check_against_reference({.d_model = 8, .n_heads = 4, .n_kv_heads = 1, .head_combine = hr::HeadCombine::sum,
                             .qk_norm = true, .key_smear = true, .rope = true},
                            nullptr, true);
  }
}

TEST_CASE("heads summed equal heads concatenated through one out_proj block repeated per head") {
  // sum(head_h) W_s^T == concat(head_h) [W_s ... W_s]^T: the same layer with out_proj
  // tiled H times along its input axis.
  hr::Rng rng(11);
  const hr::AttentionOptions base{.d_model = 8, .n_heads = 4, .n_kv_heads = 2, .init_std = 0.4, .out_init_std = 0.4};
  hr::AttentionOptions summed_options = base;
  summed_options.head_combine = hr::HeadCombine::sum;
  hr::MultiHeadAttention<double> summed(summed_options, rng);
  hr::MultiHeadAttention<double> concat(base, rng);
  auto sp = summed.named_parameters();
  auto cp = concat.named_parameters();
  REQUIRE(sp.size() == cp.size());
  for (std::size_t i = 0; i < sp.size(); ++i) {
    REQUIRE(sp[i].first == cp[i].first);
    if (sp[i].first == "out_proj.weight") {
      REQUIRE(hr::format_shape(sp[i].second.shape()) == "(8, 2)");  // (d_model, d_v)
      REQUIRE(hr::format_shape(cp[i].second.shape()) == "(8, 8)");  // (d_model, H d_v)
      xt::xarray<double>& tiled = cp[i].second.mutable_value();
      for (std::size_t c = 0; c < 8; ++c)
        for (std::size_t k = 0; k < 8; ++k) tiled(c, k) = sp[i].second.value()(c, k % 2);
    } else {
      cp[i].second.mutable_value() = sp[i].second.value();
    }
  }
  hr::NoGrad no_grad;
  const D x(hr::normal_init<double>({2, 5, 8}, 1.0, rng));
  const xt::xarray<double> a = summed.forward(x).out.value(), b = concat.forward(x).out.value();
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE_MESSAGE(std::abs(a.data()[i] - b.data()[i]) < 1e-12,
                    "flat index " << i << ": sum " << a.data()[i] << ", tiled concat " << b.data()[i]);
  }
}

TEST_CASE("head_combine parses concat and sum and names a bad value") {
  CHECK(hr::parse_head_combine("concat") == hr::HeadCombine::concat);
  CHECK(hr::parse_head_combine("sum") == hr::HeadCombine::sum);
  CHECK(hr::to_string(hr::HeadCombine::concat) == "concat");
  CHECK(hr::to_string(hr::HeadCombine::sum) == "sum");
  CHECK_THROWS_WITH_AS(hr::parse_head_combine("mean"), "head_combine must be 'concat' or 'sum', got 'mean'",
                       std::invalid_argument);
}

TEST_CASE("a fully masked query yields zeros and finite gradients") {
  hr::Mask pad = xt::zeros<bool>({2, 4});
  pad(0, 0) = true;  // causal: query 0 of batch 0 has no visible key
  CHECK_GRADCHECK(check_attention({.d_model = 6, .n_heads = 2}, {2, 4, 6}, &pad));

  hr::Rng rng(1);
  hr::MultiHeadAttention<double> attn({.d_model = 6, .n_heads = 2, .bias = false}, rng);
  D x = random_input({2, 4, 6}, rng);
  auto result = attn.forward(x, &pad, true);
  for (std::size_t c = 0; c < 6; ++c) CHECK(result.out.value()(0, 0, c) == 0.0);
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t j = 0; j < 4; ++j) CHECK(result.weights.value()(0, h, 0, j) == 0.0);
  sum(result.out).backward();
  for (const auto& [name, p] : attn.named_parameters()) {
    for (double g : p.grad()) CHECK_MESSAGE(std::isfinite(g), name << " has a non-finite gradient");
  }
}

TEST_CASE("attention weights: (B, H, T, T), rows sum to one, causal zeros above the diagonal") {
  hr::Rng rng(3);
  hr::MultiHeadAttention<double> attn({.d_model = 8, .n_heads = 4, .n_kv_heads = 2}, rng);
  const auto r = attn.forward(random_input({2, 5, 8}, rng), nullptr, true);
  REQUIRE(hr::format_shape(r.weights.shape()) == "(2, 4, 5, 5)");
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 4; ++h)
      for (std::size_t i = 0; i < 5; ++i) {
        double s = 0;
        for (std::size_t j = 0; j < 5; ++j) {
          s += r.weights.value()(b, h, i, j);
          if (j > i) CHECK(r.weights.value()(b, h, i, j) == 0.0);
        }
        CHECK(s == doctest::Approx(1.0).epsilon(1e-12));
      }
  hr::clear_tape<double>();
}

TEST_CASE("merge_heads(split_heads(x)) == x exactly") {
  hr::Rng rng(9);
  const D x(hr::normal_init<double>({3, 5, 12}, 1.0, rng));
  for (std::size_t heads : {1u, 2u, 3u, 4u, 6u, 12u}) {
    const D s = hr::split_heads(x, heads);
    CHECK(hr::format_shape(s.shape()) == hr::format_shape({3, heads, 5, 12 / heads}));
    // Head j of position t holds channels [j d, (j+1) d) of x at t: head-major rows.
    CHECK(s.value()(1, heads - 1, 2, 0) == x.value()(1, 2, (heads - 1) * (12 / heads)));
    const D m = hr::merge_heads(s);
    CHECK(m.value() == x.value());
  }
  CHECK_THROWS_WITH_AS(hr::split_heads(x, 5), "split_heads: cannot split (3, 5, 12) into 5 heads along the last axis",
                       std::invalid_argument);
}

TEST_CASE("parameter counts match the closed forms") {
  hr::Rng rng(0);
  // n_heads * d_k = d_model, no bias: 4 d_model^2 whatever the head count.
  for (std::size_t heads : {1u, 2u, 8u, 16u, 64u}) {
    hr::MultiHeadAttention<float> attn({.d_model = 512, .n_heads = heads, .bias = false}, rng);
    CHECK_MESSAGE(attn.parameter_count() == 1048576u, heads << " heads");
  }
  hr::MultiHeadAttention<float> with_bias({.d_model = 512, .n_heads = 8}, rng);
  CHECK(with_bias.parameter_count() == 4u * 512 * 512 + 4 * 512);
  // GQA: q and out stay d_model^2; k and v shrink to d_model * G d_k each.
  hr::MultiHeadAttention<float> gqa({.d_model = 64, .n_heads = 8, .n_kv_heads = 2, .bias = false}, rng);
  CHECK(gqa.parameter_count() == 2u * 64 * 64 + 2u * 64 * (2 * 8));
  // Free d_k, d_v: q, k (H d_k each), v (H d_v), out (H d_v).
  hr::MultiHeadAttention<float> wide({.d_model = 16, .n_heads = 2, .d_k = 10, .d_v = 3, .bias = false}, rng);
  CHECK(wide.parameter_count() == 16u * 20 * 2 + 16u * 6 * 2);
}

TEST_CASE("parameter counts with heads summed, and attention_parameter_count agrees with the layer") {
  hr::Rng rng(0);
  // q, k, v unchanged; out_proj shrinks from (C, H d_v) to (C, d_v):
  // 3 C^2 + C d_v = 3 C^2 + C^2 / H when H d_k = C, no bias.
  for (std::size_t heads : {1u, 2u, 8u, 64u}) {
    const hr::AttentionOptions o{
        .d_model = 512, .n_heads = heads, .head_combine = hr::HeadCombine::sum, .bias = false};
    hr::MultiHeadAttention<float> attn(o, rng);
    CHECK_MESSAGE(attn.parameter_count() == 3u * 512 * 512 + 512u * (512 / heads), heads << " heads");
    CHECK(hr::attention_parameter_count(o) == attn.parameter_count());
  }
  // With bias: + 3 H d_k (q, k, v with G = H) + d_model (out_proj).
  const hr::AttentionOptions biased{.d_model = 64, .n_heads = 8, .head_combine = hr::HeadCombine::sum};
  CHECK(hr::attention_parameter_count(biased) == 3u * 64 * 64 + 3u * 64 + 64u * 8 + 64u);
  // GQA with free d_k, d_v, bias: q (C+1) H d_k, k (C+1) G d_k, v (C+1) G d_v, out C d_v + C.
  const hr::AttentionOptions gqa{.d_model = 16, .n_heads = 4, .d_k = 5, .d_v = 3, .n_kv_heads = 2,
                                 .head_combine = hr::HeadCombine::sum};
  CHECK(hr::attention_parameter_count(gqa) == 17u * 20 + 17u * 10 + 17u * 6 + 16u * 3 + 16u);
  // Every layout of the reference tests, both combinations: the closed form is the layer.
  for (const hr::HeadCombine combine : {hr::HeadCombine::concat, hr::HeadCombine::sum}) {
    for (hr::AttentionOptions o : {hr::AttentionOptions{.d_model = 8, .n_heads = 4},
                                   hr::AttentionOptions{.d_model = 6, .n_heads = 3, .d_k = 5, .d_v = 3},
                                   hr::AttentionOptions{.d_model = 8, .n_heads = 4, .n_kv_heads = 1, .bias = false},
                                   gqa, biased}) {
      o.head_combine = combine;
      hr::MultiHeadAttention<float> attn(o, rng);
      CHECK_MESSAGE(hr::attention_parameter_count(o) == attn.parameter_count(),
                    hr::to_string(combine) << ", d_model " << o.d_model << ", H " << o.n_heads);
    }
  }
  CHECK_THROWS_WITH_AS(hr::attention_parameter_count({.d_model = 64, .n_heads = 8, .n_kv_heads = 3}),
                       "MultiHeadAttention: n_heads=8 is not a multiple of n_kv_heads=3", std::invalid_argument);
}

TEST_CASE("kv_cache_floats_per_token is n_kv_heads (d_k + d_v), whatever the head combination") {
  CHECK(hr::kv_cache_floats_per_token({.d_model = 64, .n_heads = 8}) == 8u * (8 + 8));
  CHECK(hr::kv_cache_floats_per_token({.d_model = 64, .n_heads = 8, .n_kv_heads = 2}) == 2u * 16);
  CHECK(hr::kv_cache_floats_per_token({.d_model = 64, .n_heads = 8, .n_kv_heads = 1}) == 16u);
  CHECK(hr::kv_cache_floats_per_token({.d_model = 16, .n_heads = 4, .d_k = 5, .d_v = 3, .n_kv_heads = 2}) == 16u);
  CHECK(hr::kv_cache_floats_per_token(
            {.d_model = 64, .n_heads = 8, .n_kv_heads = 2, .head_combine = hr::HeadCombine::sum}) == 32u);
}

TEST_CASE("invalid attention configurations are rejected with the numbers") {
  hr::Rng rng(0);
  auto make = [&](hr::AttentionOptions o) { hr::MultiHeadAttention<float> a(o, rng); };
  CHECK_THROWS_WITH_AS(make({.d_model = 64, .n_heads = 8, .n_kv_heads = 3}),
                       "MultiHeadAttention: n_heads=8 is not a multiple of n_kv_heads=3",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make({.d_model = 10, .n_heads = 3}),
                       "MultiHeadAttention: d_model=10 is not a multiple of n_heads=3; give d_k explicitly",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make({.d_model = 0, .n_heads = 1}), "MultiHeadAttention: d_model must be positive, got 0",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make({.d_model = 8, .n_heads = 0}), "MultiHeadAttention: n_heads must be positive, got 0",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make({.d_model = 8, .n_heads = 2, .n_kv_heads = 4}),
                       "MultiHeadAttention: n_heads=2 is not a multiple of n_kv_heads=4", std::invalid_argument);
  CHECK_THROWS_WITH_AS(make({.d_model = 8, .n_heads = 2, .dropout = 1.0}),
                       "MultiHeadAttention: dropout must be in [0, 1), got 1", std::invalid_argument);

  hr::MultiHeadAttention<float> attn({.d_model = 8, .n_heads = 2}, rng);
  hr::Tensor<float> x(xt::zeros<float>({2, 3, 6}));
  CHECK_THROWS_WITH_AS(attn.forward(x), "MultiHeadAttention: input must be (B, T, 8), got (2, 3, 6)",
                       std::invalid_argument);
  hr::Tensor<float> ok(xt::zeros<float>({2, 3, 8}));
  hr::Mask bad = xt::zeros<bool>({2, 4});
  CHECK_THROWS_WITH_AS(attn.forward(ok, &bad), "MultiHeadAttention: key_padding_mask must be (B, T) = (2, 3), got (2, 4)",
                       std::invalid_argument);
}

TEST_CASE("head gate: all zero leaves out_proj's bias, zero for head j removes exactly its columns") {
  hr::Rng rng(3);
  hr::AttentionOptions options{.d_model = 8, .n_heads = 4, .init_std = 0.5, .out_init_std = 0.5};
  hr::MultiHeadAttention<double> attn(options, rng);
  // A non-zero bias, so that "only the bias" is a real check.
  for (auto& [name, p] : attn.named_parameters()) {
    if (name == "out_proj.bias") p.mutable_value() = hr::normal_init<double>(p.shape(), 1.0, rng);
  }
  const D x(hr::normal_init<double>({2, 5, 8}, 1.0, rng));
  const xt::xarray<double> ungated = attn.forward(x).out.value();
  const auto params = attn.named_parameters();
  auto param = [&](const std::string& name) {
    for (const auto& [n, p] : params) {
      if (n == name) return p;
    }
    FAIL("no parameter " << name);
    return D();
  };
  const xt::xarray<double> bias = param("out_proj.bias").value();

  SUBCASE("every head gated out: each position's output is out_proj.bias") {
    attn.set_head_gate(D(xt::xarray<double>{0, 0, 0, 0}));
    const xt::xarray<double> out = attn.forward(x).out.value();
    for (std::size_t b = 0; b < 2; ++b) {
      for (std::size_t t = 0; t < 5; ++t) {
        for (std::size_t c = 0; c < 8; ++c) CHECK(out(b, t, c) == bias(c));
      }
    }
  }
  SUBCASE("a gate of ones changes nothing") {
    attn.set_head_gate(D(xt::xarray<double>{1, 1, 1, 1}));
    CHECK(attn.forward(x).out.value() == ungated);
    attn.clear_head_gate();
    CHECK_FALSE(attn.head_gate().has_value());
  }
  SUBCASE("head 2 gated out equals zeroing out_proj's columns of head 2") {
    attn.set_head_gate(D(xt::xarray<double>{1, 1, 0, 1}));
    const xt::xarray<double> gated = attn.forward(x).out.value();
    attn.clear_head_gate();
    D w = param("out_proj.weight");  // (C, H d_v): head 2 owns columns [4, 6)
    const xt::xarray<double> saved = w.value();
    for (std::size_t r = 0; r < 8; ++r) {
      w.mutable_value()(r, 4) = 0;
      w.mutable_value()(r, 5) = 0;
    }
    const xt::xarray<double> zeroed = attn.forward(x).out.value();
    w.mutable_value() = saved;
    CHECK(xt::allclose(gated, zeroed, 0.0, 1e-14));
    CHECK_FALSE(xt::allclose(gated, ungated, 0.0, 1e-6));  // head 2 did contribute
  }
  SUBCASE("a gate of the wrong shape is refused with both shapes") {
    CHECK_THROWS_WITH_AS(attn.set_head_gate(D(xt::xarray<double>{1, 1, 1})),
                         "MultiHeadAttention: the head gate must be (n_heads) = (4), got (3)",
                         std::invalid_argument);
  }
}

// The composed form the fused op replaced (and that MultiHeadAttention still uses for
// attention dropout in training): split_heads, two matmuls, scale, masks, softmax,
// merge_heads.
static D composed_attention(const D& q, const D& k, const D& v, std::size_t H, std::size_t G, double scale,
                            bool causal, const hr::Mask* padding) {
  const std::size_t B = q.shape()[0], T = q.shape()[1], dk = q.shape()[2] / H, dv = v.shape()[2] / G;
  D qh = hr::reshape(hr::split_heads(q, H), {B, G, H / G, T, dk});
  D kh = hr::reshape(hr::split_heads(k, G), {B, G, 1, T, dk});
  D vh = hr::reshape(hr::split_heads(v, G), {B, G, 1, T, dv});
  D scores = hr::mul_scalar(hr::matmul(qh, hr::transpose(kh)), scale);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (causal) scores = hr::masked_fill(scores, hr::causal_mask(T), neg_inf);
  if (padding) {
    hr::Mask keys = *padding;
    keys.reshape({B, 1, 1, 1, T});
    scores = hr::masked_fill(scores, keys, neg_inf);
  }
  return hr::merge_heads(hr::reshape(hr::matmul(hr::softmax(scores, -1), vh), {B, H, T, dv}));
}

TEST_CASE("the fused attention op equals the composed ops it replaced, values and gradients") {
  struct Layout {
    const char* what;
    std::size_t H, G, dk, dv;
    bool causal, padded;
    std::size_t T = 5;
  };
  // The fused op runs causal attention in blocks of 32 query rows (ops_attention.cpp):
  // T = 70 crosses two block boundaries and ends in a partial block.
  for (const Layout l : {Layout{"MHA causal", 4, 4, 3, 3, true, false}, Layout{"GQA, d_v != d_k", 4, 2, 3, 5, true, false},
                         Layout{"MQA, not causal", 3, 1, 4, 2, false, false},
                         Layout{"key padding with a query that sees nothing", 2, 2, 3, 3, true, true},
                         Layout{"causal over three row blocks, GQA, padding", 4, 2, 3, 2, true, true, 70},
                         Layout{"not causal, T = 70", 2, 2, 2, 3, false, false, 70},
                         // Heads of width 1 and 2 run their products a column at a time
                         // (ops_attention.cpp, narrow_product).
                         Layout{"d_k 1, d_v 1, causal over three row blocks, padding", 6, 6, 1, 1, true, true, 70},
                         Layout{"d_k 2, d_v 1, GQA, not causal", 4, 2, 2, 1, false, false, 37},
                         Layout{"d_k 1, d_v 2, MQA, causal, padding", 3, 1, 1, 2, true, true, 33},
                         Layout{"d_k 3, d_v 2 beside d_k 2, d_v 3", 2, 2, 2, 3, true, false, 40}}) {
    CAPTURE(std::string(l.what));
    hr::Rng rng(11);
    const std::size_t B = 2, T = l.T;
    hr::Mask pad = xt::zeros<bool>({B, T});
    pad(0, 0) = true;
    pad(1, 3) = true;
    const hr::Mask* padding = l.padded ? &pad : nullptr;
    std::vector<D> fused_in, composed_in;
    for (const std::size_t width : {l.H * l.dk, l.G * l.dk, l.G * l.dv}) {
      const xt::xarray<double> value = hr::normal_init<double>({B, T, width}, 1.0, rng);
      fused_in.emplace_back(value, true);
      composed_in.emplace_back(value, true);
    }
    xt::xarray<double> weights;
    const D fused = hr::attention(fused_in[0], fused_in[1], fused_in[2],
                                  {.n_heads = l.H, .n_kv_heads = l.G, .scale = 0.6, .causal = l.causal,
                                   .key_padding = padding, .weights = &weights});
    const D composed = composed_attention(composed_in[0], composed_in[1], composed_in[2], l.H, l.G, 0.6, l.causal,
                                          padding);
    REQUIRE(fused.shape() == composed.shape());
    CHECK(xt::allclose(fused.value(), composed.value(), 1e-12, 1e-13));
    CHECK(weights.shape() == hr::Shape{B, l.H, T, T});
    // The same non-uniform upstream gradient through both.
    const xt::xarray<double> upstream = hr::normal_init<double>(fused.shape(), 1.0, rng);
    fused.backward(upstream, {.keep_tape = true});  // the composed graph is on the same tape
    composed.backward(upstream);
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);  // 0 q, 1 k, 2 v
      CHECK(xt::allclose(fused_in[i].grad(), composed_in[i].grad(), 1e-12, 1e-13));
    }
  }
}

// Float runs its own kernels (the per-ISA clones of the narrow products, small_gemm's
// vector code): at every head width they must give double's values and gradients to
// float's precision. Widths 1, 2 and 3 take the narrow path, 6 both, 16 small_gemm.
TEST_CASE("the float attention op agrees with double at every head width, values and gradients") {
  // T = 7: the scores' 7 key columns are a whole vector and 3 narrow ones.
  for (const std::size_t T : {7, 70}) {
  for (const std::size_t dk : {1, 2, 3, 6, 16}) {
    for (const std::size_t dv : {1, 2, 16}) {
      CAPTURE(T);
      CAPTURE(dk);
      CAPTURE(dv);
      hr::Rng rng(5 + dk * 31 + dv);
      const std::size_t B = 2, H = 4, G = 2;
      std::vector<D> dbl;
      std::vector<hr::Tensor<float>> flt;
      for (const std::size_t width : {H * dk, G * dk, G * dv}) {
        const xt::xarray<double> value = hr::normal_init<double>({B, T, width}, 1.0, rng);
        dbl.emplace_back(value, true);
        flt.emplace_back(xt::xarray<float>(xt::cast<float>(value)), true);
      }
      const D out_d = hr::attention(dbl[0], dbl[1], dbl[2], {.n_heads = H, .n_kv_heads = G, .scale = 0.6});
      const hr::Tensor<float> out_f =
          hr::attention(flt[0], flt[1], flt[2], {.n_heads = H, .n_kv_heads = G, .scale = 0.6f});
      CHECK(xt::allclose(xt::cast<double>(out_f.value()), out_d.value(), 1e-4, 1e-5));
      const xt::xarray<double> upstream = hr::normal_init<double>(out_d.shape(), 1.0, rng);
      out_d.backward(upstream);
      out_f.backward(xt::xarray<float>(xt::cast<float>(upstream)));
      for (std::size_t i = 0; i < 3; ++i) {
        CAPTURE(i);  // 0 q, 1 k, 2 v
        CHECK(xt::allclose(xt::cast<double>(flt[i].grad()), dbl[i].grad(), 1e-3, 1e-4));
      }
    }
  }
  }
}

// Attention dropout in training mode runs the module's composed path (nn/attention.cpp),
// not the fused op. At a dropout rate of 1e-15 no weight is dropped and the rest are
// scaled by 1 + 1e-15, so that path must give what the fused path gives, output and
// input gradient, for every layout it serves: GQA and MQA, causal or not, key padding,
// the head gate and summed heads. Its causal mask, its grouping, its padding and its
// gate are then all checked, which no other test does.
TEST_CASE("the composed attention path (dropout in training) equals the fused one for every layout") {
  struct Layout {
    const char* name;
    hr::AttentionOptions options;
    bool padding = false;
    bool gate = false;
    bool positions = false;  // pos_qk_only's table into q and k
  };
  const std::vector<Layout> layouts{
      {"MHA causal", {.d_model = 8, .n_heads = 4}},
      {"MHA not causal", {.d_model = 8, .n_heads = 4, .causal = false}},
      {"GQA 4 over 2, padding", {.d_model = 8, .n_heads = 4, .n_kv_heads = 2}, true},
      {"MQA, d_k and d_v free, gate", {.d_model = 6, .n_heads = 3, .d_k = 4, .d_v = 5, .n_kv_heads = 1}, false, true},
      {"summed heads, padding, gate", {.d_model = 8, .n_heads = 2, .head_combine = hr::HeadCombine::sum}, true, true},
      {"qk_norm, key smear, rope, GQA, padding",
       {.d_model = 8, .n_heads = 4, .n_kv_heads = 2, .qk_norm = true, .key_smear = true, .rope = true}, true},
      {"positions into q and k, key smear", {.d_model = 8, .n_heads = 2, .key_smear = true}, false, false, true},
  };
  const std::size_t B = 2, T = 5;
  hr::Mask padding = hr::Mask::from_shape({B, T});
  padding.fill(false);
  padding(0, 4) = true;
  padding(1, 3) = true;
  padding(1, 4) = true;
  for (const Layout& l : layouts) {
    CAPTURE(l.name);
    hr::AttentionOptions o = l.options;
    o.init_std = 0.4;
    o.out_init_std = 0.4;
    o.dropout = 1e-15;
    const hr::DropoutSeed masks(0);  // where the composed path's dropout draws
    hr::Rng rng(11);
    hr::MultiHeadAttention<double> attn(o, rng);
    if (l.gate) attn.set_head_gate(D(hr::normal_init<double>({o.n_heads}, 1.0, rng)));
    if (o.qk_norm || o.key_smear) scramble(attn, rng);
    const xt::xarray<double> x0 = hr::normal_init<double>({B, T, o.d_model}, 1.0, rng);
    const xt::xarray<double> upstream = hr::normal_init<double>({B, T, o.d_model}, 1.0, rng);
    const xt::xarray<double> table = hr::normal_init<double>({T, o.d_model}, 1.0, rng);
    const hr::Mask* pad = l.padding ? &padding : nullptr;
    auto run = [&](bool training) {
      attn.train(training);
      D x(x0, true);
      D positions(table, true);
      const D out = attn.forward(x, pad, false, l.positions ? &positions : nullptr).out;
      out.backward(upstream);
      return std::tuple{out.value(), x.grad(), l.positions ? positions.grad() : xt::xarray<double>()};
    };
    const auto [composed, composed_grad, composed_pgrad] = run(true);
    const auto [fused, fused_grad, fused_pgrad] = run(false);
    CHECK(xt::allclose(composed, fused, 1e-10, 1e-12));
    CHECK(xt::allclose(composed_grad, fused_grad, 1e-10, 1e-12));
    if (l.positions) CHECK(xt::allclose(composed_pgrad, fused_pgrad, 1e-10, 1e-12));
  }
}
