// Incremental decoding with a KV cache (docs/design.md #18) against the full
// re-run it replaces: at every step, the logits from the cache equal those of a
// forward pass over the whole context so far, to float rounding in float and to
// 1e-12 in double, for MHA, GQA and MQA, pre-, post- and no norm, every position
// scheme and every block key, prompts of length 1 and max_len - 1, and a batch of
// prompts of different lengths decoded together. Greedy decoding gives the same ids.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "support.hpp"
#include "nn/generate.hpp"
#include "nn/kv_cache.hpp"
#include "nn/transformer.hpp"

namespace hr = headroom;

namespace {

using hr::FeedForwardType, hr::HeadCombine, hr::NormPlacement, hr::NormType, hr::PositionEncoding;

// Every parameter drawn afresh at a scale where each one shows in the output (at
// the 0.02 init every logit is near 0 and any two paths agree trivially).
template <typename T>
void scramble(hr::TransformerLM<T>& model, std::uint64_t seed) {
  hr::Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) p.mutable_value() = hr::normal_init<T>(p.shape(), 0.4, rng);
}

struct Case {
  std::string name;
  hr::ModelConfig config;
};

hr::ModelConfig base() {
  return {.vocab = 11, .d_model = 16, .n_layers = 2, .n_heads = 4, .max_len = 10};
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const auto add = [&](const std::string& name, auto edit) {
    hr::ModelConfig c = base();
    edit(c);
    out.push_back({name, c});
  };
  add("MHA, learned, pre-norm", [](hr::ModelConfig&) {});
  add("GQA kv 2, sinusoidal, post-norm", [](hr::ModelConfig& c) {
    c.n_kv_heads = 2;
    c.pos = PositionEncoding::sinusoidal;
    c.norm = NormPlacement::post;
  });
  add("MQA, rope, rmsnorm, swiglu, no bias (llama-style)", [](hr::ModelConfig& c) {
    c.n_kv_heads = 1;
    c.pos = PositionEncoding::rope;
    c.norm_type = NormType::rmsnorm;
    c.ffn = FeedForwardType::swiglu;
    c.bias = false;
  });
  add("GQA kv 2, no positions, no norm", [](hr::ModelConfig& c) {
    c.n_kv_heads = 2;
    c.pos = PositionEncoding::none;
    c.norm = NormPlacement::none;
  });
  add("MHA, rope, qk_norm, key_smear, post-norm", [](hr::ModelConfig& c) {
    c.pos = PositionEncoding::rope;
    c.qk_norm = true;
    c.key_smear = true;
    c.norm = NormPlacement::post;
  });
  add("GQA kv 2, learned pos_qk_only, key_smear, attn_only", [](hr::ModelConfig& c) {
    c.n_kv_heads = 2;
    c.pos_qk_only = true;
    c.key_smear = true;
    c.attn_only = true;
  });
  add("MQA, sinusoidal pos_qk_only, head_combine sum, d_k 6, d_v 3, tied", [](hr::ModelConfig& c) {
    c.n_kv_heads = 1;
    c.pos = PositionEncoding::sinusoidal;
    c.pos_qk_only = true;
    c.head_combine = HeadCombine::sum;
    c.d_k = 6;
    c.d_v = 3;
    c.tie_embeddings = true;
  });
  return out;
}

// Row b's tokens: S of them, drawn from the seed.
std::vector<std::vector<hr::Index>> sequences(std::size_t rows, std::size_t S, std::size_t vocab, std::uint64_t seed) {
  hr::Rng rng(seed);
  std::vector<std::vector<hr::Index>> out(rows);
  for (auto& row : out) {
    for (std::size_t t = 0; t < S; ++t) row.push_back(static_cast<hr::Index>(rng.below(vocab)));
  }
  return out;
}

hr::IndexArray as_array(const std::vector<hr::Index>& ids, std::size_t from, std::size_t to) {
  hr::IndexArray a = hr::IndexArray::from_shape({std::size_t{1}, to - from});
  std::copy(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.begin() + static_cast<std::ptrdiff_t>(to), a.begin());
  return a;
}

// The largest |a - b| over one row of logits, and the largest |b|.
template <typename T>
std::pair<double, double> row_gap(const T* a, const T* b, std::size_t V) {
  double gap = 0, scale = 0;
  for (std::size_t v = 0; v < V; ++v) {
    gap = std::max(gap, std::abs(static_cast<double>(a[v]) - static_cast<double>(b[v])));
    scale = std::max(scale, std::abs(static_cast<double>(b[v])));
  }
  return {gap, scale};
}

// Decodes rows of the given prompt lengths (one row each) to the end of max_len
// with the cache: each prompt alone, then every row one token per step together,
// and compares every new row of logits with the full re-run's last row on the same
// context. Returns the worst gap relative to max(1, |logit|).
template <typename T>
double worst_cached_gap(const hr::ModelConfig& config, const std::vector<std::size_t>& prompt_lengths) {
  hr::Rng rng(3);
  hr::TransformerLM<T> model(config, rng);
  scramble(model, 5);
  model.eval();
  hr::NoGrad no_grad;
  const std::size_t S = config.max_len, B = prompt_lengths.size(), V = config.vocab;
  const auto seqs = sequences(B, S, V, 7);
  const auto full_last = [&](std::size_t b, std::size_t end) {  // (V) the re-run's logits at end - 1
    const hr::Tensor<T> logits = model.forward(as_array(seqs[b], 0, end));
    return std::vector<T>(logits.value().data() + (end - 1) * V, logits.value().data() + end * V);
  };
  double worst = 0;
  const auto compare = [&](const T* cached, std::size_t b, std::size_t end) {
    const std::vector<T> full = full_last(b, end);
    const auto [gap, scale] = row_gap(cached, full.data(), V);
    worst = std::max(worst, gap / std::max(1.0, scale));
  };
  hr::KVCache<T> cache(config, B);
  for (std::size_t b = 0; b < B; ++b) {
    const std::size_t P = prompt_lengths[b];
    const hr::Tensor<T> logits = model.forward_cached(as_array(seqs[b], 0, P), cache, b);  // (1, P, V)
    REQUIRE(logits.shape() == hr::Shape{1, P, V});
    for (std::size_t t = 0; t < P; ++t) compare(logits.value().data() + t * V, b, t + 1);  // the prefill's rows too
    CHECK(cache.length(b) == P);
  }
  // Then one token per row per step, every row in one call, until the longest row fills the cache.
  const std::size_t longest = *std::max_element(prompt_lengths.begin(), prompt_lengths.end());
  for (std::size_t step = 0; longest + step < S; ++step) {
    hr::IndexArray next = hr::IndexArray::from_shape({B, std::size_t{1}});
    for (std::size_t b = 0; b < B; ++b) next(b, 0) = seqs[b][prompt_lengths[b] + step];
    const hr::Tensor<T> logits = model.forward_cached(next, cache);  // (B, 1, V)
    for (std::size_t b = 0; b < B; ++b) compare(logits.value().data() + b * V, b, prompt_lengths[b] + step + 1);
  }
  return worst;
}

}  // namespace

TEST_CASE("kv cache: cached logits equal the full re-run's at every step, in double to 1e-12") {
  for (const Case& c : cases()) {
    for (const std::vector<std::size_t>& lengths :
         {std::vector<std::size_t>{1}, std::vector<std::size_t>{c.config.max_len - 1},
          std::vector<std::size_t>{1, 4, c.config.max_len - 1}}) {
      INFO(c.name, ", prompt lengths ", fmt::format("{}", fmt::join(lengths, " ")));
      CHECK(worst_cached_gap<double>(c.config, lengths) < 1e-12);
    }
  }
}

TEST_CASE("kv cache: cached logits equal the full re-run's at every step, in float to rounding") {
  for (const Case& c : cases()) {
    for (const std::vector<std::size_t>& lengths :
         {std::vector<std::size_t>{1}, std::vector<std::size_t>{c.config.max_len - 1},
          std::vector<std::size_t>{1, 4, c.config.max_len - 1}}) {
      INFO(c.name, ", prompt lengths ", fmt::format("{}", fmt::join(lengths, " ")));
      // Float's epsilon is 1.2e-7; a few hundred roundings through two layers stay
      // well within 50 of them.
      CHECK(worst_cached_gap<float>(c.config, lengths) < 5e-6);
    }
  }
}

TEST_CASE("kv cache: a head gated out is gated out of the cached path too") {
  hr::ModelConfig config = base();
  config.n_kv_heads = 2;
  hr::Rng rng(3);
  hr::TransformerLM<double> model(config, rng);
  scramble(model, 5);
  model.eval();
  hr::NoGrad no_grad;
  model.block(1).attention().set_head_gate(hr::Tensor<double>(xt::xarray<double>{1.0, 0.0, 1.0, 0.5}));
  const auto seq = sequences(1, config.max_len, config.vocab, 9)[0];
  const hr::Tensor<double> full = model.forward(as_array(seq, 0, seq.size()));
  hr::KVCache<double> cache(config, 1);
  model.forward_cached(as_array(seq, 0, 3), cache);
  for (std::size_t t = 3; t < seq.size(); ++t) {
    const hr::Tensor<double> step = model.forward_cached(as_array(seq, t, t + 1), cache);
    const auto [gap, scale] = row_gap(step.value().data(), full.value().data() + t * config.vocab, config.vocab);
    CHECK(gap < 1e-12 * std::max(1.0, scale));
  }
}

TEST_CASE("kv cache: greedy decoding gives the same ids with and without the cache, past max_len too") {
  for (const Case& c : cases()) {
    INFO(c.name);
    hr::Rng rng(3);
    hr::TransformerLM<float> model(c.config, rng);
    scramble(model, 11);
    const std::vector<hr::Index> prompt{1, 2, 3};
    const hr::SamplingOptions greedy{.greedy = true};
    hr::Rng draws(0);
    // 2 max_len tokens: the window moves, and both paths read the same cropped context.
    const std::size_t n = 2 * c.config.max_len;
    const auto cached = hr::generate(model, prompt, n, greedy, draws, {}, hr::Decode::cached);
    const auto full = hr::generate(model, prompt, n, greedy, draws, {}, hr::Decode::full);
    CHECK(cached == full);
    CHECK(cached.size() == n);
  }
}

TEST_CASE("kv cache: generate_batch decodes each prompt as generate does alone") {
  hr::ModelConfig config = base();
  config.n_kv_heads = 2;
  config.pos = PositionEncoding::rope;
  hr::Rng rng(3);
  hr::TransformerLM<float> model(config, rng);
  scramble(model, 13);
  const std::vector<std::vector<hr::Index>> prompts{{4}, {1, 2, 3, 4, 5}, {7, 7}};
  const hr::SamplingOptions greedy{.greedy = true};
  hr::Rng draws(0);
  std::vector<std::pair<std::size_t, hr::Index>> streamed;
  const auto batch = hr::generate_batch(model, prompts, 5, greedy, draws,
                                        [&](std::size_t row, hr::Index id) { streamed.emplace_back(row, id); });
  REQUIRE(batch.size() == prompts.size());
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    CHECK(batch[b] == hr::generate(model, prompts[b], 5, greedy, draws, {}, hr::Decode::full));
  }
  REQUIRE(streamed.size() == 15);
  CHECK(streamed[0] == std::pair<std::size_t, hr::Index>{0, batch[0][0]});
  CHECK(streamed[4] == std::pair<std::size_t, hr::Index>{1, batch[1][1]});  // step by step, rows in order
  CHECK(error_of([&] { hr::generate_batch(model, prompts, 6, greedy, draws); }) ==
        "generate_batch: the longest prompt (5 tokens) and 6 new ones do not fit in max_len 10");
}

TEST_CASE("kv cache: bytes follow n_layers G (d_k + d_v), so MQA holds 1/h of MHA") {
  hr::ModelConfig mha = base();
  mha.n_heads = 8;
  mha.d_model = 32;
  hr::ModelConfig gqa = mha, mqa = mha;
  gqa.n_kv_heads = 2;
  mqa.n_kv_heads = 1;
  CHECK(hr::KVCache<float>::bytes_per_token(mha) == 2 * 8 * (4 + 4) * 4);
  CHECK(hr::KVCache<float>::bytes_per_token(mha) == 8 * hr::KVCache<float>::bytes_per_token(mqa));
  CHECK(hr::KVCache<float>::bytes_per_token(mha) == 4 * hr::KVCache<float>::bytes_per_token(gqa));
  const hr::KVCache<float> cache(mqa, 3);
  CHECK(cache.bytes() == 3 * mqa.max_len * hr::KVCache<float>::bytes_per_token(mqa));
  CHECK(hr::KVCache<double>::bytes_per_token(mqa) == 2 * hr::KVCache<float>::bytes_per_token(mqa));
}

TEST_CASE("kv cache: refusals name the value") {
  hr::ModelConfig config = base();
  CHECK(error_of([&] { hr::KVCache<float>(config, 0); }) == "KV cache: batch must be at least 1, got 0");
  CHECK(error_of([&] { hr::KVCache<float>(config, 1, 11); }) ==
        "KV cache: capacity 11 is above the model's max_len 10 (positions end there)");
  hr::ModelConfig bidirectional = config;
  bidirectional.causal = false;
  CHECK(error_of([&] { hr::KVCache<float>(bidirectional, 1); }).starts_with("KV cache: the model is not causal"));
  hr::Rng rng(1);
  hr::TransformerLM<float> model(config, rng);
  hr::KVCache<float> cache(config, 2, 4);
  model.forward_cached(as_array({1, 2, 3}, 0, 3), cache, 1);
  CHECK(error_of([&] { model.forward_cached(as_array({1, 2}, 0, 2), cache, 1); }) ==
        "KV cache: row 1 holds 3 tokens of 4; 2 more do not fit");
  CHECK(cache.length(1) == 3);  // a refused call changes nothing
  CHECK(cache.length(0) == 0);
  hr::ModelConfig other = config;
  other.n_layers = 3;
  hr::KVCache<float> wrong(other, 1);
  CHECK(error_of([&] { model.forward_cached(as_array({1}, 0, 1), wrong); }) ==
        "TransformerLM: a KV cache of 3 layers and 1 rows cannot take rows [0, 1) of this 2-layer model");
}
