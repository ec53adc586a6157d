// The flags `headroom train` and `headroom ablate` share: every model, data and
// training setting. Precedence, lowest first: the task's defaults, --preset NAME,
// --config FILE, the flags (docs/design.md #17).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "nn/presets.hpp"
#include "train/config.hpp"

namespace headroom::cli {

// The settings the user gave; each overrides --config, which overrides the defaults.
struct TrainFlags {
  std::string config_file;
  std::string preset;  // --preset NAME (nn/presets.hpp); empty: none
  // The train flags given, by config key ("model.d_model"): each writes its value
  // into a TrainConfig (build_config). An enum's name is parsed there, so a bad one
  // is the same one-line error as a bad value.
  std::map<std::string, std::function<void(TrainConfig&)>> given;
};

struct TrainFlagGroups {
  CLI::Option_group* model = nullptr;
  CLI::Option_group* data = nullptr;
  CLI::Option_group* training = nullptr;
};

// `ablate` sweeps --heads, --dk and --kv-heads as lists and takes --seeds for
// --seed, so it registers those flags itself. `params` counts a model and trains
// nothing: the model flags and, of the data flags, --task, --seq-len and --vocab
// (its `training` group is null).
enum class TrainFlagSet { train, ablate, params };

// Registers the model, data and training flags on `cmd` as option groups that
// write into `flags` (which must outlive the parse): one flag per field of the
// tables in nn/config_fields.hpp and train/config_fields.hpp that has one, in
// their order.
TrainFlagGroups add_train_flags(CLI::App& cmd, TrainFlags& flags, TrainFlagSet set = TrainFlagSet::train);

// The defaults build_config leaves to follow the final model, for ablate, whose runs
// each have their own model.
struct OpenDefaults {
  // A preset's n_kv_heads rule (llama's) when neither --kv-heads nor the file's
  // model.n_kv_heads sets it; null otherwise.
  KvHeadsRule kv_heads = nullptr;
  // No flag, config file or task gave the lr, so it is default_lr(model)
  // (train/config.hpp): kNoNormLr for a model without norms.
  bool lr = false;
};

// The config the flags describe on top of `config_file` (none when empty), the
// preset and the task's defaults. Throws std::invalid_argument for an unreadable or
// invalid file, or an unknown preset. A preset's n_kv_heads rule follows the final
// n_heads, and the lr the final model (default_lr), unless a flag or the file (or
// for the lr, the task) sets them: build_config applies both, and says in *open (when
// given) which it applied.
TrainConfig build_config(const TrainFlags& flags, const std::string& config_file, OpenDefaults* open = nullptr);

// The --preset flag's help: every preset with the keys it sets.
std::string preset_help();

// Throws std::invalid_argument, naming the flag, for a training flag that none of
// `runs` reads (--momentum without sgd, --min-lr without the cosine schedule,
// --warmup with the constant one), where it would be silently ignored
// (docs/design.md #11). A value of 0, which turns the setting off, passes. `train` passes its one config; `ablate` every run of its grid.
void check_flags_read(const TrainFlags& flags, const std::vector<TrainConfig>& runs);

}  // namespace headroom::cli
