#include "nn/generate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace headroom {

void check_sampling_options(const SamplingOptions& options, std::size_t vocab) {
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature)) {
    throw std::invalid_argument(
        fmt::format("sample: temperature must be a finite number >= 0, got {}", options.temperature));
  }
  if (options.top_k > vocab) {
    throw std::invalid_argument(fmt::format("sample: top_k {} is larger than the vocabulary ({})", options.top_k, vocab));
  }
}

Index sample_token(std::span<const float> logits, const SamplingOptions& options, Rng& rng) {
  const std::size_t V = logits.size();
  if (V == 0) throw std::invalid_argument("sample: no logits");
  for (std::size_t i = 0; i < V; ++i) {
    if (!std::isfinite(logits[i])) {
      throw std::invalid_argument(fmt::format("sample: the model's logit for token {} is {}", i, logits[i]));
    }
  }
  if (options.greedy || options.temperature == 0) {
    return static_cast<Index>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }

  // Candidates: every id, or the top_k largest logits (ties keep the lower id, so
  // top_k = 1 picks what greedy picks).
  std::vector<std::size_t> ids(V);  // (V) candidate ids, best first when cut
  std::iota(ids.begin(), ids.end(), std::size_t{0});
  if (options.top_k > 0 && options.top_k < V) {
    const auto k = static_cast<std::ptrdiff_t>(options.top_k);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](std::size_t a, std::size_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    ids.resize(options.top_k);
    std::sort(ids.begin(), ids.end());  // id order, so the draw does not depend on the sort
  }

  // softmax(z / temperature) over the candidates, max-subtracted, in double.
  double max_z = -INFINITY;
  for (const std::size_t i : ids) max_z = std::max(max_z, static_cast<double>(logits[i]) / options.temperature);
  std::vector<double> weight(ids.size());  // unnormalised probabilities
  double total = 0;
  for (std::size_t j = 0; j < ids.size(); ++j) {
    weight[j] = std::exp(static_cast<double>(logits[ids[j]]) / options.temperature - max_z);
    total += weight[j];
  }
  const double u = rng.uniform() * total;
  double cumulative = 0;
  for (std::size_t j = 0; j < ids.size(); ++j) {
    cumulative += weight[j];
    if (u < cumulative) return static_cast<Index>(ids[j]);
  }
  // Rounding can leave u just above the last partial sum: the last candidate with
  // any weight.
  for (std::size_t j = ids.size(); j-- > 0;) {
    if (weight[j] > 0) return static_cast<Index>(ids[j]);
  }
  return static_cast<Index>(ids.back());
}

std::vector<Index> generate(TransformerLM<float>& model, std::span<const Index> prompt, std::size_t tokens,
                            const SamplingOptions& options, Rng& rng) {
  const ModelConfig& config = model.config();
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt is empty (it needs at least one token)");
  for (const Index id : prompt) {
    if (id < 0 || static_cast<std::size_t>(id) >= config.vocab) {
      throw std::invalid_argument(fmt::format("generate: prompt token {} is outside the vocabulary [0, {})", id,
                                              config.vocab));
    }
  }
  check_sampling_options(options, config.vocab);

  NoGrad no_grad;
  // Eval mode (no dropout) for the whole generation; the caller's mode comes back
  // even when a forward pass throws.
  struct RestoreMode {
    TransformerLM<float>& model;
    bool training;
    ~RestoreMode() { model.train(training); }
  } restore{model, model.is_training()};
  model.eval();
  std::vector<Index> sequence(prompt.begin(), prompt.end());
  std::vector<Index> out;
  out.reserve(std::min<std::size_t>(tokens, 1 << 16));  // --tokens may be huge; we grow as we go
  for (std::size_t n = 0; n < tokens; ++n) {
    // The model rejects inputs longer than max_len: read the most recent ones.
    const std::size_t L = std::min(sequence.size(), config.max_len);
    IndexArray context = IndexArray::from_shape({std::size_t{1}, L});  // (1, L)
    std::copy(sequence.end() - static_cast<std::ptrdiff_t>(L), sequence.end(), context.begin());
    const Tensor<float> logits = model.forward(context);  // (1, L, V)
    const std::size_t V = logits.shape()[2];
    const float* last = logits.value().data() + (L - 1) * V;
    const Index next = sample_token(std::span<const float>(last, V), options, rng);
    sequence.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace headroom
