// The training loop behind `headroom train`: data, model, optimizer and schedule
// from a TrainConfig; train_step (train/step.hpp) in a loop; validation on held-out
// batches (train/evaluate.hpp); config.json, metrics.csv (train/metrics.hpp) and
// rolling checkpoints (train/resume.hpp) in the output directory; progress through a
// callback. Nothing here prints.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "autograd/random.hpp"
#include "data/dataset.hpp"
#include "train/config.hpp"
#include "train/convergence.hpp"
#include "train/evaluate.hpp"
#include "train/head_log.hpp"

namespace headroom {

// A run's independent random streams of its one seed: the initial weights, the
// training batches and the dropout masks (the validation batches are validation_seed's
// stream 2). Step k's masks come from dropout_step_seed: a function of the seed and
// the step, not of how much earlier steps drew, so a resumed run needs no generator
// state to draw what the uninterrupted run drew.
inline constexpr std::uint64_t kInitStream = 0;
inline constexpr std::uint64_t kTrainStream = 1;
inline constexpr std::uint64_t kDropoutStream = 3;
constexpr std::uint64_t dropout_step_seed(std::uint64_t seed, std::size_t step) {
  return stream_seed(stream_seed(seed, kDropoutStream), step);
}

struct Progress {
  std::size_t step = 0;
  std::size_t steps = 0;
  double train_loss = 0;  // mean since the previous report
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double elapsed_s = 0;
  bool evaluated = false;  // val is set on this report
  EvalResult val{};
  // At a validation, with TrainOptions::sample_chars: what the model writes now
  // (train/text_sample.hpp). Empty otherwise.
  std::u32string sample{};
};

// Why a run ended: at its last step; by early stopping, out of patience
// (train/convergence.hpp); or stopped by stop_requested or stop_after before either.
// The first two are finished runs, the last one is resumable.
enum class StopReason { steps, patience, stopped };
std::string to_string(StopReason reason);  // "steps" | "patience" | "stopped"

struct TrainSummary {
  std::size_t steps = 0;        // the last step done
  std::size_t start_step = 0;   // the checkpoint's step when resumed, else 0
  std::size_t parameters = 0;
  std::size_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient norm
  double final_train_loss = 0;
  EvalResult final_val{};
  double best_val_accuracy = 0;
  std::size_t best_step = 0;
  // The Bayes loss of the validation targets and the model's excess over it
  // (docs/design.md #14, #15): final_val's, and the lowest of any validation of the
  // run (of those since the checkpoint, for a run resumed from a checkpoint made
  // before these were recorded). Empty when the data does not know its
  // distribution (a text). The validation batches are the same at every
  // validation, so the Bayes loss is one number per run.
  std::optional<double> bayes_loss{};
  std::optional<double> final_excess_loss{};
  std::optional<double> best_excess_loss{};
  double wall_s = 0;      // this process's share
  double tokens_per_s = 0;
  bool stopped_early = false;  // by stop_requested or stop_after, before config.optim.steps
  StopReason stop_reason = StopReason::steps;  // stopped when stopped_early
  // Whether the val loss was still falling at the end, by the rule of
  // train/convergence.hpp with optim.min_delta, over the run's validations (a resumed
  // run's earlier ones included).
  Convergence convergence{};
  EarlyStopState early_stop{};  // the lowest val loss by early stopping's rule, and its step
  std::string checkpoint;      // the newest checkpoint directory written, if any
  std::string model_file;      // OUT/model.safetensors, when the run stopped (finished or early) with an out_dir
};

// Raised when training cannot go on: max_bad_steps consecutive steps with a
// non-finite loss or gradient norm. The message names the step, the last good
// checkpoint and, under detect_anomaly, the op where the first NaN or Inf appeared.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// out_dir is checked before the model is allocated (train/out_dir.hpp, open_out_dir):
// missing or empty for a new run; one holding a run only with resume (to continue
// it) or overwrite (to replace it); never a non-empty directory that holds no run.
// It is locked (flock on out_dir/.lock) for the run, and what killed saves left in
// it is removed.
struct TrainOptions {
  std::string out_dir;  // config.json, metrics.csv, loss.svg, checkpoints/, model.safetensors; "" writes nothing
  bool resume = false;  // continue from out_dir's newest checkpoint (its recorded config must match)
  bool overwrite = false;  // out_dir may hold a run: its entries are removed first
  bool out_dir_locked = false;  // the caller holds out_dir's RunDirLock (headroom ablate's runner)
  std::size_t stop_after = 0;  // > 0: stop after this step with a checkpoint, as an interrupt does
  std::function<void(const Progress&)> on_progress;  // after every step
  std::function<bool()> stop_requested;             // polled after every step (Ctrl-C)
  // With optim.track_heads: each head's statistics at a validation, given the model
  // (in eval mode) and the run's validation batches; the rows go to tracked_heads.csv. The
  // statistics live above this layer (interp/head_tracking.hpp, track_heads), so
  // the caller supplies them; train() refuses track_heads without it.
  std::function<std::vector<HeadTrack>(TransformerLM<float>&, const std::vector<Batch>&)> track_heads{};
  // A text only (the data a CharDataset): at every validation, this many characters
  // generated from the current weights (Progress::sample; 0: none). They are drawn
  // from an Rng of their own, in eval mode and without gradients, so a run's numbers
  // are the same with or without them; train() refuses it for a toy task.
  std::size_t sample_chars = 0;
};

// The data source a config names: a text file when data.text is set, else a task.
std::unique_ptr<Dataset> make_dataset(const TrainConfig& config);

// Fills in what follows from the data (model.vocab, model.max_len) and checks the
// whole config. Throws std::invalid_argument with one line naming the problem.
TrainConfig finalize(TrainConfig config, const Dataset& data);

// Trains. With a non-empty out_dir, writes out_dir/config.json before the first step,
// appends a row to out_dir/metrics.csv at every evaluation (flushed, so a crash
// loses nothing written; with optim.track_heads, the heads' rows to tracked_heads.csv
// too) and redraws out_dir/loss.svg from it (train/loss_plot.hpp), saves a rolling checkpoint every save_every steps and on
// an early stop (train/resume.hpp), and ends, finished (at optim.steps, or out of
// optim.patience: StopReason) or stopped early, with a checkpoint and
// out_dir/model.safetensors (metadata "step": its step). A resumed run removes the
// old model.safetensors first, and a diverged one writes none, so the file is never
// older than the newest checkpoint; without it, --model DIR reads that checkpoint.
// Resuming rewrites metrics.csv without the rows after the checkpoint's step, so the
// file reads as one run, and loss.svg with it. Bad steps: see TrainingDiverged.
TrainSummary train(const TrainConfig& config, const Dataset& data, const TrainOptions& options);
TrainSummary train(const TrainConfig& config, const Dataset& data, const std::string& out_dir,
                   const std::function<void(const Progress&)>& on_progress);

}  // namespace headroom
