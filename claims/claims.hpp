// The claims of `headroom claims` (docs/cli/claims.md), each assessed from numbers:
// the parameter counter's counts, the attention at initialisation, and the seed
// statistics of the sweeps' finished runs. Every function here is pure, so the tests
// feed it numbers made up for the purpose; run_claims (claims/run.hpp) feeds it the
// sweeps'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ablate/report.hpp"
#include "claims/init_scores.hpp"
#include "claims/verdict.hpp"
#include "train/config.hpp"

namespace headroom {

// The tolerances the verdict rules are given (docs/cli/claims.md#verdict-rules).
inline constexpr double kEqualLossMargin = kEqualLossNats;  // nats: two losses closer than this are equal (0.02)
inline constexpr double kNearZeroExcess = 0.05;   // nats: an excess loss this small is "about 0"
inline constexpr double kSlopeTolerance = 0.1;    // a fitted log-log slope this close is the predicted one
inline constexpr double kTimeMargin = 0.05;       // step times within 5% are equal
// Two accuracies within a point (0.01) of each other are equal: a fifth of the 5
// points Vaswani et al.'s and the seeds' comparisons turn on, and about one item
// in a hundred of a val split.
inline constexpr double kAccuracyMargin = 0.01;
// recall (2 pairs a row) is learned when a point's accuracy passes this: halfway from
// picking one of the two values in context (50%) to always right.
inline constexpr double kRecallLearned = 0.75;
// nats: a seed whose loss ends this far above its point's best seed is stuck, a run
// that failed to train where another seed of the same model did (five times the
// margin within which two losses count as equal).
inline constexpr double kStuckMargin = 0.1;

// One grid point of a sweep: its config (the first run's, seed aside) and its numbers over seeds.
struct PointNumbers {
  std::string point;                 // "h4-dk12"
  TrainConfig config;                // finalized: every model value resolved
  SeedStats val_loss, excess_loss, tokens_per_s, val_accuracy;
  // Per seed, the val loss at the run's second-to-last validation minus that at its
  // last: how much it was still gaining when it stopped (empty below two validations).
  SeedStats last_gain{};
  // The in-context-learning score at each seed's last validation (train/evaluate.hpp:
  // the loss late in the context minus early; negative when the model uses it).
  SeedStats icl_score{};
  std::size_t parameters = 0, attention_parameters = 0;
  std::vector<double> seed_losses{};  // each finished seed's loss() value, in run order
  // Seeds whose val loss was still falling when they stopped (train/convergence.hpp),
  // and those whose trend is known at all: a comparison with such a point measures
  // the budget as much as the model.
  std::size_t still_falling = 0, trend_known = 0;
  // The seeds whose loss ended more than kStuckMargin above the point's best seed.
  std::size_t stuck() const;
  // loss() over the seeds that are not stuck: what the model reaches when training
  // works (loss() itself when the seeds' own values are not known).
  SeedStats trained_loss() const;
  // The loss the claims compare: the excess loss where the task knows its Bayes loss,
  // else the validation loss.
  const SeedStats& loss() const { return excess_loss.n > 0 ? excess_loss : val_loss; }
  bool has_excess() const { return excess_loss.n > 0; }
};

struct SweepNumbers {
  std::string name;                  // "4-heads-lags"
  std::vector<PointNumbers> points;  // grid order; a point with no finished run has n = 0
  // The first point whose model the predicate accepts, or nullptr.
  const PointNumbers* find(const std::function<bool(const ModelConfig&)>& where) const;
};

// A sweep's numbers from its plan and its finished runs (collect_results).
SweepNumbers sweep_numbers(const std::string& name, const SweepPlan& plan, const std::vector<RunResult>& results);

// Claim 2's measurement at initialisation, one per run of its sweep.
struct InitPoint {
  std::size_t d_k = 0;
  bool scaled = true;  // attn_scale 1/sqrt(d_k); false: 1
  std::uint64_t seed = 0;
  InitAttention attention{};
};

// Claim 10's measurement of one trained model of the kjv sweep, on the same
// validation rows for every model, repeated (interp/head_analysis.hpp,
// repeated_rows): the strongest previous-token and repeat-induction heads, the loss
// on the second copy over the first, and the heads that keep one offset.
struct HeadRoles {
  std::string point;  // "h4-dk16"
  std::uint64_t seed = 0;
  double previous_token = NAN;    // the largest previous-token score of any head
  double repeat_induction = NAN;  // the largest repeat-induction score of any head
  double copy_ratio = NAN;        // loss on the second copy / loss on the first
  double word_start = NAN;        // the largest word-start score of any head
  double line_start = NAN;        // the largest line-start (verse-start) score
  // Heads whose dominant offset (query - argmax key) is held by at least half their
  // queries, by offset: {1: 2} is two previous-token heads by argmax.
  std::map<long, std::size_t> offset_heads{};
};

// One row of the report.
struct ClaimRow {
  std::string id;                    // "4", "5a"
  std::string claim;                 // the claim, in the seeds' words
  std::string experiment;            // what was run or counted
  std::vector<std::string> sweeps;   // the sweep directories it reads
  std::string prediction;            // what the claim predicts here
  std::string rule;                  // the verdict rule, with its numbers
  std::vector<std::string> numbers;  // one line each: "h=1: excess 0.2130 (sd 0.0110, n 5)"
  std::string plot_svg;              // an SVG document, or empty
  Verdict verdict = Verdict::inconclusive;
  std::string finding;               // what was found, plainly, against the prediction
  std::string summary;               // the headline numbers, for the table
  // The same rule on each of the study's two disjoint seed sets (claims/study.hpp),
  // when it ran both: the verdict is settled only where they agree.
  bool replicated = false;
  Verdict set_a = Verdict::inconclusive, set_b = Verdict::inconclusive;
  // Both seed sets give the same verdict, and it is not inconclusive.
  bool settled() const { return replicated && set_a == set_b && set_a != Verdict::inconclusive; }
  // False where more seeds would not move the verdict: exact counts, a task no point
  // learned, runs still improving at the end (the budget decides), points missing.
  bool seeds_can_decide = true;
  // The points its rule compares, by sweep and point id ("4-heads-lags", "h2-dk24"):
  // the ones seeds until decided grow while it is open. Empty: every point of its
  // sweeps (a rule fitted over the whole grid, as 2a's slopes).
  struct Point {
    std::string sweep, point;
    bool operator==(const Point&) const = default;
  };
  std::vector<Point> compared{};
  // The seeds a set its verdict rests on: the most any compared point has (every
  // point of its sweeps when `compared` is empty); set by assess_study.
  std::size_t seeds_per_set = 0;
};

// Each row of `all` (the claims assessed on every seed) with the verdicts of the
// same claims on seed set A and on seed set B (the same rows, in the same order).
void add_replication(std::vector<ClaimRow>& all, const std::vector<ClaimRow>& a, const std::vector<ClaimRow>& b);

// "0.2130 (sd 0.0110, n 5)"; "n/a" when nothing finished; "(sd n/a, n 1)".
std::string format_stats(const SeedStats& s, int decimals = 4);

// 1: MHA parameters are 4 d_model^2 whatever the head count, from count_parameters,
// and the trained runs' own attention counts (biases included) from `heads`, when given.
ClaimRow assess_mha_parameters(const SweepNumbers* heads);
// 2a: the score sd at initialisation against d_k (slope 0.5 unscaled, 0 scaled);
// 2b: the loss reached, scaled vs unscaled at the largest d_k.
std::vector<ClaimRow> assess_attn_scale(const SweepNumbers& sweep, const std::vector<InitPoint>& init);
// 2c: the same comparison where q and k start with unit variance (init_std
// 1/sqrt(d_model)): the entropy at initialisation and the loss at the largest d_k.
ClaimRow assess_attn_scale_unit_init(const SweepNumbers& sweep, const std::vector<InitPoint>& init);
// 3a: concatenated vs summed heads at the same d_v (the seed's claim: summing instead
// of concatenating, fewer parameters); 3b: the same at equal weights (sum's d_v wider).
std::vector<ClaimRow> assess_concat_sum(const SweepNumbers& sweep);
// 4a: several heads beat one: the excess at h = lags vs h = 1; 4b: the excess at h = lags is about 0.
std::vector<ClaimRow> assess_several_heads(const SweepNumbers& sweep, std::size_t lags);
// 5a: on lags, the narrowest heads against the best of h = 2..16; 5b: the same on recall.
std::vector<ClaimRow> assess_too_many_heads(const SweepNumbers& lags, const SweepNumbers& recall);
// 6: the KV cache shrinks by h/g exactly (count_parameters), and the loss cost of sharing.
ClaimRow assess_kv_heads(const SweepNumbers& sweep);
// 7: more heads at fixed computation cost time: tokens/s at the most heads of h <= 16 vs one head.
ClaimRow assess_head_time(const SweepNumbers& sweep);

// The real-text suite (claims/study.hpp, Suite::text).
// 8a: the seeds' anecdote, a classifier's error rate at h = 8 vs h = 4 (lower rule,
// kAccuracyMargin); 8b: 16 heads no better than 8 (their error rate not lower by
// the margin) and slower (tokens/s, kTimeMargin).
std::vector<ClaimRow> assess_classifier_heads(const SweepNumbers& sweep);
// 9a: one head loses clearly on real text: the best h >= 2 vs h = 1 (val loss, nats
// per character); 9b: a shallow U: the most heads lose to the best of the heads
// between, and by less than one head does.
std::vector<ClaimRow> assess_text_heads(const SweepNumbers& sweep);
// A head that does a thing puts most of its weight on it: the score it must reach.
inline constexpr double kHeadRoleScore = 0.5;
// 10a: the trained kjv models have a previous-token head (at_least_rule on the
// largest previous-token score, kHeadRoleScore); 10b: and an induction head that
// works (the largest repeat-induction score at least kHeadRoleScore, and the second
// copy's loss at most half the first's), both at the point of lowest mean val loss.
std::vector<ClaimRow> assess_head_roles(const SweepNumbers& sweep, const std::vector<HeadRoles>& roles);

}  // namespace headroom
