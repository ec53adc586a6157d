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

// The claim "a is lower than b" (a loss, an excess loss, a step time):
//   supported     a and b differ beyond noise and a.mean < b.mean;
//   contradicted  they differ beyond noise and a.mean > b.mean, or they are shown
//                 equal: |b.mean - a.mean| + 2 se < margin (the whole two-standard-error
//                 interval of the difference lies inside +-margin);
//   inconclusive  otherwise, and whenever either has fewer than 2 seeds.
// se is sqrt(sd_a^2 / n_a + sd_b^2 / n_b), as in differs_beyond_noise.
Verdict lower_rule(const SeedStats& a, const SeedStats& b, double margin);

// The claim "x is about zero" (an excess loss at or past the elbow), with a tolerance:
//   supported     mean + 2 se <= tolerance;
//   contradicted  mean - 2 se > tolerance;
//   inconclusive  otherwise, and below 2 seeds. se = sd / sqrt(n).
Verdict near_zero_rule(const SeedStats& x, double tolerance);

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
