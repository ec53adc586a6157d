// Rolling checkpoints of a training run, for exact resume.
//
// A checkpoint is a directory OUT/checkpoints/step-00000500/ holding
//   model.safetensors        the model (nn/checkpoint.hpp), loadable on its own
//   train_state.safetensors  the optimizer's per-parameter state as tensors
//                            ("exp_avg/<param>", "exp_avg_sq/<param>" or
//                            "momentum_buffer/<param>") and, in __metadata__ "state",
//                            a JSON object with the step, the optimizer's step counts,
//                            the data generator's state and the loop's running sums;
//                            in "train_config", the run's whole config (to_json)
// The directory is written under a temporary name and renamed into place, so a
// checkpoint directory is complete or absent: a crash while saving leaves the
// previous checkpoint as the newest. Resuming from step k replays exactly what the
// uninterrupted run would have done after step k (same binary, same thread count).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/random.hpp"
#include "train/config.hpp"
#include "train/trainer.hpp"
#include "nn/transformer.hpp"
#include "optim/optimizer.hpp"

namespace headroom {

// Everything of the training loop besides the model and the optimizer.
struct LoopState {
  std::size_t step = 0;             // steps done
  std::size_t skipped_steps = 0;    // updates skipped for a non-finite loss or gradient norm
  std::size_t consecutive_bad = 0;  // the current run of such steps
  double best_val_accuracy = 0;
  std::size_t best_step = 0;
  std::optional<double> best_excess_loss{};  // the lowest val excess loss so far, when known
  double last_train_loss = 0;  // at the latest evaluation
  EvalResult last_val{};
  double loss_since = 0;        // sums since the latest evaluation
  std::size_t steps_since = 0;
  std::size_t tokens_since = 0;
  double elapsed_s = 0;  // wall time spent before this process
  Rng::State data_rng{};
};

// Adds one step to the loop's running sums: a step that updated the weights adds its
// loss and ends any run of bad steps; one that did not (a non-finite loss or gradient
// norm) counts as skipped and extends the run. Returns the length of the run of bad
// steps it is now part of (0 after a good step): the trainer stops at max_bad_steps.
std::size_t record_step(LoopState& state, bool updated, double loss);

// OUT/checkpoints/step-<8 digits>.
std::filesystem::path checkpoint_dir(const std::filesystem::path& out_dir, std::size_t step);

// The newest complete checkpoint under OUT/checkpoints, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& out_dir);

// Saves a checkpoint for state.step (replacing one of the same step), then removes
// all but the newest `keep` checkpoints. Returns its directory. I/O errors are
// CheckpointErrors naming the path; the previous checkpoints stay intact.
std::filesystem::path save_training_checkpoint(const std::filesystem::path& out_dir, const TrainConfig& config,
                                               const TransformerLM<float>& model, const Optimizer<float>& optimizer,
                                               const LoopState& state,
                                               const std::map<std::string, std::string>& model_metadata,
                                               std::size_t keep);

// Restores model, optimizer and loop state from a checkpoint directory made for the
// same config. Strict: a config that differs from the checkpoint's (its model
// config, and the whole config it recorded, but for resume_may_change) is a
// CheckpointError with the first differing key (first_config_difference, naming
// `config_source` for the run's side); so are a different optimizer, a missing or
// misshapen state tensor, or a malformed state. A checkpoint written before configs
// were recorded is checked on its model config only. On error nothing useful is
// left in model and optimizer, so the caller must not go on training them.
LoopState load_training_checkpoint(const std::filesystem::path& dir, const TrainConfig& config,
                                   TransformerLM<float>& model, Optimizer<float>& optimizer,
                                   const std::string& config_source = "the run's config");

// The keys of the config's train section that a resumed run may change: when it stops
// (steps, and early stopping's patience and min_delta) and the checkpointing and fault
// settings, which change no number of the steps already taken. `headroom train
// --resume` accepts exactly their flags.
const std::vector<std::string>& resume_may_change();

// The first key, as "section.key" (sections, then their keys, in sorted order), whose
// value differs between a checkpoint's config and the run's (both as to_json gives
// them), skipping the train keys of resume_may_change: "train.lr: 0.003 in the
// checkpoint, 0.001 in SOURCE" (a key missing on one side reads "absent"). Empty
// when they agree.
std::string first_config_difference(const nlohmann::json& checkpoint, const nlohmann::json& run,
                                    const std::string& source);

// The newest checkpoint of out_dir to resume a run with these settings from. A
// std::invalid_argument when there is none, or when the run is finished at it: at
// optim.steps or beyond, or out of patience (patience_ran_out), saying so with the
// step, so that a resume says that before anything else about the steps.
std::filesystem::path checkpoint_to_resume(const std::filesystem::path& out_dir, const OptimConfig& optim);

// The step at which early stopping with optim's patience and min_delta ended (or, for
// settings changed since, would have ended) the run in out_dir, among its validations
// up to `step` (metrics.csv's rows, train/convergence.hpp's patience_stop); nothing
// when patience is off or not exhausted. The state is recomputed from metrics.csv
// rather than stored in the checkpoint: the file already holds every validation, as
// the trainer decided on it (as_recorded), for checkpoints from before early stopping
// too, and a resume that changes patience or min_delta decides by the new values.
// std::invalid_argument naming metrics.csv when it cannot be read.
std::optional<std::size_t> patience_ran_out(const std::filesystem::path& out_dir, std::size_t step,
                                            const OptimConfig& optim);

}  // namespace headroom
