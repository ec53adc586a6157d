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
#include "cli/model_file.hpp"
#include "cli/out_paths.hpp"
#include "interp/attention_maps.hpp"
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

// DIR/model.safetensors -> DIR/attention.svg; any other FILE.safetensors ->
// FILE.attention.svg beside it, so that maps of two checkpoints do not overwrite
// each other.
fs::path default_svg(const fs::path& model_file) {
  const std::string stem = model_file.stem().string();
  return model_file.parent_path() / (stem == "model" ? std::string("attention.svg") : stem + ".attention.svg");
}

int run_attention(const AttentionFlags& flags) {
  set_threads(1);  // one short sequence: threads only add overhead
  LoadedRun run = open_model(flags.model);
  const fs::path& file = run.file;
  const std::string& source = run.source;
  const DataDescription& data = run.data;
  const ModelConfig& config = run.config();

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
  // Both checked before the model runs, so a typo in a path costs nothing and never
  // leaves the SVG written without its weights.
  check_out_file(svg_path, "--out");
  check_out_file(weights_path, "--weights");

  const AttentionInput input = flags.input ? attention_input(*flags.input, data, source)
                                           : validation_example(flags.example.value_or(0), data, source);
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

  const std::vector<xt::xarray<float>> weights = attention_weights(run.model(), input.ids);  // L of (H, T, T)
  const SafetensorsFile out = attention_weights_file(weights, input, source);
  heatmap::AttentionMaps maps;
  maps.causal = config.causal;
  maps.tokens = input.labels;
  maps.layers = weights;

  const std::string kind = data.is_text()         ? "character-level text model"
                           : data.is_classifier() ? "classifier"
                                                  : data.task + " model";
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
      "Draw a trained model's attention on one input: an SVG with a heatmap per layer and head (queries down, keys "
      "across, one colour scale from 0 to 1), and the weights as a safetensors file.");
  cmd->footer(
      "The weights file holds layer.N: (heads, T, T) float32 and tokens: (T) int64. Without --input or --example it "
      "shows validation example 0 of the model's data.");
  cmd->add_option("--model", f->model,
                  "A run directory written by headroom train --out (its model.safetensors, else its newest "
                  "checkpoint), or a .safetensors file")
      ->required();
  CLI::Option* input = cmd->add_option(
      "--input", f->input,
      "The input to draw: text for a text model; space-separated token ids for a toy-task model (_ | ? for pad, "
      "separator and query). At most the model's max_len and 128 tokens; not with --example");
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
