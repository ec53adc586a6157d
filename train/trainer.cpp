#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "data/char_dataset.hpp"
#include "data/labelled_dataset.hpp"
#include "train/metrics.hpp"
#include "train/optim_setup.hpp"
#include "train/out_dir.hpp"
#include "train/resources.hpp"
#include "train/init_from.hpp"
#include "train/loss_plot.hpp"
#include "train/resume.hpp"
#include "train/run_dir.hpp"
#include "train/step.hpp"
#include "train/text_sample.hpp"
#include "nn/checkpoint.hpp"
#include "data/char_dataset.hpp"
#include "data/labelled_dataset.hpp"
#include "data/task.hpp"
#include "optim/optim.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;


}  // namespace

std::string to_string(StopReason reason) {
  switch (reason) {
    case StopReason::steps: return "steps";
    case StopReason::patience: return "patience";
    case StopReason::stopped: return "stopped";
  }
  return "steps";  // unreachable; keeps -Wreturn-type quiet
}

std::unique_ptr<Dataset> make_dataset(const TrainConfig& config) {
  const DataConfig& d = config.data;
  if (!d.text.empty() && !d.val_text.empty()) {
    return std::make_unique<CharDataset>(d.text, d.val_text, CharDatasetOptions{.seq_len = d.seq_len});
  }
  if (!d.text.empty()) return std::make_unique<CharDataset>(d.text, CharDatasetOptions{.seq_len = d.seq_len});
  if (!d.labelled.empty()) return std::make_unique<LabelledDataset>(read_labelled_tsv(d.labelled), d.seq_len);
  if (!d.corpus.empty()) {
    const Corpus corpus = load_corpus(d.corpus);
    if (corpus.kind == CorpusKind::labelled) return std::make_unique<LabelledDataset>(corpus, d.seq_len);
    return std::make_unique<CharDataset>(CharDataset::of_corpus(corpus, d.seq_len));
  }
  return make_task(d.task, task_options(d));
}

TrainConfig finalize(TrainConfig config, const Dataset& data) {
  config.validate();
  config.model.vocab = data.vocab_size();
  if (config.model.max_len == 0) config.model.max_len = config.data.seq_len;
  config.model = config.model.resolved();
  if (config.data.seq_len > config.model.max_len) {
    throw std::invalid_argument(fmt::format("seq_len {} is longer than the model's max_len {}", config.data.seq_len,
                                            config.model.max_len));
  }
  (void)make_schedule(config.optim);  // checks the schedule's settings
  return config;
}

namespace {

std::string bad_step_message(std::size_t step, std::size_t bad, const StepResult& r, const std::string& ckpt,
                             const std::string& anomaly, bool detect_anomaly) {
  auto show = [](double v) { return std::isnan(v) ? std::string("nan") : fmt::format("{}", v); };
  const std::string what = !std::isfinite(r.loss) ? "loss " + show(r.loss) : "gradient norm " + show(r.grad_norm);
  std::string m = fmt::format(
      "training stopped at step {}: {} consecutive steps with a non-finite loss or gradient norm (this one: {}); "
      "the weights were not updated by them; last good checkpoint: {}",
      step, bad, what, ckpt.empty() ? "none" : ckpt);
  if (!anomaly.empty()) {
    m += "; first NaN/Inf: " + anomaly;
  } else if (!detect_anomaly) {
    m += "; rerun with --detect-anomaly to name the op that made the first NaN or Inf";
  }
  return m;
}

// One run of the loop: what train() builds from the config, and the hooks it calls
// around each train_step (evaluate, metrics, progress, checkpoints, stop).
class Loop {
 public:
  Loop(const TrainConfig& config, const Dataset& data, const TrainOptions& options)
      : config_(config), o_(config.optim), data_(data), options_(options), out_dir_(options.out_dir),
        init_rng_(stream_seed(o_.seed, kInitStream)), data_rng_(stream_seed(o_.seed, kTrainStream)),
        model_(config.model, init_rng_), optimizer_(make_optimizer(o_, model_.named_parameters())),
        schedule_(make_schedule(config.optim)), metadata_{{kDataMetadataKey, data_metadata(config.data, data)}},
        text_(dynamic_cast<const CharDataset*>(&data)) {
    // Uptraining starts from the weights of init_from, pooled to this model's kv heads
    // (docs/design.md #19); a resumed run loads its own checkpoint instead.
    if (!o_.init_from.empty() && !options.resume) load_init_weights(config_, model_);
  }

  TrainSummary run() {
    if (options_.resume) resume();
    open_files();  // only once everything that can reject the config has accepted it
    start_summary();
    start_ = last_report_ = Clock::now();
    std::size_t step = state_.step;
    while (step < o_.steps) {
      ++step;
      const Batch batch = data_.sample(o_.batch, Split::train, data_rng_);
      const double lr = schedule_.lr_at(step);
      const StepResult r = train_step(model_, *optimizer_, batch,
                                      {.lr = lr,
                                       .clip = o_.clip,
                                       .detect_anomaly = o_.detect_anomaly,
                                       .dropout_seed = dropout_step_seed(o_.seed, step)});
      count(step, r);
      const Progress p = report(step, lr, r);
      if (options_.on_progress) options_.on_progress(p);
      const bool stop = (options_.stop_requested && options_.stop_requested()) ||
                        (options_.stop_after > 0 && step >= options_.stop_after);
      // Out of patience at this step's validation: the run is finished, even when a
      // stop was asked for at the same step.
      const bool out_of_patience = p.evaluated && out_of_patience_;
      if (step == o_.steps || stop || out_of_patience ||
          (r.updated && o_.save_every > 0 && step % o_.save_every == 0)) {
        checkpoint(p.elapsed_s);
      }
      if (out_of_patience) {
        summary_.stop_reason = StopReason::patience;
        break;
      }
      if (stop && step < o_.steps) {
        summary_.stopped_early = true;
        summary_.stop_reason = StopReason::stopped;
        break;
      }
    }
    return finish(step);
  }

 private:
  void resume() {  // train() has refused a resume without an out_dir
    const fs::path dir = checkpoint_to_resume(out_dir_, o_);
    state_ = load_training_checkpoint(dir, config_, model_, *optimizer_, (out_dir_ / "config.json").string());
    data_rng_.set_state(state_.data_rng);
    summary_.start_step = state_.step;
    summary_.checkpoint = dir.string();
  }

  // The directory exists and is ours (open_out_dir). A resumed run's model.safetensors
  // is its checkpoint's model and would go stale with the first step, so it goes:
  // until this run stops, --model DIR reads the newest checkpoint. Everything that
  // reads (and can refuse) comes before anything that writes.
  void open_files() {
    if (out_dir_.empty()) return;
    const std::string metrics_text = MetricsWriter::initial_text(out_dir_, options_.resume, state_.step);
    const std::string heads_text =
        o_.track_heads ? HeadLogWriter::initial_text(out_dir_, options_.resume, state_.step) : std::string();
    if (options_.resume) restore_validations(metrics_text);
    const fs::path stale_model = out_dir_ / "model.safetensors";
    std::error_code ec;
    fs::remove(stale_model, ec);
    if (ec) throw std::invalid_argument(fmt::format("cannot remove {}: {}", stale_model.string(), ec.message()));
    write_file_atomically(out_dir_ / "config.json", to_json(config_).dump(2) + "\n");
    metrics_ = MetricsWriter::open(out_dir_, metrics_text);
    if (o_.track_heads) heads_ = HeadLogWriter::open(out_dir_, heads_text);
    // The interrupted run may have drawn rows past its checkpoint that metrics.csv
    // has just lost: the plot follows the file from the start.
    if (options_.resume) plot_losses();
  }

  void plot_losses() {
    write_loss_plot(out_dir_, fmt::format("{}: loss during training", data_.name()),
                    per_character() ? LossTargets::characters : LossTargets::tokens);
  }

  // A text's losses are per character (docs/cli/train.md); a toy task's per target token.
  bool per_character() const { return text_ != nullptr; }
  std::optional<double> bpc(double loss) const {
    return per_character() ? std::optional<double>(bits_per_char(loss)) : std::nullopt;
  }

  // A resumed run's validations before its checkpoint, as metrics.csv recorded them,
  // and early stopping's state after them (train/resume.hpp, patience_ran_out, says
  // why from the file): checkpoint_to_resume has refused a run already out of patience.
  void restore_validations(const std::string& metrics_text) {
    validations_ = validations(read_metrics_text(metrics_text, (out_dir_ / "metrics.csv").string()));
    for (const ValPoint& v : validations_) observe(early_stop_, v, o_.min_delta, o_.patience);
  }

  void start_summary() {
    summary_.parameters = model_.parameter_count();
    summary_.skipped_steps = state_.skipped_steps;
  }

  // The running sums of a step; a run of max_bad_steps bad steps ends the run.
  void count(std::size_t step, const StepResult& r) {
    if (!r.anomaly.empty() && first_anomaly_.empty()) first_anomaly_ = r.anomaly;
    const std::size_t bad = record_step(state_, r.updated, r.loss);
    summary_.skipped_steps = state_.skipped_steps;
    if (bad >= o_.max_bad_steps) {
      throw TrainingDiverged(
          bad_step_message(step, bad, r, summary_.checkpoint, first_anomaly_, o_.detect_anomaly));
    }
    state_.step = step;
    state_.tokens_since += o_.batch * data_.seq_len();
  }

  // The step's progress report, with a validation (and a metrics row) every
  // eval_every steps and at the last.
  Progress report(std::size_t step, double lr, const StepResult& r) {
    Progress p{.step = step, .steps = o_.steps, .lr = lr, .grad_norm = r.grad_norm};
    const auto now = Clock::now();
    p.elapsed_s = state_.elapsed_s + std::chrono::duration<double>(now - start_).count();
    const double window_s = std::chrono::duration<double>(now - last_report_).count();
    p.train_loss = state_.steps_since > 0 ? state_.loss_since / static_cast<double>(state_.steps_since) : NAN;
    p.tokens_per_s = window_s > 0 ? static_cast<double>(state_.tokens_since) / window_s : 0;
    if (step % o_.eval_every != 0 && step != o_.steps) return p;
    validate(step, lr, r, p);
    return p;
  }

  // A validation: p.val (and p.sample), the run's bests, early stopping, the rows of
  // metrics.csv (and tracked_heads.csv) and the plot.
  void validate(std::size_t step, double lr, const StepResult& r, Progress& p) {
    p.evaluated = true;
    if (val_batches_.empty()) val_batches_ = validation_batches(data_, o_.eval_batches, o_.batch, validation_seed(o_.seed));
    p.val = evaluate_batches(model_, val_batches_);  // the same batches at every validation
    if (o_.track_heads) {
      const bool was_training = model_.is_training();
      model_.eval();
      const std::vector<HeadTrack> heads = options_.track_heads(model_, val_batches_);
      model_.train(was_training);
      heads_.append(step, heads);
    }
    // Its own Rng, under NoGrad and in eval mode: the run's numbers do not see it.
    if (options_.sample_chars > 0) p.sample = sample_characters(model_, text_->vocab(), options_.sample_chars);
    if (p.val.accuracy > state_.best_val_accuracy || state_.best_step == 0) {
      state_.best_val_accuracy = p.val.accuracy;
      state_.best_step = step;
    }
    const std::optional<double> excess = p.val.excess_loss();
    if (excess && std::isfinite(*excess) && (!state_.best_excess_loss || *excess < *state_.best_excess_loss)) {
      state_.best_excess_loss = excess;
    }
    validations_.push_back({.step = step, .val_loss = as_recorded(p.val.loss)});
    out_of_patience_ = observe(early_stop_, validations_.back(), o_.min_delta, o_.patience);
    metrics_.append({.step = step, .train_loss = p.train_loss, .val_loss = p.val.loss,
                     .val_accuracy = p.val.accuracy, .val_excess_loss = excess, .lr = lr, .grad_norm = r.grad_norm,
                     .tokens_per_s = p.tokens_per_s, .icl_score = p.val.icl_score,
                     .train_bpc = bpc(p.train_loss), .val_bpc = bpc(p.val.loss)});
    if (!out_dir_.empty()) plot_losses();
    state_.last_train_loss = p.train_loss;
    state_.last_val = p.val;
    state_.loss_since = 0;
    state_.steps_since = 0;
    state_.tokens_since = 0;
    last_report_ = Clock::now();
  }

  void checkpoint(double elapsed_s) {
    if (out_dir_.empty()) return;
    LoopState saved = state_;
    saved.data_rng = data_rng_.state();
    saved.elapsed_s = elapsed_s;
    summary_.checkpoint =
        save_training_checkpoint(out_dir_, config_, model_, *optimizer_, saved, model_metadata(), o_.keep_checkpoints)
            .string();
  }

  // The metadata of a model file: what it was trained on, and after which step.
  std::map<std::string, std::string> model_metadata() const {
    std::map<std::string, std::string> m = metadata_;
    m[kStepMetadataKey] = std::to_string(state_.step);
    return m;
  }

  TrainSummary finish(std::size_t step) {
    // A run that ends unable to predict (every late step skipped, say) is a failure,
    // not a model: we say so instead of writing model.safetensors.
    if (!summary_.stopped_early && !std::isfinite(state_.last_val.loss)) {
      throw TrainingDiverged(fmt::format(
          "training ended at step {} with a non-finite validation loss ({}), so no model.safetensors was written; "
          "{} of {} updates were skipped for a non-finite loss or gradient norm (lower --lr, or keep --clip on)",
          step, std::isnan(state_.last_val.loss) ? std::string("nan") : fmt::format("{}", state_.last_val.loss),
          state_.skipped_steps, step));
    }
    // Finished or stopped early, the model file is the newest state: the one the
    // last checkpoint holds.
    if (!out_dir_.empty()) {
      const fs::path model_file = out_dir_ / "model.safetensors";
      save_checkpoint(model_file, model_, config_.model, model_metadata());
      summary_.model_file = model_file.string();
    }
    summary_.steps = step;
    summary_.best_val_accuracy = state_.best_val_accuracy;
    summary_.best_step = state_.best_step;
    summary_.final_train_loss = state_.last_train_loss;
    summary_.final_val = state_.last_val;
    summary_.bayes_loss = state_.last_val.bayes_loss;
    summary_.final_excess_loss = state_.last_val.excess_loss();
    summary_.best_excess_loss = state_.best_excess_loss;
    summary_.convergence = convergence(validations_, o_.min_delta);
    summary_.early_stop = early_stop_;
    summary_.wall_s = std::chrono::duration<double>(Clock::now() - start_).count();
    summary_.tokens_per_s = static_cast<double>((step - summary_.start_step) * o_.batch * data_.seq_len()) /
                            std::max(summary_.wall_s, 1e-9);
    return summary_;
  }

  const TrainConfig& config_;
  const OptimConfig& o_;
  const Dataset& data_;
  const TrainOptions& options_;
  const fs::path out_dir_;
  Rng init_rng_, data_rng_;
  TransformerLM<float> model_;
  std::unique_ptr<Optimizer<float>> optimizer_;
  const LrSchedule schedule_;
  const std::map<std::string, std::string> metadata_;
  const CharDataset* text_;  // the data, when it is a text
  LoopState state_;
  TrainSummary summary_;
  MetricsWriter metrics_;
  HeadLogWriter heads_;             // optim.track_heads only
  std::vector<Batch> val_batches_;  // drawn at the first validation
  std::string first_anomaly_;
  Clock::time_point start_, last_report_;
  std::vector<ValPoint> validations_;  // every validation of the run, as metrics.csv records it
  EarlyStopState early_stop_;
  bool out_of_patience_ = false;  // at the latest validation
};

}  // namespace

TrainSummary train(const TrainConfig& config, const Dataset& data, const std::string& out_dir,
                   const std::function<void(const Progress&)>& on_progress) {
  TrainOptions options;
  options.out_dir = out_dir;
  options.on_progress = on_progress;
  return train(config, data, options);
}

TrainSummary train(const TrainConfig& config, const Dataset& data, const TrainOptions& options) {
  if (config.optim.track_heads && !options.track_heads) {
    throw std::invalid_argument("train.track_heads is on, but no head statistics were given (TrainOptions::track_heads)");
  }
  if (options.sample_chars > 0 && dynamic_cast<const CharDataset*>(&data) == nullptr) {
    throw std::invalid_argument(fmt::format(
        "TrainOptions::sample_chars {}: samples are characters, and {} is not a text", options.sample_chars,
        data.name()));
  }
  // Before the model, the optimizer or the run directory take anything (docs/design.md #12).
  check_training_memory(config, data.vocab_size());
  // Before the model is allocated: the directory is checked, ours, and clean.
  RunDirLock lock;
  if (!options.out_dir.empty()) {
    const OutDirUse use = options.resume      ? OutDirUse::resume
                          : options.overwrite ? OutDirUse::overwrite
                                              : OutDirUse::fresh;
    lock = open_out_dir(options.out_dir, use, options.out_dir_locked);
  } else if (options.resume) {
    throw std::invalid_argument("resume needs the run's output directory");
  }
  set_threads(training_threads(config, data.vocab_size()).used);
  return Loop(config, data, options).run();
}

}  // namespace headroom
