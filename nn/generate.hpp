// Autoregressive generation from a trained TransformerLM: greedy, or sampling at a
// temperature from the top k candidates, drawn with headroom's own Rng so a seed
// reproduces the output on any standard library (docs/design.md #6).
//
// Legend: V = vocab, L = tokens in the model's context (at most max_len).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "autograd/ops.hpp"  // Index
#include "autograd/random.hpp"
#include "nn/transformer.hpp"

namespace headroom {

struct SamplingOptions {
  double temperature = 1.0;  // softmax(logits / temperature); 0 means greedy
  std::size_t top_k = 0;     // sample among the k most likely tokens; 0 means all
  bool greedy = false;       // argmax, whatever the temperature
};

// Throws std::invalid_argument for a temperature that is negative or not finite,
// or a top_k above the vocabulary.
void check_sampling_options(const SamplingOptions& options, std::size_t vocab);

// The next token from one row of logits (V). Greedy (greedy or temperature 0) is the
// first argmax and draws nothing from rng; otherwise one rng.uniform() picks from
// softmax(logits / temperature) restricted to the top_k largest logits (ties keep
// the lower id). Non-finite logits are a std::invalid_argument.
Index sample_token(std::span<const float> logits, const SamplingOptions& options, Rng& rng);

// `tokens` new ids after `prompt` (at least one id, each in [0, V)). The model reads
// at most its max_len most recent tokens: once the sequence outgrows that, the
// context is cropped from the left. Runs under NoGrad in eval mode and restores the
// model's training mode.
std::vector<Index> generate(TransformerLM<float>& model, std::span<const Index> prompt, std::size_t tokens,
                            const SamplingOptions& options, Rng& rng);

}  // namespace headroom
