// `headroom train`: train a small decoder-only transformer on a toy task or a text
// file, with a progress bar, validation, config.json and metrics.csv.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/interrupt.hpp"
#include "cli/progress.hpp"
#include "cli/train_flags.hpp"
#include "train/resources.hpp"
#include "train/trainer.hpp"
#include "cli/validators.hpp"
#include "data/task.hpp"
#include "data/task_defaults.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

// The shared settings (cli/train_flags.hpp) and what only `train` takes.
struct TrainCommandFlags : TrainFlags {
  std::string out;
  std::string resume;
  std::size_t stop_after = 0;
  bool quiet = false;
};

// More threads than cores is allowed (a config made on a bigger machine still runs)
// but slow: say so.
void warn_threads(int threads) {
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && static_cast<unsigned>(threads) > cores) {
    fmt::print(stderr, "headroom train: warning: --threads {} is more than this machine's {} cores\n", threads, cores);
  }
}

std::string rate(double tokens_per_s) {
  return tokens_per_s >= 1e6 ? fmt::format("{:.1f}M", tokens_per_s / 1e6) : fmt::format("{:.1f}k", tokens_per_s / 1e3);
}

int run_train(const TrainCommandFlags& flags) {
  // Ctrl-C or SIGTERM from here on stops the run cleanly at the next step boundary,
  // with a checkpoint (before the first step: with nothing saved).
  const InterruptGuard interrupt;
  // A resumed run takes everything that changes its numbers from its config.json.
  TrainConfig config = build_config(
      flags, flags.resume.empty() ? flags.config_file : (fs::path(flags.resume) / "config.json").string());
  config.validate();
  // A toy task's vocabulary is the config's: refuse a step that cannot fit before the
  // task is made (docs/design.md #10); a text's is known once it is read.
  if (config.data.text.empty()) check_training_memory(config);
  std::unique_ptr<Dataset> data = make_dataset(config);
  config = finalize(config, *data);
  check_training_memory(config, data->vocab_size());
  warn_threads(config.optim.threads);

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
  options.stop_requested = [] { return InterruptGuard::requested(); };
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
    if (tty) fmt::print("\n");
    throw;
  }
  if (s.stopped_early) {
    if (tty) fmt::print("\n");
    const char* why = InterruptGuard::requested() ? "interrupted" : "stopped";
    if (options.out_dir.empty()) {
      fmt::print("{} at step {} of {}; nothing saved (no --out)\n", why, s.steps, config.optim.steps);
    } else {
      fmt::print("{} at step {} of {}; checkpoint saved to {}\ncontinue with: headroom train --resume {}\n", why,
                 s.steps, config.optim.steps, s.checkpoint, options.out_dir);
    }
    return InterruptGuard::requested() ? InterruptGuard::exit_status() : 0;
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

// "--task recall has its own defaults: --seq-len 6 ...; --task before: --steps 3000
// --eval-every 250.", from the tasks' settings (data/task_defaults.hpp).
std::string task_defaults_help() {
  std::string help;
  for (const std::string& task : tasks_with_own_settings()) {
    const TaskSettings s = task_settings(task);
    std::string flags;
    auto add = [&](const char* flag, const auto& value) {
      if (value) flags += fmt::format(" {} {}", flag, *value);
    };
    add("--seq-len", s.seq_len);
    add("--vocab", s.vocab);
    add("--batch", s.batch);
    add("--lr", s.lr);
    if (s.constant_lr) flags += " --schedule constant";
    add("--weight-decay", s.weight_decay);
    add("--steps", s.steps);
    add("--eval-every", s.eval_every);
    help += help.empty() ? fmt::format("--task {} has its own defaults:{}", task, flags)
                         : fmt::format("; --task {}:{}", task, flags);
  }
  return help.empty() ? help : help + ".";
}

Run add_train_command(CLI::App& app) {
  auto f = std::make_shared<TrainCommandFlags>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a small decoder-only transformer on a toy task (--task) or a text file (--text), showing progress and "
      "validation loss and accuracy on the counted targets. Flags override --config FILE.json, which overrides the "
      "defaults shown. " + task_defaults_help());
  const TrainFlagGroups groups = add_train_flags(*cmd, *f);
  CLI::Option_group* model = groups.model;
  CLI::Option_group* data = groups.data;
  CLI::Option_group* opt = groups.training;

  CLI::Option* config = cmd->add_option(
      "--config", f->config_file,
      "Read settings from a JSON file like the config.json a run writes (at most 1 MiB; a key given twice is an error)");
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
