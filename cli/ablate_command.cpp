// `headroom ablate`: train a grid of models over head count, per-head width and any
// other setting, several seeds each, and report a table and plots (cli/ablate.hpp).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "ablate/sweep.hpp"
#include "ablate/report.hpp"
#include "ablate/slurm.hpp"
#include "cli/commands.hpp"
#include "interp/head_tracking.hpp"
#include "cli/interrupt.hpp"
#include "cli/progress.hpp"
#include "cli/train_flags.hpp"
#include "cli/validators.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

struct AblateFlags : TrainFlags {
  std::string heads, dk, kv_heads;  // lists; empty: the base config's value
  std::vector<std::string> sweeps;  // KEY=V1,V2,...
  std::string seeds = "3";  // or "auto": seeds until decided
  std::string seed_offset = "0";
  std::optional<std::size_t> max_seeds;  // --seeds auto's cap (default kAutoMaxSeeds)
  std::size_t jobs = std::max(1u, std::thread::hardware_concurrency());
  bool jobs_given = false;  // --slurm's tasks default to one job each
  std::string shard;  // K/N or auto
  std::vector<std::string> merge;
  std::string resume;  // a sweep directory to continue as its sweep.json says
  std::string out;
  bool no_report = false;
  bool slurm = false, submit = false;
  std::size_t tasks = 0;  // 0: one per run
  std::vector<std::string> sbatch;
  double target_acc = 0.99;
  std::size_t max_runs = kDefaultMaxRuns;
  bool quiet = false;
};

// Rebuilds the reports and prints summary.md (also under --quiet: it is the answer).
void report(const SweepPlan& plan, const fs::path& dir, double target_acc) {
  const std::string summary = write_reports(plan, dir, target_acc);
  fmt::print("\n{}", summary);
  fmt::print("\nwrote {0}/results.csv, {0}/summary.md, {0}/report.html and the plots (*.svg)\n", dir.string());
}

int run_merge(const AblateFlags& f) {
  std::vector<fs::path> from(f.merge.begin(), f.merge.end());
  const fs::path into = f.out;
  const MergeOutcome m = merge_sweeps(from, into);
  const SweepPlan plan = read_sweep_plan(into);
  std::error_code ec;
  if (from.size() == 1 && fs::equivalent(from.front(), into, ec)) {  // --merge DIR --out DIR: the reports only
    fmt::print("{}: {} of {} runs finished\n", into.string(), m.present, plan.runs.size());
  } else {
    fmt::print("merged {} director{} into {}: {} runs brought in, {} already there, {} of {} finished\n", from.size(),
               from.size() == 1 ? "y" : "ies", into.string(), m.copied, m.present, m.copied + m.present,
               plan.runs.size());
  }
  if (!m.missing.empty()) {
    std::string ids;
    for (std::size_t i = 0; i < m.missing.size() && i < 20; ++i) ids += (i == 0 ? "" : ", ") + m.missing[i];
    fmt::print("not finished in any of them: {}{}\n", ids, m.missing.size() > 20 ? ", ..." : "");
  }
  report(plan, into, f.target_acc);
  return m.missing.empty() ? 0 : 1;
}

// The runner's plan for this shard, in one line.
void print_plan(const SweepEvent& e, const Shard& shard) {
  fmt::print("{} runs in this {}{}: {} finished before (skipped), {} to run{}\n", e.in_shard,
             shard.count > 1 ? fmt::format("shard ({}/{})", shard.index, shard.count) : std::string("sweep"),
             e.left_out == 0 ? std::string() : fmt::format(" asked for at the compared points (the grid's other {} are not)", e.left_out),
             e.finished_before, e.to_run,
             e.to_run == 0 ? std::string() : fmt::format(" ({} resumed from checkpoints), {} at a time", e.resumed, e.jobs));
  std::fflush(stdout);
}

// --shard: K/N, auto (the scheduler's array task), or the whole grid.
Shard shard_of(const AblateFlags& f) {
  if (f.shard.empty()) return Shard{};
  return f.shard == "auto" ? shard_from_environment() : parse_shard(f.shard);
}

// The plan a sweep command trains: from the flags, or with --resume from DIR/sweep.json.
// --seeds auto starts with this many seeds a point, as the default count does, and
// stops at --max-seeds, by default this many.
constexpr std::size_t kAutoFirstSeeds = 3;
constexpr std::size_t kAutoMaxSeeds = 12;

// The seeds text plan_of reads: auto's current count, else the flag.
std::string seeds_text(const AblateFlags& f, std::size_t auto_seeds) {
  return f.seeds == "auto" ? std::to_string(auto_seeds) : f.seeds;
}

// *lr_by_norms says whether its points without norms took the default rate for them.
SweepPlan plan_of(const AblateFlags& f, bool* lr_by_norms, std::size_t auto_seeds = kAutoFirstSeeds) {
  *lr_by_norms = false;
  if (!f.resume.empty()) return read_sweep_plan(f.resume);
  SweepSpec spec;
  OpenDefaults open;
  spec.base = build_config(f, f.config_file, &open);
  spec.kv_heads = open.kv_heads;
  spec.lr_follows_model = open.lr;
  if (!f.heads.empty()) spec.axes.push_back(parse_count_axis("--heads", "n_heads", f.heads, false));
  if (!f.dk.empty()) spec.axes.push_back(parse_count_axis("--dk", "d_k", f.dk, true));
  if (!f.kv_heads.empty()) spec.axes.push_back(parse_count_axis("--kv-heads", "n_kv_heads", f.kv_heads, false));
  for (const std::string& s : f.sweeps) {
    SweepAxis axis = parse_sweep_flag(s);
    for (const SweepAxis& a : spec.axes) {
      if (a.key == axis.key) throw std::invalid_argument(fmt::format("--sweep {} is given twice", axis.key));
    }
    spec.axes.push_back(std::move(axis));
  }
  spec.seeds = parse_seeds(seeds_text(f, auto_seeds), parse_seed_offset(f.seed_offset));
  check_grid_size(spec, f.max_runs);  // before the grid is planned
  SweepPlan plan = plan_sweep(spec);
  std::vector<TrainConfig> configs;
  for (const PlannedRun& run : plan.runs) {
    configs.push_back(run.config);
    *lr_by_norms = *lr_by_norms || (spec.lr_follows_model && run.config.optim.lr != OptimConfig{}.lr);
  }
  check_flags_read(f, configs);
  return plan;
}

// --slurm: the batch scripts, and with --submit the jobs.
int run_slurm(const AblateFlags& f, const SweepPlan& plan, const fs::path& dir) {
  SlurmSpec spec{.sweep_dir = fs::absolute(dir).lexically_normal(),
                 .binary = fs::canonical("/proc/self/exe"),
                 .work_dir = fs::current_path(),
                 .runs = plan.runs.size(),
                 .tasks = f.tasks == 0 ? plan.runs.size() : f.tasks,
                 .jobs = f.jobs_given ? f.jobs : 1,
                 .threads = 1,
                 .target_acc = f.target_acc,
                 .sbatch = f.sbatch};
  for (const PlannedRun& run : plan.runs) {
    spec.threads = std::max(spec.threads, static_cast<std::size_t>(std::max(1, run.config.optim.threads)));
  }
  check_slurm_spec(spec);
  if (f.submit && find_on_path("sbatch").empty()) {
    throw std::invalid_argument("--submit: sbatch is not on PATH (is this a Slurm login node?); drop --submit to "
                                "write the scripts only");
  }
  write_sweep_json(dir, plan);
  const std::vector<fs::path> scripts = write_slurm_scripts(spec);
  fmt::print("wrote {} (a job array of {} task{}, {} CPU{} each) and {} (the reports, after the array)\n",
             scripts[0].string(), spec.tasks, spec.tasks == 1 ? "" : "s", spec.jobs * spec.threads,
             spec.jobs * spec.threads == 1 ? "" : "s", scripts[1].string());
  if (!f.submit) {
    fmt::print("submit them with --submit, or by hand:\n  jid=$(sbatch --parsable {})\n  sbatch "
               "--dependency=afterany:$jid {}\n",
               scripts[0].string(), scripts[1].string());
    return 0;
  }
  SlurmJobs jobs;
  try {
    jobs = submit_slurm(dir);
  } catch (const std::runtime_error& e) {
    fmt::print(stderr, "headroom: error: {}\n", e.what());
    return 1;
  }
  fmt::print("slurm: submitted array job {} ({} tasks) and merge job {} (after the array)\n", jobs.array_id,
             spec.tasks, jobs.merge_id);
  fmt::print("follow it with: squeue -j {},{}; the reports appear in {} when job {} ends (its log: "
             "{}/slurm/merge-{}.out)\n",
             jobs.array_id, jobs.merge_id, dir.string(), jobs.merge_id, dir.string(), jobs.merge_id);
  return 0;
}

int run_ablate(const AblateFlags& f) {
  if (!f.merge.empty()) return run_merge(f);
  if (f.out.empty() && f.resume.empty()) throw std::invalid_argument("--out is required (or --resume DIR)");
  if (f.jobs > static_cast<std::size_t>(kMaxThreads)) {  // a thread per job, capped as --threads is
    throw std::invalid_argument(fmt::format("--jobs {}: must be from 1 to {}", f.jobs, kMaxThreads));
  }
  const Shard shard = shard_of(f);
  const bool seeds_auto = f.seeds == "auto";
  if (seeds_auto && (f.slurm || shard.count > 1 || f.no_report)) {
    throw std::invalid_argument("--seeds auto decides each round from the whole sweep's results: not with --slurm, "
                                "--shard or --no-report");
  }
  if (f.max_seeds && !seeds_auto) throw std::invalid_argument("--max-seeds is for --seeds auto");
  const std::size_t max_seeds = f.max_seeds.value_or(kAutoMaxSeeds);
  if (seeds_auto && max_seeds < kAutoFirstSeeds) {
    throw std::invalid_argument(
        fmt::format("--max-seeds {}: --seeds auto starts with {} seeds", max_seeds, kAutoFirstSeeds));
  }
  std::size_t auto_seeds = kAutoFirstSeeds;
  bool lr_by_norms = false;
  SweepPlan plan = plan_of(f, &lr_by_norms, auto_seeds);
  const fs::path dir = f.resume.empty() ? fs::path(f.out) : fs::path(f.resume);
  check_sweep_dir(dir, plan);  // before anything is written
  if (f.slurm) return run_slurm(f, plan, dir);  // the nodes' memory is not this machine's
  check_sweep_memory(plan, f.jobs);

  if (!f.quiet) {
    const std::size_t points = plan.runs.size() / plan.seeds.size();
    fmt::print("headroom ablate: {} runs ({} point{} x {} seed{}) into {}\n", plan.runs.size(), points,
               points == 1 ? "" : "s", plan.seeds.size(), plan.seeds.size() == 1 ? "" : "s", dir.string());
    for (const SkippedPoint& s : plan.skipped) fmt::print("skipped {}: {}\n", s.point, s.reason);
    if (lr_by_norms) {
      fmt::print("lr {}: the default for a model without norms, in the runs without them (--lr to choose another)\n",
                 kNoNormLr);
    }
    std::fflush(stdout);
  }

  // Ctrl-C or SIGTERM: every running run saves a checkpoint at its next step and no
  // new run starts.
  SweepOutcome outcome;
  const InterruptGuard interrupt;
  SweepBoard board(isatty(fileno(stdout)) != 0, f.quiet);
  AblateOptions options{.out_dir = dir,
                        .jobs = f.jobs,
                        .shard = shard,
                        .on_event = [&](const SweepEvent& e) {
                          if (e.kind == SweepEvent::Kind::planned && !f.quiet) print_plan(e, shard);
                          board(e);
                        },
                        .stop_requested = [] { return InterruptGuard::requested(); },
                        .track_heads = track_heads};
  outcome = run_sweep(plan, options);
  board.close();
  // Seeds until decided: while a point's comparison with the best is open and the cap
  // allows, one more seed for the open points and the best, the points compared; the
  // rest keep the seeds they have. Finished runs are never trained again, and each
  // round's seed is new to every point, so a rerun replays the rounds from the
  // finished runs alone.
  while (seeds_auto && !outcome.interrupted && outcome.failed.empty()) {
    std::string best;
    const std::vector<std::string> open =
        undecided_points(summarize(plan, collect_results(plan, dir, f.target_acc)), kEqualLossNats, &best);
    if (open.empty() || auto_seeds >= max_seeds) {
      fmt::print("--seeds auto: {} with up to {} seeds a point{}\n",
                 open.empty() ? "every comparison with the best point decided" : "not decided at --max-seeds",
                 auto_seeds, open.empty() ? "" : fmt::format(" ({} open)", open.size()));
      break;
    }
    ++auto_seeds;
    std::set<std::string> compared(open.begin(), open.end());
    if (!best.empty()) compared.insert(best);
    options.only = new_seeds_at(plan, std::move(compared));
    plan = plan_of(f, &lr_by_norms, auto_seeds);
    check_sweep_memory(plan, f.jobs);
    if (!f.quiet) {
      std::string names;
      for (std::size_t i = 0; i < open.size() && i < 6; ++i) names += (i == 0 ? "" : ", ") + open[i];
      fmt::print("--seeds auto: {} point{} not decided against the best ({}{}): seed {} for them and the best, {}\n",
                 open.size(), open.size() == 1 ? "" : "s", names, open.size() > 6 ? ", ..." : "", plan.seeds.back(),
                 best.empty() ? "none yet" : best);
      std::fflush(stdout);
    }
    SweepBoard round_board(isatty(fileno(stdout)) != 0, f.quiet);
    options.on_event = [&](const SweepEvent& e) {
      if (e.kind == SweepEvent::Kind::planned && !f.quiet) print_plan(e, shard);
      round_board(e);
    };
    outcome = run_sweep(plan, options);
    round_board.close();
  }

  if (!outcome.held_elsewhere.empty()) {  // also under --quiet: the report is not yet whole
    std::string ids;
    for (std::size_t i = 0; i < outcome.held_elsewhere.size() && i < 10; ++i) {
      ids += (i == 0 ? "" : ", ") + outcome.held_elsewhere[i];
    }
    fmt::print("{} run{} of this {} {} still trained by other processes: {}{}\n", outcome.held_elsewhere.size(),
               outcome.held_elsewhere.size() == 1 ? "" : "s", shard.count > 1 ? "shard" : "sweep",
               outcome.held_elsewhere.size() == 1 ? "is" : "are", ids,
               outcome.held_elsewhere.size() > 10 ? ", ..." : "");
  }
  if (f.no_report) {
    if (!f.quiet) fmt::print("reports not rebuilt (--no-report): headroom ablate --merge {0} --out {0} does it\n", dir.string());
  } else {
    report(plan, dir, f.target_acc);
  }
  for (const auto& [id, error] : outcome.failed) fmt::print("failed: {}: {}\n", id, error);
  if (outcome.interrupted) {
    fmt::print("interrupted: {} run{} stopped with a checkpoint, {} finished; run the same command again to "
               "continue\n",
               outcome.stopped.size(), outcome.stopped.size() == 1 ? "" : "s", outcome.trained.size());
    return InterruptGuard::exit_status();
  }
  if (!outcome.failed.empty()) {
    fmt::print("{} of {} runs failed; run the same command again to retry them\n", outcome.failed.size(),
               outcome.in_shard);
    return 1;
  }
  return 0;
}

}  // namespace

Run add_ablate_command(CLI::App& app) {
  auto f = std::make_shared<AblateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "ablate",
      "Train a grid of small transformers (--heads x --dk x --kv-heads x each --sweep, times --seeds), several at a "
      "time, and write a table (results.csv, summary.md), SVG plots and report.html. Running the same command "
      "again resumes.");
  cmd->footer(
      "Every train flag sets the base config of every run. summary.md has the mean and sd over seeds, with * on "
      "the points that differ from the best beyond seed noise. Running again skips finished runs and resumes "
      "interrupted ones from their checkpoints.");
  const TrainFlagGroups groups = add_train_flags(*cmd, *f, TrainFlagSet::ablate);

  CLI::Option_group* grid = cmd->add_option_group("Sweep");
  CLI::Option* heads =
      grid->add_option("--heads", f->heads, "Query head counts to sweep, e.g. 1,2,4,8,16 (default: the base config's)")
          ->check(parsed_by([](const std::string& t) { parse_count_axis("--heads", "n_heads", t, false); }, "LIST"));
  CLI::Option* dk =
      grid->add_option("--dk", f->dk,
                       "Per-head query/key widths to sweep, e.g. 8,16,32; auto is d_model / heads for each head count "
                       "(fixed computation, Table 3 (A) of Attention Is All You Need) (default: the base config's)")
          ->check(parsed_by([](const std::string& t) { parse_count_axis("--dk", "d_k", t, true); }, "LIST|auto"));
  CLI::Option* kv =
      grid->add_option("--kv-heads", f->kv_heads, "Key/value head counts to sweep (GQA; 1 is MQA)")
          ->check(parsed_by([](const std::string& t) { parse_count_axis("--kv-heads", "n_kv_heads", t, false); },
                            "LIST"));
  CLI::Option* sweep =
      grid->add_option("--sweep", f->sweeps,
                       "Sweep any config.json key too, e.g. lr=0.001,0.003 or norm=pre,post or attn_scale=0.125,0.5 or "
                       "pos=learned,rope or ffn=mlp,swiglu "
                       "(repeatable)")
          ->check(parsed_by([](const std::string& t) { parse_sweep_flag(t); }, "KEY=V1,V2,..."));
  CLI::Option* seeds =
      grid->add_option("--seeds", f->seeds,
                       "Seeds per point: a count N (seeds 0..N-1), a list 0,5,9, or auto: 3, then one more for the "
                       "open points and the best while a point is neither beyond noise from the best nor equal to it "
                       "within 0.02 nats, up to --max-seeds (default 3)")
          ->check(parsed_by(
              [](const std::string& t) {
                if (t != "auto") parse_seeds(t);
              },
              "N|LIST|auto"));
  CLI::Option* max_seeds =
      grid->add_option("--max-seeds", f->max_seeds, "The most seeds --seeds auto trains a point (default 12)")
          ->check(kCount);
  CLI::Option* seed_offset =
      grid->add_option("--seed-offset", f->seed_offset,
                       "Add N to every seed: --seeds 5 --seed-offset 100 trains seeds 100..104, a disjoint set to "
                       "replicate a sweep on (default 0)")
          ->check(parsed_by([](const std::string& t) { parse_seed_offset(t); }, "N"));
  CLI::Option* jobs = grid->add_option("--jobs", f->jobs,
                                       "Runs trained side by side, one thread each, at most 256 (default: the CPU count; 1 per array task "
                                       "with --slurm)")
                          ->check(kCount);
  CLI::Option* shard =
      grid->add_option("--shard", f->shard,
                       "Run only the K-th of N slices of the grid (run index mod N), e.g. 2/3; auto: this task's "
                       "slice of a Slurm or Grid Engine job array (SLURM_ARRAY_TASK_ID, ...)")
          ->check(parsed_by(
              [](const std::string& t) {
                if (t != "auto") parse_shard(t);
              },
              "K/N|auto"));
  CLI::Option* max_runs =
      grid->add_option("--max-runs", f->max_runs,
                       fmt::format("Refuse a grid of more runs than this, seeds included (default {})", kDefaultMaxRuns))
          ->check(kCount);
  cmd->add_option("--target-acc", f->target_acc,
                  "Report the steps each run took to reach this validation accuracy (default 0.99)")
      ->check(CLI::Range(0.0, 1.0));
  CLI::Option* config =
      cmd->add_option("--config", f->config_file, "Read the base settings from a JSON file like a run's config.json")
          ->type_name("FILE");
  CLI::Option* out = cmd->add_option(
      "--out", f->out,
      "The sweep's directory (required): sweep.json, runs/<id>/, results.csv, summary.md, *.svg, report.html; "
      "processes on any machines may share it, each run is trained by one at a time")
                          ->type_name("DIR");
  CLI::Option* merge = cmd->add_option(
      "--merge", f->merge,
      "Merge these shard directories of one sweep into --out and rebuild its reports (--merge DIR --out DIR: "
      "rebuild DIR's); exit status 1 when a run is finished in none of them. Not with --config, --resume, "
      "--no-report, --slurm or any Sweep, Model, Data or Training flag")
                            ->type_name("DIR");
  CLI::Option* resume = cmd->add_option(
      "--resume", f->resume,
      "Train the unfinished runs of the sweep in DIR as DIR/sweep.json defines them (what each Slurm array task "
      "runs). Not with --out, --config, --heads, --dk, --kv-heads, --sweep, --seeds, --seed-offset, --max-seeds, --max-runs or any Model, "
      "Data or Training flag")
                             ->type_name("DIR");
  CLI::Option* no_report =
      cmd->add_flag("--no-report", f->no_report, "Do not rebuild the reports at the end (the merge job does)");
  cmd->add_flag("-q,--quiet", f->quiet, "Print only the summary");

  CLI::Option_group* cluster = cmd->add_option_group("Slurm");
  CLI::Option* slurm = cluster->add_flag(
      "--slurm", f->slurm,
      "Write the sweep as a Slurm job array, DIR/slurm/array.sbatch, and a merge job that builds the reports, "
      "DIR/slurm/merge.sbatch; train nothing here (not with --shard or --no-report)");
  CLI::Option* tasks =
      cluster->add_option("--tasks", f->tasks, "Array tasks, each a shard of the grid (default: one per run; with --slurm)")
          ->check(kCount);
  CLI::Option* sbatch = cluster->add_option(
      "--sbatch", f->sbatch,
      "One more #SBATCH option for both scripts, written with '=': --sbatch=--time=1:00:00 (repeatable; with "
      "--slurm)");
  CLI::Option* submit = cluster->add_flag(
      "--submit", f->submit, "Submit both with sbatch, the merge with --dependency=afterany on the array (with --slurm)");
  for (CLI::Option* o : {tasks, sbatch, submit}) o->needs(slurm);
  slurm->excludes(shard)->excludes(no_report);

  // A merge, and a resumed sweep, take the sweep from sweep.json. --merge's and
  // --resume's help say which flags these are.
  for (CLI::Option* from_file : {merge, resume}) {
    from_file->excludes(config)->excludes(heads)->excludes(dk)->excludes(kv)->excludes(sweep)->excludes(seeds);
    from_file->excludes(seed_offset)->excludes(max_seeds);
    from_file->excludes(max_runs);
    for (CLI::Option_group* g : {groups.model, groups.data, groups.training}) {
      for (CLI::Option* o : g->get_options()) {
        if (o != g->get_help_ptr()) from_file->excludes(o);
      }
    }
  }
  merge->excludes(jobs)->excludes(shard)->excludes(resume)->excludes(no_report)->excludes(slurm);
  resume->excludes(out);
  return [f, jobs] {
    f->jobs_given = jobs->count() > 0;
    return run_ablate(*f);
  };
}

}  // namespace headroom::cli
