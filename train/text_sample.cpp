#include "train/text_sample.hpp"

#include <vector>

#include "autograd/random.hpp"
#include "nn/generate.hpp"

namespace headroom {

Index default_text_prompt(const CharVocab& vocab) { return vocab.find(U'\n').value_or(0); }

std::u32string sample_characters(TransformerLM<float>& model, const CharVocab& vocab, std::size_t chars,
                                 std::uint64_t seed) {
  Rng draws(stream_seed(seed, kSampleDrawStream));
  const Index prompt = default_text_prompt(vocab);
  const std::vector<Index> ids = generate(model, std::span<const Index>(&prompt, 1), chars, SamplingOptions{}, draws);
  std::u32string text;
  text.reserve(ids.size());
  for (const Index id : ids) text += vocab.alphabet().at(static_cast<std::size_t>(id));
  return text;
}

}  // namespace headroom
