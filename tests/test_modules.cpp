// Modules: names as docs/design.md lists them, state dicts, config JSON, causality and
// the sinusoidal table. Their gradient checks are in test_module_gradcheck.cpp.
#include <cmath>
#include <set>

#include <doctest/doctest.h>

#include "nn/config_fields.hpp"
#include "nn/config_json.hpp"
#include "nn/dropout.hpp"
#include "nn/transformer.hpp"

namespace hr = headroom;

namespace {

hr::IndexArray random_tokens(std::size_t b, std::size_t t, std::size_t vocab, hr::Rng& rng) {
  hr::IndexArray tokens = hr::IndexArray::from_shape({b, t});
  for (auto& v : tokens) v = static_cast<hr::Index>(rng.below(vocab));
  return tokens;
}

}  // namespace

TEST_CASE("parameter names follow docs/design.md and PyTorch's state_dict") {
  hr::Rng rng(0);
  hr::TransformerLM<float> lm({.vocab = 11, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 16}, rng);
  std::vector<std::string> names;
  for (const auto& [name, p] : lm.named_parameters()) names.push_back(name + " " + hr::format_shape(p.shape()));
  std::vector<std::string> want{"tok_emb.weight (11, 8)", "pos_emb.weight (16, 8)"};
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const char* s : {"ln1.weight (8)", "ln1.bias (8)", "attn.q_proj.weight (8, 8)", "attn.q_proj.bias (8)",
                          "attn.k_proj.weight (8, 8)", "attn.k_proj.bias (8)", "attn.v_proj.weight (8, 8)",
                          "attn.v_proj.bias (8)", "attn.out_proj.weight (8, 8)", "attn.out_proj.bias (8)",
                          "ln2.weight (8)", "ln2.bias (8)", "ffn.fc1.weight (32, 8)", "ffn.fc1.bias (32)",
                          "ffn.fc2.weight (8, 32)", "ffn.fc2.bias (8)"}) {
      want.push_back(b + s);
    }
  }
  want.push_back("ln_f.weight (8)");
  want.push_back("ln_f.bias (8)");
  want.push_back("head.weight (11, 8)");
  CHECK(names == want);

  hr::TransformerLM<float> tied({.vocab = 11, .d_model = 8, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1,
                                 .max_len = 16, .pos = hr::PositionEncoding::sinusoidal, .tie_embeddings = true},
                                rng);
  std::set<std::string> tied_names;
  for (const auto& [name, p] : tied.named_parameters()) tied_names.insert(name);
  CHECK(tied_names.count("head.weight") == 0);
  CHECK(tied_names.count("pos_emb.weight") == 0);
  CHECK(tied.named_parameters()[5].first == "blocks.0.attn.k_proj.weight");
  CHECK(hr::format_shape(tied.named_parameters()[5].second.shape()) == "(4, 8)");  // one kv head of d_k 4
}

TEST_CASE("changing tokens after position t leaves logits up to t bit-identical") {
  hr::Rng rng(4);
  hr::TransformerLM<float> lm({.vocab = 9, .d_model = 16, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .max_len = 12},
                              rng);
  hr::NoGrad no_grad;
  hr::IndexArray a = random_tokens(2, 10, 9, rng);
  const xt::xarray<float> before = lm.forward(a).value();
  for (std::size_t t = 6; t < 10; ++t) a(1, t) = (a(1, t) + 1) % 9;  // change batch 1 from t = 6 on
  const xt::xarray<float> after = lm.forward(a).value();
  for (std::size_t t = 0; t < 10; ++t)
    for (std::size_t v = 0; v < 9; ++v) {
      CHECK_MESSAGE(before(0, t, v) == after(0, t, v), "batch 0 changed at t=" << t);
      if (t < 6) CHECK_MESSAGE(before(1, t, v) == after(1, t, v), "batch 1 changed at t=" << t << " < 6");
    }
  bool later_changed = false;
  for (std::size_t v = 0; v < 9; ++v) later_changed = later_changed || before(1, 6, v) != after(1, 6, v);
  CHECK(later_changed);  // and the changed positions do see the change
}

TEST_CASE("sinusoidal positions follow Vaswani et al. (2017)") {
  const xt::xarray<double> pe = hr::sinusoidal_positions<double>(50, 8);
  CHECK(pe(0, 0) == 0.0);
  CHECK(pe(0, 1) == 1.0);
  CHECK(pe(3, 0) == doctest::Approx(std::sin(3.0)));
  CHECK(pe(3, 1) == doctest::Approx(std::cos(3.0)));
  // i = 1: w = 10000^(-2/8) = 0.1
  CHECK(pe(7, 2) == doctest::Approx(std::sin(0.7)));
  CHECK(pe(7, 3) == doctest::Approx(std::cos(0.7)));
  // i = 3: w = 10000^(-6/8) = 0.001
  CHECK(pe(49, 6) == doctest::Approx(std::sin(0.049)));
}

TEST_CASE("state_dict round-trips and load_state_dict names what is wrong") {
  hr::Rng rng(5);
  const hr::ModelConfig cfg{.vocab = 5, .d_model = 4, .n_layers = 1, .n_heads = 2, .max_len = 4};
  hr::TransformerLM<float> a(cfg, rng), b(cfg, rng);
  b.load_state_dict(a.state_dict());
  const auto sa = a.state_dict(), sb = b.state_dict();
  for (std::size_t i = 0; i < sa.size(); ++i) CHECK_MESSAGE(sa[i].second == sb[i].second, sa[i].first);

  auto missing = sa;
  missing.erase(missing.begin() + 2);
  CHECK_THROWS_WITH_AS(b.load_state_dict(missing),
                       "load_state_dict: missing parameter 'blocks.0.ln1.weight' of shape (4)", std::invalid_argument);
  auto wrong = sa;
  wrong[0].second = xt::zeros<float>({5, 3});
  CHECK_THROWS_WITH_AS(b.load_state_dict(wrong),
                       "load_state_dict: parameter 'tok_emb.weight' has shape (5, 3) but the model expects (5, 4)",
                       std::invalid_argument);
  auto extra = sa;
  extra.emplace_back("head.bias", xt::zeros<float>({5}));
  CHECK_THROWS_WITH_AS(b.load_state_dict(extra), "load_state_dict: unexpected parameter 'head.bias' of shape (5)",
                       std::invalid_argument);
  // A failed load changes nothing.
  for (std::size_t i = 0; i < sa.size(); ++i) CHECK(b.state_dict()[i].second == sa[i].second);
}

TEST_CASE("model config: defaults, validation and JSON") {
  const hr::ModelConfig r = hr::ModelConfig{.vocab = 10, .d_model = 64, .n_heads = 8}.resolved();
  CHECK(r.d_k == 8);
  CHECK(r.d_v == 8);
  CHECK(r.n_kv_heads == 8);
  CHECK(r.d_ff == 256);
  CHECK(*r.attn_scale == doctest::Approx(1.0 / std::sqrt(8.0)));

  const std::string json = hr::model_config_to_json(r);
  for (const char* key : {"\"vocab\"", "\"d_model\"", "\"n_layers\"", "\"n_heads\"", "\"n_kv_heads\"", "\"d_k\"",
                          "\"d_v\"", "\"head_combine\"", "\"d_ff\"", "\"max_len\"", "\"norm\"", "\"activation\"", "\"pos\"",
                          "\"causal\"", "\"attn_scale\"", "\"ln_eps\"", "\"bias\"", "\"tie_embeddings\"",
                          "\"attn_only\""}) {
    CHECK_MESSAGE(json.find(key) != std::string::npos, "config JSON lacks " << key);
  }
  const hr::ModelConfig back = hr::model_config_from_json(json, "cfg.json");
  CHECK(hr::model_config_to_json(back) == json);

  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "heads": 4})", "cfg.json"),
                       doctest::Contains("cfg.json: unknown model config key 'heads'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "d_model": "64"})", "cfg.json"),
                       "cfg.json: 'd_model' must be a non-negative integer, got \"64\" (string)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "norm": "middle"})", "cfg.json"),
                       "cfg.json: 'norm': norm must be 'pre', 'post' or 'none', got 'middle'", std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "n_heads": 8, "n_kv_heads": 3})", "cfg.json"),
                       "cfg.json: MultiHeadAttention: n_heads=8 is not a multiple of n_kv_heads=3",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::model_config_from_json("{\"vocab\": 5,", "cfg.json"),
                       doctest::Contains("cfg.json: not valid JSON"), std::invalid_argument);
  CHECK_THROWS_WITH_AS((hr::ModelConfig{.vocab = 0}.resolved()), "model config: vocab must be positive, got 0",
                       std::invalid_argument);
}

TEST_CASE("model config: head_combine defaults to concat, is always written, round-trips and is checked") {
  const hr::ModelConfig concat = hr::ModelConfig{.vocab = 10}.resolved();
  CHECK(concat.head_combine == hr::HeadCombine::concat);
  CHECK(hr::model_config_to_json(concat).find("\"head_combine\": \"concat\"") != std::string::npos);
  // A config written before the key existed reads as concat.
  CHECK(hr::model_config_from_json(R"({"vocab": 10})", "old.json").head_combine == hr::HeadCombine::concat);

  const hr::ModelConfig summed =
      hr::ModelConfig{.vocab = 10, .n_heads = 4, .n_kv_heads = 2, .head_combine = hr::HeadCombine::sum}.resolved();
  const std::string json = hr::model_config_to_json(summed);
  CHECK(json.find("\"head_combine\": \"sum\"") != std::string::npos);
  const hr::ModelConfig back = hr::model_config_from_json(json, "cfg.json");
  CHECK(back.head_combine == hr::HeadCombine::sum);
  CHECK(hr::model_config_to_json(back) == json);
  CHECK(hr::to_json(back)["head_combine"] == "sum");

  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "head_combine": "mean"})", "cfg.json"),
                       "cfg.json: 'head_combine': head_combine must be 'concat' or 'sum', got 'mean'",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "head_combine": 1})", "cfg.json"),
                       "cfg.json: 'head_combine' must be a string, got 1 (number)", std::invalid_argument);
  // A wrong type is named once, for every key that takes a name.
  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "norm": 3})", "cfg.json"),
                       "cfg.json: 'norm' must be a string, got 3 (number)", std::invalid_argument);
  hr::ModelConfig updated{.vocab = 5};
  hr::update_from_json(updated, nlohmann::json{{"head_combine", "sum"}}, "cli");
  CHECK(updated.head_combine == hr::HeadCombine::sum);
}

// Two configs that resolve and between them set every field to a value other than
// its default: attn_only refuses a d_ff and an activation (docs/design.md #11), so it
// is set in the second alone.
static hr::ModelConfig every_field_set() {
  return {.vocab = 11, .d_model = 24, .n_layers = 3, .n_heads = 6, .n_kv_heads = 3, .d_k = 5, .d_v = 7,
          .head_combine = hr::HeadCombine::sum, .d_ff = 40, .max_len = 9, .norm = hr::NormPlacement::post,
          .activation = hr::Activation::relu, .pos = hr::PositionEncoding::sinusoidal, .causal = false,
          .attn_scale = 0.3, .ln_eps = 1e-6, .bias = false, .tie_embeddings = true, .init_std = 0.125,
          .dropout = 0.2};
}
static hr::ModelConfig attn_only_set() {
  hr::ModelConfig c = every_field_set();
  c.d_ff = 0, c.activation = hr::Activation::gelu, c.attn_only = true, c.pos_qk_only = true;
  return c;
}
// The keys of current blocks (docs/design.md #17): rope needs an even d_k, swiglu the
// default activation.
static hr::ModelConfig modern_set() {
  hr::ModelConfig c = every_field_set();
  c.d_k = 4, c.activation = hr::Activation::gelu, c.pos = hr::PositionEncoding::rope, c.rope_base = 500;
  c.norm_type = hr::NormType::rmsnorm, c.ffn = hr::FeedForwardType::swiglu, c.qk_norm = true, c.key_smear = true;
  return c;
}

TEST_CASE("model config field table: every field round-trips through JSON under its key") {
  const hr::ModelConfig defaults;
  std::size_t fields = 0;
  hr::for_each_model_field([&](const auto& f) {
    CAPTURE(std::string(f.key));
    ++fields;
    CHECK_MESSAGE((every_field_set().*f.member != defaults.*f.member || attn_only_set().*f.member != defaults.*f.member ||
                   modern_set().*f.member != defaults.*f.member),
                  "every config leaves it at its default");
  });
  CHECK(fields == 27);
  for (const hr::ModelConfig& config : {every_field_set(), attn_only_set(), modern_set()}) {
    const hr::ModelConfig set = config.resolved();
    const nlohmann::json json = hr::to_json(set);
    hr::ModelConfig back;  // the defaults, then every key read
    hr::update_from_json(back, json, "cfg.json");
    hr::for_each_model_field([&](const auto& f) {
      CAPTURE(std::string(f.key));
      CHECK(json.contains(f.key));
      CHECK(back.*f.member == set.*f.member);
    });
    CHECK(json.size() == fields);  // no key outside the table
    CHECK(back == set);
  }
  CHECK(hr::model_config_keys().size() == fields);
}

TEST_CASE("model config field table: the unknown-key message lists every key, in table order") {
  std::string keys;
  hr::for_each_model_field([&](const auto& f) { keys += (keys.empty() ? "" : ", ") + std::string(f.key); });
  CHECK(keys ==
        "vocab, d_model, n_layers, n_heads, n_kv_heads, d_k, d_v, head_combine, d_ff, max_len, norm, activation, pos, "
        "causal, attn_scale, ln_eps, bias, tie_embeddings, attn_only, rope_base, norm_type, ffn, qk_norm, key_smear, "
        "pos_qk_only, init_std, dropout");
  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "heads": 4})", "cfg.json"),
                       ("cfg.json: unknown model config key 'heads' (keys: " + keys + ")").c_str(),
                       std::invalid_argument);
}

TEST_CASE("init_std sets every initial weight's sd, the residual writers' divided by sqrt(2 n_layers)") {
  const auto sd_of = [](const xt::xarray<float>& w) {
    double sum = 0, sq = 0;
    for (const float v : w) sum += v;
    const double mean = sum / static_cast<double>(w.size());
    for (const float v : w) sq += (v - mean) * (v - mean);
    return std::sqrt(sq / static_cast<double>(w.size() - 1));
  };
  for (const double init_std : {0.02, 0.125}) {
    CAPTURE(init_std);
    hr::Rng rng(5);
    const hr::TransformerLM<float> model(
        hr::ModelConfig{.vocab = 97, .d_model = 64, .n_layers = 2, .n_heads = 2, .max_len = 16, .init_std = init_std},
        rng);
    for (const auto& [name, p] : model.named_parameters()) {
      if (p.value().dimension() != 2) continue;  // biases and norm weights keep their constants
      CAPTURE(name);
      const bool writer = name.find("out_proj") != std::string::npos || name.find("fc2") != std::string::npos;
      const double want = writer ? init_std / std::sqrt(4.0) : init_std;
      // Thousands of draws: the sample sd is within 10% of the true one.
      CHECK(sd_of(p.value()) == doctest::Approx(want).epsilon(0.1));
    }
  }
  for (const double bad : {0.0, -0.02, static_cast<double>(INFINITY), static_cast<double>(NAN)}) {
    CHECK_THROWS_WITH_AS(hr::ModelConfig({.vocab = 5, .init_std = bad}).resolved(),
                         doctest::Contains("model config: init_std must be a positive number"), std::invalid_argument);
  }
}

TEST_CASE("model config enums: every name parses back to its value, and a bad name is named") {
  for (const auto v : {hr::NormPlacement::pre, hr::NormPlacement::post, hr::NormPlacement::none}) {
    CHECK(hr::parse_norm(hr::to_string(v)) == v);
  }
  for (const auto v : {hr::PositionEncoding::learned, hr::PositionEncoding::sinusoidal, hr::PositionEncoding::rope,
                       hr::PositionEncoding::none}) {
    CHECK(hr::parse_pos(hr::to_string(v)) == v);
  }
  for (const auto v : {hr::NormType::layernorm, hr::NormType::rmsnorm}) CHECK(hr::parse_norm_type(hr::to_string(v)) == v);
  for (const auto v : {hr::FeedForwardType::mlp, hr::FeedForwardType::swiglu}) CHECK(hr::parse_ffn(hr::to_string(v)) == v);
  CHECK_THROWS_WITH_AS(hr::parse_norm_type("batchnorm"), "norm_type must be 'layernorm' or 'rmsnorm', got 'batchnorm'",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::parse_ffn("geglu"), "ffn must be 'mlp' or 'swiglu', got 'geglu'", std::invalid_argument);
  for (const auto v : {hr::HeadCombine::concat, hr::HeadCombine::sum}) {
    CHECK(hr::parse_head_combine(hr::to_string(v)) == v);
  }
  for (const auto v : {hr::Activation::gelu, hr::Activation::gelu_tanh, hr::Activation::relu}) {
    CHECK(hr::parse_activation(hr::to_string(v)) == v);
  }
  CHECK(hr::to_string(hr::NormPlacement::post) == "post");
  CHECK(hr::to_string(hr::PositionEncoding::sinusoidal) == "sinusoidal");
  CHECK_THROWS_WITH_AS(hr::parse_norm("middle"), "norm must be 'pre', 'post' or 'none', got 'middle'", std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::parse_pos("rotary"), "pos must be 'learned', 'sinusoidal', 'rope' or 'none', got 'rotary'",
                       std::invalid_argument);
}

TEST_CASE("model config: operator== compares fields, and resolved configs compare what they resolve to") {
  const hr::ModelConfig a{.vocab = 10, .d_model = 32, .n_heads = 4};
  hr::ModelConfig b = a;
  CHECK(a == b);
  b.d_ff = 4 * 32;  // the default d_ff, spelled out
  CHECK(a != b);
  CHECK(a.resolved() == b.resolved());
  b.d_k = 8;  // d_model / n_heads, spelled out
  CHECK(a.resolved() == b.resolved());
  b.d_k = 4;
  CHECK(a.resolved() != b.resolved());
  hr::ModelConfig c = a;
  c.attn_scale = 1 / std::sqrt(8.0);  // the default scale for d_k = 8
  CHECK(a.resolved() == c.resolved());
  c.tie_embeddings = true;
  CHECK(a.resolved() != c.resolved());
}

TEST_CASE("resolved config: filled in once, read as a ModelConfig, and taken as is by TransformerLM") {
  const hr::ResolvedModelConfig r = hr::ModelConfig{.vocab = 10, .d_model = 32, .n_heads = 4, .max_len = 8}.resolved();
  CHECK(r->d_k == 8);
  CHECK(r.get().n_kv_heads == 4);
  const hr::ModelConfig& plain = r;
  CHECK(plain.d_ff == 128);
  CHECK(plain.resolved() == r);  // resolving a resolved config changes nothing
  hr::Rng rng(1), same(1);
  const hr::TransformerLM<float> from_resolved(r, rng);
  hr::TransformerLM<float> from_plain(hr::ModelConfig{.vocab = 10, .d_model = 32, .n_heads = 4, .max_len = 8},
                                      same);
  CHECK(from_resolved.resolved_config() == r);
  CHECK(from_plain.resolved_config() == r);
  CHECK(from_plain.config().attn_scale == r->attn_scale);

  const hr::AttentionOptions a = hr::attention_options(r);
  CHECK(a.d_model == 32);
  CHECK(a.n_heads == 4);
  CHECK(a.d_k == 8);
  CHECK(a.d_v == 8);
  CHECK(a.n_kv_heads == 4);
  CHECK(a.causal);
  CHECK(a.bias);
  CHECK(a.attn_scale == r->attn_scale);
  CHECK(from_plain.block(0).attention().options().d_k == 8);
}

TEST_CASE("heads summed: out_proj.weight is (d_model, d_v) in every block, and the loss is finite") {
  hr::Rng rng(2);
  const hr::ModelConfig cfg{.vocab = 9, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .d_v = 3,
                            .head_combine = hr::HeadCombine::sum, .max_len = 8};
  hr::TransformerLM<float> lm(cfg, rng);
  std::size_t found = 0;
  for (const auto& [name, p] : lm.named_parameters()) {
    if (name.ends_with("attn.out_proj.weight")) {
      CHECK_MESSAGE(hr::format_shape(p.shape()) == "(8, 3)", name);
      ++found;
    }
    if (name.ends_with("attn.v_proj.weight")) CHECK_MESSAGE(hr::format_shape(p.shape()) == "(6, 8)", name);
  }
  CHECK(found == 2);
  CHECK(lm.block(0).attention().options().head_combine == hr::HeadCombine::sum);
  // Against the same model with heads concatenated: each block's out_proj loses
  // d_model (H - 1) d_v weights, and nothing else changes.
  hr::ModelConfig as_concat = cfg;
  as_concat.head_combine = hr::HeadCombine::concat;
  hr::TransformerLM<float> other(as_concat, rng);
  CHECK(other.parameter_count() - lm.parameter_count() == 2u * 8 * (4 - 1) * 3);

  const hr::IndexArray tokens = random_tokens(2, 8, 9, rng);
  hr::NoGrad no_grad;
  CHECK(std::isfinite(lm.loss(tokens).value()()));
}

TEST_CASE("the language model checks its inputs") {
  hr::Rng rng(0);
  hr::TransformerLM<float> lm({.vocab = 5, .d_model = 4, .n_layers = 1, .n_heads = 2, .max_len = 4}, rng);
  CHECK_THROWS_WITH_AS(lm.forward(random_tokens(1, 5, 5, rng)),
                       "TransformerLM: sequence length 5 is not in [1, max_len=4]", std::invalid_argument);
  hr::IndexArray bad = {{0, 1, 7}};
  CHECK_THROWS_WITH_AS(lm.forward(bad),
                       "embedding: index 7 at position (0, 2) is out of range for a weight of shape (5, 4)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(lm.loss(random_tokens(1, 1, 5, rng)), "TransformerLM: loss needs tokens (B, T+1) with T >= 1, got (1, 1)",
                       std::invalid_argument);
}

TEST_CASE("Dropout: drops in training mode, is the identity in eval mode, follows its seed") {
  const hr::Tensor<float> x(xt::ones<float>({100, 100}));
  hr::Dropout<float> a({.p = 0.25, .seed = 9}), b({.p = 0.25, .seed = 9});
  const xt::xarray<float> ya = a.forward(x).value(), yb = b.forward(x).value();
  CHECK(ya == yb);  // same seed, same mask
  std::size_t dropped = 0;
  for (float v : ya) {
    CHECK((v == 0.0f || v == doctest::Approx(1.0f / 0.75f)));
    dropped += v == 0.0f ? 1 : 0;
  }
  // 10000 draws at p = 0.25: sd = sqrt(10000 * 0.25 * 0.75) ~ 43; allow 5 sd.
  CHECK(dropped > 2500 - 5 * 43);
  CHECK(dropped < 2500 + 5 * 43);
  a.eval();
  CHECK(a.forward(x).value() == x.value());
  CHECK_THROWS_WITH_AS(hr::Dropout<float>({.p = 1.0}), "Dropout: p must be in [0, 1), got 1", std::invalid_argument);
}

TEST_CASE("DropoutSeed: site s draws from stream s of the seed, goes on within one, and the innermost rules") {
  const hr::Tensor<double> x(xt::ones<double>({64}));
  const auto mask_of = [&](std::uint64_t seed, std::uint64_t site) {  // the rule, by hand
    hr::Rng rng(hr::stream_seed(seed, site));
    xt::xarray<double> y = xt::ones<double>({64});
    for (auto& v : y) v = rng.uniform() < 0.5 ? 0.0 : 2.0;
    return y;
  };
  const auto drop = [&](std::uint64_t site) { return hr::site_dropout(x, 0.5, site, true, "test").value(); };
  {
    const hr::DropoutSeed outer(3);
    CHECK(drop(1) == mask_of(3, 1));
    CHECK(drop(4) == mask_of(3, 4));
    CHECK(drop(1) != mask_of(3, 1));  // site 1's generator went on
    {
      const hr::DropoutSeed inner(8);
      CHECK(drop(1) == mask_of(8, 1));
    }
    CHECK(hr::DropoutSeed::generator(4) != nullptr);
  }
  CHECK(hr::DropoutSeed::generator(4) == nullptr);
  // Eval mode and p = 0 draw nothing and need no DropoutSeed; training at p > 0 does.
  CHECK(hr::site_dropout(x, 0.5, 1, false, "test").value() == x.value());
  CHECK(hr::site_dropout(x, 0.0, 1, true, "test").value() == x.value());
  CHECK_THROWS_WITH_AS(drop(1), doctest::Contains("test: dropout 0.5 in training mode draws its masks from a DropoutSeed"),
                       std::logic_error);
}

// ---- attn_only and norm "none" (docs/design.md #13) ----------------------------------

namespace {
std::vector<std::string> parameter_names(const hr::ModelConfig& config) {
  hr::Rng rng(1);
  const hr::TransformerLM<float> model(config, rng);
  std::vector<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.push_back(name);
  return names;
}
}  // namespace

TEST_CASE("attn_only and norm none: which tensors a model has") {
  const hr::ModelConfig base{.vocab = 5, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 4, .bias = false};
  hr::ModelConfig attn_only = base;
  attn_only.attn_only = true;
  CHECK(parameter_names(attn_only) ==
        std::vector<std::string>{"tok_emb.weight", "pos_emb.weight", "blocks.0.ln1.weight", "blocks.0.ln1.bias",
                                 "blocks.0.attn.q_proj.weight", "blocks.0.attn.k_proj.weight",
                                 "blocks.0.attn.v_proj.weight", "blocks.0.attn.out_proj.weight", "ln_f.weight",
                                 "ln_f.bias", "head.weight"});
  hr::ModelConfig bare = attn_only;
  bare.norm = hr::NormPlacement::none;
  CHECK(parameter_names(bare) ==
        std::vector<std::string>{"tok_emb.weight", "pos_emb.weight", "blocks.0.attn.q_proj.weight",
                                 "blocks.0.attn.k_proj.weight", "blocks.0.attn.v_proj.weight",
                                 "blocks.0.attn.out_proj.weight", "head.weight"});
  hr::ModelConfig no_norm = base;
  no_norm.norm = hr::NormPlacement::none;
  CHECK(parameter_names(no_norm) ==
        std::vector<std::string>{"tok_emb.weight", "pos_emb.weight", "blocks.0.attn.q_proj.weight",
                                 "blocks.0.attn.k_proj.weight", "blocks.0.attn.v_proj.weight",
                                 "blocks.0.attn.out_proj.weight", "blocks.0.ffn.fc1.weight", "blocks.0.ffn.fc2.weight",
                                 "head.weight"});
  // An attention-only config resolves with d_ff 0: there is no feed-forward width.
  CHECK(attn_only.resolved()->d_ff == 0);
}

TEST_CASE("attn_only and norm none: the block computes x + attn(x), against the parts by hand") {
  // One attention-only block without norms, and its attention layer alone: the block
  // adds the layer's output to its input and nothing else.
  hr::Rng rng(4);
  hr::TransformerBlock<double> block({.attention = {.d_model = 6, .n_heads = 2},
                                      .ffn = {},
                                      .norm = hr::NormPlacement::none,
                                      .attn_only = true},
                                     rng);
  CHECK(block.parameter_count() == hr::attention_parameter_count({.d_model = 6, .n_heads = 2}));
  hr::Rng xr(5);
  const hr::Tensor<double> x(hr::normal_init<double>({2, 3, 6}, 1.0, xr));
  hr::NoGrad no_grad;
  const xt::xarray<double> attn = block.attention().forward(x).out.value();
  const xt::xarray<double> y = block.forward(x).value();
  const xt::xarray<double> expected = x.value() + attn;
  CHECK(xt::allclose(y, expected, 0, 1e-12));
  // Post-norm attention-only: ln1(x + attn(x)), whose rows have mean 0.
  hr::Rng rng2(4);
  hr::TransformerBlock<double> post({.attention = {.d_model = 6, .n_heads = 2},
                                     .ffn = {},
                                     .norm = hr::NormPlacement::post,
                                     .attn_only = true},
                                    rng2);
  const xt::xarray<double> p = post.forward(x).value();
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t t = 0; t < 3; ++t) {
      double mean = 0;
      for (std::size_t c = 0; c < 6; ++c) mean += p(b, t, c) / 6;
      CHECK(mean == doctest::Approx(0).epsilon(1e-12));
    }
}

TEST_CASE("attn_only and norm none: a block with every part keeps its parameter order") {
  const std::vector<std::string> names =
      parameter_names({.vocab = 5, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 4, .bias = false});
  CHECK(names == std::vector<std::string>{"tok_emb.weight", "pos_emb.weight", "blocks.0.ln1.weight",
                                          "blocks.0.ln1.bias", "blocks.0.attn.q_proj.weight",
                                          "blocks.0.attn.k_proj.weight", "blocks.0.attn.v_proj.weight",
                                          "blocks.0.attn.out_proj.weight", "blocks.0.ln2.weight", "blocks.0.ln2.bias",
                                          "blocks.0.ffn.fc1.weight", "blocks.0.ffn.fc2.weight", "ln_f.weight",
                                          "ln_f.bias", "head.weight"});
}

TEST_CASE("attn_only and norm none: values the model would not read are refused (docs/design.md #11)") {
  CHECK_THROWS_WITH_AS(hr::ModelConfig({.vocab = 5, .d_ff = 32, .attn_only = true}).resolved(),
                       "model config: d_ff 32 with attn_only: an attention-only block has no feed-forward sublayer",
                       std::invalid_argument);
  // The default width, 4 d_model, which every config.json of a model with a
  // feed-forward writes, says nothing: it resolves to 0.
  CHECK(hr::ModelConfig({.vocab = 5, .d_model = 8, .d_ff = 32, .attn_only = true}).resolved()->d_ff == 0);
  CHECK_THROWS_WITH_AS(
      hr::ModelConfig({.vocab = 5, .activation = hr::Activation::relu, .attn_only = true}).resolved(),
      "model config: activation 'relu' with attn_only: an attention-only block has no feed-forward sublayer",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::ModelConfig({.vocab = 5, .norm = hr::NormPlacement::none, .ln_eps = 1e-3}).resolved(),
                       "model config: ln_eps 0.001 with norm 'none': a model without LayerNorm has no eps to use",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::parse_norm("rms"), "norm must be 'pre', 'post' or 'none', got 'rms'",
                       std::invalid_argument);
  // What headroom writes for such a model reads back as the same model.
  const hr::ModelConfig bare{.vocab = 5, .norm = hr::NormPlacement::none, .attn_only = true};
  const std::string json = hr::model_config_to_json(bare);
  CHECK(json.find("\"d_ff\": 0") != std::string::npos);
  CHECK(json.find("\"norm\": \"none\"") != std::string::npos);
  CHECK(json.find("\"attn_only\": true") != std::string::npos);
  CHECK(hr::model_config_from_json(json, "cfg.json") == bare.resolved().get());
  // A file from before attn_only existed reads as a model with a feed-forward.
  CHECK_FALSE(hr::model_config_from_json(R"({"vocab": 5})", "old.json").attn_only);
}
