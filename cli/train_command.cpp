// `headroom train`: train a small decoder-only transformer on a toy task or a text
// file, with a progress bar, validation, config.json and metrics.csv.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/interrupt.hpp"
#include "cli/progress.hpp"
#include "cli/train_flags.hpp"
#include "nn/presets.hpp"
#include "train/evaluate.hpp"
#include "train/init_from.hpp"
#include "train/out_dir.hpp"
#include "train/resume.hpp"
#include "train/resources.hpp"
#include "train/trainer.hpp"
#include "cli/validators.hpp"
#include "data/char_dataset.hpp"
#include "data/labelled_dataset.hpp"
#include "data/task.hpp"
#include "data/task_defaults.hpp"
#include "interp/attention_maps.hpp"
#include "interp/head_tracking.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

// The shared settings (cli/train_flags.hpp) and what only `train` takes.
struct TrainCommandFlags : TrainFlags {
  std::optional<std::string> out;  // none: default_out_dir (train/out_dir.hpp)
  std::optional<std::string> resume;
  std::optional<std::size_t> stop_after;
  bool overwrite = false;
  bool no_save = false;
  bool quiet = false;
  std::optional<std::size_t> sample_chars;  // none: kDefaultSampleChars for a text, none for a task
};

// A text run's sample at each validation: a line's worth by default, and a cap that
// keeps one validation from writing pages.
constexpr std::size_t kDefaultSampleChars = 100;
constexpr std::size_t kMaxSampleChars = 10000;

// The flags that are wrong on their own, before any config is read.
void check_flags(const TrainCommandFlags& flags) {
  if (flags.out && flags.out->empty()) {
    throw std::invalid_argument(
        "--out: the path is empty; give a directory, or --no-save for a run that saves nothing");
  }
  if (flags.resume && flags.resume->empty()) {
    throw std::invalid_argument("--resume: the path is empty; give the directory of the run to continue");
  }
  if (flags.stop_after && *flags.stop_after == 0) {
    throw std::invalid_argument("--stop-after 0: the step to stop after must be at least 1");
  }
  if (flags.sample_chars && *flags.sample_chars > kMaxSampleChars) {
    throw std::invalid_argument(
        fmt::format("--sample-chars: at most {}, got {}", kMaxSampleChars, *flags.sample_chars));
  }
  if (flags.sample_chars && *flags.sample_chars > 0 && flags.quiet) {
    throw std::invalid_argument(fmt::format(
        "--sample-chars {}: --quiet prints only the summary, so it would be ignored; give one or the other",
        *flags.sample_chars));
  }
}

// The characters to sample at each validation: only a text has characters, so an
// explicit --sample-chars for a toy task is refused rather than ignored.
std::size_t sample_chars_of(const TrainCommandFlags& flags, const TrainConfig& config) {
  if (!is_char_model(config.data)) {
    if (flags.sample_chars && *flags.sample_chars > 0) {
      throw std::invalid_argument(fmt::format(
          "--sample-chars {}: samples are characters of a text (--text, --corpus kjv); {} writes none",
          *flags.sample_chars, is_classifier(config.data) ? "a classifier" : "a toy task"));
    }
    return 0;
  }
  return flags.quiet ? 0 : flags.sample_chars.value_or(kDefaultSampleChars);
}

// A loss as the terminal shows it: a text's, in nats per character, with its bits
// per character beside it; a toy task's alone.
std::string shown_loss(double loss, bool text) {
  return text ? fmt::format("{:.4f} ({:.3f} bpc)", loss, bits_per_char(loss)) : fmt::format("{:.4f}", loss);
}

// Where the run writes: --resume's or --out's directory, the default one, or nothing
// (--no-save). The directory is checked here, before anything is printed or
// allocated; train() checks it again under the run's lock.
std::string out_dir_of(const TrainCommandFlags& flags, const TrainConfig& config) {
  if (flags.resume) {
    (void)check_out_dir(*flags.resume, OutDirUse::resume);
    return *flags.resume;
  }
  if (flags.no_save) return "";
  const std::string dir = flags.out ? *flags.out : default_out_dir(config).string();
  (void)check_out_dir(dir, flags.overwrite ? OutDirUse::overwrite : OutDirUse::fresh);
  return dir;
}

// More threads than cores is allowed (a config made on a bigger machine still runs)
// but slow: say so.
void warn_threads(int threads) {
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && static_cast<unsigned>(threads) > cores) {
    fmt::print(stderr, "headroom train: warning: --threads {} is more than this machine's {} cores\n", threads, cores);
  }
}

// The convergence line of the summary (train/convergence.hpp's rule, docs/cli/train.md).
std::string convergence_line(const Convergence& c, double min_delta) {
  const std::string trend =
      fmt::format("{:+.4g} per validation over the last {} validations", -c.fall_per_eval, c.window);
  switch (c.status) {
    case ConvergenceStatus::falling:
      return fmt::format("val loss still falling ({}): more steps would lower it", trend);
    case ConvergenceStatus::converged:
      return fmt::format("val loss converged ({}: no fall beyond its noise and --min-delta {})", trend, min_delta);
    case ConvergenceStatus::unknown: break;
  }
  return fmt::format("val loss trend unknown (it needs {} finite validations; a smaller --eval-every gives more)",
                     kConvergenceMinPoints);
}

std::string rate(double tokens_per_s) {
  return tokens_per_s >= 1e6 ? fmt::format("{:.1f}M", tokens_per_s / 1e6) : fmt::format("{:.1f}k", tokens_per_s / 1e3);
}

// What a text run reads, split by split: characters for a language model; items per
// label for a classifier, with what the corpus left out and what a row cuts short.
void print_text_counts(const Dataset& data) {
  if (const auto* chars = dynamic_cast<const CharDataset*>(&data)) {
    fmt::print("data: {} characters train, {} val\n", chars->split_size(Split::train), chars->split_size(Split::val));
    return;
  }
  const auto* items = dynamic_cast<const LabelledDataset*>(&data);
  if (items == nullptr) return;
  const std::vector<std::size_t> train = items->label_counts(Split::train), val = items->label_counts(Split::val);
  std::string per_label;
  for (std::size_t i = 0; i < train.size(); ++i) {
    per_label += fmt::format("{}{} {}/{}", i == 0 ? "" : ", ", items->labels()[i], train[i], val[i]);
  }
  fmt::print("data: {} labels, {} items train, {} val (train/val by label: {})\n", items->labels().size(),
             items->items(Split::train), items->items(Split::val), per_label);
  fmt::print("data: {} duplicate and {} conflicting items left out; {} train and {} val items cut to seq_len - 1 = {} "
             "characters\n",
             items->duplicates(), items->ambiguous(), items->truncated(Split::train), items->truncated(Split::val),
             items->seq_len() - 1);
}

int run_train(const TrainCommandFlags& flags) {
  // Ctrl-C or SIGTERM from here on stops the run cleanly at the next step boundary,
  // with a checkpoint (before the first step: with nothing saved).
  const InterruptGuard interrupt;
  // A resumed run takes everything that changes its numbers from its config.json.
  check_flags(flags);
  OpenDefaults open;
  TrainConfig config = build_config(
      flags, flags.resume ? (fs::path(*flags.resume) / "config.json").string() : flags.config_file, &open);
  // A resume to a step the run has passed says so, before any check of the steps.
  if (flags.resume) (void)checkpoint_to_resume(*flags.resume, config.optim);
  check_flags_read(flags, {config});
  const std::size_t sample_chars = sample_chars_of(flags, config);
  const bool text = is_char_model(config.data);
  if (config.optim.track_heads && flags.no_save) {
    throw std::invalid_argument("--track-heads writes DIR/tracked_heads.csv and DIR/tracked_heads.svg: not with --no-save");
  }
  // Uptraining: DIR's data and model must be this run's, before anything is printed
  // (a resumed run reads its own checkpoint, not DIR).
  std::optional<InitSource> init_source;
  if (!config.optim.init_from.empty() && !flags.resume) {
    init_source = read_init_source(config.optim.init_from);
    if (flags.overwrite && flags.out) check_init_from_outside(*init_source, *flags.out);
    check_init_data(config, *init_source);
  }
  config.validate();
  // A toy task's vocabulary is the config's: refuse a step that cannot fit before the
  // task is made (docs/design.md #12); a text's is known once it is read.
  if (!reads_text(config.data)) {
    check_training_memory(config);
  } else {
    check_text_memory(config);
  }
  std::unique_ptr<Dataset> data = make_dataset(config);
  config = finalize(config, *data);
  if (init_source) check_init_source(config, *init_source);
  check_training_memory(config, data->vocab_size());
  warn_threads(config.optim.threads);
  const std::string out_dir = out_dir_of(flags, config);

  const bool tty = isatty(fileno(stdout)) != 0 && !flags.quiet;
  const ModelConfig& m = config.model;
  std::string blocks;  // rope, rmsnorm, swiglu, ... where they are not GPT-2's (nn/presets.hpp)
  for (const std::string& b : block_choices(m)) blocks += ", " + b;
  fmt::print("headroom train: {} (vocab {}, seq_len {}), d_model {}, {} layers, {} heads (kv {}), d_k {}, d_v {}, "
             "{}{}{}\n",
             data->name(), m.vocab, config.data.seq_len, m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.d_k, m.d_v,
             m.norm == NormPlacement::none ? std::string("no norm") : to_string(m.norm) + "-norm", blocks,
             m.attn_only ? ", attention-only" : "");
  if (const auto* task = dynamic_cast<const Task*>(data.get())) fmt::print("example: {}\n", task->example());
  print_text_counts(*data);
  // A rate other than the global default that nobody asked for is said before the run.
  if (open.lr && config.optim.lr != OptimConfig{}.lr) {
    fmt::print("lr {}: the default for a model without norms (--lr to choose another)\n", config.optim.lr);
  }
  if (const ThreadChoice t = training_threads(config, data->vocab_size()); !t.why.empty()) {
    fmt::print("threads: {}\n", t.why);
  }
  std::fflush(stdout);

  TrainOptions options;
  options.out_dir = out_dir;
  if (config.optim.track_heads) options.track_heads = track_heads;
  options.resume = flags.resume.has_value();
  options.overwrite = flags.overwrite;
  options.stop_after = flags.stop_after.value_or(0);
  options.stop_requested = [] { return InterruptGuard::requested(); };
  options.sample_chars = sample_chars;
  if (options.resume) {
    fmt::print("resuming {} from its newest checkpoint\n", *flags.resume);
  } else if (!flags.out && !flags.no_save) {
    fmt::print("saving to {} (--out DIR to choose, --no-save to keep nothing)\n", out_dir);
  }
  // The floor of the validation loss, once: every validation scores the same targets
  // (docs/design.md #15).
  const OptimConfig& o = config.optim;
  if (const std::optional<double> bayes =
          bayes_loss(validation_batches(*data, o.eval_batches, o.batch, validation_seed(o.seed)))) {
    fmt::print("bayes loss {:.4f} on the validation targets (the true distribution's loss; excess = val - bayes)\n",
               *bayes);
  }
  std::fflush(stdout);

  double last_val_loss = NAN, last_val_acc = NAN;
  std::optional<double> last_excess;
  options.on_progress = [&](const Progress& p) {
    if (p.evaluated) {
      last_val_loss = p.val.loss;
      last_val_acc = p.val.accuracy;
      last_excess = p.val.excess_loss();
    }
    const double eta = p.step > 0 ? p.elapsed_s * static_cast<double>(p.steps - p.step) / static_cast<double>(p.step) : 0;
    const std::string excess = last_excess ? fmt::format(" excess {:.4f}", *last_excess) : std::string();
    const std::string val =
        std::isnan(last_val_loss)
            ? std::string("val -")
            : fmt::format("val {}{} acc {:5.1f}%", shown_loss(last_val_loss, text), excess, 100 * last_val_acc);
    // What the model writes now, on a line of its own (above the bar on a terminal).
    const std::string sample =
        p.sample.empty() ? std::string() : fmt::format("sample at step {}: {}\n", p.step, one_line_text(p.sample));
    if (tty) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(kWidth * p.step / p.steps);
      if (!sample.empty()) fmt::print("\r\x1b[K{}", sample);
      fmt::print("\r[{:<{}}] step {}/{}  loss {}  {}  {} tok/s  ETA {}\x1b[K", std::string(filled, '='), kWidth,
                 p.step, p.steps, shown_loss(p.train_loss, text), val, rate(p.tokens_per_s), duration(eta));
      if (p.step == p.steps) fmt::print("\n");
      std::fflush(stdout);
    } else if (p.evaluated && !flags.quiet) {
      fmt::print("step {:>6}/{}  loss {}  {}  lr {:.3g}  grad norm {:.3f}  {} tok/s  elapsed {}\n{}", p.step,
                 p.steps, shown_loss(p.train_loss, text), val, p.lr, p.grad_norm, rate(p.tokens_per_s),
                 duration(p.elapsed_s), sample);
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
  // The tracked heads' plot, from what tracked_heads.csv holds so far (a stopped run too).
  std::string heads_plot;
  if (config.optim.track_heads && !options.out_dir.empty() && s.steps > s.start_step) {
    heads_plot = write_head_tracking_plot(options.out_dir);
  }
  if (s.stopped_early) {
    if (tty) fmt::print("\n");
    const char* why = InterruptGuard::requested() ? "interrupted" : "stopped";
    if (options.out_dir.empty()) {
      fmt::print("{} at step {} of {}; not saved (--no-save)\n", why, s.steps, config.optim.steps);
    } else {
      fmt::print("{} at step {} of {}; checkpoint saved to {}\ncontinue with: headroom train --resume {}\n", why,
                 s.steps, config.optim.steps, s.checkpoint, options.out_dir);
    }
    return InterruptGuard::requested() ? InterruptGuard::exit_status() : 0;
  }
  if (tty && s.stop_reason == StopReason::patience) fmt::print("\n");  // the bar stopped short of its end
  fmt::print("done: {} steps in {} ({} tok/s), {} parameters\n", s.steps - s.start_step, duration(s.wall_s),
             rate(s.tokens_per_s), s.parameters);
  if (s.stop_reason == StopReason::patience) {
    fmt::print("out of patience at step {} of {}: {} validations in a row without the val loss falling more than "
               "--min-delta {} below {:.4f}, its value at its last improvement (step {})\n",
               s.steps, config.optim.steps, config.optim.patience, config.optim.min_delta, s.early_stop.best,
               s.early_stop.best_step);
  }
  if (s.skipped_steps > 0) fmt::print("skipped {} updates with a non-finite gradient norm\n", s.skipped_steps);
  fmt::print("final: train loss {}, val loss {}, val accuracy {:.2f}% (best {:.2f}% at step {})\n",
             shown_loss(s.final_train_loss, text), shown_loss(s.final_val.loss, text), 100 * s.final_val.accuracy,
             100 * s.best_val_accuracy, s.best_step);
  if (s.final_excess_loss && s.bayes_loss) {
    fmt::print("excess loss {:.4f} (val loss - bayes loss {:.4f}){}\n", *s.final_excess_loss, *s.bayes_loss,
               s.best_excess_loss ? fmt::format(", lowest {:.4f}", *s.best_excess_loss) : std::string());
  }
  fmt::print("{}\n", convergence_line(s.convergence, config.optim.min_delta));
  if (!options.out_dir.empty()) {
    fmt::print("wrote {0}/config.json, {0}/metrics.csv (plotted in {0}/loss.svg) and {0}/model.safetensors "
               "(checkpoints in {0}/checkpoints)\n",
               options.out_dir);
    if (!heads_plot.empty()) {
      fmt::print("tracked heads: {0}/tracked_heads.csv, plotted with the ICL score in {1}\n", options.out_dir, heads_plot);
    }
  } else {
    fmt::print("not saved (--no-save)\n");
  }
  return 0;
}

// The flags of train/resume.hpp's keys, the training flags a resumed run may change.
std::vector<std::string> resume_may_change_flags() {
  std::vector<std::string> flags;
  for (const std::string& key : resume_may_change()) {
    std::string name = "--" + key;
    std::replace(name.begin(), name.end(), '_', '-');
    flags.push_back(name);
  }
  return flags;
}

// --resume's help, where the flags it refuses are said once.
std::string resume_help() {
  const std::vector<std::string> may_change = resume_may_change_flags();
  std::string listed;
  for (std::size_t i = 0; i < may_change.size(); ++i) {
    listed += (i == 0 ? "" : i + 1 == may_change.size() ? " and " : ", ") + may_change[i];
  }
  return "Continue the run in this directory from its newest checkpoint, with its config.json (which must match the "
         "checkpoint's). Not with --config, --out, --overwrite, --no-save or any Model, Data or Training flag but " +
         listed;
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
      "validation loss and accuracy. Flags override --config FILE.json, which overrides the defaults shown.");
  cmd->footer(task_defaults_help());
  const TrainFlagGroups groups = add_train_flags(*cmd, *f);
  CLI::Option_group* model = groups.model;
  CLI::Option_group* data = groups.data;
  CLI::Option_group* opt = groups.training;

  CLI::Option* config = cmd->add_option(
      "--config", f->config_file,
      "Read settings from a JSON file like the config.json a run writes (at most 1 MiB; a key given twice is an error)")
      ->type_name("FILE");
  CLI::Option* out = cmd->add_option("--out", f->out,
                                     "Write config.json, metrics.csv, loss.svg, checkpoints/ and model.safetensors "
                                     "into this directory, which must be missing, empty or (with --overwrite) a run "
                                     "(default: runs/TASK or runs/TEXT-STEM, or the next free runs/NAME-2, -3, ...)")
                          ->type_name("DIR");
  CLI::Option* overwrite = cmd->add_flag(
      "--overwrite", f->overwrite,
      "Let --out DIR hold a run, and replace it: its config.json, metrics.csv, loss.svg, model.safetensors and "
      "checkpoints/ are removed first (other files are never touched)");
  CLI::Option* no_save =
      cmd->add_flag("--no-save", f->no_save, "Write nothing: a throwaway run (not with --out or --overwrite)");
  CLI::Option* resume = cmd->add_option("--resume", f->resume, resume_help())->type_name("DIR");
  cmd->add_option("--stop-after", f->stop_after,
                  "Stop after this step (at least 1) with a checkpoint, as Ctrl-C does (for training in chunks); a "
                  "step at or past --steps just finishes the run")
      ->check(kWholeNumber);
  cmd->add_flag("-q,--quiet", f->quiet, "Print only the summary");
  cmd->add_option("--sample-chars", f->sample_chars,
                  fmt::format("A text run (--text, --corpus kjv) only: at every validation, print this many characters the model "
                              "writes now, at most {}; 0: none (default {}). They are what headroom sample "
                              "--tokens N prints (its prompt and seed 0), drawn apart from the run's own random "
                              "streams, so they change none of its numbers",
                              kMaxSampleChars, kDefaultSampleChars))
      ->type_name("N")
      ->check(kWholeNumber);

  // A resumed run is the same run: everything that changes its numbers comes from
  // its config.json. resume_help() says which flags these are.
  resume->excludes(config)->excludes(out)->excludes(overwrite)->excludes(no_save);
  no_save->excludes(out)->excludes(overwrite);
  overwrite->needs(out);
  for (CLI::Option_group* g : {model, data}) {
    for (CLI::Option* o : g->get_options()) {
      if (o != g->get_help_ptr()) resume->excludes(o);
    }
  }
  const std::vector<std::string> may_change = resume_may_change_flags();
  for (CLI::Option* o : opt->get_options()) {
    if (o == opt->get_help_ptr()) continue;
    if (std::find(may_change.begin(), may_change.end(), o->get_name()) == may_change.end()) resume->excludes(o);
  }
  return [f] { return run_train(*f); };
}

}  // namespace headroom::cli
