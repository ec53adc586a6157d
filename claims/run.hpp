// Running the study of `headroom claims` and writing its report:
//
//     DIR/claims.json        the budget and seeds the directory was made with
//     DIR/<sweep>/           one `headroom ablate` directory per sweep (claims/study.hpp)
//     DIR/claims.md          a row per claim: verdict and headline numbers, then each
//                            claim's experiment, command, prediction, rule, numbers, plot
//     DIR/claims.html        the same on one page, the plots inline
//     DIR/claim-<id>.svg     each claim's plot
//
// Running it again into the same DIR resumes every sweep (ablate's own resume) and
// rebuilds the report; a DIR made with another budget or seed count is refused.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ablate/sweep.hpp"
#include "claims/claims.hpp"
#include "claims/study.hpp"

namespace headroom {

// What run_claims reports as it goes (calls never overlap).
struct ClaimsEvent {
  enum class Kind {
    sweep_started,   // sweep `index` of `count` begins: sweep, plan
    sweep_event,     // one of its runner's events: event
    sweep_finished,  // its runs are done (or stopped) and its ablate reports written: outcome
    assessing,       // the claims are being assessed (claim 2 measures its models at initialisation)
    round_started,   // seeds until decided: round `round` gives the points open_claims compare a seed a set
  };
  Kind kind = Kind::sweep_started;
  std::size_t index = 0, count = 0;  // 1-based
  const ClaimSweep* sweep = nullptr;
  const SweepPlan* plan = nullptr;
  const SweepEvent* event = nullptr;
  const SweepOutcome* outcome = nullptr;
  std::size_t round = 1;                 // 1: the study's own seeds; 2, 3, ...: one more seed a set each
  std::vector<std::string> open_claims{};  // round_started: the claims not settled that more seeds may settle
};

struct ClaimsOptions {
  std::filesystem::path out_dir;
  std::size_t jobs = 1;  // runs trained side by side, one thread each
  std::function<void(const ClaimsEvent&)> on_event;  // progress; may be empty
  std::function<bool()> stop_requested;              // Ctrl-C: the running runs checkpoint and stop
};

// Every sweep's plan, in the study's order.
std::vector<SweepPlan> plan_study(const Study& study);

// Refuses (std::invalid_argument, one line) what run_claims would refuse, before
// anything is written: a DIR that is not a directory; a non-empty DIR without
// claims.json; a claims.json of another budget or seed count; a sweep directory
// holding a different sweep (check_sweep_dir); a sweep that does not fit in memory
// with `jobs` runs side by side (check_sweep_memory).
void check_claims_dir(const Study& study, const std::vector<SweepPlan>& plans, const std::filesystem::path& dir,
                      std::size_t jobs);

struct ClaimsOutcome {
  std::vector<SweepOutcome> sweeps;  // one per sweep run (fewer when interrupted)
  std::vector<ClaimRow> rows;        // the report's rows
  std::string markdown;              // claims.md
  bool interrupted = false;
  std::size_t failed = 0;            // runs that failed, over all sweeps
};

// Seeds until decided: what the next round grows by one seed a set, as sweep index
// (into study.sweeps) -> the points of it that gain the seed (empty: every point).
// A sweep grows where a claim reads it that is not settled, that more seeds could
// settle (ClaimRow::seeds_can_decide), while the sweep has fewer than
// study.max_seeds a set (per_set[i] now); the points are the ones such claims compare
// (ClaimRow::compared; a claim comparing none grows every point). `open`, when
// given, receives those claims' ids.
std::map<std::size_t, std::set<std::string>> sweeps_to_grow(const Study& study, const std::vector<ClaimRow>& rows,
                                                            const std::vector<std::size_t>& per_set,
                                                            std::vector<std::string>* open = nullptr);

// check_claims_dir, then writes claims.json and runs each sweep in turn (run_sweep),
// writes its ablate reports (write_reports), then runs rounds of seeds until decided
// (sweeps_to_grow, up to study.max_seeds a set), assesses the claims from whatever
// has finished and writes the report. After an interrupt the remaining sweeps are
// not started, and the report says what has finished.
ClaimsOutcome run_claims(const Study& study, const ClaimsOptions& options);

// The claims assessed from the sweeps' finished runs in DIR (and claim 2's
// measurement at initialisation, which trains nothing).
std::vector<ClaimRow> assess_study(const Study& study, const std::vector<SweepPlan>& plans,
                                   const std::filesystem::path& dir);

// How far each sweep has got, and what its runs cost: the report's table of sweeps.
struct SweepTally {
  std::string name;
  std::size_t runs = 0, finished = 0;  // the grid's runs at its seeds now, and those finished
  double run_seconds = 0;  // the finished runs' wall times, summed (runs side by side overlap)
  std::size_t seeds_per_set = 0;  // the seeds a set it has now (more than the study's after rounds)
};
std::vector<SweepTally> tally_study(const Study& study, const std::vector<SweepPlan>& plans,
                                    const std::filesystem::path& dir);

// claims.md and claims.html of `rows` (the report writer; pure).
std::string claims_markdown(const Study& study, const std::vector<ClaimRow>& rows, const std::filesystem::path& dir,
                            const std::vector<SweepTally>& tallies = {});
std::string claims_html(const Study& study, const std::vector<ClaimRow>& rows, const std::filesystem::path& dir,
                        const std::vector<SweepTally>& tallies = {});
// Writes claims.md, claims.html and claim-<id>.svg into DIR, each atomically; returns claims.md.
std::string write_claims_report(const Study& study, const std::vector<ClaimRow>& rows, const std::filesystem::path& dir,
                                const std::vector<SweepTally>& tallies = {});

}  // namespace headroom
