// `headroom attention`: run a trained model on one input and draw every layer's and
// head's attention weights as one SVG grid of heatmaps (cli/heatmap.hpp); write the
// weights themselves as a safetensors file for numpy or torch.
//
// Legend: L = layers, H = heads, T = tokens of the input.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "autograd/random.hpp"
#include "autograd/tensor.hpp"
#include "cli/commands.hpp"
#include "plot/heatmap.hpp"
#include "train/run_dir.hpp"
#include "data/task_tokens.hpp"
#include "cli/validators.hpp"
#include "data/utf8.hpp"
#include "nn/checkpoint.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

struct AttentionFlags {
  std::string model;
  std::optional<std::string> input;
  std::optional<std::size_t> example;
  std::string out;
  std::string weights;
};

// Validation examples are drawn in order from one stream (task_tokens.hpp), so
// example N costs N + 1 draws; this keeps a typo from running for minutes.
constexpr std::size_t kMaxExample = 100000;

// What the maps are drawn for: the token ids and how to describe them.
struct Input {
  std::vector<Index> ids;               // (T)
  std::vector<std::string> labels;      // (T) axis labels
  std::string description;              // for the title and the terminal
};

// A character as an axis label: whitespace and control characters as visible symbols,
// so that a space or a newline does not read as an empty label.
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

// The text of a text model's input for the subtitle: as it reads, but with line
// breaks and other control characters shown by their symbols so it stays one line.
std::string one_line_text(const std::u32string& text) {
  std::string out;
  for (const char32_t c : text) out += c == U' ' ? std::string(" ") : visible_character(c);
  return out;
}

Input labelled(std::vector<Index> ids, const DataDescription& data, const std::string& source) {
  Input in;
  if (data.is_text()) {
    const CharVocab vocab = char_vocab(data, source);
    std::u32string text;
    for (const Index id : ids) text += vocab.alphabet().at(static_cast<std::size_t>(id));
    for (const char32_t c : text) in.labels.push_back(visible_character(c));
    in.description = "\"" + one_line_text(text) + "\"";
  } else {
    for (const Index id : ids) in.labels.push_back(task_token_label(id));
    in.description = render_task_tokens(ids);
  }
  in.ids = std::move(ids);
  return in;
}

// The user's --input: token ids for a toy-task model, text for a text model.
Input user_input(const std::string& input, const DataDescription& data, const std::string& source) {
  std::vector<Index> ids;
  if (data.is_text()) {
    if (input.empty()) throw std::invalid_argument("--input: is empty (it needs at least one character)");
    const IndexArray encoded = char_vocab(data, source).encode(std::string_view(input), "--input");
    ids.assign(encoded.begin(), encoded.end());
  } else {
    ids = parse_task_tokens(input, data.vocab, "--input");
  }
  Input in = labelled(std::move(ids), data, source);
  in.description = "input " + in.description;
  return in;
}

// Validation example n of the model's own data: the n-th row drawn from the
// validation stream of seed 0, all T of its model inputs (row[0 .. T-1]), so a task's
// answer positions are on the maps too.
Input validation_input(std::size_t n, const DataDescription& data, const std::string& source) {
  if (n >= kMaxExample) {
    throw std::invalid_argument(fmt::format("--example: must be below {}, got {}", kMaxExample, n));
  }
  const std::unique_ptr<Dataset> dataset =
      own_dataset(data, source, "give the model its input with --input TEXT instead");
  Rng rng(stream_seed(0, kValidationExampleStream));
  Batch row;
  for (std::size_t i = 0; i <= n; ++i) row = dataset->sample(1, Split::val, rng);
  const std::size_t T = data.seq_len;
  Input in = labelled(std::vector<Index>(row.tokens.data(), row.tokens.data() + T), data, source);
  in.description = fmt::format("validation example {} of {}: {}", n, data.is_text() ? data.text : data.task,
                               in.description);
  return in;
}

// DIR/model.safetensors -> DIR/attention.svg; any other FILE.safetensors ->
// FILE.attention.svg beside it, so that maps of two checkpoints do not overwrite
// each other.
fs::path default_svg(const fs::path& model_file) {
  const std::string stem = model_file.stem().string();
  return model_file.parent_path() / (stem == "model" ? std::string("attention.svg") : stem + ".attention.svg");
}

// We check where the files go before running the model, so that a typo in a path
// costs nothing and never leaves the SVG written without its weights.
void check_writable(const fs::path& path, const std::string& flag) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw std::invalid_argument(fmt::format("{} '{}': is a directory; give a file name in it", flag, path.string()));
  }
  const fs::path dir = path.parent_path();
  if (!dir.empty() && !fs::is_directory(dir, ec)) {
    throw std::invalid_argument(fmt::format("{} '{}': the directory '{}' does not exist", flag, path.string(),
                                            dir.string()));
  }
}

int run_attention(const AttentionFlags& flags) {
  set_threads(1);  // one short sequence: threads only add overhead
  const fs::path file = resolve_model_file(flags.model);
  const std::string source = file.string();
  LoadedModel<float> loaded = load_model<float>(file);
  const DataDescription data = data_description(loaded.metadata, source);
  const ModelConfig& config = loaded.config;
  if (data.vocab != config.vocab) {
    throw std::invalid_argument(fmt::format("{}: the data metadata says vocab {} but the model has vocab {}", source,
                                            data.vocab, config.vocab));
  }

  const fs::path svg_path = flags.out.empty() ? default_svg(file) : fs::path(flags.out);
  const fs::path weights_path =
      flags.weights.empty() ? fs::path(svg_path).replace_extension(".safetensors") : fs::path(flags.weights);
  if (weights_path.lexically_normal() == svg_path.lexically_normal()) {
    throw std::invalid_argument(
        flags.weights.empty()
            ? fmt::format("--out '{}': the weights go to the same name with .safetensors by default; name the SVG "
                          "*.svg or give --weights FILE",
                          svg_path.string())
            : fmt::format("--weights '{}': is the SVG's own path (--out); give another file", weights_path.string()));
  }
  check_writable(svg_path, "--out");
  check_writable(weights_path, "--weights");

  const Input input = flags.input ? user_input(*flags.input, data, source)
                                  : validation_input(flags.example.value_or(0), data, source);
  const std::size_t T = input.ids.size();
  const std::string what =
      flags.input ? std::string("--input") : fmt::format("validation example {}", flags.example.value_or(0));
  if (T > config.max_len) {
    throw std::invalid_argument(
        fmt::format("{}: {} tokens are more than the model's max_len {}", what, T, config.max_len));
  }
  if (T > heatmap::kMaxTokens) {
    throw std::invalid_argument(fmt::format("{}: {} tokens are more than the {} we draw maps for; give a shorter --input",
                                            what, T, heatmap::kMaxTokens));
  }

  // One forward pass in eval mode (no dropout), recording nothing for backward.
  NoGrad no_grad;
  TransformerLM<float>& model = *loaded.model;
  model.eval();
  IndexArray tokens = IndexArray::from_shape({1, T});  // (1, T)
  std::copy(input.ids.begin(), input.ids.end(), tokens.begin());
  std::vector<Tensor<float>> weights;  // L of (1, H, T, T)
  (void)model.forward(tokens, &weights);

  heatmap::AttentionMaps maps;
  maps.causal = config.causal;
  maps.tokens = input.labels;
  SafetensorsFile out;
  for (std::size_t l = 0; l < weights.size(); ++l) {
    const xt::xarray<float>& w = weights[l].value();  // (1, H, T, T)
    xt::xarray<float> per_head = w;
    per_head.reshape({w.shape()[1], T, T});  // (H, T, T): [head, query, key]
    out.tensors.push_back(to_record(fmt::format("layer.{}", l), per_head));
    maps.layers.push_back(std::move(per_head));
  }
  IndexArray ids = IndexArray::from_shape({T});  // (T)
  std::copy(input.ids.begin(), input.ids.end(), ids.begin());
  out.tensors.push_back(to_record("tokens", ids));
  out.metadata = {{"model", source},
                  {"input", input.description},
                  {"layout", "layer.{i}: float32 (heads, query, key), each row sums to 1 over the keys it can see; "
                             "tokens: int64 (T) the input ids"}};

  const std::string kind = data.is_text() ? "character-level text model" : data.task + " model";
  const std::size_t H = maps.layers.front().shape()[0];
  maps.title = fmt::format("Attention weights of {} ({}, {} layer{} x {} head{})", source, kind, weights.size(),
                           weights.size() == 1 ? "" : "s", H, H == 1 ? "" : "s");
  maps.subtitle = input.description;
  const std::string svg_text = heatmap::render_attention_maps(maps);

  write_file_atomically(svg_path, svg_text);
  write_safetensors(weights_path, out);
  fmt::print("{}: {}, {} layer{} x {} head{}\n", source, kind, weights.size(), weights.size() == 1 ? "" : "s", H,
             H == 1 ? "" : "s");
  fmt::print("{} ({} tokens)\n", input.description, T);
  fmt::print("wrote {} (the maps)\n", svg_path.string());
  const std::string layer_names =
      weights.size() == 1 ? std::string("layer.0") : fmt::format("layer.0 to layer.{}", weights.size() - 1);
  fmt::print("wrote {} ({}: float32 ({}, {}, {}) [head, query, key]; tokens: int64 ({}))\n", weights_path.string(),
             layer_names, H, T, T, T);
  return 0;
}

}  // namespace

Run add_attention_command(CLI::App& app) {
  auto f = std::make_shared<AttentionFlags>();
  CLI::App* cmd = app.add_subcommand(
      "attention",
      "Draw a trained model's attention: run it on one input and write one SVG with a heatmap per layer and head "
      "(queries down, keys across, one colour scale from 0 to 1), and the weights themselves as a safetensors file "
      "(layer.N: (heads, T, T) float32, tokens: (T) int64). Without --input or --example it shows validation example "
      "0 of the model's data.");
  cmd->add_option("--model", f->model,
                  "A run directory written by headroom train --out (its model.safetensors, else its newest "
                  "checkpoint), or a .safetensors file")
      ->required();
  CLI::Option* input = cmd->add_option(
      "--input", f->input,
      "The input to draw: text for a text model; space-separated token ids for a toy-task model (_ | ? for pad, "
      "separator and query). At most the model's max_len and 128 tokens");
  CLI::Option* example =
      cmd->add_option("--example", f->example,
                      "Draw validation example N of the model's own data instead (default 0): all seq_len inputs "
                      "of the N-th row drawn for the validation split, the row `headroom sample --seed 0` shows as "
                      "its (N+1)-th example. A text model needs its training file for this")
          ->check(kWholeNumber);
  input->excludes(example);
  cmd->add_option("--out", f->out,
                  "The SVG file to write (default: attention.svg beside the model file, or "
                  "NAME.attention.svg beside NAME.safetensors)");
  cmd->add_option("--weights", f->weights,
                  "The safetensors file for the weights (default: the SVG's path with the extension .safetensors)");
  return [f] { return run_attention(*f); };
}

}  // namespace headroom::cli
