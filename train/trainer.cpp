#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "train/run_dir.hpp"
#include "train/resume.hpp"
#include "nn/checkpoint.hpp"
#include "data/char_dataset.hpp"
#include "data/task.hpp"
#include "optim/optim.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Independent streams from one seed (validation is validation_seed's stream).
constexpr std::uint64_t kInitStream = 0;
constexpr std::uint64_t kTrainStream = 1;

std::unique_ptr<Optimizer<float>> make_optimizer(const OptimConfig& o, NamedParameters<float> params) {
  if (o.optimizer == "adamw") {
    return std::make_unique<AdamW<float>>(std::move(params), AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
  }
  if (o.optimizer == "adam") {
    return std::make_unique<Adam<float>>(std::move(params), AdamOptions{.lr = o.lr, .weight_decay = o.weight_decay});
  }
  return std::make_unique<SGD<float>>(std::move(params),
                                      SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
}

LrSchedule make_schedule(const TrainConfig& c) {
  const OptimConfig& o = c.optim;
  // --lr is the peak for every schedule. inverse_sqrt peaks at t = warmup with
  // scale * (d_model * warmup)^-0.5, so we pick the scale that puts that peak at lr
  // (lr = (d_model * warmup)^-0.5 gives the paper's own constants).
  const double inverse_sqrt_scale =
      o.lr * std::sqrt(static_cast<double>(c.model.d_model) * static_cast<double>(std::max<std::size_t>(o.warmup, 1)));
  return LrSchedule::from_name(o.schedule, {.lr = o.lr, .warmup = o.warmup, .total_steps = o.steps,
                                            .min_lr = o.min_lr, .d_model = c.model.d_model,
                                            .scale = inverse_sqrt_scale});
}

}  // namespace

std::unique_ptr<Dataset> make_dataset(const TrainConfig& config) {
  const DataConfig& d = config.data;
  if (!d.text.empty()) return std::make_unique<CharDataset>(d.text, CharDatasetOptions{.seq_len = d.seq_len});
  return make_task(d.task, TaskOptions{.vocab = d.vocab, .seq_len = d.seq_len});
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
  (void)make_schedule(config);  // checks the schedule's name and settings
  return config;
}

std::vector<Batch> validation_batches(const Dataset& data, std::size_t batches, std::size_t batch,
                                      std::uint64_t seed) {
  Rng rng(seed);
  std::vector<Batch> out;
  out.reserve(batches);
  for (std::size_t i = 0; i < batches; ++i) out.push_back(data.sample(batch, Split::val, rng));
  return out;
}

EvalResult evaluate_batches(TransformerLM<float>& model, const std::vector<Batch>& batches) {
  NoGrad no_grad;
  const bool was_training = model.is_training();
  model.eval();
  EvalResult r;
  double loss_sum = 0;
  std::size_t correct = 0;
  for (const Batch& b : batches) {
    const auto [inputs, targets] = shift_tokens(b.tokens);
    const Tensor<float> logits = model.forward(inputs);  // (B, T, V)
    // The loss is the training loss itself (a mean over this batch's counted
    // targets); we weight it back to a sum so batches combine exactly.
    std::size_t counted = 0;
    for (bool c : b.target_mask) counted += c ? 1 : 0;
    loss_sum += static_cast<double>(cross_entropy(logits, targets, b.target_mask).item()) *
                static_cast<double>(counted);
    r.counted += counted;
    const std::size_t V = logits.shape()[2];
    const float* pl = logits.value().data();
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (!b.target_mask.data()[i]) continue;
      const float* row = pl + i * V;
      const auto arg = static_cast<std::size_t>(std::max_element(row, row + V) - row);
      correct += arg == static_cast<std::size_t>(targets.data()[i]) ? 1 : 0;
    }
  }
  if (r.counted > 0) {
    r.loss = loss_sum / static_cast<double>(r.counted);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.counted);
  }
  model.train(was_training);
  return r;
}

EvalResult evaluate(TransformerLM<float>& model, const Dataset& data, std::size_t batches, std::size_t batch,
                    std::uint64_t seed) {
  return evaluate_batches(model, validation_batches(data, batches, batch, seed));
}

namespace {

// metrics.csv's rows up to and including `step` (and the header), for a resumed
// run: the interrupted run may have written rows past its last checkpoint.
std::string metrics_up_to(const fs::path& file, std::size_t step) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument(fmt::format("cannot read {} to resume", file.string()));
  std::string line, kept;
  bool header = true;
  while (std::getline(in, line)) {
    if (!header) {
      const std::size_t comma = line.find(',');
      std::size_t row_step = 0;
      try {
        row_step = std::stoull(line.substr(0, comma));
      } catch (const std::logic_error&) {
        throw std::invalid_argument(fmt::format("{}: malformed row '{}'", file.string(), line));
      }
      if (row_step > step) break;
    }
    kept += line + "\n";
    header = false;
  }
  return kept;
}

std::string bad_step_message(std::size_t step, std::size_t bad, double loss, double norm, const std::string& ckpt,
                             const std::string& anomaly, bool detect_anomaly) {
  auto show = [](double v) { return std::isnan(v) ? std::string("nan") : fmt::format("{}", v); };
  const std::string what = !std::isfinite(loss) ? "loss " + show(loss) : "gradient norm " + show(norm);
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

}  // namespace

TrainSummary train(const TrainConfig& config, const Dataset& data, const std::string& out_dir,
                   const std::function<void(const Progress&)>& on_progress) {
  TrainOptions options;
  options.out_dir = out_dir;
  options.on_progress = on_progress;
  return train(config, data, options);
}

TrainSummary train(const TrainConfig& config, const Dataset& data, const TrainOptions& options) {
  const OptimConfig& o = config.optim;
  const std::string& out_dir = options.out_dir;
  set_threads(o.threads);

  Rng init_rng(stream_seed(o.seed, kInitStream));
  Rng data_rng(stream_seed(o.seed, kTrainStream));
  TransformerLM<float> model(config.model, init_rng);
  NamedParameters<float> params = model.named_parameters();
  std::unique_ptr<Optimizer<float>> optimizer = make_optimizer(o, params);
  const LrSchedule schedule = make_schedule(config);
  const std::map<std::string, std::string> metadata{{"data", data_metadata(config.data, data)}};

  TrainSummary summary;
  LoopState st;
  if (options.resume) {
    if (out_dir.empty()) throw std::invalid_argument("resume needs the run's output directory");
    const auto dir = latest_checkpoint(out_dir);
    if (!dir) throw std::invalid_argument(fmt::format("{} has no checkpoint to resume from", out_dir));
    st = load_training_checkpoint(*dir, config, model, *optimizer);
    if (st.step >= o.steps) {
      throw std::invalid_argument(fmt::format("{} is already at step {} of steps {}: nothing to resume; pass a larger "
                                              "--steps to train further",
                                              dir->string(), st.step, o.steps));
    }
    data_rng.set_state(st.data_rng);
    summary.start_step = st.step;
    summary.checkpoint = dir->string();
  }

  // Files only once everything that can reject the config has accepted it.
  std::ofstream metrics;
  if (!out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) throw std::invalid_argument(fmt::format("cannot create output directory {}: {}", out_dir, ec.message()));
    const fs::path metrics_file = fs::path(out_dir) / "metrics.csv";
    const std::string kept =
        options.resume ? metrics_up_to(metrics_file, st.step)
                       : std::string("step,train_loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s\n");
    write_file_atomically(fs::path(out_dir) / "config.json", to_json(config).dump(2) + "\n");
    write_file_atomically(metrics_file, kept);
    metrics.open(metrics_file, std::ios::app);
    if (!metrics) throw std::invalid_argument(fmt::format("cannot write {}", metrics_file.string()));
  }

  summary.parameters = model.parameter_count();
  summary.skipped_steps = st.skipped_steps;
  summary.best_val_accuracy = st.best_val_accuracy;
  summary.best_step = st.best_step;
  summary.final_train_loss = st.last_train_loss;
  summary.final_val = st.last_val;
  const auto start = Clock::now();
  auto last_report = start;
  std::string first_anomaly;
  std::size_t step = st.step;
  while (step < o.steps) {
    ++step;
    const Batch batch = data.sample(o.batch, Split::train, data_rng);
    optimizer->zero_grad();
    double loss_value = NAN, norm = NAN;
    try {
      std::optional<DetectAnomaly> anomaly;
      if (o.detect_anomaly) anomaly.emplace();
      Tensor<float> loss = model.loss(batch.tokens, &batch.target_mask);
      loss_value = loss.item();
      if (std::isfinite(loss_value)) {
        loss.backward();
        norm = o.clip > 0 ? clip_grad_norm(params, o.clip) : grad_norm(params);
      }
    } catch (const AnomalyError& e) {
      if (first_anomaly.empty()) first_anomaly = e.what();
    }
    clear_tape<float>();  // a skipped backward leaves the forward's history behind
    const double lr = schedule.lr_at(step);
    optimizer->set_lr(lr);
    // A non-finite loss or gradient must not reach the weights: skip the update.
    const bool good = std::isfinite(loss_value) && std::isfinite(norm);
    if (good) {
      optimizer->step();
      st.consecutive_bad = 0;
      st.loss_since += loss_value;
      ++st.steps_since;
    } else {
      ++st.skipped_steps;
      ++st.consecutive_bad;
      summary.skipped_steps = st.skipped_steps;
      if (st.consecutive_bad >= o.max_bad_steps) {
        throw TrainingDiverged(bad_step_message(step, st.consecutive_bad, loss_value, norm, summary.checkpoint,
                                                first_anomaly, o.detect_anomaly));
      }
    }
    st.step = step;
    st.tokens_since += o.batch * data.seq_len();

    Progress p{.step = step, .steps = o.steps, .lr = lr, .grad_norm = norm};
    const auto now = Clock::now();
    p.elapsed_s = st.elapsed_s + std::chrono::duration<double>(now - start).count();
    const double window_s = std::chrono::duration<double>(now - last_report).count();
    p.train_loss = st.steps_since > 0 ? st.loss_since / static_cast<double>(st.steps_since) : NAN;
    p.tokens_per_s = window_s > 0 ? static_cast<double>(st.tokens_since) / window_s : 0;
    if (step % o.eval_every == 0 || step == o.steps) {
      p.evaluated = true;
      p.val = evaluate(model, data, o.eval_batches, o.batch, validation_seed(o.seed));
      if (p.val.accuracy > st.best_val_accuracy || st.best_step == 0) {
        st.best_val_accuracy = p.val.accuracy;
        st.best_step = step;
      }
      if (metrics.is_open()) {
        metrics << fmt::format("{},{:.6f},{:.6f},{:.6f},{:.6g},{:.6g},{:.1f}\n", step, p.train_loss, p.val.loss,
                               p.val.accuracy, lr, norm, p.tokens_per_s)
                << std::flush;
      }
      st.last_train_loss = p.train_loss;
      st.last_val = p.val;
      st.loss_since = 0;
      st.steps_since = 0;
      st.tokens_since = 0;
      last_report = Clock::now();
    }
    if (options.on_progress) options.on_progress(p);

    const bool stop = (options.stop_requested && options.stop_requested()) ||
                      (options.stop_after > 0 && step >= options.stop_after);
    if (!out_dir.empty() &&
        (step == o.steps || stop || (good && o.save_every > 0 && step % o.save_every == 0))) {
      LoopState saved = st;
      saved.data_rng = data_rng.state();
      saved.elapsed_s = p.elapsed_s;
      summary.checkpoint =
          save_training_checkpoint(out_dir, config, model, *optimizer, saved, metadata, o.keep_checkpoints).string();
    }
    if (stop && step < o.steps) {
      summary.stopped_early = true;
      break;
    }
  }
  if (!out_dir.empty() && !summary.stopped_early) {
    const fs::path model_file = fs::path(out_dir) / "model.safetensors";
    save_checkpoint(model_file, model, config.model, metadata);
    summary.model_file = model_file.string();
  }
  summary.steps = step;
  summary.best_val_accuracy = st.best_val_accuracy;
  summary.best_step = st.best_step;
  summary.final_train_loss = st.last_train_loss;
  summary.final_val = st.last_val;
  summary.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  summary.tokens_per_s =
      static_cast<double>((step - summary.start_step) * o.batch * data.seq_len()) / std::max(summary.wall_s, 1e-9);
  return summary;
}

}  // namespace headroom
