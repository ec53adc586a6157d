// A trained model's attention weights on one input, and what `headroom attention`
// draws and writes of them: labelled inputs (a text model's characters, a toy task's
// tokens), the weights per layer and head, the heat-map grid (plot/heatmap.hpp) and
// the weights as a safetensors file.
//
// Legend: L = layers, H = heads, T = tokens of the input.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

#include "nn/safetensors.hpp"
#include "nn/transformer.hpp"
#include "plot/heatmap.hpp"
#include "train/run_dir.hpp"

namespace headroom {

// What the maps are drawn for: the token ids and how to describe them.
struct AttentionInput {
  std::vector<Index> ids;           // (T)
  std::vector<std::string> labels;  // (T) axis labels
  std::string description;          // for the title and the terminal
};

// Validation examples are drawn in order from one stream (data/task_tokens.hpp), so
// example N costs N + 1 draws; this keeps a typo from running for minutes.
inline constexpr std::size_t kMaxAttentionExample = 100000;

// A character as an axis label: whitespace and control characters as visible
// symbols, so that a space or a newline does not read as an empty label.
std::string visible_character(char32_t c);

// A token of a model's vocabulary as an axis label: a text model's character
// (visible_character); a classifier's character, "_" pad, "|" separator or "<label>"
// (data/labelled_dataset.hpp); a toy task's id or special (task_token_label).
std::string token_label(const DataDescription& data, Index id);

// Text as it reads, on one line: spaces stay spaces, line breaks and other control
// characters show as visible_character's symbols (the subtitle of a text model's
// maps; train's sample at each validation).
std::string one_line_text(const std::u32string& text);

// The user's input: text for a text model, token ids (or _ | ?) for a toy-task
// model, text for a classifier, which reads it with the separator after it (where it
// predicts the label). std::invalid_argument starting with "--input" for an empty or bad input.
AttentionInput attention_input(const std::string& input, const DataDescription& data, const std::string& source);

// Validation example n of the model's own data: the n-th row drawn from the
// validation stream of seed 0, all T of its model inputs (row[0 .. T-1]), so a
// task's answer positions are on the maps too. A text model needs its training file.
AttentionInput validation_example(std::size_t n, const DataDescription& data, const std::string& source);

// One forward pass in eval mode, recording nothing: L arrays of (H, T, T), [head,
// query, key], each row summing to 1 over the keys it can see.
std::vector<xt::xarray<float>> attention_weights(TransformerLM<float>& model, const std::vector<Index>& ids);

// The weights as `headroom attention --weights` writes them: layer.{i} float32
// (H, T, T), tokens int64 (T), and metadata naming the model and the input.
SafetensorsFile attention_weights_file(const std::vector<xt::xarray<float>>& weights, const AttentionInput& input,
                                       const std::string& source);

}  // namespace headroom
