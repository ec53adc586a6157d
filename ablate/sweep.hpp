// `headroom ablate`: a grid of training runs over head count, per-head width and any
// other setting, run side by side in threads, resumable, shardable and mergeable.
//
//     DIR/sweep.json                 the sweep's definition: its columns, every run's id and
//                                    finalized config, the skipped points and why
//     DIR/runs/<id>/                 one `headroom train --out` directory per run, plus
//     DIR/runs/<id>/result.json      written (atomically) when the run has finished
//     DIR/runs/<id>/attempts.log     a line per process that took the run: start, and how it ended
//     DIR/.lock                      held while sweep.json or the reports are written
//     DIR/results.csv, summary.md, *.svg, report.html   (ablate/report.hpp)
//
// A run is finished when its result.json exists. Running the same sweep again in the
// same DIR skips finished runs and resumes the others from their newest checkpoint;
// a DIR whose sweep.json differs from the new sweep's is refused.
//
// Any number of processes, on any machines that share DIR, may run one sweep at once
// (docs/design.md #24): a process trains a run only while it holds the run's lock
// (train/out_dir.hpp, RunDirLock), taken before it looks at the run's checkpoints, so
// no run is trained twice at a time; a run whose process died is free again and the
// next process to ask resumes it; sweep.json and the reports are written under DIR's
// own lock, so they are never torn and the last writer has seen every finished run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/presets.hpp"
#include "train/config.hpp"
#include "train/out_dir.hpp"
#include "train/trainer.hpp"

namespace headroom {

// One swept setting: a config.json key and its values in the order given.
struct SweepAxis {
  std::string flag;                     // "--heads", "--dk", "--kv-heads" or "--sweep"
  std::string section;                  // "model", "data" or "train"
  std::string key;                      // the config.json key: "n_heads", "lr", ...
  std::vector<std::string> labels;      // the values as written ("auto" for --dk auto)
  std::vector<nlohmann::json> values;   // what update_from_json reads ("auto" is 0)
};

// The K-th (1-based) of N slices of the grid: the runs whose index mod N is K - 1.
struct Shard {
  std::size_t index = 1;
  std::size_t count = 1;
  bool has(std::size_t run_index) const { return run_index % count == index - 1; }
};

// Parsers of the sweep flags. Each throws std::invalid_argument with a message that
// shows the text (without the flag's name, which CLI11 puts in front).
// "1,2,4": whole numbers >= 1, no repeats; with allow_auto also "auto" (d_k = d_model / heads).
SweepAxis parse_count_axis(const std::string& flag, const std::string& key, const std::string& text,
                           bool allow_auto);
// "KEY=V1,V2,...": KEY is a config.json key ("lr", "norm", or "train.lr"); each value
// is read as JSON when it parses as a number, true, false or null, else as a string,
// and must be accepted by update_from_json (an unknown key or a bad value throws).
SweepAxis parse_sweep_flag(const std::string& text);
// "N": seeds 0..N-1; "0,5,9" (or "7," for the one seed 7): these seeds.
std::vector<std::uint64_t> parse_seeds(const std::string& text);
// The seeds of `text` (parse_seeds) shifted by `offset`: --seeds 5 --seed-offset 100
// is seeds 100..104, a set disjoint from --seeds 5's, to replicate a sweep on.
std::vector<std::uint64_t> parse_seeds(const std::string& text, std::uint64_t offset);
// "N", a whole number of at most kMaxSeedOffset (a seed stays far from the
// wrap-around of its 64 bits).
std::uint64_t parse_seed_offset(const std::string& text);
inline constexpr std::uint64_t kMaxSeedOffset = 1'000'000'000'000;
// "K/N" with 1 <= K <= N.
Shard parse_shard(const std::string& text);

// --shard auto: the shard of this task of a scheduler's job array, from its
// environment (`env` returns a variable's value, or nothing when it is unset):
//   Slurm        SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_MAX,
//                SLURM_ARRAY_TASK_COUNT and SLURM_ARRAY_TASK_STEP (1 when unset);
//   Grid Engine  SGE_TASK_ID, SGE_TASK_FIRST, SGE_TASK_LAST, SGE_TASK_STEPSIZE
//                (SGE, Univa/Altair GE, Open Cluster Scheduler; "undefined" outside an array).
// The array's indices must be an evenly spaced range (Slurm's 0-15 or 1-99:2, not
// 1,4,5); the task at MIN is shard 1. Anything else, no array at all included, is a
// std::invalid_argument naming the variables and their values.
Shard shard_from_environment(const std::function<std::optional<std::string>(const std::string&)>& env);
Shard shard_from_environment();  // from this process's environment

struct SweepSpec {
  TrainConfig base;                  // --config and every flag applied, before the axes
  std::vector<SweepAxis> axes;       // in run-id order: --heads, --dk, --kv-heads, then each --sweep
  std::vector<std::uint64_t> seeds;  // innermost
  // A preset's n_kv_heads rule still open (cli build_config's kv_heads_rule): each
  // point's n_kv_heads follows its own n_heads, unless --kv-heads is an axis. Null: none.
  KvHeadsRule kv_heads = nullptr;
  // No flag, config file or task gave the base its lr (cli build_config's OpenDefaults):
  // each point's lr is default_lr of its own model (train/config.hpp), unless lr is an axis.
  bool lr_follows_model = false;
};

struct PlannedRun {
  std::string id;     // "h4-dk16-lr0.001-s1": its directory under DIR/runs
  std::string point;  // "h4-dk16-lr0.001": the grid point; its seeds are pooled in the summary
  std::uint64_t seed = 0;
  std::vector<nlohmann::json> values;  // one per SweepPlan::columns, as resolved
  TrainConfig config;                  // finalized (finalize): what the run trains
};

struct SkippedPoint {
  std::string point;   // "n_heads=3 d_k=auto"
  std::string reason;  // why the config is invalid
};

struct SweepPlan {
  // n_heads, d_k, n_kv_heads (always: they are what the command is about), then each
  // --sweep key: the columns of results.csv and summary.md before the metrics.
  std::vector<std::string> columns;
  std::vector<std::string> plot_axes;  // the columns swept over two or more values
  std::vector<std::uint64_t> seeds;
  std::vector<PlannedRun> runs;        // grid order: the axes as given, seeds innermost
  std::vector<SkippedPoint> skipped;   // invalid or duplicate points
};

// A grid larger than this is refused unless --max-runs raises the limit
// (docs/cli/ablate.md): a typo in a list should not start a million runs.
inline constexpr std::size_t kDefaultMaxRuns = 1000;

// What planning a grid holds per run at its peak (the points' configs and ids, the
// plan's JSON and the report's rows), measured with bench/plan_memory.sh, rounded up.
inline constexpr double kPlanBytesPerRun = 16 * 1024;

// Refuses (std::invalid_argument, one line) a grid of more than max_runs runs, naming
// its size: "the grid is 1000 --heads x 1000 --dk x 1 seed = 1000000 runs, more than
// --max-runs 1000 ...", and a grid whose plan (kPlanBytesPerRun a run) does not fit
// in the available memory (train/resources.hpp). Counts without planning, so it
// comes before anything is planned or written.
void check_grid_size(const SweepSpec& spec, std::size_t max_runs);

// The cartesian product of the axes and the seeds. Each point is validated as
// `headroom train` would (config.validate, make_dataset, finalize); an invalid point,
// or one that resolves to the same model as an earlier one (--dk 8,auto), is
// skipped with the reason. Throws std::invalid_argument when no point is valid.
SweepPlan plan_sweep(const SweepSpec& spec);

// sweep.json, and back (strict; errors name `source`).
nlohmann::json to_json(const SweepPlan& plan);
SweepPlan sweep_plan_from_json(const nlohmann::json& json, const std::string& source);
// DIR/sweep.json; a std::invalid_argument when it is missing or malformed.
SweepPlan read_sweep_plan(const std::filesystem::path& dir);

// Refuses (std::invalid_argument, one line) a DIR that is not a directory, that is a
// non-empty directory without sweep.json, or whose sweep.json differs from `plan`'s:
// the message names the first difference. A sweep that differs only by more or fewer
// seeds (the same grid; one seed list a prefix of the other) is the same sweep,
// extended: running it trains the seeds DIR lacks. Creates and writes nothing.
void check_sweep_dir(const std::filesystem::path& dir, const SweepPlan& plan);

// Refuses (std::invalid_argument, one line) a sweep whose largest run, times the runs
// trained side by side (min(jobs, runs)), needs more memory than the machine has
// (train/resources.hpp), naming the run and the flag that dominates.
void check_sweep_memory(const SweepPlan& plan, std::size_t jobs);

// Creates DIR/runs and, under DIR's lock, writes DIR/sweep.json unless it is there;
// when it is, it is checked again (check_sweep_dir), since another process may have
// written a different sweep since the caller's check, and replaced when `plan`
// extends it with more seeds (never shortened: a process with fewer seeds trains its
// subset).
void write_sweep_json(const std::filesystem::path& dir, const SweepPlan& plan);
// DIR's own lock (DIR/.lock), waited for: held while sweep.json and the reports are
// written and while a merge brings runs in.
RunDirLock lock_sweep_dir(const std::filesystem::path& dir);
// A run is finished when DIR/runs/<id>/result.json exists.
bool run_finished(const std::filesystem::path& run_dir);

// What run_sweep reports as it goes, one event at a time (calls never overlap, even
// from several worker threads), for a progress display.
struct SweepEvent {
  enum class Kind {
    planned,   // once, before any run: the counts below
    started,   // a run began (from_step > 0: resumed from its checkpoint)
    stepped,   // a run finished one more step
    finished,  // a run finished and wrote result.json: summary, wall_s
    stopped,   // a run stopped early with a checkpoint (stop_requested): summary
    failed,    // a run failed: error
    elsewhere, // a run this process had to do is another's: held by another process
               // (held true: it may still come back, as started), or found finished
  };
  Kind kind = Kind::planned;
  const PlannedRun* run = nullptr;  // all but planned
  // planned:
  std::size_t in_shard = 0;         // runs of the grid in this shard (and asked for: AblateOptions::only)
  std::size_t left_out = 0;         // runs of the shard AblateOptions::only did not ask for
  std::size_t finished_before = 0;  // of those asked for, already finished
  std::size_t to_run = 0;           // to train now
  std::size_t resumed = 0;          // of those, resuming from a checkpoint
  std::size_t jobs = 0;             // side by side
  std::size_t steps_to_do = 0;      // steps all the runs to train still take
  // started:
  std::size_t from_step = 0;
  // finished, stopped:
  const TrainSummary* summary = nullptr;
  double wall_s = 0;  // the run's whole wall time, earlier processes included
  // failed:
  std::string error{};
  // elsewhere:
  bool held = false;           // true: another process trains it now; false: it is finished
  std::size_t steps_left = 0;  // the steps it still had when this process planned it
};

struct AblateOptions {
  std::filesystem::path out_dir;
  std::size_t jobs = 1;        // runs trained side by side, one thread each
  Shard shard;
  std::function<void(const SweepEvent&)> on_event;  // progress; may be empty
  std::function<bool()> stop_requested;  // Ctrl-C: every running run saves a checkpoint and stops
  // Passed to every run as TrainOptions::track_heads (needed when the runs have
  // train.track_heads; interp/head_tracking.hpp's track_heads).
  std::function<std::vector<HeadTrack>(TransformerLM<float>&, const std::vector<Batch>&)> track_heads{};
  // When set, only the runs it accepts are trained (or counted) by this call; the rest
  // of the grid stays in sweep.json, untrained unless a later call asks for it. Seeds
  // until decided use it to give a round's new seed to the compared points alone.
  std::function<bool(const PlannedRun&)> only{};
};

// For AblateOptions::only in seeds until decided: the runs of a grown plan whose seed
// `before` did not have, at `points` (point ids; empty: every point).
std::function<bool(const PlannedRun&)> new_seeds_at(const SweepPlan& before, std::set<std::string> points);

struct SweepOutcome {
  std::size_t in_shard = 0;          // runs of the grid in this shard (and asked for: AblateOptions::only)
  std::size_t left_out = 0;          // runs of the shard AblateOptions::only did not ask for
  std::size_t finished_before = 0;   // skipped: their result.json was already there
  std::vector<std::string> trained;  // finished now
  std::vector<std::string> stopped;  // stopped early by stop_requested, with a checkpoint
  std::vector<std::pair<std::string, std::string>> failed;  // id and error
  std::vector<std::string> finished_elsewhere;  // unfinished when planned, then finished by another process
  std::vector<std::string> held_elsewhere;      // unfinished and held by another process at the end
  bool interrupted = false;
};

// Checks DIR (check_sweep_dir), writes DIR/sweep.json, then trains this shard's
// unfinished runs, `jobs` at a time, in grid order. Each is claimed first: its lock
// taken without waiting (a run another process holds is passed over, and tried again
// whenever a worker of this process looks for its next run), then, under the lock,
// it is looked at again: finished meanwhile, it is passed over; with a checkpoint
// before its last step it resumes from it; else it starts over in a directory
// emptied of all but its lock and attempts.log. Each claim appends to attempts.log
// ("start", then "finish", "stop" or "fail"; one killed leaves only its "start").
// A failing run (diverged, or a checkpoint that does not load) is reported and the
// others go on. Progress goes to options.on_event; nothing here prints.
SweepOutcome run_sweep(const SweepPlan& plan, const AblateOptions& options);

struct MergeOutcome {
  std::size_t copied = 0;            // finished runs brought in from the shards
  std::size_t present = 0;           // already finished in the target
  std::vector<std::string> missing;  // finished nowhere
};

// Merges shard directories of one sweep (their sweep.json files must agree) into
// `into`, under `into`'s lock: each finished run's directory is hard-linked there
// (copied across file systems) unless `into` already has it finished; a run that a
// live process holds in `into` is not replaced (it counts as missing). `from` may
// name `into` itself: `--merge DIR --out DIR` brings nothing in and only counts.
MergeOutcome merge_sweeps(const std::vector<std::filesystem::path>& from, const std::filesystem::path& into);

}  // namespace headroom
