// The parameter counter (nn/param_count.hpp) against the models it describes: over a
// grid of configs, each group's count equals the values a built TransformerLM
// registers under that group's names; and the seeds' own numbers, counted for models
// far too large to build.
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "nn/param_count.hpp"
#include "nn/transformer.hpp"

namespace hr = headroom;

namespace {

// The group a parameter name belongs to, as count_parameters splits them, with ".w"
// or ".b" for a weight or a bias: "blocks.1.attn.q_proj.bias" -> "1.q.b".
std::string group_of(const std::string& name) {
  const bool bias = name.size() > 5 && name.substr(name.size() - 5) == ".bias";
  const std::string wb = bias ? ".b" : ".w";
  for (const char* top : {"tok_emb", "pos_emb", "ln_f", "head"}) {
    if (name.rfind(std::string(top) + ".", 0) == 0) return top + wb;
  }
  REQUIRE_MESSAGE(name.rfind("blocks.", 0) == 0, name);
  const std::size_t dot = name.find('.', 7);
  const std::string layer = name.substr(7, dot - 7), rest = name.substr(dot + 1);
  const std::map<std::string, std::string> parts{
      {"attn.q_proj", "q"},         {"attn.k_proj", "k"},       {"attn.v_proj", "v"},
      {"attn.out_proj", "o"},       {"attn.q_norm", "qk_norm"}, {"attn.k_norm", "qk_norm"},
      {"attn.key_smear", "key_smear"}, {"ffn.fc1", "ffn"},     {"ffn.fc2", "ffn"},
      {"ffn.gate_proj", "ffn"},     {"ffn.up_proj", "ffn"},     {"ffn.down_proj", "ffn"},
      {"ln1", "norms"},             {"ln2", "norms"}};
  for (const auto& [prefix, part] : parts) {
    // attn.key_smear is a bare tensor, the others a module's .weight and .bias.
    if (rest == prefix || rest.rfind(prefix + ".", 0) == 0) return layer + "." + part + wb;
  }
  FAIL("a parameter of no group: " << name);
  return "";
}

// Every group's count as the counter gives it, zeros left out.
std::map<std::string, std::size_t> counted(const hr::ModelParams& m) {
  std::map<std::string, std::size_t> out;
  auto put = [&](const std::string& group, const hr::ParamPart& p) {
    if (p.weights != 0) out[group + ".w"] = p.weights;
    if (p.biases != 0) out[group + ".b"] = p.biases;
  };
  put("tok_emb", m.tok_emb);
  put("pos_emb", m.pos_emb);
  put("ln_f", m.ln_f);
  put("head", m.head);
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const hr::LayerParams& l = m.layers[i];
    const std::string n = std::to_string(i) + ".";
    put(n + "q", l.q);
    put(n + "k", l.k);
    put(n + "v", l.v);
    put(n + "o", l.o);
    put(n + "qk_norm", l.qk_norm);
    put(n + "key_smear", l.key_smear);
    put(n + "ffn", l.ffn);
    put(n + "norms", l.norms);
  }
  return out;
}

// The counter's groups, its total, its attention and KV-cache numbers against a model
// built from `c`.
void check_against_built(const hr::ModelConfig& c) {
  hr::Rng rng(3);
  const hr::TransformerLM<float> model(c, rng);
  std::map<std::string, std::size_t> built;
  for (const auto& [name, p] : model.named_parameters()) built[group_of(name)] += p.value().size();
  const hr::ModelParams m = hr::count_parameters(c, 9);
  const std::string what = hr::model_config_to_json(c);
  CHECK_MESSAGE(counted(m) == built, what);
  CHECK_MESSAGE(m.total() == model.parameter_count(), what);
  CHECK_MESSAGE(m.layers[0].attention() == hr::attention_parameter_count(hr::attention_options(c)), what);
  CHECK_MESSAGE(m.kv_cache_bytes_per_token == c.n_layers * 4 * hr::kv_cache_floats_per_token(hr::attention_options(c)),
                what);
}

}  // namespace

TEST_CASE("count_parameters equals a built model's parameters, group by group, over a grid of configs") {
  const hr::ModelConfig base{.vocab = 11, .d_model = 12, .n_layers = 2, .n_heads = 4, .max_len = 9};
  std::size_t cases = 0;
  for (std::size_t kv : {0, 2, 1})                      // MHA, GQA, MQA
    for (std::size_t dk : {0, 5})                       // d_model / h, or not
      for (std::size_t dv : {0, 2})                     // d_v = d_k, or not
        for (hr::HeadCombine hc : {hr::HeadCombine::concat, hr::HeadCombine::sum})
          for (hr::NormPlacement norm : {hr::NormPlacement::pre, hr::NormPlacement::post, hr::NormPlacement::none})
            for (bool attn_only : {false, true})
              for (int variant = 0; variant < 3; ++variant) {
                hr::ModelConfig c = base;
                c.n_kv_heads = kv, c.d_k = dk, c.d_v = dv, c.head_combine = hc, c.norm = norm;
                c.attn_only = attn_only;
                if (variant == 1) c.bias = false, c.tie_embeddings = true;
                if (variant == 2) c.pos = hr::PositionEncoding::sinusoidal, c.n_layers = 1, c.d_ff = attn_only ? 0 : 7;
                check_against_built(c);
                ++cases;
              }
  CHECK(cases == 3 * 2 * 2 * 2 * 3 * 2 * 3);
}

TEST_CASE("count_parameters equals a built model's parameters over the keys of docs/design.md #17") {
  // d_model 16 and 4 heads: d_k 4, even, as RoPE needs.
  const hr::ModelConfig base{.vocab = 11, .d_model = 16, .n_layers = 2, .n_heads = 4, .max_len = 9};
  using P = hr::PositionEncoding;
  std::size_t cases = 0;
  for (P pos : {P::learned, P::sinusoidal, P::rope, P::none})
    for (hr::NormType nt : {hr::NormType::layernorm, hr::NormType::rmsnorm})
      for (hr::FeedForwardType ffn : {hr::FeedForwardType::mlp, hr::FeedForwardType::swiglu})
        for (bool qk_norm : {false, true})
          for (bool key_smear : {false, true})
            for (std::size_t kv : {0, 1})  // MHA, MQA
              for (int variant = 0; variant < 3; ++variant) {
                hr::ModelConfig c = base;
                c.pos = pos, c.norm_type = nt, c.ffn = ffn, c.qk_norm = qk_norm, c.key_smear = key_smear;
                c.n_kv_heads = kv;
                const bool table = pos == P::learned || pos == P::sinusoidal;
                if (variant == 1) {
                  c.bias = false, c.tie_embeddings = true, c.norm = hr::NormPlacement::post, c.d_ff = 7;
                  c.pos_qk_only = table;
                  if (pos == P::rope) c.rope_base = 500;
                }
                if (variant == 2) {
                  // No norms (a norm type needs norms), attention-only (SwiGLU needs a feed-forward).
                  if (nt == hr::NormType::layernorm) c.norm = hr::NormPlacement::none;
                  c.attn_only = ffn == hr::FeedForwardType::mlp;
                  c.d_k = 6, c.d_v = 2, c.head_combine = hr::HeadCombine::sum, c.n_layers = 1;
                }
                check_against_built(c);
                ++cases;
              }
  CHECK(cases == 4 * 2 * 2 * 2 * 2 * 2 * 3);
}

TEST_CASE("count_parameters: RMSNorm, QK-norm, the key smear and SwiGLU by hand") {
  // d_model 12, 2 heads of d_k 6, 1 kv head, 3 layers, SwiGLU's default d_ff 8 ceil(12 / 3) = 32.
  const hr::ModelConfig c{.vocab = 10, .d_model = 12, .n_layers = 3, .n_heads = 2, .n_kv_heads = 1, .max_len = 20,
                          .pos = hr::PositionEncoding::rope, .bias = false, .norm_type = hr::NormType::rmsnorm,
                          .ffn = hr::FeedForwardType::swiglu, .qk_norm = true, .key_smear = true};
  const hr::ModelParams m = hr::count_parameters(c, 20);
  REQUIRE(m.layers.size() == 3);
  const hr::LayerParams& l = m.layers[0];
  CHECK(m.pos_emb.total() == 0);  // rope: no table
  CHECK(l.norms.weights == 2u * 12);
  CHECK(l.norms.biases == 0);
  CHECK(m.ln_f.weights == 12);
  CHECK(m.ln_f.biases == 0);
  CHECK(l.qk_norm.weights == 2u * 6);
  CHECK(l.key_smear.weights == 1);
  CHECK(l.ffn.weights == 3u * 12 * 32);
  CHECK(l.ffn.biases == 0);
  CHECK(l.attention_weights() == 12u * 12 + 12u * 6 * 2 + 12u * 12);  // q, k and v of one kv head, o
  CHECK(l.attention() == l.attention_weights() + 12 + 1);
  CHECK(m.total() == 10u * 12 + 3 * (l.attention() + 3u * 12 * 32 + 24) + 12 + 10u * 12);
  // With biases SwiGLU has three: gate_proj and up_proj (d_ff), down_proj (d_model).
  hr::ModelConfig biased = c;
  biased.bias = true;
  CHECK(hr::count_parameters(biased, 20).layers[0].ffn.biases == 32u + 32 + 12);
  // The FLOPs: 2 per weight of the three matrices; the gating and RoPE are not counted.
  hr::ModelConfig mlp = c;
  mlp.ffn = hr::FeedForwardType::mlp, mlp.d_ff = 32, mlp.pos = hr::PositionEncoding::none;
  CHECK(m.forward_flops_per_token - hr::count_parameters(mlp, 20).forward_flops_per_token ==
        doctest::Approx(2.0 * 3 * 12 * 32));
}

TEST_CASE("count_parameters: the groups an attention-only model without norms has") {
  const hr::ModelParams m = hr::count_parameters(
      {.vocab = 16, .d_model = 64, .n_layers = 1, .n_heads = 2, .max_len = 9, .norm = hr::NormPlacement::none,
       .attn_only = true},
      9);
  REQUIRE(m.layers.size() == 1);
  CHECK(m.layers[0].ffn.total() == 0);
  CHECK(m.layers[0].norms.total() == 0);
  CHECK(m.ln_f.total() == 0);
  CHECK(m.layers[0].attention() == 4u * 64 * 64 + 4u * 64);
  CHECK(m.total() == 16u * 64 + 9u * 64 + 4u * 64 * 64 + 4u * 64 + 16u * 64);
}

TEST_CASE("the seeds' numbers: MHA attention is 4 d_model^2 weights whatever the head count") {
  for (std::size_t heads : {1, 2, 4, 8, 16}) {
    const hr::ModelParams m = hr::count_parameters({.vocab = 100, .d_model = 512, .n_layers = 1, .n_heads = heads}, 128);
    CHECK_MESSAGE(m.layers[0].attention_weights() == 1'048'576u, heads << " heads");
    CHECK_MESSAGE(m.layers[0].attention() == 1'048'576u + 4u * 512, heads << " heads");
  }
}

TEST_CASE("the seeds' numbers: d_model 4096, 32 heads of d_k 128, and 8 KV heads, counted without building") {
  const hr::ModelConfig mha{.vocab = 32000, .d_model = 4096, .n_layers = 32, .n_heads = 32, .d_k = 128,
                            .max_len = 4096, .bias = false};
  const hr::ModelParams m = hr::count_parameters(mha, 4096);
  REQUIRE(m.layers.size() == 32);
  CHECK(m.layers[0].q.weights == 16'777'216u);
  CHECK(m.layers[0].attention_weights() == 67'108'864u);  // 4 * 4096^2
  CHECK(m.layers[0].ffn.weights == 2u * 4096 * 16384);
  CHECK(m.kv_cache_bytes_per_token == 32u * 32 * (128 + 128) * 4);  // 1 MiB a token
  hr::ModelConfig gqa = mha;
  gqa.n_kv_heads = 8;
  const hr::ModelParams g = hr::count_parameters(gqa, 4096);
  CHECK(g.layers[0].k.weights * 4 == m.layers[0].k.weights);
  CHECK(g.layers[0].v.weights * 4 == m.layers[0].v.weights);
  CHECK(g.layers[0].q.weights == m.layers[0].q.weights);
  CHECK(g.kv_cache_bytes_per_token * 4 == m.kv_cache_bytes_per_token);
}

TEST_CASE("count_parameters: the FLOPs per token, by hand, and how they grow with the context") {
  // 2 per weight of the projections and the head, 2 H (d_k + d_v) per key attended to.
  const hr::ModelConfig c{.vocab = 10, .d_model = 8, .n_layers = 3, .n_heads = 2, .d_ff = 16, .max_len = 64};
  const double per_layer = 4.0 * 8 * 8 + 2.0 * 8 * 16;
  const double attend = 2.0 * (4 + 4);
  const hr::ModelParams at1 = hr::count_parameters(c, 1), at64 = hr::count_parameters(c, 64);
  CHECK(at1.forward_flops_per_token == doctest::Approx(2 * (3 * (per_layer + attend) + 10.0 * 8)));
  CHECK(at64.forward_flops_per_token - at1.forward_flops_per_token == doctest::Approx(2 * 3 * attend * 63));
  hr::ModelConfig tied = c;
  tied.tie_embeddings = true;  // the head's product is made either way
  CHECK(hr::count_parameters(tied, 1).forward_flops_per_token == at1.forward_flops_per_token);
}

TEST_CASE("count_parameters refuses what resolved() refuses, and a count beyond 64 bits") {
  CHECK_THROWS_WITH_AS(hr::count_parameters({.vocab = 0}, 1), "model config: vocab must be positive, got 0",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::count_parameters({.vocab = 5, .n_heads = 8, .n_kv_heads = 3}, 1),
                       "MultiHeadAttention: n_heads=8 is not a multiple of n_kv_heads=3", std::invalid_argument);
  CHECK_THROWS_AS(hr::count_parameters({.vocab = std::size_t{1} << 40, .d_model = std::size_t{1} << 30}, 1),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::count_parameters({.vocab = 5, .n_layers = 100'001}, 1),
                       "count_parameters: n_layers 100001 is more than the 100000 layers it lists",
                       std::invalid_argument);
}
