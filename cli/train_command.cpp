// `headroom train`: train a small decoder-only transformer on a toy task or a text
// file, with a progress bar, validation, config.json and metrics.csv.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "cli/trainer.hpp"
#include "data/task.hpp"
#include "nn/config_json.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

// Flags the user gave; each overrides --config, which overrides the defaults.
struct TrainFlags {
  std::string config_file;
  std::string out;
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
  std::string resume;
  std::size_t stop_after = 0;
  bool quiet = false;
};

// Set by SIGINT; the training loop polls it after every step, saves a checkpoint and
// stops. A second Ctrl-C gets the default action (saving is atomic, so nothing is
// left half-written even then).
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);
}

template <typename V>
void apply(std::optional<V> flag, V& target) {
  if (flag) target = *flag;
}

TrainConfig build_config(const TrainFlags& f) {
  const std::string config_file = f.resume.empty() ? f.config_file : (fs::path(f.resume) / "config.json").string();
  nlohmann::json object;
  if (!config_file.empty()) {
    std::ifstream in(config_file);
    if (!in) throw std::invalid_argument(fmt::format("cannot read config file {}", config_file));
    std::stringstream text;
    text << in.rdbuf();
    try {
      object = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::parse_error& e) {
      throw std::invalid_argument(fmt::format("{}: not valid JSON: {}", config_file, e.what()));
    }
  }
  // Precedence, lowest first: the task's defaults, the config file, the flags.
  std::string task = TrainConfig{}.data.task;
  if (object.is_object() && object.contains("data") && object["data"].is_object() &&
      object["data"].contains("task") && object["data"]["task"].is_string()) {
    task = object["data"]["task"].get<std::string>();
  }
  if (f.task) task = *f.task;
  TrainConfig c = task_defaults(task);
  if (!config_file.empty()) update_from_json(c, object, config_file);
  ModelConfig& m = c.model;
  apply(f.d_model, m.d_model);
  apply(f.heads, m.n_heads);
  apply(f.dk, m.d_k);
  apply(f.dv, m.d_v);
  apply(f.kv_heads, m.n_kv_heads);
  apply(f.layers, m.n_layers);
  apply(f.d_ff, m.d_ff);
  apply(f.max_len, m.max_len);
  if (f.norm) m.norm = parse_norm(*f.norm);
  if (f.activation) m.activation = parse_activation(*f.activation);
  if (f.pos) m.pos = parse_pos(*f.pos);
  if (f.attn_scale) m.attn_scale = *f.attn_scale;
  if (f.no_bias) m.bias = false;
  if (f.tie) m.tie_embeddings = true;
  if (f.non_causal) m.causal = false;
  apply(f.task, c.data.task);
  apply(f.text, c.data.text);
  apply(f.seq_len, c.data.seq_len);
  apply(f.vocab, c.data.vocab);
  OptimConfig& o = c.optim;
  apply(f.optimizer, o.optimizer);
  apply(f.schedule, o.schedule);
  apply(f.steps, o.steps);
  apply(f.batch, o.batch);
  apply(f.warmup, o.warmup);
  apply(f.eval_every, o.eval_every);
  apply(f.eval_batches, o.eval_batches);
  apply(f.save_every, o.save_every);
  apply(f.keep_checkpoints, o.keep_checkpoints);
  apply(f.max_bad_steps, o.max_bad_steps);
  if (f.detect_anomaly) o.detect_anomaly = true;
  apply(f.lr, o.lr);
  apply(f.min_lr, o.min_lr);
  apply(f.clip, o.clip);
  apply(f.weight_decay, o.weight_decay);
  apply(f.momentum, o.momentum);
  apply(f.seed, o.seed);
  apply(f.threads, o.threads);
  return c;
}

std::string duration(double s) {
  const auto total = static_cast<long>(s + 0.5);
  return total >= 3600 ? fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
                       : fmt::format("{}:{:02}", total / 60, total % 60);
}

std::string rate(double tokens_per_s) {
  return tokens_per_s >= 1e6 ? fmt::format("{:.1f}M", tokens_per_s / 1e6) : fmt::format("{:.1f}k", tokens_per_s / 1e3);
}

int run_train(const TrainFlags& flags) {
  // Ctrl-C from here on stops the run cleanly (before the first step: with nothing saved).
  g_interrupted = 0;
  std::signal(SIGINT, on_sigint);
  TrainConfig config = build_config(flags);
  config.validate();
  std::unique_ptr<Dataset> data = make_dataset(config);
  config = finalize(config, *data);

  const bool tty = isatty(fileno(stdout)) != 0 && !flags.quiet;
  const ModelConfig& m = config.model;
  fmt::print("headroom train: {} (vocab {}, seq_len {}), d_model {}, {} layers, {} heads (kv {}), d_k {}, d_v {}, "
             "{}-norm\n",
             data->name(), m.vocab, config.data.seq_len, m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.d_k, m.d_v,
             to_string(m.norm));
  if (const auto* task = dynamic_cast<const Task*>(data.get())) fmt::print("example: {}\n", task->example());
  std::fflush(stdout);

  TrainOptions options;
  options.out_dir = flags.resume.empty() ? flags.out : flags.resume;
  options.resume = !flags.resume.empty();
  options.stop_after = flags.stop_after;
  options.stop_requested = [] { return g_interrupted != 0; };
  if (options.resume) fmt::print("resuming {} from its newest checkpoint\n", flags.resume);
  std::fflush(stdout);

  double last_val_loss = NAN, last_val_acc = NAN;
  options.on_progress = [&](const Progress& p) {
    if (p.evaluated) {
      last_val_loss = p.val.loss;
      last_val_acc = p.val.accuracy;
    }
    const double eta = p.step > 0 ? p.elapsed_s * static_cast<double>(p.steps - p.step) / static_cast<double>(p.step) : 0;
    const std::string val = std::isnan(last_val_loss)
                                ? std::string("val -")
                                : fmt::format("val {:.4f} acc {:5.1f}%", last_val_loss, 100 * last_val_acc);
    if (tty) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(kWidth * p.step / p.steps);
      fmt::print("\r[{:<{}}] step {}/{}  loss {:.4f}  {}  {} tok/s  ETA {}\x1b[K", std::string(filled, '='), kWidth,
                 p.step, p.steps, p.train_loss, val, rate(p.tokens_per_s), duration(eta));
      if (p.step == p.steps) fmt::print("\n");
      std::fflush(stdout);
    } else if (p.evaluated && !flags.quiet) {
      fmt::print("step {:>6}/{}  loss {:.4f}  {}  lr {:.3g}  grad norm {:.3f}  {} tok/s  elapsed {}\n", p.step,
                 p.steps, p.train_loss, val, p.lr, p.grad_norm, rate(p.tokens_per_s), duration(p.elapsed_s));
      std::fflush(stdout);
    }
  };
  TrainSummary s;
  try {
    s = train(config, *data, options);
  } catch (...) {
    std::signal(SIGINT, SIG_DFL);
    if (tty) fmt::print("\n");
    throw;
  }
  std::signal(SIGINT, SIG_DFL);
  if (s.stopped_early) {
    if (tty) fmt::print("\n");
    const char* why = g_interrupted != 0 ? "interrupted" : "stopped";
    if (options.out_dir.empty()) {
      fmt::print("{} at step {} of {}; nothing saved (no --out)\n", why, s.steps, config.optim.steps);
    } else {
      fmt::print("{} at step {} of {}; checkpoint saved to {}\ncontinue with: headroom train --resume {}\n", why,
                 s.steps, config.optim.steps, s.checkpoint, options.out_dir);
    }
    return g_interrupted != 0 ? 130 : 0;
  }
  fmt::print("done: {} steps in {} ({} tok/s), {} parameters\n", s.steps - s.start_step, duration(s.wall_s),
             rate(s.tokens_per_s), s.parameters);
  if (s.skipped_steps > 0) fmt::print("skipped {} updates with a non-finite gradient norm\n", s.skipped_steps);
  fmt::print("final: train loss {:.4f}, val loss {:.4f}, val accuracy {:.2f}% (best {:.2f}% at step {})\n",
             s.final_train_loss, s.final_val.loss, 100 * s.final_val.accuracy, 100 * s.best_val_accuracy,
             s.best_step);
  if (!options.out_dir.empty()) {
    fmt::print("wrote {0}/config.json, {0}/metrics.csv and {0}/model.safetensors (checkpoints in "
               "{0}/checkpoints)\n",
               options.out_dir);
  }
  return 0;
}

}  // namespace

Run add_train_command(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a small decoder-only transformer on a toy task (--task) or a text file (--text), showing progress and "
      "validation loss and accuracy on the counted targets. Flags override --config FILE.json, which overrides the "
      "defaults shown. --task recall has its own defaults: --seq-len 6 --vocab 32 --batch 64 --lr 0.001 "
      "--schedule constant --weight-decay 0.1 --steps 6000 --eval-every 500.");
  const TrainConfig d;
  auto group = [&](const char* name) { return cmd->add_option_group(name); };

  CLI::Option_group* model = group("Model");
  model->add_option("--d-model", f->d_model, fmt::format("Model width (default {})", d.model.d_model))->check(kWholeNumber);
  model->add_option("--heads", f->heads, fmt::format("Query heads (default {})", d.model.n_heads))->check(kWholeNumber);
  model->add_option("--dk", f->dk, "Per-head query/key width (default d_model / heads)")->check(kPositiveWholeNumber);
  model->add_option("--dv", f->dv, "Per-head value width (default d_k)")->check(kPositiveWholeNumber);
  model->add_option("--kv-heads", f->kv_heads, "Key/value heads: 1 is MQA, fewer than --heads is GQA (default --heads)")->check(kPositiveWholeNumber);
  model->add_option("--layers", f->layers, fmt::format("Transformer blocks (default {})", d.model.n_layers))->check(kWholeNumber);
  model->add_option("--d-ff", f->d_ff, "Feed-forward width (default 4 * d_model)")->check(kPositiveWholeNumber);
  model->add_option("--max-len", f->max_len, "Longest sequence the model accepts (default --seq-len)")->check(kPositiveWholeNumber);
  model->add_option("--norm", f->norm, "pre | post (default pre)");
  model->add_option("--activation", f->activation, "gelu | gelu_tanh | relu (default gelu)");
  model->add_option("--pos", f->pos, "learned | sinusoidal (default learned)");
  model->add_option("--attn-scale", f->attn_scale, "Attention score scale (default 1/sqrt(d_k))")->check(kPositive);
  model->add_flag("--no-bias", f->no_bias, "Linear layers without bias");
  model->add_flag("--tie-embeddings", f->tie, "Share the output head with the token embedding");
  model->add_flag("--non-causal", f->non_causal, "Let every position attend to every position");

  CLI::Option_group* data = group("Data");
  std::string tasks;
  for (const auto& t : task_names()) tasks += (tasks.empty() ? "" : " | ") + t;
  data->add_option("--task", f->task, fmt::format("Toy task: {} (default {})", tasks, d.data.task));
  data->add_option("--text", f->text, "Train a character-level model on this UTF-8 text file instead of a task");
  data->add_option("--seq-len", f->seq_len, fmt::format("Tokens the model reads per row (default {})", d.data.seq_len))->check(kWholeNumber);
  data->add_option("--vocab", f->vocab, fmt::format("Toy task vocabulary, 3 special tokens included (default {})",
                                                   d.data.vocab))->check(kWholeNumber);

  CLI::Option_group* opt = group("Training");
  opt->add_option("--steps", f->steps, fmt::format("Optimizer steps (default {})", d.optim.steps))->check(kWholeNumber);
  opt->add_option("--batch", f->batch, fmt::format("Rows per step (default {})", d.optim.batch))->check(kWholeNumber);
  opt->add_option("--lr", f->lr, fmt::format("Peak learning rate, reached after --warmup steps (default {})",
                                             d.optim.lr))->check(kPositive);
  opt->add_option("--optimizer", f->optimizer, "adamw | adam | sgd (default adamw)");
  opt->add_option("--schedule", f->schedule,
                  "constant | cosine (linear warm-up, cosine decay to --min-lr) | inverse_sqrt (linear warm-up, "
                  "then lr * sqrt(warmup / t)) (default cosine)");
  opt->add_option("--warmup", f->warmup, fmt::format("Warm-up steps (default {})", d.optim.warmup))->check(kWholeNumber);
  opt->add_option("--min-lr", f->min_lr, "Floor of the cosine decay (default 0)")->check(kNonNegative);
  opt->add_option("--clip", f->clip, fmt::format("Clip the global gradient norm; 0 is off (default {})", d.optim.clip))->check(kNonNegative);
  opt->add_option("--weight-decay", f->weight_decay,
                  fmt::format("AdamW decoupled decay, skipping biases, norms and embeddings; L2 for adam and sgd "
                              "(default {})",
                              d.optim.weight_decay))->check(kNonNegative);
  opt->add_option("--momentum", f->momentum, "SGD momentum (default 0.9)")->check(kNonNegative);
  opt->add_option("--seed", f->seed, "Seed for weights, batches and dropout (default 0)")->check(kWholeNumber);
  opt->add_option("--threads", f->threads, "OpenBLAS threads (default 1)")->check(kWholeNumber);
  opt->add_option("--eval-every", f->eval_every, fmt::format("Steps between validations (default {})",
                                                            d.optim.eval_every))->check(kWholeNumber);
  opt->add_option("--eval-batches", f->eval_batches,
                  fmt::format("Validation batches per evaluation (default {})", d.optim.eval_batches))->check(kWholeNumber);

  opt->add_option("--save-every", f->save_every,
                  fmt::format("Steps between rolling checkpoints in --out; 0 saves only at the end and on Ctrl-C "
                              "(default {})",
                              d.optim.save_every))->check(kWholeNumber);
  opt->add_option("--keep-checkpoints", f->keep_checkpoints,
                  fmt::format("Rolling checkpoints kept (default {})", d.optim.keep_checkpoints))->check(kWholeNumber);
  opt->add_option("--max-bad-steps", f->max_bad_steps,
                  fmt::format("Stop after this many consecutive steps with a non-finite loss or gradient norm; "
                              "such steps never update the weights (default {})",
                              d.optim.max_bad_steps))->check(kWholeNumber);
  opt->add_flag("--detect-anomaly", f->detect_anomaly,
                "Check every op for NaN/Inf and name the first one that makes it (slower)");

  CLI::Option* config = cmd->add_option("--config", f->config_file,
                                        "Read settings from a JSON file like the config.json a run writes");
  CLI::Option* out = cmd->add_option("--out", f->out,
                                     "Write config.json, metrics.csv, checkpoints/ and model.safetensors into this "
                                     "directory");
  CLI::Option* resume = cmd->add_option(
      "--resume", f->resume,
      "Continue the run in this directory from its newest checkpoint, with its config.json; only --steps and the "
      "checkpointing flags may change");
  cmd->add_option("--stop-after", f->stop_after,
                  "Stop after this step with a checkpoint, as Ctrl-C does (for training in chunks)")->check(kWholeNumber);
  cmd->add_flag("-q,--quiet", f->quiet, "Print only the summary");

  // A resumed run is the same run: everything that changes its numbers comes from
  // its config.json.
  resume->excludes(config)->excludes(out);
  for (CLI::Option_group* g : {model, data}) {
    for (CLI::Option* o : g->get_options()) resume->excludes(o);
  }
  for (CLI::Option* o : opt->get_options()) {
    const std::string& name = o->get_name();
    const bool may_change = name == "--steps" || name == "--save-every" || name == "--keep-checkpoints" ||
                            name == "--max-bad-steps" || name == "--detect-anomaly";
    if (!may_change) resume->excludes(o);
  }
  return [f] { return run_train(*f); };
}

}  // namespace headroom::cli
