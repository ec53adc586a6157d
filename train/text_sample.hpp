// What a text model writes when nobody gives it a prompt: `headroom sample` without
// --prompt, and the sample `headroom train` shows at each validation
// (TrainOptions::sample_chars). Both start from the same prompt and draw from an Rng
// of their own with the same seed, so the two agree, and a run's sampling never
// touches its training streams (train/trainer.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "autograd/ops.hpp"  // Index
#include "data/char_vocab.hpp"
#include "nn/transformer.hpp"

namespace headroom {

// The stream of a sampling seed that draws the tokens (`headroom sample` draws a toy
// task's validation examples from another).
inline constexpr std::uint64_t kSampleDrawStream = 0;
// `headroom sample`'s default --seed.
inline constexpr std::uint64_t kDefaultSampleSeed = 0;

// A newline when the vocabulary has one (a text tends to start after one), else its
// first character.
Index default_text_prompt(const CharVocab& vocab);

// `chars` characters of `model` after default_text_prompt, at temperature 1 over the
// whole vocabulary, drawn from Rng(stream_seed(seed, kSampleDrawStream)): what
// `headroom sample --tokens chars --seed seed` prints. generate (nn/generate.hpp) runs
// it under NoGrad in eval mode and restores the model's mode.
std::u32string sample_characters(TransformerLM<float>& model, const CharVocab& vocab, std::size_t chars,
                                 std::uint64_t seed = kDefaultSampleSeed);

}  // namespace headroom
