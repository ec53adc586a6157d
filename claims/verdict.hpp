// The verdict rules of `headroom claims` (docs/cli/claims.md#verdict-rules): pure
// functions from measured numbers to supported, contradicted or inconclusive, so
// that no verdict is ever written by hand and each rule can be tested on numbers
// made up for the purpose.
//
// Every comparison of seed means goes through ablate's noise rule (two standard
// errors of the difference, Welch: differs_beyond_noise in ablate/report.hpp).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ablate/report.hpp"

namespace headroom {

enum class Verdict { supported, contradicted, inconclusive };

// "supported", "contradicted", "inconclusive at this budget".
std::string to_string(Verdict verdict);

// An exact count against its formula.
struct ExactCheck {
  std::string what;       // "d_model 512, 4 heads: attention weights"
  double expected = 0;    // the formula's value
  double measured = 0;    // the counter's value
};

// Supported when every check's measured value equals the expected one, contradicted
// when one differs, inconclusive when there is none.
Verdict exact_rule(const std::vector<ExactCheck>& checks);

// The claim "a is lower than b" (a loss, an excess loss, a step time), with se =
// sqrt(sd_a^2 / n_a + sd_b^2 / n_b) as in differs_beyond_noise:
//   supported     a is lower beyond noise (b - a > 2 se) and by more than the margin
//                 (b - a > margin);
//   contradicted  a is higher beyond noise (a - b > 2 se), or the two are equal:
//                 |b - a| + 2 se < margin (the whole two-standard-error interval of
//                 the gap lies inside +-margin);
//   inconclusive  otherwise (within noise; or lower beyond noise by less than the
//                 margin, which more seeds turn into "equal" or "supported"), and
//                 whenever either side has fewer than 2 seeds.
Verdict lower_rule(const SeedStats& a, const SeedStats& b, double margin);

// Which branch of lower_rule decided, so a report can say why.
enum class LowerOutcome {
  lower_by_more_than_margin,  // supported
  lower_within_margin,        // inconclusive: beyond noise, inside the margin
  higher,                     // contradicted
  equal,                      // contradicted: equal within the margin
  within_noise,               // inconclusive
  unknown,                    // inconclusive: fewer than 2 seeds a side, or a non-finite number
};
LowerOutcome lower_outcome(const SeedStats& a, const SeedStats& b, double margin);
// "lower beyond seed noise, by more than the 0.02 nats margin", ...
std::string describe(LowerOutcome outcome, double margin, const std::string& unit);
// The rule in words for a report, of "a is lower" with `subject` naming a:
// "supported when the scaled mean is lower beyond seed noise ... else inconclusive".
std::string lower_rule_text(const std::string& subject, double margin, const std::string& unit);

// The claim "x is about zero" (an excess loss at or past the elbow), with a tolerance:
//   supported     mean + 2 se <= tolerance;
//   contradicted  mean - 2 se > tolerance;
//   inconclusive  otherwise, and below 2 seeds. se = sd / sqrt(n).
Verdict near_zero_rule(const SeedStats& x, double tolerance);

// The claim "x reaches the threshold" (a score a head must reach to be called one):
//   supported     mean - 2 se >= threshold;
//   contradicted  mean + 2 se < threshold;
//   inconclusive  otherwise, and below 2 seeds. se = sd / sqrt(n).
// near_zero_rule is its mirror, "x stays at or below the tolerance".
Verdict at_least_rule(const SeedStats& x, double threshold);

// The claim "the slope is `predicted`", from one fitted slope per seed:
//   supported     |mean - predicted| <= tolerance;
//   contradicted  |mean - predicted| - 2 se > tolerance;
//   inconclusive  otherwise, and below 2 seeds. se = sd / sqrt(n).
Verdict slope_rule(const SeedStats& slope, double predicted, double tolerance);

// Parts of one claim that must all hold: contradicted if any part is, supported if
// every part is (and there is one), else inconclusive.
Verdict all_of(const std::vector<Verdict>& parts);

// The least-squares slope of log(y) against log(x); NaN with fewer than two points,
// a non-positive value, or all x equal.
double log_log_slope(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace headroom
