// `headroom ablate`: train a grid of models over head count, per-head width and any
// other setting, several seeds each, and report a table and plots (cli/ablate.hpp).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "ablate/sweep.hpp"
#include "ablate/report.hpp"
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
  std::string seeds = "3";
  std::size_t jobs = std::max(1u, std::thread::hardware_concurrency());
  std::string shard;
  std::vector<std::string> merge;
  std::string out;
  double target_acc = 0.99;
  std::size_t max_runs = kDefaultMaxRuns;
  bool quiet = false;
};

// A CLI11 validator from one of ablate.hpp's parsers.
template <typename Parse>
CLI::Validator parsed_by(Parse parse, const char* name) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          parse(text);
          return "";
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      name);
}

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
  fmt::print("merged {} director{} into {}: {} runs brought in, {} already there, {} of {} finished\n", from.size(),
             from.size() == 1 ? "y" : "ies", into.string(), m.copied, m.present, m.copied + m.present,
             plan.runs.size());
  if (!m.missing.empty()) {
    std::string ids;
    for (std::size_t i = 0; i < m.missing.size() && i < 20; ++i) ids += (i == 0 ? "" : ", ") + m.missing[i];
    fmt::print("not finished in any of them: {}{}\n", ids, m.missing.size() > 20 ? ", ..." : "");
  }
  report(plan, into, f.target_acc);
  return 0;
}

// The runner's plan for this shard, in one line.
void print_plan(const SweepEvent& e, const Shard& shard) {
  fmt::print("{} runs in this {}: {} finished before (skipped), {} to run{}\n", e.in_shard,
             shard.count > 1 ? fmt::format("shard ({}/{})", shard.index, shard.count) : std::string("sweep"),
             e.finished_before, e.to_run,
             e.to_run == 0 ? std::string() : fmt::format(" ({} resumed from checkpoints), {} at a time", e.resumed, e.jobs));
  std::fflush(stdout);
}

int run_ablate(const AblateFlags& f) {
  if (!f.merge.empty()) return run_merge(f);
  SweepSpec spec;
  spec.base = build_config(f, f.config_file, &spec.kv_heads);
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
  spec.seeds = parse_seeds(f.seeds);
  const Shard shard = f.shard.empty() ? Shard{} : parse_shard(f.shard);
  if (f.jobs > static_cast<std::size_t>(kMaxThreads)) {  // a thread per job, capped as --threads is
    throw std::invalid_argument(fmt::format("--jobs {}: must be from 1 to {}", f.jobs, kMaxThreads));
  }
  check_grid_size(spec, f.max_runs);  // before the grid is planned

  const SweepPlan plan = plan_sweep(spec);
  {
    std::vector<TrainConfig> configs;
    for (const PlannedRun& run : plan.runs) configs.push_back(run.config);
    check_flags_read(f, configs);
  }
  const fs::path dir = f.out;
  check_sweep_dir(dir, plan);  // before anything is written
  check_sweep_memory(plan, f.jobs);

  if (!f.quiet) {
    const std::size_t points = plan.runs.size() / plan.seeds.size();
    fmt::print("headroom ablate: {} runs ({} point{} x {} seed{}) into {}\n", plan.runs.size(), points,
               points == 1 ? "" : "s", plan.seeds.size(), plan.seeds.size() == 1 ? "" : "s", dir.string());
    for (const SkippedPoint& s : plan.skipped) fmt::print("skipped {}: {}\n", s.point, s.reason);
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

  report(plan, dir, f.target_acc);
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
      "time, and write DIR/results.csv, DIR/summary.md (mean and sd over seeds, with points that differ from the "
      "best beyond seed noise marked *), SVG plots and DIR/report.html. Every train flag sets the base config. "
      "Running the same command again skips finished runs and resumes interrupted ones.");
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
      grid->add_option("--seeds", f->seeds, "Seeds per point: a count N (seeds 0..N-1) or a list 0,5,9 (default 3)")
          ->check(parsed_by([](const std::string& t) { parse_seeds(t); }, "N|LIST"));
  CLI::Option* jobs = grid->add_option("--jobs", f->jobs,
                                       "Runs trained side by side, one thread each, at most 256 (default: the CPU count)")
                          ->check(kCount);
  CLI::Option* shard =
      grid->add_option("--shard", f->shard, "Run only the K-th of N slices of the grid (run index mod N), e.g. 2/3")
          ->check(parsed_by([](const std::string& t) { parse_shard(t); }, "K/N"));
  CLI::Option* max_runs =
      grid->add_option("--max-runs", f->max_runs,
                       fmt::format("Refuse a grid of more runs than this, seeds included (default {})", kDefaultMaxRuns))
          ->check(kCount);
  cmd->add_option("--target-acc", f->target_acc,
                  "Report the steps each run took to reach this validation accuracy (default 0.99)")
      ->check(CLI::Range(0.0, 1.0));
  CLI::Option* config =
      cmd->add_option("--config", f->config_file, "Read the base settings from a JSON file like a run's config.json");
  cmd->add_option("--out", f->out,
                  "The sweep's directory: sweep.json, runs/<id>/, results.csv, summary.md, *.svg, report.html")
      ->required();
  CLI::Option* merge = cmd->add_option(
      "--merge", f->merge, "Merge these shard directories of one sweep into --out and rebuild its reports");
  cmd->add_flag("-q,--quiet", f->quiet, "Print only the summary");

  // A merge takes its sweep from the shards' sweep.json.
  merge->excludes(config)->excludes(heads)->excludes(dk)->excludes(kv)->excludes(sweep)->excludes(seeds);
  merge->excludes(jobs)->excludes(shard)->excludes(max_runs);
  for (CLI::Option_group* g : {groups.model, groups.data, groups.training}) {
    for (CLI::Option* o : g->get_options()) {
      if (o != g->get_help_ptr()) merge->excludes(o);
    }
  }
  return [f] { return run_ablate(*f); };
}

}  // namespace headroom::cli
