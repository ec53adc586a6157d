// `headroom claims`: the seeds' claims about heads, each measured by a sweep and given
// a verdict computed from its numbers (claims/run.hpp, docs/cli/claims.md).
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "claims/run.hpp"
#include "cli/commands.hpp"
#include "cli/interrupt.hpp"
#include "cli/progress.hpp"
#include "cli/validators.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

struct ClaimsFlags {
  bool quick = false;
  bool text = false;
  std::string budget;  // hidden: "smoke" for the test suite
  std::string out;
  std::size_t jobs = std::max(1u, std::thread::hardware_concurrency());
  std::optional<std::size_t> seeds;
  std::string seed_offset = "0";
  std::optional<std::size_t> max_seeds;
  bool quiet = false;
};

// The table of claims.md: its lines from the header to the first blank line after it.
std::string claims_table(const std::string& markdown) {
  const std::size_t start = markdown.find("| # |");
  if (start == std::string::npos) return {};
  const std::size_t end = markdown.find("\n\n", start);
  return markdown.substr(start, end == std::string::npos ? std::string::npos : end - start + 1);
}

int run_claims_command(const ClaimsFlags& f) {
  if (f.jobs > static_cast<std::size_t>(kMaxThreads)) {  // a thread per job, capped as ablate caps it
    throw std::invalid_argument(fmt::format("--jobs {}: must be from 1 to {}", f.jobs, kMaxThreads));
  }
  if (!f.budget.empty() && f.quick) throw std::invalid_argument("--quick and --budget: give one of them");
  const Budget budget = !f.budget.empty() ? parse_budget(f.budget) : f.quick ? Budget::quick : Budget::full;
  const Study study = make_study(budget, f.seeds, parse_seed_offset(f.seed_offset), f.max_seeds,
                                 f.text ? Suite::text : Suite::synthetic);
  const fs::path dir = f.out;
  // Everything refused before anything is written (run_claims checks again).
  const std::vector<SweepPlan> plans = plan_study(study);
  check_claims_dir(study, plans, dir, f.jobs);

  std::size_t runs = 0;
  for (const SweepPlan& p : plans) runs += p.runs.size();
  if (!f.quiet) {
    fmt::print("headroom claims{}: budget {}, {} seeds per point ({}..{}: sets A and B of {}; up to {} a set until "
               "settled), {} sweeps ({} runs) into {}, {} at a time\n",
               f.text ? " on real text" : "", to_string(budget), 2 * study.seeds, study.seed_offset, study.seed_offset + 2 * study.seeds - 1,
               study.seeds, study.max_seeds, plans.size(), runs, dir.string(), f.jobs);
    std::fflush(stdout);
  }

  const InterruptGuard interrupt;
  const bool live = isatty(fileno(stdout)) != 0;
  std::optional<SweepBoard> board;
  ClaimsOptions options{
      .out_dir = dir,
      .jobs = f.jobs,
      .on_event =
          [&](const ClaimsEvent& e) {
            switch (e.kind) {
              case ClaimsEvent::Kind::sweep_started:
                if (!f.quiet) {
                  fmt::print("\n[{}/{}] {}: {}\n  {}\n", e.index, e.count, e.sweep->name, e.sweep->about,
                             e.sweep->command(dir));
                  for (const SkippedPoint& s : e.plan->skipped) fmt::print("  skipped {}: {}\n", s.point, s.reason);
                  std::fflush(stdout);
                }
                board.emplace(live, f.quiet);
                break;
              case ClaimsEvent::Kind::sweep_event:
                if (e.event->kind == SweepEvent::Kind::planned && !f.quiet) {
                  fmt::print("  {} runs{}: {} finished before (skipped), {} to run\n", e.event->in_shard,
                             e.event->left_out == 0
                                 ? std::string()
                                 : fmt::format(" asked for at the compared points (the grid's other {} are not)",
                                               e.event->left_out),
                             e.event->finished_before, e.event->to_run);
                  std::fflush(stdout);
                }
                if (board) (*board)(*e.event);
                break;
              case ClaimsEvent::Kind::sweep_finished:
                if (board) board->close();
                board.reset();
                if (!f.quiet) {
                  for (const auto& [id, error] : e.outcome->failed) fmt::print("  failed: {}: {}\n", id, error);
                  fmt::print("  wrote {}/summary.md and report.html\n", (dir / e.sweep->name).string());
                  std::fflush(stdout);
                }
                break;
              case ClaimsEvent::Kind::assessing:
                if (!f.quiet) {
                  fmt::print("\nassessing the claims{}\n", study.suite == Suite::synthetic
                                                                 ? " (claim 2 measures its models at initialisation)"
                                                                 : "");
                  std::fflush(stdout);
                }
                break;
              case ClaimsEvent::Kind::round_started:
                if (!f.quiet) {
                  std::string open;
                  for (const std::string& id : e.open_claims) open += (open.empty() ? "" : ", ") + id;
                  fmt::print("\nround {}: not settled yet: {}; one more seed a set at the points they compare (up to {} "
                             "a set)\n",
                             e.round, open, study.max_seeds);
                  std::fflush(stdout);
                }
                break;
            }
          },
      .stop_requested = [] { return InterruptGuard::requested(); }};
  const ClaimsOutcome outcome = run_claims(study, options);

  fmt::print("\n{}", claims_table(outcome.markdown));
  fmt::print("\nwrote {0}/claims.md, {0}/claims.html and the plots (claim-*.svg)\n", dir.string());
  if (outcome.interrupted) {
    fmt::print("interrupted: the report shows what had finished; run the same command again to continue\n");
    return InterruptGuard::exit_status();
  }
  if (outcome.failed > 0) {
    fmt::print("{} runs failed; run the same command again to retry them\n", outcome.failed);
    return 1;
  }
  return 0;
}

}  // namespace

Run add_claims_command(CLI::App& app) {
  auto f = std::make_shared<ClaimsFlags>();
  CLI::App* cmd = app.add_subcommand(
      "claims",
      "Check the common claims about attention heads: run a fixed set of ablate sweeps into DIR/<sweep>/ and write "
      "DIR/claims.md and DIR/claims.html, a verdict per claim computed from the numbers. Running the same command "
      "again resumes.");
  cmd->footer(
      "The claims: parameter counts, the 1/sqrt(d_k) scale, concatenating heads, several heads vs one, too many "
      "heads, MQA/GQA, the time cost of heads. With --text: the seeds' text-classifier anecdote (8 vs 4 vs 16 heads) "
      "heads at fixed computation on the King James Bible, and the previous-token and induction heads of its models.");
  cmd->add_flag("--quick", f->quick,
                "The small study, a smoke test: about 15 minutes on 2 cores, 10 with --text (default: the full "
                "study, about 70 minutes; with --text, hours)");
  cmd->add_flag("--text", f->text,
                "The claims on real text instead: a character-level classifier of fortunes by topic and a character "
                "model of the King James Bible, each from 1 to 16 heads at fixed d_model, trained until the val "
                "loss stops falling (needs the corpora: scripts/setup.sh --data)");
  cmd->add_option("--out", f->out,
                  "The study's directory: claims.json, one ablate directory per sweep, claims.md, claims.html, "
                  "claim-*.svg")
      ->required();
  cmd->add_option("--jobs", f->jobs, "Runs trained side by side, one thread each, at most 256 (default: the CPU count)")
      ->check(kCount);
  cmd->add_option("--seeds", f->seeds,
                  "Seeds per set, at least 2: every point trains two disjoint sets of this many, and a verdict is "
                  "settled where both sets give it (default: 3 with --quick, 5 for the full study; with --text 2 and 3)")
      ->check(kCount);
  cmd->add_option("--max-seeds", f->max_seeds,
                  "Seeds until decided: a claim not settled gives the points it compares one more seed a set per "
                  "round, up to this many a set (default: 10 for the full study; 3 with --quick, which adds none; with --text 5, "
                  "and 2 with --quick)")
      ->check(kCount);
  cmd->add_option("--seed-offset", f->seed_offset,
                  "The first seed: another offset replicates the whole study on seeds it has not used (default 0)")
      ->check(parsed_by([](const std::string& t) { parse_seed_offset(t); }, "N"));
  cmd->add_option("--budget", f->budget, "")  // hidden: smoke, for the test suite
      ->group("")
      ->check(CLI::IsMember({"quick", "full", "smoke"}));
  cmd->add_flag("-q,--quiet", f->quiet, "Print only the claims table");
  return [f] { return run_claims_command(*f); };
}

}  // namespace headroom::cli
