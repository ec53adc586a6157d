// The current blocks of docs/design.md #17 in the model: parameter names and shapes as
// the checkpoint table lists them, initial values, checkpoint round trips of every
// key, and what each switch is for: RoPE's scores depend on the offset of the
// positions only, a model without positions is permutation-equivariant, positions
// into q and k only leave the values without them. Their gradient checks are in
// nn/module_checks.cpp, the attention's plain-loop reference in test_attention.cpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "support.hpp"
#include "nn/checkpoint.hpp"
#include "nn/transformer.hpp"

namespace hr = headroom;

namespace {

using hr::FeedForwardType, hr::NormPlacement, hr::NormType, hr::PositionEncoding;

std::vector<std::string> names_and_shapes(const hr::ModelConfig& config) {
  hr::Rng rng(1);
  const hr::TransformerLM<float> model(config, rng);
  std::vector<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.push_back(name + " " + hr::format_shape(p.shape()));
  return names;
}

// Rope, RMSNorm, SwiGLU, no bias, grouped K/V: d_k 2, d_ff 8 ceil(8 / 3) = 24.
const hr::ModelConfig kLlama{.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 4, .n_kv_heads = 2, .max_len = 6,
                             .pos = PositionEncoding::rope, .bias = false, .norm_type = NormType::rmsnorm,
                             .ffn = FeedForwardType::swiglu};

hr::IndexArray random_tokens(std::size_t b, std::size_t t, std::size_t vocab, hr::Rng& rng) {
  hr::IndexArray tokens = hr::IndexArray::from_shape({b, t});
  for (auto& v : tokens) v = static_cast<hr::Index>(rng.below(vocab));
  return tokens;
}

// Every parameter drawn afresh at a scale where each one shows in the output.
template <typename T>
void scramble(hr::TransformerLM<T>& model, std::uint64_t seed) {
  hr::Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) p.mutable_value() = hr::normal_init<T>(p.shape(), 0.5, rng);
}

}  // namespace

TEST_CASE("current blocks: a llama-style model has the checkpoint table's names and shapes") {
  CHECK(names_and_shapes(kLlama) ==
        std::vector<std::string>{"tok_emb.weight (7, 8)",
                                 "blocks.0.ln1.weight (8)",
                                 "blocks.0.attn.q_proj.weight (8, 8)",
                                 "blocks.0.attn.k_proj.weight (4, 8)",
                                 "blocks.0.attn.v_proj.weight (4, 8)",
                                 "blocks.0.attn.out_proj.weight (8, 8)",
                                 "blocks.0.ln2.weight (8)",
                                 "blocks.0.ffn.gate_proj.weight (24, 8)",
                                 "blocks.0.ffn.up_proj.weight (24, 8)",
                                 "blocks.0.ffn.down_proj.weight (8, 24)",
                                 "ln_f.weight (8)",
                                 "head.weight (7, 8)"});
  // SwiGLU with biases: one per projection, down_proj's of d_model.
  hr::ModelConfig biased = kLlama;
  biased.bias = true;
  biased.d_ff = 6;
  const auto names = names_and_shapes(biased);
  CHECK(std::find(names.begin(), names.end(), "blocks.0.ffn.gate_proj.bias (6)") != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.0.ffn.up_proj.bias (6)") != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.0.ffn.down_proj.bias (8)") != names.end());
}

TEST_CASE("current blocks: qk_norm and key_smear add q_norm, k_norm (d_k) and key_smear (n_kv_heads)") {
  const hr::ModelConfig c{.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 4, .n_kv_heads = 2, .d_k = 3,
                          .max_len = 6, .attn_only = true, .qk_norm = true, .key_smear = true};
  // The module's own parameter comes before its children, as in PyTorch's state_dict.
  CHECK(names_and_shapes(c) == std::vector<std::string>{"tok_emb.weight (7, 8)",
                                                        "pos_emb.weight (6, 8)",
                                                        "blocks.0.ln1.weight (8)",
                                                        "blocks.0.ln1.bias (8)",
                                                        "blocks.0.attn.key_smear (2)",
                                                        "blocks.0.attn.q_proj.weight (12, 8)",
                                                        "blocks.0.attn.q_proj.bias (12)",
                                                        "blocks.0.attn.k_proj.weight (6, 8)",
                                                        "blocks.0.attn.k_proj.bias (6)",
                                                        "blocks.0.attn.v_proj.weight (6, 8)",
                                                        "blocks.0.attn.v_proj.bias (6)",
                                                        "blocks.0.attn.q_norm.weight (3)",
                                                        "blocks.0.attn.k_norm.weight (3)",
                                                        "blocks.0.attn.out_proj.weight (8, 12)",
                                                        "blocks.0.attn.out_proj.bias (8)",
                                                        "ln_f.weight (8)",
                                                        "ln_f.bias (8)",
                                                        "head.weight (7, 8)"});
  // pos rope, pos none and pos_qk_only with sinusoids have no position parameter;
  // pos_qk_only with learned positions keeps pos_emb.weight.
  for (const PositionEncoding pos : {PositionEncoding::rope, PositionEncoding::none}) {
    const auto names = names_and_shapes({.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .pos = pos});
    CHECK(names[1] == "blocks.0.ln1.weight (8)");
  }
  CHECK(names_and_shapes({.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6,
                          .pos_qk_only = true})[1] == "pos_emb.weight (6, 8)");
  // The count agrees with the layer.
  hr::Rng rng(2);
  const hr::MultiHeadAttention<float> attn(hr::attention_options(c.resolved()), rng);
  CHECK(attn.parameter_count() == hr::attention_parameter_count(hr::attention_options(c.resolved())));
  CHECK(attn.parameter_count() == 12u * 9 + 6u * 9 + 6u * 9 + 8u * 12 + 8 + 2 * 3 + 2);
}

TEST_CASE("current blocks: norms start at one, the smear at zero, and every drawn weight is as without them") {
  // The keys that add no drawn weight (qk_norm, key_smear, norm_type, pos rope or none
  // next to sinusoidal, pos_qk_only) leave every other initial value as it was: only
  // Linear and Embedding weights draw from the generator, in the same order.
  const hr::ModelConfig base{.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6,
                             .pos = PositionEncoding::sinusoidal};
  hr::ModelConfig current = base;
  current.qk_norm = current.key_smear = current.pos_qk_only = true;
  current.norm_type = NormType::rmsnorm;
  hr::ModelConfig rope = base;
  rope.pos = PositionEncoding::rope;
  hr::Rng r1(3), r2(3), r3(3);
  const hr::TransformerLM<float> a(base, r1), b(current, r2), c(rope, r3);
  std::map<std::string, xt::xarray<float>> before;
  for (const auto& [name, p] : a.named_parameters()) before[name] = p.value();
  for (const auto* m : {&b, &c}) {
    for (const auto& [name, p] : m->named_parameters()) {
      CAPTURE(name);
      const bool norm_weight = name.find("norm.weight") != std::string::npos || name.find("ln") != std::string::npos;
      if (name.find("key_smear") != std::string::npos) {
        CHECK(p.value() == xt::zeros<float>(p.shape()));
      } else if (norm_weight && name.find(".weight") != std::string::npos) {
        CHECK(p.value() == xt::ones<float>(p.shape()));
      } else {
        REQUIRE(before.count(name) == 1);
        CHECK(p.value() == before[name]);
      }
    }
  }
  // SwiGLU draws gate_proj, up_proj, down_proj where the MLP drew fc1, fc2: gate_proj
  // is fc1's draw, and the layers before the feed-forward are as they were.
  hr::ModelConfig swiglu{.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .d_ff = 8, .max_len = 6,
                         .ffn = FeedForwardType::swiglu};
  hr::ModelConfig mlp = swiglu;
  mlp.ffn = FeedForwardType::mlp;
  hr::Rng r4(4), r5(4);
  const hr::TransformerLM<float> s(swiglu, r4), m(mlp, r5);
  std::map<std::string, xt::xarray<float>> sp, mp;
  for (const auto& [name, p] : s.named_parameters()) sp[name] = p.value();
  for (const auto& [name, p] : m.named_parameters()) mp[name] = p.value();
  CHECK(sp["blocks.0.ffn.gate_proj.weight"] == mp["blocks.0.ffn.fc1.weight"]);
  CHECK(sp["blocks.0.attn.out_proj.weight"] == mp["blocks.0.attn.out_proj.weight"]);
  // down_proj writes into the residual stream: drawn at 0.02 / sqrt(2 n_layers).
  const xt::xarray<float>& down = sp["blocks.0.ffn.down_proj.weight"];
  double ss = 0;
  for (const float v : down) ss += static_cast<double>(v) * v;
  const double std_down = std::sqrt(ss / static_cast<double>(down.size()));
  CHECK(std_down == doctest::Approx(0.02 / std::sqrt(2.0)).epsilon(0.2));  // 64 draws
}

TEST_CASE("current blocks: every key round-trips through a checkpoint, F32 and F64") {
  const TempDir dir("current_blocks");
  const std::vector<std::pair<const char*, hr::ModelConfig>> configs{
      {"llama-style", kLlama},
      {"qk_norm, key smear, GQA, rope base 500",
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .max_len = 6,
        .pos = PositionEncoding::rope, .rope_base = 500, .qk_norm = true, .key_smear = true}},
      {"pos none, rmsnorm post-norm", {.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6,
                                       .norm = NormPlacement::post, .pos = PositionEncoding::none,
                                       .norm_type = NormType::rmsnorm}},
      {"learned positions in q/k only, swiglu",
       {.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6, .ffn = FeedForwardType::swiglu,
        .pos_qk_only = true}},
      {"sinusoid in q/k only, key smear, attn_only",
       {.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6, .pos = PositionEncoding::sinusoidal,
        .attn_only = true, .key_smear = true, .pos_qk_only = true}},
  };
  hr::Rng rng(9);
  const hr::IndexArray tokens = random_tokens(2, 6, 7, rng);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const auto& [what, config] = configs[i];
    CAPTURE(what);
    hr::Rng init(i);
    hr::TransformerLM<float> a(config, init);
    scramble(a, 50 + i);
    const auto path = dir.path() / fmt::format("m{}.safetensors", i);
    hr::save_checkpoint(path, a, config);
    const hr::LoadedModel<float> b = hr::load_model<float>(path);
    CHECK(hr::model_config_to_json(b.config) == hr::model_config_to_json(config));
    CHECK(b.config == config.resolved().get());
    const auto sa = a.state_dict(), sb = b.model->state_dict();
    REQUIRE(sa.size() == sb.size());
    for (std::size_t j = 0; j < sa.size(); ++j) {
      CHECK(sa[j].first == sb[j].first);
      CHECK(sa[j].second == sb[j].second);
    }
    hr::NoGrad no_grad;
    const float loss = a.loss(tokens).item();
    CHECK(std::isfinite(loss));
    CHECK(b.model->loss(tokens).item() == loss);
    // F64: the double model of the file, saved and loaded again, gives its loss.
    const hr::LoadedModel<double> d = hr::load_model<double>(path);
    const auto path64 = dir.path() / fmt::format("m{}_f64.safetensors", i);
    hr::save_checkpoint(path64, *d.model, config);
    const hr::LoadedModel<double> d2 = hr::load_model<double>(path64);
    CHECK(d2.model->loss(tokens).item() == d.model->loss(tokens).item());
    CHECK(d.model->loss(tokens).item() == doctest::Approx(loss).epsilon(1e-5));
  }
}

TEST_CASE("current blocks: with rope, a head's scores depend on the offset of the positions only") {
  // Every position holds the same vector, so q_t = R_t q and k_t = R_t k for one q and
  // one k: the score of (i, j) is q . R_{j-i} k, a function of i - j. Under the causal
  // mask, row i's weights are softmax over offsets 0..i, so log w(i, j) - log w(i, i)
  // is the same for every row i that has the key i - d. Without rope the scores are
  // all equal and that difference is 0; with rope it is not.
  hr::Rng rng(6);
  hr::MultiHeadAttention<double> attn({.d_model = 8, .n_heads = 2, .rope = true, .rope_base = 3.0, .init_std = 0.8},
                                      rng);
  const std::size_t T = 6;
  xt::xarray<double> row = hr::normal_init<double>({8}, 1.0, rng);
  xt::xarray<double> x = xt::xarray<double>::from_shape({1, T, 8});
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t c = 0; c < 8; ++c) x(0, t, c) = row(c);
  hr::NoGrad no_grad;
  const xt::xarray<double> w = attn.forward(hr::Tensor<double>(x), nullptr, true).weights.value();  // (1, 2, T, T)
  bool varies = false;
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t d = 1; d < T; ++d) {
      const double first = std::log(w(0, h, d, 0)) - std::log(w(0, h, d, d));
      for (std::size_t i = d + 1; i < T; ++i) {
        CAPTURE(h);
        CAPTURE(d);
        CAPTURE(i);
        CHECK(std::log(w(0, h, i, i - d)) - std::log(w(0, h, i, i)) == doctest::Approx(first).epsilon(1e-9));
      }
      varies = varies || std::abs(first) > 1e-3;
    }
  CHECK(varies);  // the rotation does change the scores with the offset

  // And at the op level, for different vectors: q at i, k at j against q at i + s, k at j + s.
  const std::size_t d_k = 4;
  const xt::xarray<double> q = hr::normal_init<double>({d_k}, 1.0, rng), k = hr::normal_init<double>({d_k}, 1.0, rng);
  auto score = [&](std::size_t i, std::size_t j) {
    xt::xarray<double> qs = xt::zeros<double>({std::size_t{1}, T + 3, d_k}), ks = qs;
    for (std::size_t c = 0; c < d_k; ++c) {
      qs(0, i, c) = q(c);
      ks(0, j, c) = k(c);
    }
    const xt::xarray<double> rq = hr::rope(hr::Tensor<double>(qs), 1, 10.0).value();
    const xt::xarray<double> rk = hr::rope(hr::Tensor<double>(ks), 1, 10.0).value();
    double s = 0;
    for (std::size_t c = 0; c < d_k; ++c) s += rq(0, i, c) * rk(0, j, c);
    return s;
  };
  for (const auto& [i, j] : {std::pair<std::size_t, std::size_t>{3, 1}, {1, 3}, {2, 2}, {4, 0}}) {
    for (std::size_t s = 1; s <= 4; ++s) CHECK(score(i + s, j + s) == doctest::Approx(score(i, j)).epsilon(1e-12));
  }
  CHECK(score(3, 1) != doctest::Approx(score(3, 2)).epsilon(1e-6));
}

TEST_CASE("current blocks: without positions a non-causal model is permutation-equivariant") {
  // pos none adds nothing to the input, so permuting the tokens of a non-causal model
  // permutes its outputs; learned positions, rope and positions in q/k only break it.
  const std::vector<std::size_t> perm{3, 0, 4, 1, 2};
  hr::Rng trng(8);
  const hr::IndexArray tokens = random_tokens(2, 5, 7, trng);
  hr::IndexArray permuted = tokens;
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t t = 0; t < 5; ++t) permuted(b, t) = tokens(b, perm[t]);
  auto max_gap = [&](const hr::ModelConfig& config) {
    hr::Rng rng(7);
    hr::TransformerLM<double> model(config, rng);
    scramble(model, 70);
    hr::NoGrad no_grad;
    const xt::xarray<double> y = model.forward(tokens).value(), yp = model.forward(permuted).value();
    double gap = 0;
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t t = 0; t < 5; ++t)
        for (std::size_t v = 0; v < 7; ++v) gap = std::max(gap, std::abs(yp(b, t, v) - y(b, perm[t], v)));
    return gap;
  };
  hr::ModelConfig none{.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6,
                       .pos = PositionEncoding::none, .causal = false};
  CHECK(max_gap(none) < 1e-12);
  none.norm_type = NormType::rmsnorm;
  none.ffn = FeedForwardType::swiglu;
  none.qk_norm = true;
  CHECK(max_gap(none) < 1e-12);
  hr::ModelConfig learned = none;
  learned.pos = PositionEncoding::learned;
  CHECK(max_gap(learned) > 1e-3);
  hr::ModelConfig qk_only = learned;
  qk_only.pos_qk_only = true;
  CHECK(max_gap(qk_only) > 1e-3);
  hr::ModelConfig rope = none;
  rope.pos = PositionEncoding::rope;
  CHECK(max_gap(rope) > 1e-3);
}

TEST_CASE("current blocks: with positions in q and k only, the values and the residual carry none") {
  // One attention-only layer on a row of one repeated token: every value is the same
  // vector, so whatever the weights, every position's output is the same. With the
  // positions added to the input instead, the positions differ.
  auto spread = [](bool qk_only) {
    hr::Rng rng(5);
    hr::TransformerLM<double> model({.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6,
                                     .attn_only = true, .pos_qk_only = qk_only},
                                    rng);
    scramble(model, 80);
    hr::NoGrad no_grad;
    const hr::IndexArray tokens = {{3, 3, 3, 3, 3}};
    const xt::xarray<double> y = model.forward(tokens).value();
    std::vector<hr::Tensor<double>> weights;
    model.forward(tokens, &weights);
    double gap = 0;
    for (std::size_t t = 1; t < 5; ++t)
      for (std::size_t v = 0; v < 7; ++v) gap = std::max(gap, std::abs(y(0, t, v) - y(0, 0, v)));
    // The weights do see the positions: not uniform over the keys a query sees.
    const xt::xarray<double> w = weights[0].value();
    return std::pair{gap, std::abs(w(0, 0, 4, 0) - w(0, 0, 4, 1))};
  };
  const auto [qk_gap, qk_weights] = spread(true);
  CHECK(qk_gap < 1e-12);
  CHECK(qk_weights > 1e-3);
  CHECK(spread(false).first > 1e-3);
}
