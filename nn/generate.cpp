#include "nn/generate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace headroom {

void check_sampling_options(const SamplingOptions& options, std::size_t vocab) {
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature)) {
    throw std::invalid_argument(
        fmt::format("sample: temperature must be a finite number >= 0, got {}", options.temperature));
  }
  // A subnormal temperature has lost its precision, and logits / temperature
  // overflows for any logit above about 1e-300: 0 (greedy) says what it would mean.
  if (options.temperature > 0 && options.temperature < std::numeric_limits<double>::min()) {
    throw std::invalid_argument(fmt::format(
        "sample: temperature {} is subnormal (below {}); use 0 for greedy decoding", options.temperature,
        std::numeric_limits<double>::min()));
  }
  if (options.top_k > vocab) {
    throw std::invalid_argument(fmt::format("sample: top_k {} is larger than the vocabulary ({})", options.top_k, vocab));
  }
  if (!(options.top_p > 0 && options.top_p <= 1)) {
    // fmt writes NaN as "-nan" for some bit patterns; the message says "nan".
    const std::string value = std::isnan(options.top_p) ? "nan" : fmt::format("{}", options.top_p);
    throw std::invalid_argument(fmt::format("sample: top_p must be in (0, 1], got {}", value));
  }
}

namespace {

// The ids of the top_k largest logits (all when top_k is 0 or at least V), in id
// order; ties keep the lower id, so top_k = 1 picks what greedy picks.
std::vector<std::size_t> top_k_ids(std::span<const float> logits, std::size_t top_k) {
  std::vector<std::size_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), std::size_t{0});
  if (top_k > 0 && top_k < ids.size()) {
    const auto k = static_cast<std::ptrdiff_t>(top_k);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](std::size_t a, std::size_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    ids.resize(top_k);
    std::sort(ids.begin(), ids.end());  // id order, so the draw does not depend on the sort
  }
  return ids;
}

// Cuts `c` to its nucleus: the fewest most likely candidates (ties: the lower id)
// whose weights sum to at least top_p of the total, kept in id order.
void keep_nucleus(Candidates& c, double top_p) {
  if (top_p >= 1) return;
  std::vector<std::size_t> order(c.ids.size());  // positions in c, most likely first
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Stable: equal weights stay in id order.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return c.weights[a] > c.weights[b]; });
  const double total = std::accumulate(c.weights.begin(), c.weights.end(), 0.0);
  // A sum that equals top_p but for rounding reaches it.
  const double target = top_p * total * (1 - 1e-12);
  std::size_t kept = 0;
  double cumulative = 0;
  while (kept < order.size() && (kept == 0 || cumulative < target)) cumulative += c.weights[order[kept++]];
  order.resize(kept);
  std::sort(order.begin(), order.end());
  Candidates nucleus;
  for (const std::size_t j : order) {
    nucleus.ids.push_back(c.ids[j]);
    nucleus.weights.push_back(c.weights[j]);
  }
  c = std::move(nucleus);
}

void check_finite(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("sample: no logits");
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      const std::string value = std::isnan(logits[i]) ? "nan" : fmt::format("{}", logits[i]);
      throw std::invalid_argument(fmt::format("sample: the model's logit for token {} is {}", i, value));
    }
  }
}

}  // namespace

Candidates sampling_candidates(std::span<const float> logits, const SamplingOptions& options) {
  check_finite(logits);
  Candidates c;
  c.ids = top_k_ids(logits, options.top_k);
  // softmax(z / temperature) over the candidates, max-subtracted, in double.
  double max_z = -INFINITY;
  for (const std::size_t i : c.ids) {
    const double z = static_cast<double>(logits[i]) / options.temperature;
    if (!std::isfinite(z)) {
      throw std::invalid_argument(fmt::format(
          "sample: temperature {} is too small for the model's logits (token {}'s logit {} / {} overflows); use 0 for "
          "greedy decoding",
          options.temperature, i, logits[i], options.temperature));
    }
    max_z = std::max(max_z, z);
  }
  c.weights.resize(c.ids.size());
  for (std::size_t j = 0; j < c.ids.size(); ++j) {
    c.weights[j] = std::exp(static_cast<double>(logits[c.ids[j]]) / options.temperature - max_z);
  }
  keep_nucleus(c, options.top_p);
  return c;
}

Index sample_token(std::span<const float> logits, const SamplingOptions& options, Rng& rng) {
  if (options.greedy || options.temperature == 0) {
    check_finite(logits);
    return static_cast<Index>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const Candidates c = sampling_candidates(logits, options);
  const double total = std::accumulate(c.weights.begin(), c.weights.end(), 0.0);
  const double u = rng.uniform() * total;
  double cumulative = 0;
  for (std::size_t j = 0; j < c.ids.size(); ++j) {
    cumulative += c.weights[j];
    if (u < cumulative) return static_cast<Index>(c.ids[j]);
  }
  // Rounding can leave u just above the last partial sum: the last candidate with
  // any weight.
  for (std::size_t j = c.ids.size(); j-- > 0;) {
    if (c.weights[j] > 0) return static_cast<Index>(c.ids[j]);
  }
  return static_cast<Index>(c.ids.back());
}

namespace {

// `what` names the prompt: "prompt" or "prompt 2".
void check_prompt(std::span<const Index> prompt, std::size_t vocab, const std::string& what) {
  if (prompt.empty()) {
    throw std::invalid_argument(fmt::format("generate: the {} is empty (it needs at least one token)", what));
  }
  for (const Index id : prompt) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab) {
      throw std::invalid_argument(
          fmt::format("generate: {} token {} is outside the vocabulary [0, {})", what, id, vocab));
    }
  }
}

// Eval mode (no dropout) for the whole generation; the caller's mode comes back
// even when a forward pass throws.
struct EvalMode {
  explicit EvalMode(TransformerLM<float>& m) : model(m), training(m.is_training()) { model.eval(); }
  ~EvalMode() { model.train(training); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;
  TransformerLM<float>& model;
  bool training;
};

IndexArray row_of(std::span<const Index> ids) {
  IndexArray a = IndexArray::from_shape({std::size_t{1}, ids.size()});
  std::copy(ids.begin(), ids.end(), a.begin());
  return a;
}

}  // namespace

std::vector<Index> generate(TransformerLM<float>& model, std::span<const Index> prompt, std::size_t tokens,
                            const SamplingOptions& options, Rng& rng, const TokenCallback& on_token, Decode decode) {
  const ModelConfig& config = model.config();
  check_prompt(prompt, config.vocab, "prompt");
  check_sampling_options(options, config.vocab);

  NoGrad no_grad;
  EvalMode eval_mode(model);
  // A non-causal model's earlier outputs change with every new token: nothing to cache.
  const bool cached = decode == Decode::cached && config.causal;
  std::optional<KVCache<float>> cache;
  if (cached && tokens > 0) cache.emplace(config, 1);
  std::vector<Index> sequence(prompt.begin(), prompt.end());
  std::vector<Index> out;
  out.reserve(std::min<std::size_t>(tokens, 1 << 16));  // --tokens may be huge; we grow as we go
  for (std::size_t n = 0; n < tokens; ++n) {
    // The model reads at most max_len tokens: the most recent ones.
    const std::size_t L = std::min(sequence.size(), config.max_len);
    const std::span<const Index> context(sequence.data() + sequence.size() - L, L);
    Tensor<float> logits;
    if (!cached) {
      logits = model.forward(row_of(context));  // (1, L, V)
    } else {
      // The cache holds sequence[0, held); the window moves once the sequence
      // passes max_len, and then every position with it: read the window afresh.
      const std::size_t held = cache->length(0);
      if (sequence.size() > config.max_len || held == 0 || held + 1 != sequence.size()) {
        cache->clear();
        logits = model.forward_cached(row_of(context), *cache);
      } else {
        logits = model.forward_cached(row_of(context.last(1)), *cache);
      }
    }
    const std::size_t V = logits.shape()[2], rows = logits.shape()[1];
    const float* last = logits.value().data() + (rows - 1) * V;
    const Index next = sample_token(std::span<const float>(last, V), options, rng);
    sequence.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
  }
  return out;
}

std::vector<std::vector<Index>> generate_batch(TransformerLM<float>& model,
                                               const std::vector<std::vector<Index>>& prompts, std::size_t tokens,
                                               const SamplingOptions& options, Rng& rng,
                                               const BatchTokenCallback& on_token) {
  const ModelConfig& config = model.config();
  if (prompts.empty()) throw std::invalid_argument("generate_batch: no prompts");
  std::size_t longest = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    check_prompt(prompts[i], config.vocab, fmt::format("prompt {}", i));
    longest = std::max(longest, prompts[i].size());
  }
  if (longest + tokens > config.max_len) {
    throw std::invalid_argument(fmt::format(
        "generate_batch: the longest prompt ({} tokens) and {} new ones do not fit in max_len {}", longest, tokens,
        config.max_len));
  }
  check_sampling_options(options, config.vocab);
  NoGrad no_grad;
  EvalMode eval_mode(model);
  const std::size_t B = prompts.size();
  std::vector<std::vector<Index>> out(B);
  if (tokens == 0) return out;
  KVCache<float> cache(config, B);
  // Each prompt alone (they differ in length), keeping its last row of logits.
  std::vector<float> last;
  std::size_t V = 0;
  for (std::size_t b = 0; b < B; ++b) {
    const Tensor<float> logits = model.forward_cached(row_of(prompts[b]), cache, b);  // (1, L_b, V)
    V = logits.shape()[2];
    const float* row = logits.value().data() + (prompts[b].size() - 1) * V;
    last.insert(last.end(), row, row + V);
  }
  IndexArray next = IndexArray::from_shape({B, std::size_t{1}});
  for (std::size_t n = 0; n < tokens; ++n) {
    for (std::size_t b = 0; b < B; ++b) {
      next(b, 0) = sample_token(std::span<const float>(last.data() + b * V, V), options, rng);
      out[b].push_back(next(b, 0));
      if (on_token) on_token(b, next(b, 0));
    }
    if (n + 1 == tokens) break;
    const Tensor<float> logits = model.forward_cached(next, cache);  // (B, 1, V)
    std::copy_n(logits.value().data(), B * V, last.data());
  }
  return out;
}

}  // namespace headroom
