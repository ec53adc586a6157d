#include "interp/attention_maps.hpp"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/random.hpp"
#include "data/task_tokens.hpp"
#include "data/utf8.hpp"

namespace headroom {
namespace {

AttentionInput labelled(std::vector<Index> ids, const DataDescription& data, const std::string& source) {
  AttentionInput in;
  if (data.is_text() || data.is_classifier()) {
    const CharVocab vocab = char_vocab(data, source);
    // A classifier's characters start at id 2, after pad and the separator.
    const Index first = data.is_classifier() ? 2 : 0;
    std::u32string text;
    std::string after;  // a classifier's separator and what follows it
    for (const Index id : ids) {
      in.labels.push_back(token_label(data, id));
      const auto i = static_cast<std::size_t>(id - first);
      if (id >= first && i < vocab.size() && after.empty()) {
        text += vocab.alphabet()[i];
      } else {
        after += (after.empty() ? "" : " ") + in.labels.back();
      }
    }
    in.description = fmt::format("\"{}\"{}", one_line_text(text), after.empty() ? "" : " " + after);
  } else {
    for (const Index id : ids) in.labels.push_back(task_token_label(id));
    in.description = render_task_tokens(ids);
  }
  in.ids = std::move(ids);
  return in;
}

}  // namespace

std::string visible_character(char32_t c) {
  switch (c) {
    case U' ': return "\u2423";   // open box
    case U'\n': return "\u21b5";  // downwards arrow with corner leftwards
    case U'\t': return "\u21e5";  // rightwards arrow to bar
    default: break;
  }
  if (c < 0x20 || (c >= 0x7f && c < 0xa0)) return fmt::format("U+{:04X}", static_cast<std::uint32_t>(c));
  std::string out;
  append_utf8(out, c);
  return out;
}

std::string token_label(const DataDescription& data, Index id) {
  if (!data.is_text() && !data.is_classifier()) return task_token_label(id);
  const auto i = static_cast<std::size_t>(id);
  if (data.is_text()) return visible_character(data.alphabet.at(i));
  if (id == kPad) return "_";
  if (id == kSep) return "|";
  if (i < 2 + data.alphabet.size()) return visible_character(data.alphabet.at(i - 2));
  return "<" + data.labels.at(i - 2 - data.alphabet.size()) + ">";
}

std::string one_line_text(const std::u32string& text) {
  std::string out;
  for (const char32_t c : text) {
    if (c == U' ') {
      out += ' ';
    } else {
      out += visible_character(c);
    }
  }
  return out;
}

AttentionInput attention_input(const std::string& input, const DataDescription& data, const std::string& source) {
  std::vector<Index> ids;
  if (data.is_text() || data.is_classifier()) {
    if (input.empty()) throw std::invalid_argument("--input: is empty (it needs at least one character)");
    const IndexArray encoded = char_vocab(data, source).encode(std::string_view(input), "--input");
    ids.assign(encoded.begin(), encoded.end());
    if (data.is_classifier()) {
      for (Index& id : ids) id += 2;
      ids.push_back(kSep);
    }
  } else {
    ids = parse_task_tokens(input, data.vocab, "--input");
  }
  AttentionInput in = labelled(std::move(ids), data, source);
  in.description = "input " + in.description;
  return in;
}

AttentionInput validation_example(std::size_t n, const DataDescription& data, const std::string& source) {
  if (n >= kMaxAttentionExample) {
    throw std::invalid_argument(fmt::format("--example: must be below {}, got {}", kMaxAttentionExample, n));
  }
  const std::unique_ptr<Dataset> dataset =
      own_dataset(data, source, "give the model its input with --input TEXT instead");
  Rng rng(stream_seed(0, kValidationExampleStream));
  Batch row;
  for (std::size_t i = 0; i <= n; ++i) row = dataset->sample(1, Split::val, rng);
  std::vector<Index> ids(row.tokens.data(), row.tokens.data() + data.seq_len);  // (T)
  // A classifier's row ends at its separator, where it answers: the pad after it is
  // read by nothing that counts.
  if (data.is_classifier()) ids.resize(static_cast<std::size_t>(std::find(ids.begin(), ids.end(), kSep) - ids.begin()) + 1);
  AttentionInput in = labelled(std::move(ids), data, source);
  in.description = fmt::format("validation example {} of {}: {}", n, data.source_name(), in.description);
  return in;
}

std::vector<xt::xarray<float>> attention_weights(TransformerLM<float>& model, const std::vector<Index>& ids) {
  NoGrad no_grad;
  const bool was_training = model.is_training();
  model.eval();  // no dropout
  const std::size_t T = ids.size();
  IndexArray tokens = IndexArray::from_shape({1, T});  // (1, T)
  std::copy(ids.begin(), ids.end(), tokens.begin());
  std::vector<Tensor<float>> weights;  // L of (1, H, T, T)
  (void)model.forward(tokens, &weights);
  model.train(was_training);
  std::vector<xt::xarray<float>> out;
  for (const Tensor<float>& w : weights) {
    xt::xarray<float> per_head = w.value();
    per_head.reshape({w.shape()[1], T, T});  // (H, T, T): [head, query, key]
    out.push_back(std::move(per_head));
  }
  return out;
}

SafetensorsFile attention_weights_file(const std::vector<xt::xarray<float>>& weights, const AttentionInput& input,
                                       const std::string& source) {
  SafetensorsFile out;
  for (std::size_t l = 0; l < weights.size(); ++l) out.tensors.push_back(to_record(fmt::format("layer.{}", l), weights[l]));
  IndexArray ids = IndexArray::from_shape({input.ids.size()});  // (T)
  std::copy(input.ids.begin(), input.ids.end(), ids.begin());
  out.tensors.push_back(to_record("tokens", ids));
  out.metadata = {{"model", source},
                  {"input", input.description},
                  {"layout", "layer.{i}: float32 (heads, query, key), each row sums to 1 over the keys it can see; "
                             "tokens: int64 (T) the input ids"}};
  return out;
}

}  // namespace headroom
