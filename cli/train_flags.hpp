// The flags `headroom train` and `headroom ablate` share: every model, data and
// training setting. Precedence, lowest first: the task's defaults, --config FILE,
// the flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "train/config.hpp"

namespace headroom::cli {

// The settings the user gave; each overrides --config, which overrides the defaults.
struct TrainFlags {
  std::string config_file;
  std::optional<std::size_t> d_model, heads, dk, dv, kv_heads, layers, d_ff, max_len;
  std::optional<std::string> norm, activation, pos;
  std::optional<double> attn_scale;
  bool no_bias = false, tie = false, non_causal = false;
  std::optional<std::string> task, text;
  std::optional<std::size_t> seq_len, vocab;
  std::optional<std::string> optimizer, schedule;
  std::optional<std::size_t> steps, batch, warmup, eval_every, eval_batches, save_every, keep_checkpoints,
      max_bad_steps;
  std::optional<double> lr, min_lr, clip, weight_decay, momentum;
  std::optional<std::uint64_t> seed;
  std::optional<int> threads;
  bool detect_anomaly = false;
};

struct TrainFlagGroups {
  CLI::Option_group* model = nullptr;
  CLI::Option_group* data = nullptr;
  CLI::Option_group* training = nullptr;
};

// `ablate` sweeps --heads, --dk and --kv-heads as lists and takes --seeds for
// --seed, so it registers those flags itself.
enum class TrainFlagSet { train, ablate };

// Registers the model, data and training flags on `cmd` as option groups that
// write into `flags` (which must outlive the parse).
TrainFlagGroups add_train_flags(CLI::App& cmd, TrainFlags& flags, TrainFlagSet set = TrainFlagSet::train);

// The config the flags describe on top of `config_file` (none when empty) and the
// task's defaults. Throws std::invalid_argument for an unreadable or invalid file.
TrainConfig build_config(const TrainFlags& flags, const std::string& config_file);

}  // namespace headroom::cli
