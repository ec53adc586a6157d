// Dropout in TransformerLM (nn/transformer.hpp, nn/dropout.hpp): at 0 it draws nothing
// and changes no bit; eval mode and cached decoding drop nothing; in training every
// site drops by the rule (its own generator, stream `site` of the DropoutSeed's seed,
// zero below p, 1/(1-p) times the value above) at the rate p; a checkpoint keeps the
// key and no tensor of it; and the key is checked. The gradient check of the dropped
// model is in the module suite (nn/module_checks.cpp, test_module_gradcheck.cpp).
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "support.hpp"
#include "nn/checkpoint.hpp"
#include "nn/safetensors.hpp"
#include "nn/config_json.hpp"
#include "nn/dropout.hpp"
#include "nn/kv_cache.hpp"
#include "nn/transformer.hpp"

namespace hr = headroom;

namespace {

using hr::HookPoint;

hr::IndexArray dropout_tokens(std::size_t b, std::size_t t, std::size_t vocab, hr::Rng& rng) {
  hr::IndexArray tokens = hr::IndexArray::from_shape({b, t});
  for (auto& v : tokens) v = static_cast<hr::Index>(rng.below(vocab));
  return tokens;
}

template <typename A, typename B>
bool same_bits(const A& a, const B& b) {
  return a.shape() == b.shape() && std::equal(a.begin(), a.end(), b.begin());
}

const hr::ModelConfig kBase{.vocab = 11, .d_model = 16, .n_layers = 2, .n_heads = 2, .max_len = 8};

hr::ModelConfig with_dropout(hr::ModelConfig c, double p) {
  c.dropout = p;
  return c;
}

// Every activation a forward's hooks see, by point and layer.
template <typename T>
using Seen = std::map<std::pair<HookPoint, std::size_t>, xt::xarray<T>>;

template <typename T>
hr::ForwardHooks<T> recorder(Seen<T>& seen) {
  return {.fn =
              [&seen](HookPoint point, std::size_t layer, const hr::Tensor<T>& value) {
                seen[{point, layer}] = value.value();
                return value;
              },
          .pattern = true};
}

// Checks that `after` is `before` through site `site`'s dropout under DropoutSeed(seed):
// element i (in memory order) is dropped when the site's i-th uniform is below p, and
// `dropped(i)` / `kept(i)` say whether the element reads as such. Returns the drops.
template <typename Dropped, typename Kept>
std::size_t check_rule(std::size_t n, std::uint64_t seed, std::uint64_t site, double p, Dropped dropped, Kept kept) {
  hr::Rng rng(hr::stream_seed(seed, site));
  std::size_t drops = 0, wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool drop = rng.uniform() < p;
    drops += drop ? 1 : 0;
    if (drop ? !dropped(i) : !kept(i)) ++wrong;
  }
  CHECK_MESSAGE(wrong == 0, "site ", site, ": ", wrong, " of ", n, " elements break the rule");
  return drops;
}

}  // namespace

TEST_CASE("model dropout: at 0 nothing is drawn and no bit changes, and a config without the key reads as 0") {
  const hr::ModelConfig read = hr::model_config_from_json(
      R"({"vocab": 11, "d_model": 16, "n_layers": 2, "n_heads": 2, "max_len": 8})", "old.json");
  CHECK(read.dropout == 0.0);
  CHECK(read == kBase.resolved().get());
  CHECK(hr::model_config_keys().back() == "dropout");

  const hr::NoGrad no_grad;
  hr::Rng data(3);
  const hr::IndexArray tokens = dropout_tokens(3, 8, 11, data);
  hr::Rng init_a(7), init_b(7), init_c(7);
  hr::TransformerLM<float> plain(kBase, init_a);
  hr::TransformerLM<float> zero(with_dropout(kBase, 0.0), init_b);
  hr::TransformerLM<float> dropping(with_dropout(kBase, 0.3), init_c);
  // Dropout draws nothing when the model is made: the same seed, the same weights.
  const auto sa = plain.state_dict(), sc = dropping.state_dict();
  REQUIRE(sa.size() == sc.size());
  for (std::size_t i = 0; i < sa.size(); ++i) CHECK(same_bits(sa[i].second, sc[i].second));
  CHECK(init_a.next_u64() == init_c.next_u64());

  // In training mode, and with no DropoutSeed (a draw would throw): p = 0 is the
  // forward of eval mode, bit for bit, fused attention and all.
  REQUIRE(zero.is_training());
  const xt::xarray<float> trained = zero.forward(tokens).value();
  CHECK(same_bits(trained, plain.forward(tokens).value()));
  CHECK(zero.loss(tokens).item() == plain.loss(tokens).item());
  zero.eval();
  CHECK(same_bits(trained, zero.forward(tokens).value()));
}

TEST_CASE("model dropout: eval mode and cached decoding drop nothing, training mode drops by its seed") {
  const hr::NoGrad no_grad;
  hr::Rng data(4);
  const hr::IndexArray tokens = dropout_tokens(2, 8, 11, data);
  hr::Rng init_a(9), init_b(9);
  hr::TransformerLM<float> plain(kBase, init_a);
  hr::TransformerLM<float> model(with_dropout(kBase, 0.5), init_b);
  plain.eval();
  const xt::xarray<float> reference = plain.forward(tokens).value();

  model.eval();
  CHECK(same_bits(model.forward(tokens).value(), reference));
  CHECK(model.loss(tokens).item() == plain.loss(tokens).item());

  model.train();
  CHECK_THROWS_WITH_AS(model.forward(tokens), doctest::Contains("TransformerLM: dropout 0.5 in training mode"),
                       std::logic_error);
  const auto trained = [&](std::uint64_t seed) {
    const hr::DropoutSeed masks(seed);
    return xt::xarray<float>(model.forward(tokens).value());
  };
  const xt::xarray<float> a = trained(1);
  CHECK_FALSE(same_bits(a, reference));
  CHECK(same_bits(trained(1), a));  // the masks follow the seed
  CHECK_FALSE(same_bits(trained(2), a));
  {
    // Within one DropoutSeed each site's generator goes on: a second forward draws new masks.
    const hr::DropoutSeed masks(1);
    CHECK(same_bits(model.forward(tokens).value(), a));
    CHECK_FALSE(same_bits(model.forward(tokens).value(), a));
  }

  // Decoding from a KV cache never drops, whatever the mode.
  const auto decoded = [&](hr::TransformerLM<float>& m) {
    hr::KVCache<float> cache(m.config(), 2);
    return xt::xarray<float>(m.forward_cached(tokens, cache).value());
  };
  model.train();
  const xt::xarray<float> cached = decoded(model);
  CHECK(same_bits(cached, decoded(plain)));
  CHECK(xt::allclose(cached, reference, 1e-5, 1e-6));
}

TEST_CASE("model dropout: every site drops by the rule, from stream site of the seed, at the rate p") {
  // Two pre-norm layers with their feed-forwards: sites 0 (the input), 1, 4 (attention
  // weights), 2, 5 (attention outputs) and 3, 6 (feed-forward outputs).
  const double p = 0.25;
  const double scale = 1.0 / (1.0 - p);
  const std::uint64_t seed = 31;
  const hr::NoGrad no_grad;
  hr::Rng init(5), data(6);
  hr::TransformerLM<double> model(hr::ModelConfig{.vocab = 11, .d_model = 16, .n_layers = 2, .n_heads = 2,
                                                  .max_len = 8, .dropout = p},
                                  init);
  const hr::IndexArray tokens = dropout_tokens(8, 8, 11, data);

  Seen<double> clean, seen;
  const hr::ForwardHooks<double> clean_hooks = recorder(clean), hooks = recorder(seen);
  model.eval();
  (void)model.forward(tokens, nullptr, &clean_hooks);
  model.train();
  std::vector<hr::Tensor<double>> weights;
  {
    const hr::DropoutSeed masks(seed);
    (void)model.forward(tokens, &weights, &hooks);
  }

  // Site 0: the embeddings' sum, as eval mode sees it, into block 0.
  const xt::xarray<double>& embedded = clean.at({HookPoint::resid_pre, 0});
  const xt::xarray<double>& input = seen.at({HookPoint::resid_pre, 0});
  const double* e = embedded.data();
  const double* x = input.data();
  const std::size_t drops = check_rule(
      input.size(), seed, 0, p, [&](std::size_t i) { return x[i] == 0.0; },
      [&](std::size_t i) { return x[i] == e[i] * scale; });
  // The fraction dropped is a binomial's: within 4 standard deviations of p.
  const double n = static_cast<double>(input.size());
  const double rate = static_cast<double>(drops) / n;
  INFO("dropped " << drops << " of " << n);
  CHECK(std::abs(rate - p) <= 4 * std::sqrt(p * (1 - p) / n));

  for (std::size_t l = 0; l < 2; ++l) {
    CAPTURE(l);
    const std::uint64_t base = 3 * l;
    // The weights the forward returns are the pattern hook's after dropout.
    const xt::xarray<double>& pattern = seen.at({HookPoint::pattern, l});
    const xt::xarray<double> returned = weights[l].value();
    REQUIRE(returned.shape() == pattern.shape());
    const double* w = pattern.data();
    const double* r = returned.data();
    (void)check_rule(
        pattern.size(), seed, base + 1, p, [&](std::size_t i) { return r[i] == 0.0; },
        [&](std::size_t i) { return r[i] == w[i] * scale; });
    // The residual branches: resid_mid = resid_pre + drop(attn_out), resid_post =
    // resid_mid + drop(mlp_out); a dropped element adds an exact zero.
    const double* in = seen.at({HookPoint::resid_pre, l}).data();
    const double* attn = seen.at({HookPoint::attn_out, l}).data();
    const double* mid = seen.at({HookPoint::resid_mid, l}).data();
    const double* mlp = seen.at({HookPoint::mlp_out, l}).data();
    const double* post = seen.at({HookPoint::resid_post, l}).data();
    const std::size_t btc = input.size();
    (void)check_rule(
        btc, seed, base + 2, p, [&](std::size_t i) { return mid[i] == in[i]; },
        [&](std::size_t i) { return mid[i] == in[i] + attn[i] * scale; });
    (void)check_rule(
        btc, seed, base + 3, p, [&](std::size_t i) { return post[i] == mid[i]; },
        [&](std::size_t i) { return post[i] == mid[i] + mlp[i] * scale; });
  }
}

TEST_CASE("model dropout: a checkpoint records the key and holds the same tensors as one without it") {
  const TempDir dir("model_dropout");
  hr::Rng init_a(2), init_b(2);
  hr::TransformerLM<float> plain(kBase, init_a);
  hr::TransformerLM<float> model(with_dropout(kBase, 0.2), init_b);
  hr::save_checkpoint(dir.path() / "plain.safetensors", plain, kBase);
  hr::save_checkpoint(dir.path() / "dropout.safetensors", model, with_dropout(kBase, 0.2));
  const hr::SafetensorsFile a = hr::read_safetensors(dir.path() / "plain.safetensors");
  const hr::SafetensorsFile b = hr::read_safetensors(dir.path() / "dropout.safetensors");
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    CAPTURE(a.tensors[i].name);
    CHECK(a.tensors[i].name == b.tensors[i].name);
    CHECK(a.tensors[i].shape == b.tensors[i].shape);
    CHECK(a.tensors[i].data == b.tensors[i].data);
  }
  const hr::LoadedModel<float> loaded = hr::load_model<float>(dir.path() / "dropout.safetensors");
  CHECK(loaded.config.dropout == 0.2);
  CHECK(loaded.model->config().dropout == 0.2);
  CHECK(hr::load_model<float>(dir.path() / "plain.safetensors").config.dropout == 0.0);
}

TEST_CASE("model dropout: a probability of 1 or more, or below 0, is refused with the key and the value") {
  for (const double p : {1.0, -0.1, 1.5, std::nan("")}) {
    CAPTURE(p);
    CHECK_THROWS_WITH_AS(with_dropout(kBase, p).resolved(),
                         fmt::format("model config: dropout must be in [0, 1), got {}", p).c_str(),
                         std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "dropout": 1})", "c.json"),
                       "c.json: model config: dropout must be in [0, 1), got 1", std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::model_config_from_json(R"({"vocab": 5, "dropout": "0.1"})", "c.json"),
                       doctest::Contains("'dropout' must be a number"), std::invalid_argument);
}
