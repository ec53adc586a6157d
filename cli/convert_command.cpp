// `headroom convert`: a trained model with its key/value heads mean-pooled into
// fewer (MHA -> GQA or MQA, as Ainslie et al. 2023 do it; docs/design.md #19),
// written as a model directory that sample, eval, heads and train --init-from read.
#include <filesystem>
#include <map>
#include <span>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/model_file.hpp"
#include "cli/out_paths.hpp"
#include "cli/validators.hpp"
#include "nn/attention.hpp"
#include "nn/checkpoint.hpp"
#include "nn/convert.hpp"
#include "nn/safetensors.hpp"
#include "train/run_dir.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

struct ConvertFlags {
  std::string model;
  std::string out;
  std::size_t kv_heads = 0;
};

// Missing, or an empty directory: nothing of anyone's is replaced. And a place we
// can write, checked before the model is read.
void check_convert_out(const std::string& out) {
  if (out.empty()) throw std::invalid_argument("--out: the path is empty; give the directory to write");
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec)) {
    throw std::invalid_argument(fmt::format("--out {}: exists and is not a directory; choose another --out", out));
  }
  check_out_directory(out, "--out");
  // The directory is written as a whole by a rename onto it (write_directory_atomically),
  // so its parent must be writable too, even when it exists.
  const fs::path parent = fs::path(out).lexically_normal().parent_path();
  if (fs::exists(out, ec)) check_out_directory(parent.empty() ? fs::path(".") : parent, "--out's parent");
  if (!fs::exists(out, ec)) return;
  if (fs::directory_iterator(out, ec) != fs::directory_iterator()) {
    throw std::invalid_argument(fmt::format("--out {}: the directory is not empty; choose another --out", out));
  }
}

std::size_t kv_bytes_per_token(const ModelConfig& c) {
  return c.n_layers * kv_cache_floats_per_token(attention_options(c)) * sizeof(float);
}

int run_convert(const ConvertFlags& f) {
  // Everything is checked and made in memory before the directory is created.
  check_convert_out(f.out);
  LoadedRun run = open_model(f.model);
  const ModelConfig& from = run.config();
  std::unique_ptr<TransformerLM<float>> pooled;
  try {
    pooled = pool_kv_heads(run.model(), f.kv_heads);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("--kv-heads {}: {} ({})", f.kv_heads, e.what(), run.source));
  }
  const ModelConfig& to = pooled->config();
  // config.json: the run's own, with the new model; a bare model file gets the
  // defaults around its data description.
  TrainConfig config;
  if (const std::optional<TrainConfig> own = run_config_of(run.file)) {
    config = *own;
  } else {
    config.data.task = run.data.is_text() ? DataConfig{}.task : run.data.task;
    config.data.text = run.data.text;
    config.data.seq_len = run.data.seq_len;
    config.data.vocab = run.data.is_text() ? DataConfig{}.vocab : run.data.vocab;
    config.data.lags = run.data.lags;
    config.data.context = run.data.context;
    config.data.lag_beta = run.data.lag_beta;
    config.data.task_seed = run.data.task_seed;
  }
  config.model = to;
  std::map<std::string, std::string> metadata = run.loaded.metadata;
  metadata.erase("config");  // checkpoint_of writes the new model's
  const std::string config_text = to_json(config).dump(2) + "\n";
  const SafetensorsFile file = checkpoint_of(*pooled, to, DType::f32, metadata);

  // Both files or neither: a full disk or a kill leaves no config.json without its model.
  const std::vector<std::byte> model_bytes = serialize_safetensors(file);
  write_directory_atomically(f.out, {{.name = "config.json", .bytes = std::as_bytes(std::span(config_text))},
                                     {.name = "model.safetensors", .bytes = model_bytes}});

  fmt::print("headroom convert: {} -> {}: kv heads {} -> {} ({} query heads, {} per kv head), mean of each group's "
             "k_proj and v_proj heads{}\n",
             run.source, f.out, from.n_kv_heads, to.n_kv_heads, to.n_heads, to.n_heads / to.n_kv_heads,
             to.key_smear ? " and key_smear" : "");
  fmt::print("KV cache: {} -> {} bytes per token (float32); parameters {} -> {}\n", kv_bytes_per_token(from),
             kv_bytes_per_token(to), run.model().parameter_count(), pooled->parameter_count());
  fmt::print("wrote {0}/config.json and {0}/model.safetensors (step {1}); uptrain with: headroom train --init-from "
             "{0} ...\n",
             f.out, run.step ? fmt::format("{}", *run.step) : std::string("unknown"));
  return 0;
}

}  // namespace

Run add_convert_command(CLI::App& app) {
  auto f = std::make_shared<ConvertFlags>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Mean-pool a trained model's key/value heads into fewer (MHA -> GQA or MQA, as the GQA paper does it) and "
      "write a model directory that sample, eval, heads and train --init-from read.");
  cmd->footer(
      "New kv head g is the mean of old kv heads [g r, (g+1) r), r = old / new, in k_proj and v_proj (weights and "
      "biases) and key_smear; everything else is copied.");
  cmd->add_option("--model", f->model,
                  "A run directory written by headroom train --out (its model.safetensors, else its newest "
                  "checkpoint), or a .safetensors file")
      ->required();
  cmd->add_option("--kv-heads", f->kv_heads, "Key/value heads of the result: a divisor of the model's")
      ->required()
      ->check(kPositiveWholeNumber);
  cmd->add_option("--out", f->out,
                  "The directory to write config.json and model.safetensors into; must be missing or empty")
      ->required();
  return [f] { return run_convert(*f); };
}

}  // namespace headroom::cli
