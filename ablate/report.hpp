// What `headroom ablate` makes of its finished runs:
//
//     DIR/results.csv            one row per finished run, in grid order
//     DIR/summary.md             one row per grid point: mean and sd over seeds, noise marks
//     DIR/val_loss.svg           validation loss against step, per point (band: min to max over seeds)
//     DIR/final_vs_<axis>.svg    final val loss, accuracy and (when known) excess loss against
//                                each swept axis (bars: sd)
//     DIR/tracked_heads.svg      with train.track_heads: the largest induction and previous-token
//                                scores over the heads and the ICL score against step, per point
//     DIR/report.html            the summary table and every plot on one page
//
// All of it is rebuilt from DIR/sweep.json and the runs' result.json and
// metrics.csv, so a merged directory reports exactly as an unsharded one.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/sweep.hpp"
#include "train/convergence.hpp"

namespace headroom {

struct RunResult {
  const PlannedRun* run = nullptr;
  std::size_t steps = 0;
  std::size_t parameters = 0;            // every trainable parameter
  std::size_t attention_parameters = 0;  // per layer: q, k, v and out projections, biases included
  std::size_t kv_floats_per_token = 0;   // per layer: n_kv_heads (d_k + d_v)
  double final_train_loss = NAN;
  double final_val_loss = NAN;
  double final_val_accuracy = NAN;
  double best_val_accuracy = NAN;
  // The Bayes loss of the run's validation targets and final_val_loss minus it
  // (docs/design.md #14, #15); NaN when the data does not know its distribution (a
  // text) or the result.json predates them.
  double final_excess_loss = NAN;
  double final_bayes_loss = NAN;
  std::optional<std::size_t> steps_to_target;  // first validation step with accuracy >= the target
  // Why the run ended ("steps" or "patience"; "" when its result.json predates them),
  // and whether its val loss was still falling then (train/convergence.hpp): unknown
  // for such a result.json, and NaN its fall.
  std::string stop_reason;
  ConvergenceStatus convergence = ConvergenceStatus::unknown;
  double fall_per_eval = NAN;
  double wall_s = NAN;
  double tokens_per_s = NAN;
  std::vector<double> curve_steps, curve_val_loss;  // metrics.csv's validation rows
  std::vector<double> curve_icl;                    // metrics.csv's icl_score (NaN where empty)
  // A run trained with train.track_heads (its tracked_heads.csv): at each validation
  // step, the largest induction and previous-token scores over all heads. Empty otherwise.
  std::vector<double> heads_steps, heads_max_induction, heads_max_previous;
};

// The finished runs of the plan found in DIR (result.json and metrics.csv), in grid
// order. A malformed result.json or metrics.csv is a std::invalid_argument naming it.
std::vector<RunResult> collect_results(const SweepPlan& plan, const std::filesystem::path& dir, double target_acc);

// Mean and sample standard deviation (n - 1 in the denominator; NaN below 2 values).
struct SeedStats {
  std::size_t n = 0;
  double mean = NAN;
  double sd = NAN;
};
SeedStats seed_stats(const std::vector<double>& values);

// The noise rule of summary.md: two points differ beyond seed noise when
//     |mean_a - mean_b| > 2 sqrt(sd_a^2 / n_a + sd_b^2 / n_b),
// two standard errors of the difference of the means (Welch). False when either
// point has fewer than 2 seeds: then the noise is unknown.
bool differs_beyond_noise(const SeedStats& a, const SeedStats& b);

// Two points shown equal: the whole two-standard-error interval of the difference of
// their means lies inside +-margin, |mean_a - mean_b| + 2 se < margin (se as above).
// False when either has fewer than 2 seeds or a non-finite mean or sd.
bool equal_within(const SeedStats& a, const SeedStats& b, double margin);

struct PointSummary {
  std::string point;
  std::vector<nlohmann::json> values;  // the plan's columns
  std::size_t seeds = 0;               // finished runs pooled here
  SeedStats val_loss, val_accuracy;
  SeedStats excess_loss;               // over the seeds whose excess loss is known (n = 0: none)
  SeedStats steps_to_target;           // over the seeds that reached the target
  std::size_t parameters = 0, attention_parameters = 0, kv_floats_per_token = 0;
  bool loss_differs = false, accuracy_differs = false;  // from the best point, beyond noise
  bool best_loss = false, best_accuracy = false;
  bool excess_differs = false, best_excess = false;     // against the point of lowest mean excess loss
  // Some seed's val loss was still falling when it stopped: comparisons with this
  // point measure the training budget, not the architecture (summary.md's mark).
  bool still_falling = false;
};

// Seeds until decided (ablate --seeds auto): two losses closer than this are equal.
inline constexpr double kEqualLossNats = 0.02;

// The points whose comparison with the best point is not decided: they neither
// differ from it beyond noise nor are shown equal to it (|gap| + 2 se < margin, se
// as in differs_beyond_noise). The loss compared is the excess loss where every
// point knows it, else the val loss; the best is the point of lowest mean. A point
// with fewer than 2 seeds is undecided; the best point itself is not listed, and
// goes to `best` when given (empty when no point has a finite loss).
std::vector<std::string> undecided_points(const std::vector<PointSummary>& points, double margin = kEqualLossNats,
                                          std::string* best = nullptr);

// One row per grid point with a finished run, in grid order, with the noise marks
// against the point of lowest mean val loss, the one of highest mean accuracy and the
// one of lowest mean excess loss among the points that know it (points tied with it
// are best too).
std::vector<PointSummary> summarize(const SweepPlan& plan, const std::vector<RunResult>& results);

// Writes results.csv, summary.md, the plots and report.html into DIR (each file
// atomically, all under DIR's lock, ablate/sweep.hpp's lock_sweep_dir) and returns
// summary.md's text.
std::string write_reports(const SweepPlan& plan, const std::filesystem::path& dir, double target_acc);

}  // namespace headroom
