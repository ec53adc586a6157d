// `headroom ablate`'s runner: this shard's unfinished runs, `jobs` at a time, each in
// its own thread with its own dataset (the autograd tape is thread-local), and a
// progress board shared by the threads.
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

std::string duration(double s) {
  const auto total = static_cast<long>(std::max(0.0, s) + 0.5);
  return total >= 3600 ? fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
                       : fmt::format("{}:{:02}", total / 60, total % 60);
}

// What a run still has to do.
struct Pending {
  const PlannedRun* run = nullptr;
  std::size_t from_step = 0;  // > 0: resume from this checkpoint
};

// Runs done / running / queued and an ETA from the steps trained so far, shared by
// the worker threads. On a terminal one status line is redrawn in place (at most
// five times a second); otherwise each event is a plain line.
class ProgressBoard {
 public:
  ProgressBoard(std::size_t total, std::size_t done, std::size_t steps_to_do, bool live, bool quiet)
      : total_(total), done_(done), queued_(0), steps_to_do_(steps_to_do), live_(live && !quiet), quiet_(quiet),
        start_(Clock::now()) {}

  void set_queued(std::size_t n) { queued_ = n; }

  void started(const std::string& id, std::size_t from_step) {
    std::lock_guard lock(mutex_);
    --queued_;
    ++running_;
    if (from_step > 0) say(fmt::format("{}: resuming from its checkpoint at step {}", id, from_step));
    redraw(true);
  }

  void stepped() {
    std::lock_guard lock(mutex_);
    ++steps_done_;
    redraw(false);
  }

  // A run ended: finished (counted as done), stopped early or failed.
  void ended(const std::string& line, bool done) {
    std::lock_guard lock(mutex_);
    --running_;
    if (done) ++done_;
    say(fmt::format("[{}/{}] {}", done_, total_, line));
    redraw(true);
  }

  void close() {
    std::lock_guard lock(mutex_);
    if (live_ && drawn_) fmt::print("\r\x1b[K");
    std::fflush(stdout);
  }

 private:
  std::string status() const {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    std::string eta = "-";
    if (steps_done_ > 0 && steps_to_do_ > steps_done_) {
      eta = duration(elapsed * static_cast<double>(steps_to_do_ - steps_done_) / static_cast<double>(steps_done_));
    } else if (steps_to_do_ <= steps_done_ && steps_done_ > 0) {
      eta = "0:00";
    }
    return fmt::format("{}/{} done, {} running, {} queued, elapsed {}, ETA {}", done_, total_, running_, queued_,
                       duration(elapsed), eta);
  }

  void say(const std::string& line) {
    if (quiet_) return;
    if (live_) {
      fmt::print("\r\x1b[K{}\n", line);
    } else {
      fmt::print("{}  ({})\n", line, status());
    }
    std::fflush(stdout);
  }

  void redraw(bool now) {
    if (!live_) return;
    const auto t = Clock::now();
    if (!now && t - last_draw_ < std::chrono::milliseconds(200)) return;
    last_draw_ = t;
    drawn_ = true;
    fmt::print("\r[ablate] {}\x1b[K", status());
    std::fflush(stdout);
  }

  std::mutex mutex_;
  std::size_t total_, done_, queued_, running_ = 0;
  std::size_t steps_to_do_, steps_done_ = 0;
  bool live_, quiet_, drawn_ = false;
  Clock::time_point start_, last_draw_{};
};

nlohmann::json result_json(const PlannedRun& run, const TrainSummary& s, double wall_s) {
  const OptimConfig& o = run.config.optim;
  const double tokens = static_cast<double>(s.steps) * static_cast<double>(o.batch * run.config.data.seq_len);
  return {{"id", run.id},
          {"seed", run.seed},
          {"steps", s.steps},
          {"parameters", s.parameters},
          {"final_train_loss", s.final_train_loss},
          {"final_val_loss", s.final_val.loss},
          {"final_val_accuracy", s.final_val.accuracy},
          {"best_val_accuracy", s.best_val_accuracy},
          {"best_step", s.best_step},
          {"skipped_steps", s.skipped_steps},
          {"wall_s", wall_s},
          {"tokens_per_s", wall_s > 0 ? tokens / wall_s : 0.0}};
}

// Trains one run into its directory and, when it finishes, writes result.json.
void train_run(const Pending& p, const fs::path& run_dir, const AblateOptions& options, ProgressBoard& board) {
  const PlannedRun& run = *p.run;
  board.started(run.id, p.from_step);
  try {
    if (p.from_step == 0) fs::remove_all(run_dir);  // leftovers of a run that never saved a usable checkpoint
    std::unique_ptr<Dataset> data = make_dataset(run.config);
    TrainOptions t;
    t.out_dir = run_dir.string();
    t.resume = p.from_step > 0;
    t.stop_requested = options.stop_requested;
    double wall_s = 0;  // the run's whole wall time, earlier processes included
    t.on_progress = [&](const Progress& progress) {
      wall_s = progress.elapsed_s;
      board.stepped();
    };
    const TrainSummary s = train(run.config, *data, t);
    if (s.stopped_early) {
      board.ended(fmt::format("{} stopped at step {} of {} (checkpoint saved)", run.id, s.steps,
                              run.config.optim.steps),
                  false);
      return;
    }
    write_file_atomically(run_dir / "result.json", result_json(run, s, wall_s).dump(2) + "\n");
    board.ended(fmt::format("{}: val loss {:.4f}, val accuracy {:.2f}%, {} steps in {}", run.id, s.final_val.loss,
                            100 * s.final_val.accuracy, s.steps, duration(wall_s)),
                true);
  } catch (const std::exception& e) {
    board.ended(fmt::format("{} failed: {}", run.id, e.what()), false);
    throw;
  }
}

}  // namespace

SweepOutcome run_sweep(const SweepPlan& plan, const AblateOptions& options) {
  check_sweep_dir(options.out_dir, plan);
  write_sweep_json(options.out_dir, plan);

  SweepOutcome outcome;
  std::vector<Pending> pending;
  std::size_t steps_to_do = 0, resumed = 0;
  for (std::size_t i = 0; i < plan.runs.size(); ++i) {
    if (!options.shard.has(i)) continue;
    ++outcome.in_shard;
    const PlannedRun& run = plan.runs[i];
    const fs::path dir = options.out_dir / "runs" / run.id;
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
  if (!options.quiet) {
    fmt::print("{} runs in this {}: {} finished before (skipped), {} to run{}\n", outcome.in_shard,
               options.shard.count > 1 ? fmt::format("shard ({}/{})", options.shard.index, options.shard.count)
                                       : std::string("sweep"),
               outcome.finished_before, pending.size(),
               pending.empty() ? std::string()
                               : fmt::format(" ({} resumed from checkpoints), {} at a time", resumed, jobs));
    std::fflush(stdout);
  }
  if (pending.empty()) return outcome;

  ProgressBoard board(outcome.in_shard, outcome.finished_before, steps_to_do, options.live, options.quiet);
  board.set_queued(pending.size());
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
        train_run(pending[k], dir, options, board);
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
  board.close();
  outcome.interrupted = stop();
  return outcome;
}

}  // namespace headroom
