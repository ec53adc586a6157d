#include "cli/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/gemm.hpp"
#include "data/char_dataset.hpp"
#include "data/task.hpp"
#include "optim/optim.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Independent streams from one seed, so changing how many batches one part draws
// never shifts another part's numbers.
constexpr std::uint64_t kInitStream = 0;
constexpr std::uint64_t kTrainStream = 1;
constexpr std::uint64_t kValStream = 2;
std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t stream) { return seed * 0x9E3779B97F4A7C15ull + stream; }

// Writes text to path through a temporary file and a rename, so a reader never sees
// half a file.
void write_file_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) throw std::invalid_argument(fmt::format("cannot write {}", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw std::invalid_argument(fmt::format("cannot write {}: {}", path.string(), ec.message()));
}

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

EvalResult evaluate(TransformerLM<float>& model, const Dataset& data, std::size_t batches, std::size_t batch,
                    std::uint64_t seed) {
  NoGrad no_grad;
  const bool was_training = model.is_training();
  model.eval();
  Rng rng(seed);
  EvalResult r;
  double loss_sum = 0;
  std::size_t correct = 0;
  for (std::size_t i = 0; i < batches; ++i) {
    const Batch b = data.sample(batch, Split::val, rng);
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
    for (std::size_t i_ = 0; i_ < targets.size(); ++i_) {
      if (!b.target_mask.data()[i_]) continue;
      const float* row = pl + i_ * V;
      const auto arg = static_cast<std::size_t>(std::max_element(row, row + V) - row);
      correct += arg == static_cast<std::size_t>(targets.data()[i_]) ? 1 : 0;
    }
  }
  if (r.counted > 0) {
    r.loss = loss_sum / static_cast<double>(r.counted);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.counted);
  }
  model.train(was_training);
  return r;
}

TrainSummary train(const TrainConfig& config, const Dataset& data, const std::string& out_dir,
                   const std::function<void(const Progress&)>& on_progress) {
  const OptimConfig& o = config.optim;
  set_blas_threads(o.threads);

  Rng init_rng(stream_seed(o.seed, kInitStream));
  Rng data_rng(stream_seed(o.seed, kTrainStream));
  TransformerLM<float> model(config.model, init_rng);
  NamedParameters<float> params = model.named_parameters();
  std::unique_ptr<Optimizer<float>> optimizer = make_optimizer(o, params);
  const LrSchedule schedule = make_schedule(config);

  // Files only once everything that can reject the config has accepted it.
  std::ofstream metrics;
  if (!out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) throw std::invalid_argument(fmt::format("cannot create output directory {}: {}", out_dir, ec.message()));
    write_file_atomically(fs::path(out_dir) / "config.json", to_json(config).dump(2) + "\n");
    metrics.open(fs::path(out_dir) / "metrics.csv", std::ios::trunc);
    if (!metrics) throw std::invalid_argument(fmt::format("cannot write {}/metrics.csv", out_dir));
    metrics << "step,train_loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s\n" << std::flush;
  }


  TrainSummary summary;
  summary.parameters = model.parameter_count();
  const auto start = Clock::now();
  auto last_report = start;
  double loss_since = 0;
  std::size_t steps_since = 0;
  std::size_t tokens_since = 0;
  for (std::size_t step = 1; step <= o.steps; ++step) {
    const Batch batch = data.sample(o.batch, Split::train, data_rng);
    optimizer->zero_grad();
    Tensor<float> loss = model.loss(batch.tokens, &batch.target_mask);
    loss.backward();
    const double norm = o.clip > 0 ? clip_grad_norm(params, o.clip) : grad_norm(params);
    const double lr = schedule.lr_at(step);
    optimizer->set_lr(lr);
    // A non-finite gradient must not reach the weights: skip the update.
    if (std::isfinite(norm)) {
      optimizer->step();
    } else {
      ++summary.skipped_steps;
    }

    loss_since += loss.item();
    ++steps_since;
    tokens_since += o.batch * data.seq_len();
    Progress p{.step = step, .steps = o.steps, .lr = lr, .grad_norm = norm};
    const auto now = Clock::now();
    p.elapsed_s = std::chrono::duration<double>(now - start).count();
    const double window_s = std::chrono::duration<double>(now - last_report).count();
    p.train_loss = loss_since / static_cast<double>(steps_since);
    p.tokens_per_s = window_s > 0 ? static_cast<double>(tokens_since) / window_s : 0;
    if (step % o.eval_every == 0 || step == o.steps) {
      p.evaluated = true;
      p.val = evaluate(model, data, o.eval_batches, o.batch, stream_seed(o.seed, kValStream));
      if (p.val.accuracy > summary.best_val_accuracy || summary.best_step == 0) {
        summary.best_val_accuracy = p.val.accuracy;
        summary.best_step = step;
      }
      if (metrics.is_open()) {
        metrics << fmt::format("{},{:.6f},{:.6f},{:.6f},{:.6g},{:.6g},{:.1f}\n", step, p.train_loss, p.val.loss,
                               p.val.accuracy, lr, norm, p.tokens_per_s)
                << std::flush;
      }
      summary.final_train_loss = p.train_loss;
      summary.final_val = p.val;
      loss_since = 0;
      steps_since = 0;
      tokens_since = 0;
      last_report = Clock::now();
    }
    if (on_progress) on_progress(p);
  }
  summary.steps = o.steps;
  summary.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  summary.tokens_per_s = static_cast<double>(o.steps * o.batch * data.seq_len()) / summary.wall_s;
  return summary;
}

}  // namespace headroom::cli
