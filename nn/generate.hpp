// Autoregressive generation from a trained TransformerLM: greedy, or sampling at a
// temperature from the top k candidates and then from the nucleus (top-p) of what is
// left, drawn with headroom's own Rng so a seed reproduces the output on any
// standard library (docs/design.md #6).
//
// Legend: V = vocab, L = tokens in the model's context (at most max_len).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "autograd/ops.hpp"  // Index
#include "autograd/random.hpp"
#include "nn/transformer.hpp"

namespace headroom {

struct SamplingOptions {
  double temperature = 1.0;  // softmax(logits / temperature); 0 means greedy
  std::size_t top_k = 0;     // sample among the k most likely tokens; 0 means all
  double top_p = 1.0;        // then among the smallest set whose probability reaches p; 1 means all
  bool greedy = false;       // argmax, whatever the temperature, top_k and top_p
};

// Throws std::invalid_argument for a temperature that is negative, subnormal or not finite,
// a top_k above the vocabulary, or a top_p outside (0, 1].
void check_sampling_options(const SamplingOptions& options, std::size_t vocab);

// The next token from one row of logits (V). Greedy (greedy or temperature 0) is the
// first argmax and draws nothing from rng; otherwise one rng.uniform() picks from
// p = softmax(logits / temperature) restricted to the top_k largest logits (ties keep
// the lower id), renormalised, and then to its nucleus: the fewest most likely
// candidates whose probabilities sum to at least top_p (ties keep the lower id;
// Holtzman et al., 2020, "The Curious Case of Neural Text Degeneration"). A sum that
// equals top_p up to rounding (a relative 1e-12) reaches it. Non-finite logits are a
// std::invalid_argument.
Index sample_token(std::span<const float> logits, const SamplingOptions& options, Rng& rng);

// The candidate ids sample_token draws from (in id order) and their unnormalised
// weights, after the top_k and top_p cuts; for tests and for tools that show the
// distribution. Not for greedy options (it ignores `greedy`).
struct Candidates {
  std::vector<std::size_t> ids;  // ascending
  std::vector<double> weights;   // (ids.size()) exp(z / temperature - max), > 0 for the best
};
Candidates sampling_candidates(std::span<const float> logits, const SamplingOptions& options);

// Called with each new id as generate makes it, before the next forward pass.
using TokenCallback = std::function<void(Index)>;

// How generate runs the model (docs/design.md #18).
enum class Decode {
  cached,  // a KV cache: the prompt once, then one token per step
  full,    // the whole context again for every token (no cache), for comparison
};

// `tokens` new ids after `prompt` (at least one id, each in [0, V)). The model reads
// at most its max_len most recent tokens: once the sequence outgrows that, the
// context is cropped from the left, so `tokens` is not bounded by max_len. Calls
// on_token (when set) once per new id, in order, so a caller can show them as they
// come. Runs under NoGrad in eval mode and restores the model's training mode.
// Decode::cached and Decode::full read the same contexts and draw the same numbers,
// so their logits agree to float rounding and greedy decoding gives the same ids;
// past max_len a cropped window moves every position, so there each token costs a
// full forward pass of max_len tokens in both.
std::vector<Index> generate(TransformerLM<float>& model, std::span<const Index> prompt, std::size_t tokens,
                            const SamplingOptions& options, Rng& rng, const TokenCallback& on_token = {},
                            Decode decode = Decode::cached);

// Called with (prompt index, new id) as generate_batch makes them.
using BatchTokenCallback = std::function<void(std::size_t, Index)>;

// generate for several prompts at once (of any lengths, each at most max_len) in one
// KV cache of prompts.size() rows: each prompt is read alone, then every step
// decodes one token of every row in one forward pass. Each step draws from rng for
// the prompts in order. `tokens` + the longest prompt must fit in max_len (a
// std::invalid_argument naming them otherwise). Returns each prompt's new ids.
std::vector<std::vector<Index>> generate_batch(TransformerLM<float>& model,
                                               const std::vector<std::vector<Index>>& prompts, std::size_t tokens,
                                               const SamplingOptions& options, Rng& rng,
                                               const BatchTokenCallback& on_token = {});

}  // namespace headroom
