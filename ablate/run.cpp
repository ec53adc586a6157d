// `headroom ablate`'s runner: this shard's unfinished runs, `jobs` at a time, each in
// its own thread with its own dataset (the autograd tape is thread-local), reporting
// through one callback that the threads share.
#include "ablate/sweep.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>
#include <unistd.h>

#include <fmt/format.h>

#include "autograd/whole_number.hpp"

#include "train/out_dir.hpp"
#include "train/resources.hpp"
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

// Whether a run without result.json is out of patience at its checkpoint (killed
// between its last save and result.json): a resume would be refused, so it starts
// over, as one at its last step does. A metrics.csv that cannot be read is left for
// the resume to report.
bool out_of_patience(const PlannedRun& run, const fs::path& dir, std::size_t step) {
  try {
    return patience_ran_out(dir, step, run.config.optim).has_value();
  } catch (const std::invalid_argument&) {
    return false;
  }
}

// The step an unfinished run resumes from: its newest checkpoint's, when that is
// before its last step and out of patience, and its metrics.csv is there; else 0 (it
// starts over).
std::size_t resume_step(const PlannedRun& run, const fs::path& dir) {
  std::error_code ec;
  const auto ckpt = latest_checkpoint(dir);
  if (ckpt && fs::exists(dir / "metrics.csv", ec) && checkpoint_step(*ckpt) < run.config.optim.steps &&
      !out_of_patience(run, dir, checkpoint_step(*ckpt))) {
    return checkpoint_step(*ckpt);
  }
  return 0;
}

// What a run still has to do.
struct Pending {
  const PlannedRun* run = nullptr;
  std::size_t from_step = 0;  // > 0: resume from this checkpoint
};

// The order a process claims its runs in: the longest first, so that with --jobs N
// the runs left at the end, when fewer than N are still running, are short ones
// (Graham's longest-processing-time rule). A run's length is estimated as its
// steps left times its step's matrix-product FLOPs (train/resources.hpp); among equal
// FLOPs, the run with more heads first: its attention does the same work in more,
// smaller products, which take longer (bench/README.md). Which runs a shard holds,
// and where each writes, does not depend on it.
void start_longest_first(std::vector<Pending>& pending) {
  std::vector<std::pair<double, Pending>> by_cost;
  by_cost.reserve(pending.size());
  for (const Pending& p : pending) {
    const TrainConfig& c = p.run->config;
    by_cost.emplace_back(static_cast<double>(c.optim.steps - p.from_step) * training_step_flops(c), p);
  }
  std::stable_sort(by_cost.begin(), by_cost.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second.run->config.model.n_heads > b.second.run->config.model.n_heads;
  });
  for (std::size_t i = 0; i < pending.size(); ++i) pending[i] = by_cost[i].second;
}

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
          // Why it ended (steps or patience) and whether its val loss was still
          // falling then (train/convergence.hpp); absent from an older result.json.
          {"stop_reason", to_string(s.stop_reason)},
          {"convergence", to_string(s.convergence.status)},
          {"fall_per_validation", known(std::isfinite(s.convergence.fall_per_eval)
                                            ? std::optional<double>(s.convergence.fall_per_eval)
                                            : std::nullopt)},
          {"skipped_steps", s.skipped_steps},
          {"wall_s", wall_s},
          {"tokens_per_s", wall_s > 0 ? tokens / wall_s : 0.0}};
}

// attempts.log: one line per event of a claim, "<UTC time> <event> pid=P host=H <more>".
// Written only under the run's lock, so one writer at a time, on NFS too.
void log_attempt(const fs::path& run_dir, const std::string& event, const std::string& more) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "unknown");
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char when[32] = {};
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  const std::string line = fmt::format("{} {} pid={} host={}{}{}\n", when, event, ::getpid(), host,
                                       more.empty() ? "" : " ", more);
  std::FILE* f = std::fopen((run_dir / "attempts.log").c_str(), "a");
  if (f == nullptr) throw std::runtime_error(fmt::format("cannot append to {}: {}", (run_dir / "attempts.log").string(),
                                                         std::strerror(errno)));
  const bool ok = std::fputs(line.c_str(), f) >= 0;
  if (std::fclose(f) != 0 || !ok) {
    throw std::runtime_error(fmt::format("cannot append to {}", (run_dir / "attempts.log").string()));
  }
}

// What a run's lock file says once its result.json is written (RunDirLock::mark),
// followed by the time it was written, in seconds since the epoch.
constexpr std::string_view kFinishedMark = "finished";
// How long a result.json written by another machine may stay invisible here: an NFS
// client caches a directory's lookups, its "not there" included, for up to a minute
// by default (acdirmax); twice that, to be sure.
constexpr std::int64_t kLookupCacheSeconds = 120;

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Whether a run whose lock says `mark` counts as finished although this process
// sees no result.json: only while the mark is recent enough for the file to be
// in flight. A run marked long ago (or by a headroom that wrote no time) whose
// result.json is gone was deleted, and is trained again.
bool finished_by_mark(const std::string& mark) {
  if (!mark.starts_with(kFinishedMark) || mark.size() <= kFinishedMark.size() + 1) return false;
  const std::optional<std::uint64_t> at = parse_whole_number(std::string_view(mark).substr(kFinishedMark.size() + 1));
  return at && now_seconds() - static_cast<std::int64_t>(*at) < kLookupCacheSeconds;
}

// A run directory emptied for a new start: all but its lock and attempts.log.
void clear_run_dir(const fs::path& run_dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir, ec)) {
    if (!is_kept_entry(e.path().filename().string())) fs::remove_all(e.path());
  }
  if (ec) throw fs::filesystem_error("cannot read", run_dir, ec);
}

// A run this process holds: its lock, and where it starts.
struct Claim {
  Pending pending;
  RunDirLock lock;
};

// Hands this process's workers their runs, one at a time, in grid order. A run is
// claimed by taking its lock without waiting; one that another process holds is
// passed over now and tried again at the next call, so a run whose process dies
// comes back to whoever asks next.
class Claimer {
 public:
  Claimer(const std::vector<Pending>& pending, const fs::path& out_dir, Reporter& report)
      : pending_(pending), out_dir_(out_dir), report_(report), state_(pending.size(), State::open),
        reported_held_(pending.size(), false) {}

  std::optional<Claim> next() {
    std::lock_guard guard(mutex_);
    for (std::size_t k = 0; k < pending_.size(); ++k) {
      if (state_[k] != State::open) continue;
      const PlannedRun& run = *pending_[k].run;
      const fs::path dir = out_dir_ / "runs" / run.id;
      if (run_finished(dir)) {
        done_elsewhere(k);
        continue;
      }
      fs::create_directories(dir);
      RunDirLock lock = RunDirLock::try_acquire(dir);
      if (!lock.held()) {
        if (!reported_held_[k]) {
          reported_held_[k] = true;
          report_({.kind = SweepEvent::Kind::elsewhere, .run = &run, .held = true, .steps_left = steps_left(k)});
        }
        continue;
      }
      // Finished between the look and the lock? The mark says so even where the new
      // result.json is not visible here yet (NFS caches lookups).
      if (run_finished(dir) || finished_by_mark(lock.previous_mark())) {
        done_elsewhere(k);
        continue;
      }
      state_[k] = State::ours;
      return Claim{.pending = {.run = &run, .from_step = resume_step(run, dir)}, .lock = std::move(lock)};
    }
    return std::nullopt;
  }

  // Unfinished runs another process held at the last look.
  std::vector<std::string> held_elsewhere() {
    std::lock_guard guard(mutex_);
    std::vector<std::string> ids;
    for (std::size_t k = 0; k < pending_.size(); ++k) {
      if (state_[k] == State::open) ids.push_back(pending_[k].run->id);
    }
    return ids;
  }
  std::vector<std::string> finished_elsewhere() {
    std::lock_guard guard(mutex_);
    return finished_elsewhere_;
  }

 private:
  enum class State { open, ours, done };

  std::size_t steps_left(std::size_t k) const {
    return pending_[k].run->config.optim.steps - pending_[k].from_step;
  }
  void done_elsewhere(std::size_t k) {
    state_[k] = State::done;
    finished_elsewhere_.push_back(pending_[k].run->id);
    report_({.kind = SweepEvent::Kind::elsewhere, .run = pending_[k].run, .held = false, .steps_left = steps_left(k)});
  }

  const std::vector<Pending>& pending_;
  const fs::path out_dir_;
  Reporter& report_;
  std::vector<State> state_;
  std::vector<bool> reported_held_;
  std::vector<std::string> finished_elsewhere_;
  std::mutex mutex_;
};

// Trains one claimed run into its directory and, when it finishes, writes result.json.
void train_run(const Pending& p, RunDirLock& lock, const fs::path& run_dir, const AblateOptions& options,
               Reporter& report) {
  const PlannedRun& run = *p.run;
  report({.kind = SweepEvent::Kind::started, .run = &run, .from_step = p.from_step});
  try {
    log_attempt(run_dir, "start", fmt::format("step={}", p.from_step));
    if (p.from_step == 0) clear_run_dir(run_dir);  // leftovers of a run that never saved a usable checkpoint
    std::unique_ptr<Dataset> data = make_dataset(run.config);
    TrainOptions t;
    t.out_dir = run_dir.string();
    t.resume = p.from_step > 0;
    t.out_dir_locked = true;  // the claim holds it
    t.stop_requested = options.stop_requested;
    t.track_heads = options.track_heads;
    double wall_s = 0;  // the run's whole wall time, earlier processes included
    t.on_progress = [&](const Progress& progress) {
      wall_s = progress.elapsed_s;
      report({.kind = SweepEvent::Kind::stepped, .run = &run});
    };
    const TrainSummary s = train(run.config, *data, t);
    if (s.stopped_early) {
      log_attempt(run_dir, "stop", fmt::format("step={}", s.steps));
      report({.kind = SweepEvent::Kind::stopped, .run = &run, .summary = &s, .wall_s = wall_s});
      return;
    }
    write_file_atomically(run_dir / "result.json", result_json(run, s, wall_s).dump(2) + "\n");
    lock.mark(fmt::format("{} {}", kFinishedMark, now_seconds()));
    log_attempt(run_dir, "finish", fmt::format("step={}", s.steps));
    report({.kind = SweepEvent::Kind::finished, .run = &run, .summary = &s, .wall_s = wall_s});
  } catch (const std::exception& e) {
    try {
      std::string error = e.what();
      std::replace(error.begin(), error.end(), '\n', ' ');
      log_attempt(run_dir, "fail", "error=" + error);
    } catch (const std::exception&) {
      // the failure is reported below either way
    }
    report({.kind = SweepEvent::Kind::failed, .run = &run, .error = e.what()});
    throw;
  }
}

}  // namespace

std::function<bool(const PlannedRun&)> new_seeds_at(const SweepPlan& before, std::set<std::string> points) {
  return [had = std::set<std::uint64_t>(before.seeds.begin(), before.seeds.end()),
          points = std::move(points)](const PlannedRun& run) {
    return had.count(run.seed) == 0 && (points.empty() || points.count(run.point) > 0);
  };
}

SweepOutcome run_sweep(const SweepPlan& plan, const AblateOptions& options) {
  check_sweep_dir(options.out_dir, plan);
  check_sweep_memory(plan, options.jobs);
  write_sweep_json(options.out_dir, plan);

  // What this shard still has to do, as it looks now (other processes may change it;
  // each run is looked at again under its lock when it is claimed). Temporaries are
  // removed only under the lock of the directory that holds them: another machine's
  // live process may own them, and the PID in their names means nothing on this one.
  SweepOutcome outcome;
  std::vector<Pending> pending;
  std::size_t steps_to_do = 0, resumed = 0;
  for (std::size_t i = 0; i < plan.runs.size(); ++i) {
    if (!options.shard.has(i)) continue;
    const PlannedRun& run = plan.runs[i];
    if (options.only && !options.only(run)) {
      ++outcome.left_out;
      continue;
    }
    ++outcome.in_shard;
    const fs::path dir = options.out_dir / "runs" / run.id;
    if (run_finished(dir)) {
      ++outcome.finished_before;
      // What a killed save left in a finished run: removed under its lock, which no
      // process holds for long once the run is finished.
      if (const RunDirLock lock = RunDirLock::try_acquire(dir); lock.held()) remove_stale_temporaries(dir, true);
      continue;
    }
    const Pending p{.run = &run, .from_step = resume_step(run, dir)};
    if (p.from_step > 0) ++resumed;
    steps_to_do += run.config.optim.steps - p.from_step;
    pending.push_back(p);
  }

  start_longest_first(pending);

  const std::size_t jobs = std::max<std::size_t>(1, std::min(options.jobs, pending.size()));
  Reporter report(options.on_event);
  report({.kind = SweepEvent::Kind::planned, .in_shard = outcome.in_shard, .left_out = outcome.left_out,
          .finished_before = outcome.finished_before, .to_run = pending.size(), .resumed = resumed, .jobs = jobs,
          .steps_to_do = steps_to_do});
  if (pending.empty()) return outcome;

  Claimer claimer(pending, options.out_dir, report);
  std::mutex results_mutex;
  auto stop = [&] { return options.stop_requested && options.stop_requested(); };
  auto worker = [&] {
    for (;;) {
      if (stop()) return;
      std::optional<std::string> error;
      std::optional<Claim> claim;
      try {
        claim = claimer.next();
      } catch (const std::exception& e) {  // a run directory that cannot be created or locked
        std::lock_guard lock(results_mutex);
        outcome.failed.emplace_back("(claiming a run)", e.what());
        return;
      }
      if (!claim) return;
      const PlannedRun& run = *claim->pending.run;
      const fs::path dir = options.out_dir / "runs" / run.id;
      try {
        train_run(claim->pending, claim->lock, dir, options, report);
      } catch (const std::exception& e) {
        error = e.what();
      }
      claim.reset();  // the run's lock goes
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
  outcome.finished_elsewhere = claimer.finished_elsewhere();
  if (!outcome.interrupted) outcome.held_elsewhere = claimer.held_elsewhere();
  return outcome;
}

}  // namespace headroom
