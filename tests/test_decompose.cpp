// The residual decomposition and direct logit attribution (interp/decompose.hpp,
// docs/design.md #21): in double, for every model variant headroom trains, with
// every weight scrambled so that no part is trivially small, the parts sum to the
// unembedding input and their logits to the model's; a head's part is the logit
// change its removal through the head gate causes where nothing reads it later.
#include <cmath>
#include <random>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "autograd/random.hpp"
#include "interp/decompose.hpp"
#include "nn/hooks.hpp"
#include "support.hpp"

namespace hr = headroom;

namespace {

// Every parameter uniform in [-0.7, 0.7); norm weights in [0.5, 1.5), so that the
// frozen scales and the norm biases all matter.
void scramble(hr::TransformerLM<double>& model, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-0.7, 0.7);
  for (auto& [name, p] : model.named_parameters()) {
    const bool norm_weight = name.find("norm.weight") != std::string::npos ||
                             name.find("ln1.weight") != std::string::npos ||
                             name.find("ln2.weight") != std::string::npos || name == "ln_f.weight";
    for (double& v : p.mutable_value()) v = norm_weight ? 1.0 + u(gen) / 1.4 : u(gen);
  }
}

hr::IndexArray row_of(std::size_t T, std::size_t vocab, unsigned seed) {
  std::mt19937 gen(seed);
  hr::IndexArray row = hr::IndexArray::from_shape({1, T});
  for (std::size_t t = 0; t < T; ++t) row(0, t) = static_cast<hr::Index>(gen() % vocab);
  return row;
}

hr::ModelConfig base() {
  return hr::ModelConfig{.vocab = 11, .d_model = 12, .n_layers = 2, .n_heads = 3, .max_len = 8};
}

struct Variant {
  std::string name;
  hr::ModelConfig config;
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  const auto add = [&](std::string name, auto edit) {
    hr::ModelConfig c = base();
    edit(c);
    out.push_back({std::move(name), c});
  };
  add("pre-norm", [](hr::ModelConfig&) {});
  add("post-norm", [](hr::ModelConfig& c) { c.norm = hr::NormPlacement::post; });
  add("no norm", [](hr::ModelConfig& c) { c.norm = hr::NormPlacement::none; });
  add("attn_only", [](hr::ModelConfig& c) { c.attn_only = true; });
  add("attn_only post-norm", [](hr::ModelConfig& c) { c.attn_only = true; c.norm = hr::NormPlacement::post; });
  add("rmsnorm", [](hr::ModelConfig& c) { c.norm_type = hr::NormType::rmsnorm; });
  add("rmsnorm post-norm", [](hr::ModelConfig& c) { c.norm_type = hr::NormType::rmsnorm; c.norm = hr::NormPlacement::post; });
  add("head_combine sum", [](hr::ModelConfig& c) { c.head_combine = hr::HeadCombine::sum; });
  add("GQA", [](hr::ModelConfig& c) { c.n_heads = 4; c.n_kv_heads = 2; c.d_k = 3; c.d_v = 5; });
  add("tied embeddings", [](hr::ModelConfig& c) { c.tie_embeddings = true; });
  add("pos_qk_only", [](hr::ModelConfig& c) { c.pos_qk_only = true; });
  add("sinusoidal", [](hr::ModelConfig& c) { c.pos = hr::PositionEncoding::sinusoidal; });
  add("rope qk_norm key_smear", [](hr::ModelConfig& c) {
    c.pos = hr::PositionEncoding::rope; c.d_k = 4; c.qk_norm = true; c.key_smear = true;
  });
  add("no bias swiglu", [](hr::ModelConfig& c) { c.bias = false; c.ffn = hr::FeedForwardType::swiglu; });
  return out;
}

}  // namespace

TEST_CASE("decompose: the parts sum to the unembedding input and their logits to the model's, in every variant") {
  unsigned seed = 1;
  for (const Variant& v : variants()) {
    CAPTURE(v.name);
    hr::Rng rng(seed);
    hr::TransformerLM<double> model(v.config, rng);
    scramble(model, seed);
    const hr::ModelConfig& c = model.config();
    const hr::IndexArray row = row_of(6, c.vocab, seed++);
    // The unembedding input at every position, from the final hook.
    xt::xarray<double> final_input;
    hr::ForwardHooks<double> hooks;
    hooks.fn = [&](hr::HookPoint point, std::size_t, const hr::Tensor<double>& value) {
      if (point == hr::HookPoint::final) final_input = value.value();
      return value;
    };
    {
      hr::NoGrad no_grad;
      model.forward(row, nullptr, &hooks);
    }
    for (const std::size_t p : {std::size_t{5}, std::size_t{2}}) {
      CAPTURE(p);
      const auto d = hr::decompose_residual(model, row, p == 5 ? std::nullopt : std::optional<std::size_t>(p));
      CHECK(d.position == p);
      const std::size_t N = d.parts.size();
      REQUIRE(d.vectors.shape()[0] == N);
      // Every head is a part, and none is trivially small.
      std::size_t heads = 0;
      for (std::size_t i = 0; i < N; ++i) {
        if (d.parts[i].kind != hr::PartKind::head) continue;
        ++heads;
        double largest = 0;
        for (std::size_t k = 0; k < c.vocab; ++k) largest = std::max(largest, std::abs(d.logits(i, k)));
        CHECK_MESSAGE(largest > 1e-3, d.parts[i].name);
      }
      CHECK(heads == c.n_layers * c.n_heads);
      for (std::size_t ch = 0; ch < c.d_model; ++ch) {
        double sum = 0;
        for (std::size_t i = 0; i < N; ++i) sum += d.vectors(i, ch);
        CHECK(sum == doctest::Approx(final_input(0, p, ch)).epsilon(1e-12).scale(1.0));
      }
      double largest_logit = 0;
      for (std::size_t k = 0; k < c.vocab; ++k) {
        double sum = 0;
        for (std::size_t i = 0; i < N; ++i) sum += d.logits(i, k);
        CHECK(std::abs(sum - d.model_logits(k)) < 1e-11);
        largest_logit = std::max(largest_logit, std::abs(d.model_logits(k)));
      }
      CHECK(largest_logit > 0.1);
      // The attribution of a logit difference sums to the model's difference.
      const auto dla = hr::direct_logit_attribution(d, 3, std::size_t{7});
      double total = 0;
      for (double x : dla) total += x;
      CHECK(std::abs(total - (d.model_logits(3) - d.model_logits(7))) < 1e-11);
    }
  }
}

TEST_CASE("decompose: the parts of each model variant are the ones the header lists") {
  hr::ModelConfig c = base();
  c.norm = hr::NormPlacement::post;
  hr::Rng rng(4);
  hr::TransformerLM<double> post(c, rng);
  const auto d = hr::decompose_residual(post, row_of(4, 11, 2));
  std::vector<std::string> names;
  for (const auto& part : d.parts) names.push_back(part.name);
  const std::vector<std::string> expected{"embed", "pos_embed", "L0H0", "L0H1", "L0H2", "L0.attn_bias", "L0.ln1_bias",
                                          "L0.mlp", "L0.ln2_bias", "L1H0", "L1H1", "L1H2", "L1.attn_bias", "L1.ln1_bias",
                                          "L1.mlp", "L1.ln2_bias", "ln_f_bias"};
  CHECK(names == expected);
  c = base();
  c.norm = hr::NormPlacement::none;
  c.attn_only = true;
  c.pos_qk_only = true;
  c.bias = false;
  hr::TransformerLM<double> bare(c, rng);
  names.clear();
  for (const auto& part : hr::decompose_residual(bare, row_of(4, 11, 2)).parts) names.push_back(part.name);
  CHECK(names == std::vector<std::string>{"embed", "L0H0", "L0H1", "L0H2", "L1H0", "L1H1", "L1H2"});
}

TEST_CASE("decompose: in the last layer of a no-norm attention-only model a head's part is the logit change of gating it out") {
  for (const bool sum_heads : {false, true}) {
    CAPTURE(sum_heads);
    hr::ModelConfig c = base();
    c.norm = hr::NormPlacement::none;
    c.attn_only = true;  // no MLP after the heads, to read them
    c.n_heads = 4;
    c.n_kv_heads = 2;
    if (sum_heads) c.head_combine = hr::HeadCombine::sum;
    hr::Rng rng(9);
    hr::TransformerLM<double> model(c, rng);
    scramble(model, 9);
    const hr::IndexArray row = row_of(5, 11, 3);
    const auto d = hr::decompose_residual(model, row);
    const std::size_t L = model.n_layers();
    for (std::size_t h = 0; h < 4; ++h) {
      xt::xarray<double> gate = xt::ones<double>({std::size_t{4}});
      gate(h) = 0;
      model.block(L - 1).attention().set_head_gate(hr::Tensor<double>(gate));
      xt::xarray<double> removed;
      {
        hr::NoGrad no_grad;
        removed = model.forward(row).value();
      }
      model.block(L - 1).attention().clear_head_gate();
      std::size_t part = 0;
      while (d.parts[part].name != fmt::format("L{}H{}", L - 1, h)) ++part;
      for (std::size_t k = 0; k < 11; ++k) {
        CHECK(d.model_logits(k) - removed(0, 4, k) == doctest::Approx(d.logits(part, k)).epsilon(1e-10));
      }
    }
  }
}

TEST_CASE("decompose: a bad position, token or answer is refused with its value") {
  hr::Rng rng(1);
  hr::TransformerLM<double> model(base(), rng);
  const hr::IndexArray row = row_of(4, 11, 1);
  CHECK(error_of([&] { hr::decompose_residual(model, row, std::size_t{4}); }) ==
        "decompose_residual: position 4 is outside the input [0, 4)");
  hr::IndexArray bad = row;
  bad(0, 2) = 11;
  CHECK(error_of([&] { hr::decompose_residual(model, bad); }) ==
        "decompose_residual: token 11 at position 2 is outside the vocabulary [0, 11)");
  const auto d = hr::decompose_residual(model, row);
  CHECK(error_of([&] { hr::direct_logit_attribution(d, 11); }) ==
        "direct_logit_attribution: answer 11 is outside the vocabulary [0, 11)");
  CHECK(error_of([&] { hr::direct_logit_attribution(d, 1, std::size_t{20}); }) ==
        "direct_logit_attribution: wrong answer 20 is outside the vocabulary [0, 11)");
}
