// `headroom ablate`'s runner: this shard's unfinished runs, `jobs` at a time, each in
// its own thread with its own dataset (the autograd tape is thread-local), reporting
// through one callback that the threads share.
#include "ablate/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "train/out_dir.hpp"
#include "train/resume.hpp"
#include "train/trainer.hpp"
#include "nn/safetensors.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The step of a checkpoint directory named step-00000500.
std::size_t checkpoint_step(const fs::path& dir) {
  const std::string name = dir.filename().string();
  try {
    return std::stoull(name.substr(name.find('-') + 1));
  } catch (const std::logic_error&) {
    return 0;
  }
}

// What a run still has to do.
struct Pending {
  const PlannedRun* run = nullptr;
  std::size_t from_step = 0;  // > 0: resume from this checkpoint
};

// Hands events to the caller's callback one at a time, from any worker thread.
class Reporter {
 public:
  explicit Reporter(const std::function<void(const SweepEvent&)>& on_event) : on_event_(on_event) {}
  void operator()(const SweepEvent& e) {
    if (!on_event_) return;
    std::lock_guard lock(mutex_);
    on_event_(e);
  }

 private:
  const std::function<void(const SweepEvent&)>& on_event_;
  std::mutex mutex_;
};

nlohmann::json result_json(const PlannedRun& run, const TrainSummary& s, double wall_s) {
  const auto known = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  const OptimConfig& o = run.config.optim;
  const double tokens = static_cast<double>(s.steps) * static_cast<double>(o.batch * run.config.data.seq_len);
  return {{"id", run.id},
          {"seed", run.seed},
          {"steps", s.steps},
          {"parameters", s.parameters},
          {"final_train_loss", s.final_train_loss},
          {"final_val_loss", s.final_val.loss},
          {"final_val_accuracy", s.final_val.accuracy},
          {"final_bayes_loss", known(s.bayes_loss)},  // null for a text
          {"final_excess_loss", known(s.final_excess_loss)},
          {"best_val_accuracy", s.best_val_accuracy},
          {"best_step", s.best_step},
          {"skipped_steps", s.skipped_steps},
          {"wall_s", wall_s},
          {"tokens_per_s", wall_s > 0 ? tokens / wall_s : 0.0}};
}

// Trains one run into its directory and, when it finishes, writes result.json.
void train_run(const Pending& p, const fs::path& run_dir, const AblateOptions& options, Reporter& report) {
  const PlannedRun& run = *p.run;
  report({.kind = SweepEvent::Kind::started, .run = &run, .from_step = p.from_step});
  try {
    if (p.from_step == 0) fs::remove_all(run_dir);  // leftovers of a run that never saved a usable checkpoint
    std::unique_ptr<Dataset> data = make_dataset(run.config);
    TrainOptions t;
    t.out_dir = run_dir.string();
    t.resume = p.from_step > 0;
    t.stop_requested = options.stop_requested;
    t.track_heads = options.track_heads;
    double wall_s = 0;  // the run's whole wall time, earlier processes included
    t.on_progress = [&](const Progress& progress) {
      wall_s = progress.elapsed_s;
      report({.kind = SweepEvent::Kind::stepped, .run = &run});
    };
    const TrainSummary s = train(run.config, *data, t);
    if (s.stopped_early) {
      report({.kind = SweepEvent::Kind::stopped, .run = &run, .summary = &s, .wall_s = wall_s});
      return;
    }
    write_file_atomically(run_dir / "result.json", result_json(run, s, wall_s).dump(2) + "\n");
    report({.kind = SweepEvent::Kind::finished, .run = &run, .summary = &s, .wall_s = wall_s});
  } catch (const std::exception& e) {
    report({.kind = SweepEvent::Kind::failed, .run = &run, .error = e.what()});
    throw;
  }
}

}  // namespace

SweepOutcome run_sweep(const SweepPlan& plan, const AblateOptions& options) {
  check_sweep_dir(options.out_dir, plan);
  check_sweep_memory(plan, options.jobs);
  // What killed processes left: only theirs, since other shards may be running here
  // (each run's own directory is cleaned again by train() under the run's lock).
  remove_stale_temporaries(options.out_dir, false);
  write_sweep_json(options.out_dir, plan);

  SweepOutcome outcome;
  std::vector<Pending> pending;
  std::size_t steps_to_do = 0, resumed = 0;
  for (std::size_t i = 0; i < plan.runs.size(); ++i) {
    if (!options.shard.has(i)) continue;
    ++outcome.in_shard;
    const PlannedRun& run = plan.runs[i];
    const fs::path dir = options.out_dir / "runs" / run.id;
    remove_stale_temporaries(dir, false);
    if (run_finished(dir)) {
      ++outcome.finished_before;
      continue;
    }
    Pending p{.run = &run, .from_step = 0};
    std::error_code ec;
    if (const auto ckpt = latest_checkpoint(dir);
        ckpt && fs::exists(dir / "metrics.csv", ec) && checkpoint_step(*ckpt) < run.config.optim.steps) {
      p.from_step = checkpoint_step(*ckpt);
      ++resumed;
    }
    steps_to_do += run.config.optim.steps - p.from_step;
    pending.push_back(p);
  }

  const std::size_t jobs = std::max<std::size_t>(1, std::min(options.jobs, pending.size()));
  Reporter report(options.on_event);
  report({.kind = SweepEvent::Kind::planned, .in_shard = outcome.in_shard,
          .finished_before = outcome.finished_before, .to_run = pending.size(), .resumed = resumed, .jobs = jobs,
          .steps_to_do = steps_to_do});
  if (pending.empty()) return outcome;

  std::atomic<std::size_t> next{0};
  std::mutex results_mutex;
  auto stop = [&] { return options.stop_requested && options.stop_requested(); };
  auto worker = [&] {
    for (;;) {
      if (stop()) return;
      const std::size_t k = next++;
      if (k >= pending.size()) return;
      const PlannedRun& run = *pending[k].run;
      const fs::path dir = options.out_dir / "runs" / run.id;
      std::optional<std::string> error;
      try {
        train_run(pending[k], dir, options, report);
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard lock(results_mutex);
      if (error) {
        outcome.failed.emplace_back(run.id, *error);
      } else if (run_finished(dir)) {
        outcome.trained.push_back(run.id);
      } else {
        outcome.stopped.push_back(run.id);
      }
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < jobs; ++i) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  outcome.interrupted = stop();
  return outcome;
}

}  // namespace headroom
