// `headroom claims`: the verdict rules on numbers made up for each outcome, claim 1's
// counts, the claims assessed and written from a fake set of sweep results, the
// command's one-line errors, and the whole study end to end at the test-only
// "smoke" budget (a few steps a run: its verdicts mean nothing, its files must exist).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "claims/claims.hpp"
#include "claims/run.hpp"
#include "claims/study.hpp"
#include "claims/verdict.hpp"
#include "cli_runner.hpp"
#include "data/corpus.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

hr::SeedStats stats(double mean, double sd, std::size_t n) { return {.n = n, .mean = mean, .sd = sd}; }

// A point of a lags heads sweep at d_model 48 with `heads` heads of d_k 48 / heads.
hr::PointNumbers heads_point(std::size_t heads, hr::SeedStats excess, hr::SeedStats speed = {}) {
  hr::PointNumbers p;
  p.point = fmt::format("h{}", heads);
  p.config.model.d_model = 48;
  p.config.model.n_heads = heads;
  p.config.model.n_kv_heads = heads;
  p.config.model.d_k = 48 / heads;
  p.config.model.d_v = 48 / heads;
  p.excess_loss = excess;
  p.val_loss = stats(excess.mean + 1.0, excess.sd, excess.n);
  p.tokens_per_s = speed;
  return p;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The command claims.md prints for a sweep (the line starting "headroom <prefix>") is
// that very sweep: rerun, ablate finds the runs the study finished (every one, or the
// compared points' alone where a round grew it, as the sweep's row in claims.md
// counts them) and fills the grid's others.
void check_printed_command(const std::string& md, const std::string& sweep, const std::string& prefix) {
  const std::string row = "| [" + sweep + "](" + sweep + "/summary.md) | ";
  REQUIRE(md.find(row) != std::string::npos);
  std::size_t finished = 0, grid = 0;
  REQUIRE(std::sscanf(md.c_str() + md.find(row) + row.size(), "%zu (%zu)", &finished, &grid) == 2);
  const std::string program = "headroom ";
  const std::size_t at = md.find(program + prefix);
  REQUIRE(at != std::string::npos);
  const std::string command = md.substr(at + program.size(), md.find('\n', at) - at - program.size());
  const CliResult r = run_headroom(command + " --jobs 2");
  INFO(command);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find(fmt::format(": {} finished before (skipped), {} to run", finished, grid - finished)) !=
        std::string::npos);
}

}  // namespace

// ---- the verdict rules ------------------------------------------------------------

TEST_CASE("claims rules: an exact count is supported only when every count equals its formula") {
  CHECK(hr::exact_rule({{"a", 4.0, 4.0}, {"b", 1048576.0, 1048576.0}}) == hr::Verdict::supported);
  CHECK(hr::exact_rule({{"a", 4.0, 4.0}, {"b", 1048576.0, 1048577.0}}) == hr::Verdict::contradicted);
  CHECK(hr::exact_rule({}) == hr::Verdict::inconclusive);
}

TEST_CASE("claims rules: the lower rule follows the two-standard-error noise rule and an equality margin") {
  // se = sqrt(0.01^2/5 + 0.01^2/5) = 0.00632; 2 se = 0.0126.
  CHECK(hr::lower_rule(stats(0.10, 0.01, 5), stats(0.20, 0.01, 5), 0.02) == hr::Verdict::supported);
  CHECK(hr::lower_rule(stats(0.20, 0.01, 5), stats(0.10, 0.01, 5), 0.02) == hr::Verdict::contradicted);
  // Equal: |gap| + 2 se = 0.001 + 0.0126 < 0.02.
  CHECK(hr::lower_rule(stats(0.100, 0.01, 5), stats(0.101, 0.01, 5), 0.02) == hr::Verdict::contradicted);
  // Lower beyond noise (0.015 > 2 se = 0.0126) but by less than the margin, with the
  // interval reaching past it (0.015 + 0.0126 > 0.02): not yet decided either way.
  CHECK(hr::lower_rule(stats(0.100, 0.01, 5), stats(0.115, 0.01, 5), 0.02) == hr::Verdict::inconclusive);
  CHECK(hr::lower_outcome(stats(0.100, 0.01, 5), stats(0.115, 0.01, 5), 0.02) == hr::LowerOutcome::lower_within_margin);
  // Lower beyond noise and inside the margin (0.011 + 2 se 0.0013 < 0.02): equal, contradicted.
  CHECK(hr::lower_rule(stats(0.100, 0.001, 5), stats(0.111, 0.001, 5), 0.02) == hr::Verdict::contradicted);
  CHECK(hr::lower_outcome(stats(0.100, 0.001, 5), stats(0.111, 0.001, 5), 0.02) == hr::LowerOutcome::equal);
  // A gap of 0.01 within noise of sd 0.05: neither shown lower nor shown equal.
  CHECK(hr::lower_rule(stats(0.10, 0.05, 5), stats(0.11, 0.05, 5), 0.02) == hr::Verdict::inconclusive);
  // One seed: the noise is unknown.
  CHECK(hr::lower_rule(stats(0.10, NAN, 1), stats(0.50, NAN, 1), 0.02) == hr::Verdict::inconclusive);
  CHECK(hr::lower_rule({}, stats(0.5, 0.01, 5), 0.02) == hr::Verdict::inconclusive);
}

TEST_CASE("claims rules: near zero and slope rules decide only beyond two standard errors") {
  // se = 0.01 / sqrt(4) = 0.005.
  CHECK(hr::near_zero_rule(stats(0.02, 0.01, 4), 0.05) == hr::Verdict::supported);     // 0.03 <= 0.05
  CHECK(hr::near_zero_rule(stats(0.30, 0.01, 4), 0.05) == hr::Verdict::contradicted);  // 0.29 > 0.05
  CHECK(hr::near_zero_rule(stats(0.05, 0.01, 4), 0.05) == hr::Verdict::inconclusive);  // 0.04 to 0.06
  CHECK(hr::near_zero_rule(stats(0.0, NAN, 1), 0.05) == hr::Verdict::inconclusive);

  CHECK(hr::slope_rule(stats(0.47, 0.02, 4), 0.5, 0.1) == hr::Verdict::supported);
  CHECK(hr::slope_rule(stats(0.02, 0.02, 4), 0.5, 0.1) == hr::Verdict::contradicted);  // 0.48 - 0.02 > 0.1
  CHECK(hr::slope_rule(stats(0.35, 0.2, 4), 0.5, 0.1) == hr::Verdict::inconclusive);   // 0.15 - 0.2 < 0.1 < 0.15
  CHECK(hr::slope_rule({}, 0.5, 0.1) == hr::Verdict::inconclusive);

  CHECK(hr::all_of({hr::Verdict::supported, hr::Verdict::supported}) == hr::Verdict::supported);
  CHECK(hr::all_of({hr::Verdict::supported, hr::Verdict::inconclusive}) == hr::Verdict::inconclusive);
  CHECK(hr::all_of({hr::Verdict::inconclusive, hr::Verdict::contradicted}) == hr::Verdict::contradicted);
  CHECK(hr::all_of({}) == hr::Verdict::inconclusive);
  CHECK(hr::to_string(hr::Verdict::inconclusive) == "inconclusive at this budget");
}

// Each threshold from both sides, in arithmetic that is exact: a side of sd 2 over 4
// seeds against one of sd 0 gives se = 1, so 2 se = 2, and the steps of 1/64 round to
// nothing. A rule whose factor of two became one, whose < became <=, or whose seed
// guard let one side have a single seed, fails a line here.
TEST_CASE("claims rules: every threshold of every rule, on both sides") {
  using V = hr::Verdict;
  constexpr double e = 1.0 / 64;
  const auto lower = [](double gap, double margin) {
    return hr::lower_rule(stats(10.0, 2.0, 4), stats(10.0 + gap, 0.0, 4), margin);
  };
  // Beyond noise: |gap| > 2 se, strictly.
  CHECK(lower(2 + e, e) == V::supported);
  CHECK(lower(2 + e, 0) == V::supported);
  CHECK(lower(2.0, e) == V::inconclusive);
  CHECK(lower(2 - e, e) == V::inconclusive);
  CHECK(lower(-(2 + e), e) == V::contradicted);
  CHECK(lower(-2.0, e) == V::inconclusive);
  // Supported asks the gap to exceed the margin too, strictly; beyond noise but not
  // past the margin (and not shown equal) is undecided.
  CHECK(lower(2 + 2 * e, 2 + e) == V::supported);
  CHECK(lower(2 + e, 2 + e) == V::inconclusive);
  CHECK(lower(3.0, 3 + e) == V::inconclusive);
  CHECK(hr::lower_outcome(stats(10.0, 2.0, 4), stats(13.0, 0.0, 4), 3 + e) == hr::LowerOutcome::lower_within_margin);
  // Equal comes first: beyond noise and inside the margin is equal, not lower.
  CHECK(lower(2 + e, 4 + 2 * e) == V::contradicted);
  CHECK(lower(2 + e, 4 + e) == V::inconclusive);
  CHECK(hr::lower_outcome(stats(10.0, 2.0, 4), stats(12.0 + e, 0.0, 4), 4 + 2 * e) == hr::LowerOutcome::equal);
  // Equal: |gap| + 2 se < margin, strictly; |gap| + 1 se would be below the margin of 2.
  CHECK(lower(0.5, 2.5 + e) == V::contradicted);
  CHECK(lower(-0.5, 2.5 + e) == V::contradicted);
  CHECK(lower(0.5, 2.5) == V::inconclusive);
  CHECK(lower(0.5, 2.0) == V::inconclusive);
  // The seed guard: a side with one seed decides nothing, even with a finite sd.
  CHECK(hr::lower_rule(stats(0, 0, 1), stats(10, 0, 4), 0.02) == V::inconclusive);
  CHECK(hr::lower_rule(stats(0, 0, 4), stats(10, 0, 1), 0.02) == V::inconclusive);
  CHECK(hr::lower_rule(stats(0, 0, 1), stats(0, 0, 4), 0.02) == V::inconclusive);  // not "equal" either
  CHECK(hr::lower_rule(stats(0, 0, 4), stats(0, 0, 1), 0.02) == V::inconclusive);
  CHECK(hr::lower_rule(stats(0, 0, 2), stats(10, 0, 2), 0.02) == V::supported);
  CHECK(hr::lower_rule(stats(0, 0, 2), stats(0, 0, 2), 0.02) == V::contradicted);
  CHECK(hr::lower_rule(stats(NAN, 0, 4), stats(10, 0, 4), 0.02) == V::inconclusive);
  CHECK(hr::lower_rule(stats(0, INFINITY, 4), stats(10, 0, 4), 0.02) == V::inconclusive);
  CHECK(hr::lower_rule(stats(0, 0, 4), stats(10, NAN, 4), 0.02) == V::inconclusive);
  CHECK_FALSE(hr::differs_beyond_noise(stats(0, 0, 1), stats(10, 0, 4)));
  CHECK(hr::differs_beyond_noise(stats(0, 0, 2), stats(10, 0, 2)));

  // Near zero, x of sd 2 over 4 seeds: se 1. Supported: mean + 2 se <= tolerance.
  const auto near = [](double mean, double tolerance) { return hr::near_zero_rule(stats(mean, 2.0, 4), tolerance); };
  CHECK(near(1.0, 3.0) == V::supported);
  CHECK(near(1.0, 3.0 - e) == V::inconclusive);
  CHECK(near(1.0, 2.5) == V::inconclusive);  // mean + 1 se <= 2.5 < mean + 2 se
  // Contradicted: mean - 2 se > tolerance, strictly.
  CHECK(near(5.0, 3.0 - e) == V::contradicted);
  CHECK(near(5.0, 3.0) == V::inconclusive);
  CHECK(near(5.0, 3.5) == V::inconclusive);  // mean - 1 se > 3.5 >= mean - 2 se
  CHECK(hr::near_zero_rule(stats(0, 0, 1), 0.05) == V::inconclusive);
  CHECK(hr::near_zero_rule(stats(0, 0, 2), 0.05) == V::supported);
  CHECK(hr::near_zero_rule(stats(NAN, 0, 4), 0.05) == V::inconclusive);

  // At least, x of sd 2 over 4 seeds: se 1. Supported: mean - 2 se >= threshold.
  const auto least = [](double mean, double threshold) { return hr::at_least_rule(stats(mean, 2.0, 4), threshold); };
  CHECK(least(5.0, 3.0) == V::supported);
  CHECK(least(5.0, 3.0 + e) == V::inconclusive);
  CHECK(least(5.0, 3.5) == V::inconclusive);  // mean - 1 se >= 3.5 > mean - 2 se
  // Contradicted: mean + 2 se < threshold, strictly.
  CHECK(least(1.0, 3.0 + e) == V::contradicted);
  CHECK(least(1.0, 3.0) == V::inconclusive);
  CHECK(least(1.0, 2.5) == V::inconclusive);  // mean + 1 se < 2.5 <= mean + 2 se
  CHECK(hr::at_least_rule(stats(1, 0, 1), 0.5) == V::inconclusive);
  CHECK(hr::at_least_rule(stats(1, 0, 2), 0.5) == V::supported);
  CHECK(hr::at_least_rule(stats(NAN, 0, 4), 0.5) == V::inconclusive);

  // Slope, predicted 0.5, se 1. Supported: |mean - predicted| <= tolerance, either side.
  const auto slope = [](double mean, double tolerance) { return hr::slope_rule(stats(mean, 2.0, 4), 0.5, tolerance); };
  CHECK(slope(0.75, 0.25) == V::supported);
  CHECK(slope(0.25, 0.25) == V::supported);
  CHECK(slope(0.75, 0.25 - e) == V::inconclusive);
  // Contradicted: |mean - predicted| - 2 se > tolerance, strictly, either side.
  CHECK(slope(3.5, 1.0 - e) == V::contradicted);
  CHECK(slope(-2.5, 1.0 - e) == V::contradicted);
  CHECK(slope(3.5, 1.0) == V::inconclusive);
  CHECK(slope(3.5, 1.5) == V::inconclusive);  // off - 1 se > 1.5 >= off - 2 se
  CHECK(hr::slope_rule(stats(0.5, 0, 1), 0.5, 0.1) == V::inconclusive);
  CHECK(hr::slope_rule(stats(0.5, 0, 2), 0.5, 0.1) == V::supported);
}

TEST_CASE("claims rules: the log-log slope of a power law is its exponent") {
  const std::vector<double> x{16, 32, 64, 128, 256};
  std::vector<double> root, flat;
  for (double v : x) {
    root.push_back(0.3 * std::sqrt(v));
    flat.push_back(0.7);
  }
  CHECK(hr::log_log_slope(x, root) == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(hr::log_log_slope(x, flat) == doctest::Approx(0.0));
  CHECK(std::isnan(hr::log_log_slope({16}, {1.0})));
  CHECK(std::isnan(hr::log_log_slope({16, 32}, {1.0, 0.0})));
  CHECK(std::isnan(hr::log_log_slope({16, 16}, {1.0, 2.0})));
}

// ---- the claims from numbers --------------------------------------------------------

TEST_CASE("claim 1: the counter's attention weights are 4 d_model^2 at every head count") {
  const hr::ClaimRow row = hr::assess_mha_parameters(nullptr);
  CHECK(row.verdict == hr::Verdict::supported);
  std::string numbers;
  for (const std::string& n : row.numbers) numbers += n + "\n";
  INFO(numbers);
  CHECK(count_of(numbers, ": 1,048,576 (formula 1,048,576)") == 5);  // d_model 512, h = 1, 2, 4, 8, 16
  CHECK(numbers.find("W_Q: 16,777,216 (formula 16,777,216)") != std::string::npos);
  CHECK(numbers.find("per layer: 67,108,864 (formula 67,108,864)") != std::string::npos);
  CHECK(numbers.find("W_K: 4,194,304 (formula 4,194,304)") != std::string::npos);
  CHECK(numbers.find("DIFFERS") == std::string::npos);

  // A run that reports another attention count contradicts it.
  hr::SweepNumbers sweep{.name = "4-heads-lags", .points = {heads_point(2, stats(0.1, 0.01, 3))}};
  sweep.points[0].parameters = 10000;
  sweep.points[0].attention_parameters = 4 * 48 * 48 + 4 * 48;
  CHECK(hr::assess_mha_parameters(&sweep).verdict == hr::Verdict::supported);
  sweep.points[0].attention_parameters += 1;
  CHECK(hr::assess_mha_parameters(&sweep).verdict == hr::Verdict::contradicted);
}

TEST_CASE("claim 4: several heads beat one, supported, contradicted or inconclusive from the excess losses") {
  auto verdicts = [](hr::SeedStats one, hr::SeedStats two) {
    const hr::SweepNumbers sweep{.name = "4-heads-lags",
                                 .points = {heads_point(1, one), heads_point(2, two), heads_point(4, two)}};
    const std::vector<hr::ClaimRow> rows = hr::assess_several_heads(sweep, 2);
    REQUIRE(rows.size() == 2);
    return std::pair{rows[0].verdict, rows[1].verdict};
  };
  using V = hr::Verdict;
  CHECK(verdicts(stats(0.25, 0.01, 5), stats(0.01, 0.005, 5)) == std::pair{V::supported, V::supported});
  // Two heads no better than one (equal within the margin), and both well above zero.
  CHECK(verdicts(stats(0.25, 0.01, 5), stats(0.25, 0.01, 5)) == std::pair{V::contradicted, V::contradicted});
  // Two heads better, but their excess is not shown to be near zero; then one head better.
  CHECK(verdicts(stats(0.25, 0.01, 5), stats(0.06, 0.03, 5)) == std::pair{V::supported, V::inconclusive});
  CHECK(verdicts(stats(0.01, 0.005, 5), stats(0.25, 0.01, 5)) == std::pair{V::contradicted, V::contradicted});
  // Too noisy to tell, and nothing finished.
  CHECK(verdicts(stats(0.25, 0.3, 5), stats(0.2, 0.3, 5)).first == V::inconclusive);

  // Two heads well above zero while their loss was still falling at the last
  // validation: the budget, not the heads; a gain within noise does not excuse it.
  auto near_zero = [](hr::SeedStats gain) {
    hr::SweepNumbers sweep{.name = "4-heads-lags",
                           .points = {heads_point(1, stats(0.25, 0.01, 5)), heads_point(2, stats(0.25, 0.01, 5))}};
    sweep.points[1].last_gain = gain;
    return hr::assess_several_heads(sweep, 2).at(1);
  };
  const hr::ClaimRow falling = near_zero(stats(0.02, 0.005, 5));
  CHECK(falling.verdict == V::inconclusive);
  CHECK(falling.finding.find("still improving") != std::string::npos);
  CHECK(near_zero(stats(0.002, 0.01, 5)).verdict == V::contradicted);
  CHECK(near_zero({}).verdict == V::contradicted);
  // Still improving: gain - 2 se > 0, strictly (sd 2 over 4 seeds: se 1), two seeds at least.
  constexpr double e = 1.0 / 64;
  CHECK(near_zero(stats(2 + e, 2.0, 4)).verdict == V::inconclusive);
  CHECK(near_zero(stats(2.0, 2.0, 4)).verdict == V::contradicted);
  CHECK(near_zero(stats(1.5, 2.0, 4)).verdict == V::contradicted);  // gain - 1 se > 0 is not enough
  CHECK(near_zero(stats(1.0, 0.0, 1)).verdict == V::contradicted);
  CHECK(near_zero(stats(1.0, 0.0, 2)).verdict == V::inconclusive);
  // Or most seeds still falling by the per-run convergence rule: 3 of 5 excuse, 2 of 4 do not.
  auto falling_seeds = [](std::size_t falling, std::size_t known) {
    hr::SweepNumbers sweep{.name = "4-heads-lags",
                           .points = {heads_point(1, stats(0.25, 0.01, 5)), heads_point(2, stats(0.25, 0.01, 5))}};
    sweep.points[1].still_falling = falling;
    sweep.points[1].trend_known = known;
    return hr::assess_several_heads(sweep, 2).at(1);
  };
  CHECK(falling_seeds(3, 5).verdict == V::inconclusive);
  CHECK(falling_seeds(2, 4).verdict == V::contradicted);
  CHECK(falling_seeds(0, 0).verdict == V::contradicted);
  CHECK(falling_seeds(3, 5).numbers.at(0).find("3 of 5 still falling at the end") != std::string::npos);
  CHECK(verdicts({}, {}) == std::pair{V::inconclusive, V::inconclusive});
}

TEST_CASE("claim 3: concat against sum at the same d_v (3a, the seed's) and at equal weights (3b)") {
  // 3 heads of d_k 8 at d_model 24, no biases: the four points of 3-concat-vs-sum.
  using C = hr::HeadCombine;
  const auto point = [](C combine, std::size_t dv, double loss) {
    hr::PointNumbers p = heads_point(3, stats(loss, 0.01, 5));
    p.config.model.d_model = 24;
    p.config.model.d_k = 8;
    p.config.model.d_v = dv;
    p.config.model.head_combine = combine;
    p.parameters = combine == C::concat ? 3 * 24 * 8 * 3 + 24 * 3 * dv : 3 * 24 * 8 * 2 + 3 * 24 * dv + 24 * dv;
    return p;
  };
  const auto rows = [&](double concat8, double sum8, double sum12) {
    const hr::SweepNumbers sweep{.name = "3-concat-vs-sum",
                                 .points = {point(C::concat, 8, concat8),
                                            point(C::concat, 12, 0.5), point(C::sum, 8, sum8),
                                            point(C::sum, 12, sum12)}};
    const std::vector<hr::ClaimRow> r = hr::assess_concat_sum(sweep);
    REQUIRE(r.size() == 2);
    CHECK(r[0].id == "3a");
    CHECK(r[1].id == "3b");
    return std::pair{r[0].verdict, r[1].verdict};
  };
  using V = hr::Verdict;
  // Each row reads its own sum point: the same d_v for 3a, d_v 12 for 3b.
  CHECK(rows(0.1, 0.3, 0.3) == std::pair{V::supported, V::supported});
  CHECK(rows(0.1, 0.3, 0.05) == std::pair{V::supported, V::contradicted});
  CHECK(rows(0.1, 0.1, 0.3) == std::pair{V::contradicted, V::supported});
  const hr::SweepNumbers lone{.name = "3-concat-vs-sum", .points = {point(C::concat, 8, 0.1)}};
  for (const hr::ClaimRow& r : hr::assess_concat_sum(lone)) CHECK(r.verdict == V::inconclusive);
}

TEST_CASE("a seed more than 0.1 nats above its point's best is stuck: counted, shown, and left out of 4b") {
  // Four seeds at the Bayes loss and one that failed, as h = 2 on lags can end.
  const auto point_of = [](std::vector<double> seeds) {
    hr::PointNumbers p = heads_point(2, stats(0, 0, 0));
    p.excess_loss = hr::seed_stats(seeds);
    p.seed_losses = std::move(seeds);
    return p;
  };
  const hr::PointNumbers failed = point_of({0.0065, 0.0091, 0.0072, 0.355, 0.0080});
  CHECK(failed.stuck() == 1);
  CHECK(failed.trained_loss().n == 4);
  CHECK(failed.trained_loss().mean == doctest::Approx(0.0077));
  // The margin from both sides (exact in binary: 0.125 above the best, and 1/64 less).
  CHECK(point_of({0.5, 0.5 + 0.125}).stuck() == 1);
  CHECK(point_of({0.5, 0.5 + 0.0625}).stuck() == 0);
  CHECK(point_of({0.5, 0.5 + hr::kStuckMargin}).stuck() == 0);
  CHECK(point_of({0.5, NAN}).stuck() == 1);
  CHECK(point_of({}).stuck() == 0);

  hr::SweepNumbers sweep{.name = "4-heads-lags", .points = {heads_point(1, stats(0.3, 0.01, 5)), failed}};
  const std::vector<hr::ClaimRow> rows = hr::assess_several_heads(sweep, 2);
  // The mean over all five (0.077, sd 0.155) decides nothing; the four that trained are about 0.
  CHECK(hr::near_zero_rule(failed.loss(), hr::kNearZeroExcess) == hr::Verdict::inconclusive);
  CHECK(rows.at(1).verdict == hr::Verdict::supported);
  CHECK(rows.at(1).summary.find("1 of 5 seeds stuck") != std::string::npos);
  CHECK(rows.at(1).finding.find("left out") != std::string::npos);
  // Every seed is drawn, beside the mean: five hollow markers at h = 2.
  CHECK(count_of(rows.at(0).plot_svg, "fill=\"none\" stroke=") >= 5);
}

TEST_CASE("claim 2c: unit-variance queries and keys, the entropy at initialisation and the loss at the largest d_k") {
  const auto point = [](std::size_t dk, bool scaled, double loss) {
    hr::PointNumbers p = heads_point(2, stats(loss, 0.01, 5));
    p.config.model.d_model = 64;
    p.config.model.d_k = dk;
    if (!scaled) p.config.model.attn_scale = 1.0;
    return p;
  };
  std::vector<hr::InitPoint> init;
  for (std::uint64_t seed = 0; seed < 3; ++seed) {
    init.push_back({.d_k = 256, .scaled = false, .seed = seed, .attention = {.score_sd = 16, .entropy = 0.05, .max_entropy = 2.7}});
    init.push_back({.d_k = 256, .scaled = true, .seed = seed, .attention = {.score_sd = 1, .entropy = 2.1, .max_entropy = 2.7}});
  }
  const auto verdict = [&](double scaled, double unscaled) {
    const hr::SweepNumbers sweep{.name = "2-attn-scale-unit-init",
                                 .points = {point(16, true, 0.05), point(16, false, 0.05), point(256, true, scaled),
                                            point(256, false, unscaled)}};
    const hr::ClaimRow row = hr::assess_attn_scale_unit_init(sweep, init);
    CHECK(row.id == "2c");
    CHECK(row.summary.find("entropy at init, unscaled d_k 256: 0.050 of 2.700") != std::string::npos);
    return row.verdict;
  };
  CHECK(verdict(0.03, 0.40) == hr::Verdict::supported);
  CHECK(verdict(0.40, 0.03) == hr::Verdict::contradicted);
  CHECK(verdict(0.03, 0.031) == hr::Verdict::contradicted);  // equal within the margin
}

TEST_CASE("claim 7: tokens per second against the head count") {
  auto sweep = [](double one, double sixteen) {
    return hr::SweepNumbers{.name = "4-heads-lags",
                            .points = {heads_point(1, stats(0.2, 0.01, 3), stats(one, 100, 3)),
                                       heads_point(16, stats(0.0, 0.01, 3), stats(sixteen, 100, 3))}};
  };
  CHECK(hr::assess_head_time(sweep(50000, 30000)).verdict == hr::Verdict::supported);
  CHECK(hr::assess_head_time(sweep(30000, 50000)).verdict == hr::Verdict::contradicted);
  CHECK(hr::assess_head_time(sweep(50000, 50050)).verdict == hr::Verdict::contradicted);  // equal within 5%
  // 4% slower beyond noise is still inside the 5% margin: equal (2 se = 163) ...
  CHECK(hr::assess_head_time(sweep(50000, 48000)).verdict == hr::Verdict::contradicted);
  // ... or, noisier, not yet decided: lower beyond noise, by less than the margin.
  const hr::SweepNumbers noisy{.name = "4-heads-lags",
                               .points = {heads_point(1, stats(0.2, 0.01, 3), stats(50000, 500, 3)),
                                          heads_point(16, stats(0.0, 0.01, 3), stats(48000, 500, 3))}};
  const hr::ClaimRow row = hr::assess_head_time(noisy);
  CHECK(row.verdict == hr::Verdict::inconclusive);
  CHECK(row.finding.find("the gap is 2000: lower beyond seed noise, but by less than the 2500 tokens/s margin") !=
        std::string::npos);
  CHECK(row.summary.find("; lower by 2000, inside the 2500 margin") != std::string::npos);
  CHECK(hr::assess_head_time(sweep(50000, 48000)).summary.find("; equal within 2500 (gap 2000)") != std::string::npos);
  CHECK(hr::assess_head_time(sweep(50000, 30000)).summary.find("gap") == std::string::npos);
  // The margin is 5% of one head's speed: a gap of 5 with 2 se = 40 is equal to 1000
  // (45 < 50) and not shown equal to 880 (45 > 44).
  auto timed = [](double one, double gap) {
    return hr::SweepNumbers{.name = "4-heads-lags",
                            .points = {heads_point(1, stats(0.2, 0.01, 3), stats(one, 0, 4)),
                                       heads_point(16, stats(0.0, 0.01, 3), stats(one - gap, 40, 4))}};
  };
  CHECK(hr::assess_head_time(timed(1000, 5)).verdict == hr::Verdict::contradicted);
  CHECK(hr::assess_head_time(timed(880, 5)).verdict == hr::Verdict::inconclusive);
}

TEST_CASE("claim 5b: decided only when its best point reaches 75% accuracy") {
  auto verdict = [](double best_accuracy) {
    hr::SweepNumbers recall{.name = "5-recall-narrow-heads",
                            .points = {heads_point(2, stats(0.1, 0.01, 3)), heads_point(24, stats(0.5, 0.01, 3))}};
    recall.points[0].val_accuracy = stats(best_accuracy, 0.0, 3);
    recall.points[1].val_accuracy = stats(0.5, 0.0, 3);
    const std::vector<hr::ClaimRow> rows =
        hr::assess_too_many_heads(hr::SweepNumbers{.name = "4-heads-lags", .points = {}}, recall);
    REQUIRE(rows.size() == 2);
    return rows[1].verdict;
  };
  CHECK(verdict(0.75) == hr::Verdict::supported);
  CHECK(verdict(0.75 - 1.0 / 1024) == hr::Verdict::inconclusive);
  CHECK(verdict(0.9) == hr::Verdict::supported);
}

namespace {

// A point of a real-text heads sweep at d_model 64: accuracy (a classifier's, or
// none), val loss and tokens/s over seeds.
hr::PointNumbers text_point(std::size_t heads, hr::SeedStats accuracy, hr::SeedStats loss, hr::SeedStats speed) {
  hr::PointNumbers p;
  p.point = fmt::format("h{}-dk{}", heads, 64 / heads);
  p.config.model.d_model = 64;
  p.config.model.n_heads = heads;
  p.config.model.n_kv_heads = heads;
  p.config.model.d_k = 64 / heads;
  p.config.model.d_v = 64 / heads;
  p.val_accuracy = accuracy;
  p.val_loss = loss;
  p.tokens_per_s = speed;
  return p;
}

}  // namespace

TEST_CASE("claim 8: the classifier anecdote, 8 vs 4 heads by accuracy and 16 no better but slower") {
  const auto verdicts = [](double acc4, double acc8, double acc16, double speed8, double speed16) {
    // sd 0.002 over 6 seeds: 2 se of an accuracy gap is 2 sqrt(2 0.002^2 / 6) = 0.0023.
    const hr::SweepNumbers sweep{
        .name = "8-classifier-heads",
        .points = {text_point(1, stats(0.40, 0.002, 6), stats(1.9, 0.01, 6), stats(60000, 300, 6)),
                   text_point(4, stats(acc4, 0.002, 6), stats(1.7, 0.01, 6), stats(55000, 300, 6)),
                   text_point(8, stats(acc8, 0.002, 6), stats(1.6, 0.01, 6), stats(speed8, 300, 6)),
                   text_point(16, stats(acc16, 0.002, 6), stats(1.6, 0.01, 6), stats(speed16, 300, 6))}};
    const std::vector<hr::ClaimRow> rows = hr::assess_classifier_heads(sweep);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].id == "8a");
    CHECK(rows[1].id == "8b");
    return std::pair{rows[0].verdict, rows[1].verdict};
  };
  using V = hr::Verdict;
  CHECK(verdicts(0.48, 0.50, 0.50, 50000, 40000) == std::pair{V::supported, V::supported});
  // 8 beats 4 beyond noise, by 0.9 points: inside the 1-point margin, yet not shown equal (0.9 + 0.23 > 1).
  CHECK(verdicts(0.48, 0.489, 0.489, 50000, 40000).first == V::inconclusive);
  // 8 no better than 4 (equal within the margin, or worse): contradicted.
  CHECK(verdicts(0.48, 0.4805, 0.48, 50000, 40000).first == V::contradicted);
  CHECK(verdicts(0.50, 0.48, 0.48, 50000, 40000).first == V::contradicted);
  // 16 better than 8 by 3 points: "no better" fails, whatever the speed.
  CHECK(verdicts(0.48, 0.50, 0.53, 50000, 40000).second == V::contradicted);
  // 16 as fast as 8 (within 5%): "slower" fails.
  CHECK(verdicts(0.48, 0.50, 0.50, 50000, 49000).second == V::contradicted);
  // 16 better than 8 beyond noise by less than the margin: "no better" undecided.
  CHECK(verdicts(0.48, 0.50, 0.509, 50000, 40000).second == V::inconclusive);

  // The numbers, the summary's gap with its interval, and the compared points.
  const hr::SweepNumbers sweep{.name = "8-classifier-heads",
                               .points = {text_point(4, stats(0.48, 0.01, 6), stats(1.7, 0.01, 6), stats(55000, 300, 6)),
                                          text_point(8, stats(0.50, 0.01, 6), stats(1.6, 0.01, 6), stats(50000, 300, 6))}};
  const std::vector<hr::ClaimRow> rows = hr::assess_classifier_heads(sweep);
  INFO(rows[0].summary);
  CHECK(rows[0].summary == "accuracy h=4 48.0%, h=8 50.0%: 8 - 4 = +2.00 points (2-se interval +0.85 to +3.15)");
  CHECK(rows[0].verdict == V::supported);
  CHECK(rows[0].numbers[0] == "h=4 (d_k 16): accuracy 48.0% (sd 1.0, n 6); label loss 1.7000 (sd 0.0100, n 6); "
                              "55000 (sd 300, n 6) tokens/s");
  CHECK(rows[0].compared == std::vector<hr::ClaimRow::Point>{{"8-classifier-heads", "h8-dk8"},
                                                               {"8-classifier-heads", "h4-dk16"}});
  // No 16-head point: 8b says so and seeds cannot decide it.
  CHECK(rows[1].verdict == V::inconclusive);
  CHECK_FALSE(rows[1].seeds_can_decide);
  CHECK(rows[1].finding.find("lacks h = 8 or h = 16") != std::string::npos);
  CHECK(rows[0].plot_svg.find("<svg ") == 0);
  // A margin that is 5% of a measured speed is printed to four significant digits.
  const hr::SweepNumbers timed{
      .name = "8-classifier-heads",
      .points = {text_point(8, stats(0.50, 0.002, 6), stats(1.6, 0.01, 6), stats(61672, 300, 6)),
                 text_point(16, stats(0.50, 0.002, 6), stats(1.6, 0.01, 6), stats(48821, 300, 6))}};
  const std::string finding = hr::assess_classifier_heads(timed)[1].finding;
  INFO(finding);
  CHECK(finding.find("lower beyond seed noise, by more than the 3084 tokens/s margin, so \"slower\" is supported") !=
        std::string::npos);
}

TEST_CASE("claim 9: bits per character against heads on real text, one head loses and a shallow U") {
  const auto verdicts = [](double one, double four, double eight, double sixteen) {
    const hr::SweepNumbers sweep{.name = "9-kjv-heads",
                                 .points = {text_point(1, {}, stats(one, 0.005, 6), stats(60000, 300, 6)),
                                            text_point(4, {}, stats(four, 0.005, 6), stats(55000, 300, 6)),
                                            text_point(8, {}, stats(eight, 0.005, 6), stats(50000, 300, 6)),
                                            text_point(16, {}, stats(sixteen, 0.005, 6), stats(40000, 300, 6))}};
    const std::vector<hr::ClaimRow> rows = hr::assess_text_heads(sweep);
    REQUIRE(rows.size() == 2);
    return std::pair{rows[0].verdict, rows[1].verdict};
  };
  using V = hr::Verdict;
  CHECK(verdicts(1.50, 1.40, 1.41, 1.44) == std::pair{V::supported, V::supported});
  // One head as good as the best (within 0.02 nats): 9a contradicted, and 9b's "less
  // than one head" part with it.
  CHECK(verdicts(1.405, 1.40, 1.41, 1.44) == std::pair{V::contradicted, V::contradicted});
  // The most heads as good as the best between: no right arm, no U.
  CHECK(verdicts(1.50, 1.40, 1.41, 1.405).second == V::contradicted);
  // The most heads best of all: the curve falls all the way.
  CHECK(verdicts(1.50, 1.45, 1.43, 1.40) == std::pair{V::supported, V::contradicted});
  // The most heads worse than one head: a U, but not a shallow one.
  CHECK(verdicts(1.45, 1.40, 1.41, 1.50).second == V::contradicted);

  const hr::SweepNumbers sweep{.name = "9-kjv-heads",
                               .points = {text_point(1, {}, stats(1.5, 0.005, 6), stats(60000, 300, 6)),
                                          text_point(4, {}, stats(1.4, 0.005, 6), stats(55000, 300, 6))}};
  const std::vector<hr::ClaimRow> rows = hr::assess_text_heads(sweep);
  CHECK(rows[0].numbers[0] == "h=1 (d_k 64): val loss 1.5000 (sd 0.0050, n 6) nats/char = 2.1640 bits/char; "
                              "60000 (sd 300, n 6) tokens/s");
  // Two points: no head count between the ends.
  CHECK(rows[1].verdict == V::inconclusive);
  CHECK_FALSE(rows[1].seeds_can_decide);
  // A point with no finished run yet (an interrupted study) is not compared: no "nan".
  hr::SweepNumbers partial{.name = "9-kjv-heads",
                           .points = {text_point(1, {}, {}, {}), text_point(4, {}, stats(1.4, 0.005, 3), {}),
                                      text_point(16, {}, stats(1.45, 0.005, 3), {})}};
  const std::vector<hr::ClaimRow> open = hr::assess_text_heads(partial);
  CHECK(open[0].verdict == V::inconclusive);
  CHECK(open[0].summary.empty());
  CHECK(open[0].finding == "The sweep lacks h = 1 or a larger h among its finished points.");
  CHECK(open[1].finding.find("needs h = 1") != std::string::npos);
}

TEST_CASE("claim 10: a previous-token head and an induction head that reads the repeat, at the best point") {
  const hr::SweepNumbers sweep{.name = "9-kjv-heads",
                               .points = {text_point(1, {}, stats(1.50, 0.005, 3), stats(60000, 300, 3)),
                                          text_point(4, {}, stats(1.40, 0.005, 3), stats(55000, 300, 3))}};
  const auto roles = [](std::vector<double> previous, std::vector<double> induction, std::vector<double> ratio) {
    std::vector<hr::HeadRoles> out;
    for (std::size_t i = 0; i < previous.size(); ++i) {
      out.push_back({.point = "h4-dk16", .seed = i, .previous_token = previous[i], .repeat_induction = induction[i],
                     .copy_ratio = ratio[i], .offset_heads = {{1, 1}, {0, 2}}});
      // The one-head point's models do nothing of the kind; the rule reads the best point.
      out.push_back({.point = "h1-dk64", .seed = i, .previous_token = 0.1, .repeat_induction = 0.1, .copy_ratio = 1.0});
    }
    return out;
  };
  using V = hr::Verdict;
  std::vector<hr::ClaimRow> rows = hr::assess_head_roles(sweep, roles({0.8, 0.85, 0.9}, {0.7, 0.75, 0.8}, {0.3, 0.32, 0.34}));
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].id == "10a");
  CHECK(rows[1].id == "10b");
  CHECK(rows[0].verdict == V::supported);
  CHECK(rows[1].verdict == V::supported);
  CHECK(rows[0].compared == std::vector<hr::ClaimRow::Point>{{"9-kjv-heads", "h4-dk16"}});
  CHECK(rows[0].summary == "h=4: strongest previous-token head 0.850");
  CHECK(rows[1].summary == "h=4: strongest repeat-induction head 0.750; second / first copy loss 0.320");
  CHECK(rows[0].numbers[1] ==
        "h=4: strongest previous-token head 0.850 (sd 0.050, n 3); strongest repeat-induction head 0.750 (sd 0.050, n "
        "3); second / first copy loss 0.320 (sd 0.020, n 3); strongest word-start head n/a; strongest verse-start "
        "head n/a; ICL score n/a; heads holding one offset for half their queries, over 3 models: 6 at offset 0, 3 at "
        "offset 1");
  // No previous-token head: 10a contradicted. An induction head whose model does not
  // read the repeat (the second copy no better): 10b contradicted.
  rows = hr::assess_head_roles(sweep, roles({0.2, 0.25, 0.3}, {0.7, 0.75, 0.8}, {0.9, 0.95, 1.0}));
  CHECK(rows[0].verdict == V::contradicted);
  CHECK(rows[1].verdict == V::contradicted);
  // Around the threshold, within the seeds' noise: undecided.
  rows = hr::assess_head_roles(sweep, roles({0.3, 0.5, 0.7}, {0.3, 0.5, 0.7}, {0.3, 0.32, 0.34}));
  CHECK(rows[0].verdict == V::inconclusive);
  CHECK(rows[1].verdict == V::inconclusive);
  // Nothing measured: said so, and seeds cannot decide it.
  rows = hr::assess_head_roles(sweep, {});
  CHECK(rows[0].verdict == V::inconclusive);
  CHECK_FALSE(rows[0].seeds_can_decide);
  CHECK(rows[0].finding == "No trained model of the sweep has been measured.");
}

TEST_CASE("claims --text study: its sweeps on Debian's corpora, commands, seeds and claims.json") {
  const hr::Study full = hr::make_study(hr::Budget::full, std::nullopt, 0, std::nullopt, hr::Suite::text);
  CHECK(full.seeds == 3);
  CHECK(full.max_seeds == 5);
  REQUIRE(full.sweeps.size() == 2);
  CHECK(hr::study_corpora(full) == std::vector<std::string>{"fortunes-topic", "kjv"});
  CHECK(full.sweep("8-classifier-heads").command("/d") ==
        "headroom ablate --corpus fortunes-topic --seq-len 128 --d-model 64 --layers 2 --steps 8000 --eval-every 250 "
        "--eval-batches 34 --patience 4 --heads 1,2,4,8,16 --dk auto --seeds 6 --out /d/8-classifier-heads");
  CHECK(full.sweep("9-kjv-heads").command("/d") ==
        "headroom ablate --corpus kjv --seq-len 128 --d-model 64 --layers 2 --steps 6000 --eval-every 250 "
        "--eval-batches 16 --patience 4 --heads 1,2,4,8,16 --dk auto --seeds 6 --out /d/9-kjv-heads");
  const hr::SweepSpec spec = full.sweep("9-kjv-heads").spec();
  CHECK(spec.base.data.corpus == "kjv");
  CHECK(spec.base.optim.patience == 4);
  CHECK(spec.seeds.size() == 6);
  // claims.json names the suite; the synthetic study's has no such key, as before suites.
  CHECK(hr::study_json(full)["suite"] == "text");
  CHECK_FALSE(hr::study_json(hr::make_study(hr::Budget::full)).contains("suite"));
  const hr::Study quick = hr::make_study(hr::Budget::quick, std::nullopt, 0, std::nullopt, hr::Suite::text);
  CHECK(quick.seeds == 2);
  CHECK(quick.sweep("8-classifier-heads").spec().base.optim.patience == 0);
  CHECK(hr::study_corpora(hr::make_study(hr::Budget::full)).empty());
}

TEST_CASE("claims report: a fake set of results gives a table row per claim, commands, plots and the rules") {
  const hr::Study study = hr::make_study(hr::Budget::quick);
  CHECK(study.seeds == 3);
  hr::SweepNumbers heads{.name = "4-heads-lags",
                         .points = {heads_point(1, stats(0.25, 0.01, 3), stats(50000, 500, 3)),
                                    heads_point(2, stats(0.01, 0.005, 3), stats(40000, 500, 3)),
                                    heads_point(48, stats(0.30, 0.02, 3), stats(20000, 500, 3))}};
  std::vector<hr::ClaimRow> rows{hr::assess_mha_parameters(nullptr)};
  for (hr::ClaimRow& r : hr::assess_several_heads(heads, 2)) rows.push_back(std::move(r));
  rows.push_back(hr::assess_head_time(heads));
  for (hr::ClaimRow& r : hr::assess_too_many_heads(heads, hr::SweepNumbers{.name = "5-recall-narrow-heads", .points = {}})) {
    rows.push_back(std::move(r));
  }
  const TempDir tmp("claims_report");
  const std::string md = hr::write_claims_report(study, rows, tmp.path());
  INFO(md);
  CHECK(md.find("| 1 | MHA parameters are 4 d_model^2 whatever the head count | supported |") != std::string::npos);
  CHECK(md.find("| 4a | Several heads beat one at equal parameters | supported |") != std::string::npos);
  CHECK(md.find("| 4b | ... and 2 heads (\\|K\\|) reach about the Bayes loss | supported |") != std::string::npos);
  CHECK(md.find("| 7 | More heads at fixed computation cost time | supported |") != std::string::npos);
  CHECK(md.find("| 5a | Too many heads hurt: heads too narrow to carry a token's table | supported |") !=
        std::string::npos);
  CHECK(md.find("| 5b | Too many heads hurt: narrow heads fail at matching many keys | inconclusive at this budget |") !=
        std::string::npos);
  CHECK(md.find("h=1 (d_k 48): excess loss 0.2500 (sd 0.0100, n 3)") != std::string::npos);
  CHECK(md.find("headroom ablate --task lags --vocab 19 --layers 1 --attn-only --norm none --d-model 48 --steps ") !=
        std::string::npos);
  CHECK(md.find("--heads 1,2,3,4,8,16,24 --dk auto --seeds 6 --out " + (tmp / "4-heads-lags").string()) !=
        std::string::npos);
  CHECK(md.find("two standard errors") != std::string::npos);
  for (const char* file : {"claims.md", "claims.html", "claim-1.svg", "claim-4a.svg", "claim-7.svg", "claim-5b.svg"}) {
    CHECK(fs::exists(tmp / file));
  }
  const std::string html = read_file(tmp / "claims.html");
  CHECK(count_of(html, "<svg ") == 5);
  CHECK(html.find("<td class=\"inconclusive\">inconclusive at this budget</td>") != std::string::npos);
}

TEST_CASE("claims study: each sweep's spec is what its printed ablate command builds, seeds as asked") {
  const hr::Study full = hr::make_study(hr::Budget::full);
  CHECK(full.seeds == 5);
  CHECK(hr::make_study(hr::Budget::quick, 4).seeds == 4);
  CHECK(error_of([] { hr::make_study(hr::Budget::quick, 1); }).find("--seeds 1: ") == 0);
  const hr::ClaimSweep& heads = full.sweep("4-heads-lags");
  const hr::SweepSpec spec = heads.spec();
  CHECK(spec.base.model.n_layers == 1);
  CHECK(spec.base.model.d_model == 48);
  CHECK(spec.seeds == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});  // sets A and B of 5
  REQUIRE(spec.axes.size() == 2);
  CHECK(spec.axes[0].labels == std::vector<std::string>{"1", "2", "3", "4", "8", "16", "24", "48"});
  CHECK(heads.command("/d") ==
        "headroom ablate --task lags --vocab 19 --layers 1 --attn-only --norm none --d-model 48 --steps 3000 --eval-every 250 "
        "--lr 0.03 --heads 1,2,3,4,8,16,24,48 --dk auto --seeds 10 --out /d/4-heads-lags");

  // Replicated on other seeds: the offset moves both sets, and the command says it.
  const hr::Study other = hr::make_study(hr::Budget::full, 5, 100);
  const hr::ClaimSweep& moved = other.sweep("4-heads-lags");
  CHECK(moved.spec().seeds == std::vector<std::uint64_t>{100, 101, 102, 103, 104, 105, 106, 107, 108, 109});
  CHECK(moved.command("/d").find("--seeds 10 --seed-offset 100 --out /d/4-heads-lags") != std::string::npos);
  CHECK(other.set_of(100) == hr::SeedSet::a);
  CHECK(other.set_of(107) == hr::SeedSet::b);
  CHECK(hr::study_json(other)["seed_offset"] == 100);
  CHECK(hr::study_json(other) != hr::study_json(full));
  CHECK(error_of([] { hr::make_study(hr::Budget::quick, 3, hr::kMaxSeedOffset + 1); }).find("--seed-offset ") == 0);
}

TEST_CASE("seeds until decided: a round grows the compared points of the claims not settled that seeds could settle") {
  const hr::Study study = hr::make_study(hr::Budget::full);  // 5 a set, up to 10
  CHECK(study.max_seeds == 10);
  CHECK(hr::make_study(hr::Budget::quick).max_seeds == 3);
  CHECK(hr::make_study(hr::Budget::quick, 4).max_seeds == 4);
  CHECK(hr::make_study(hr::Budget::full, 5, 0, 7).max_seeds == 7);
  CHECK(error_of([] { hr::make_study(hr::Budget::full, 5, 0, 4); }).find("--max-seeds 4: ") == 0);
  CHECK(study.grown("4-heads-lags", 7).spec().seeds.size() == 14);

  const auto row = [](const char* id, std::vector<std::string> sweeps, hr::Verdict a, hr::Verdict b) {
    hr::ClaimRow r;
    r.id = id;
    r.sweeps = std::move(sweeps);
    r.replicated = true;
    r.set_a = a;
    r.set_b = b;
    return r;
  };
  using V = hr::Verdict;
  std::vector<hr::ClaimRow> rows{row("2b", {"2-attn-scale"}, V::supported, V::inconclusive),
                                 row("4a", {"4-heads-lags"}, V::supported, V::supported),
                                 row("5b", {"5-recall-narrow-heads"}, V::inconclusive, V::inconclusive)};
  rows[2].seeds_can_decide = false;  // not learned: seeds cannot settle it
  std::vector<std::size_t> per_set(study.sweeps.size(), 5);
  const auto index = [&](const std::string& name) {
    for (std::size_t i = 0; i < study.sweeps.size(); ++i) {
      if (study.sweeps[i].name == name) return i;
    }
    return study.sweeps.size();
  };
  using Grow = std::map<std::size_t, std::set<std::string>>;
  std::vector<std::string> open;
  // 2b compares no point by name here: its whole sweep grows.
  CHECK(hr::sweeps_to_grow(study, rows, per_set, &open) == Grow{{index("2-attn-scale"), {}}});
  CHECK(open == std::vector<std::string>{"2b"});
  // Comparing two points, only those grow; a settled claim's points do not.
  rows[0].compared = {{"2-attn-scale", "h2-dk256-attn_scale1"}, {"2-attn-scale", "h2-dk256-attn_scalenull"}};
  rows[1].compared = {{"4-heads-lags", "h1-dk48"}, {"4-heads-lags", "h2-dk24"}};
  CHECK(hr::sweeps_to_grow(study, rows, per_set) ==
        Grow{{index("2-attn-scale"), {"h2-dk256-attn_scale1", "h2-dk256-attn_scalenull"}}});
  // Two open claims on one sweep: the union of their points; one reading the whole
  // sweep (2a's slopes) makes every point grow.
  rows.push_back(row("5a", {"4-heads-lags"}, V::inconclusive, V::supported));
  rows.back().compared = {{"4-heads-lags", "h3-dk16"}, {"4-heads-lags", "h48-dk1"}};
  rows.push_back(row("4b", {"4-heads-lags"}, V::supported, V::inconclusive));
  rows.back().compared = {{"4-heads-lags", "h2-dk24"}};
  CHECK(hr::sweeps_to_grow(study, rows, per_set)[index("4-heads-lags")] ==
        std::set<std::string>{"h2-dk24", "h3-dk16", "h48-dk1"});
  rows.push_back(row("2a", {"2-attn-scale"}, V::supported, V::inconclusive));
  CHECK(hr::sweeps_to_grow(study, rows, per_set)[index("2-attn-scale")].empty());
  per_set[index("2-attn-scale")] = 10;  // at the cap: nothing more there
  per_set[index("4-heads-lags")] = 10;
  CHECK(hr::sweeps_to_grow(study, rows, per_set).empty());
}

TEST_CASE("claims replication: a verdict is settled only where both seed sets give it, and the report prints both") {
  using V = hr::Verdict;
  const auto row = [](const char* id, V v) {
    hr::ClaimRow r;
    r.id = id;
    r.claim = std::string("claim ") + id;
    r.verdict = v;
    return r;
  };
  std::vector<hr::ClaimRow> all{row("1", V::supported), row("2", V::supported), row("3", V::inconclusive),
                                row("4", V::contradicted)};
  hr::add_replication(all, {row("1", V::supported), row("2", V::supported), row("3", V::inconclusive),
                            row("4", V::contradicted)},
                      {row("1", V::supported), row("2", V::inconclusive), row("3", V::inconclusive),
                       row("4", V::supported)});
  CHECK(all[0].settled());
  CHECK_FALSE(all[1].settled());  // B undecided
  CHECK_FALSE(all[2].settled());  // both undecided: agreement on nothing
  CHECK_FALSE(all[3].settled());  // A and B disagree
  CHECK_FALSE(row("5", V::supported).settled());  // never replicated
  CHECK_THROWS_AS(hr::add_replication(all, {row("1", V::supported)}, {row("1", V::supported)}), std::logic_error);

  const hr::Study study = hr::make_study(hr::Budget::quick, 2, 10);
  const std::string md = hr::claims_markdown(study, all, "/d");
  CHECK(md.find("6 seeds per point") == std::string::npos);
  CHECK(md.find("4 seeds per point in two disjoint sets of 2: A (seeds 10, 12) and B (seeds 11, 13)") !=
        std::string::npos);
  CHECK(md.find("| 1 | claim 1 | supported, settled | supported · supported |") != std::string::npos);
  CHECK(md.find("| 2 | claim 2 | supported, not settled | supported · inconclusive at this budget |") !=
        std::string::npos);
  CHECK(md.find("| 4 | claim 4 | contradicted, not settled | contradicted · supported |") != std::string::npos);
  CHECK(md.find("Seed set A: contradicted; seed set B: supported: they do not agree") != std::string::npos);
  CHECK(md.find("Seed set A: supported; seed set B: supported: the two disjoint sets agree") != std::string::npos);
}

// ---- the command ------------------------------------------------------------------

TEST_CASE("headroom claims: bad flags and a directory of another kind get one line and exit status 2") {
  const TempDir tmp("claims_bad");
  const fs::path dir = tmp / "out";  // must not come into being
  const std::string out = " --out " + dir.string();
  struct Bad {
    std::string args;
    const char* says;
  };
  const Bad cases[] = {
      {"claims --bogus" + out, "unknown flag --bogus (see headroom claims --help)"},
      {"claims --jobs 0" + out, "--jobs: must be a whole number from 1"},
      {"claims --jobs 300" + out, "--jobs 300: must be from 1 to 256"},
      {"claims --seeds 1" + out, "--seeds 1: the verdicts compare seed means, which needs at least 2 seeds"},
      {"claims --quick", "--out is required"},
  };
  for (const Bad& bad : cases) {
    check_refused(bad.args, bad.says);
    CHECK_FALSE(fs::exists(dir));
  }
  // A directory that is not a claims study, and one made with another budget.
  const fs::path other = tmp / "other";
  fs::create_directories(other);
  tmp.write("other/notes.txt", "mine\n");
  CliResult r = run_headroom("claims --quick --out " + other.string());
  CHECK(r.status == 2);
  CHECK(r.output.find("is not empty and holds no claims.json") != std::string::npos);
  const fs::path quick = tmp / "quick";
  fs::create_directories(quick);
  tmp.write("quick/claims.json", hr::study_json(hr::make_study(hr::Budget::quick)).dump(2));
  r = run_headroom("claims --out " + quick.string());
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(count_lines(r.output) == 1);
  CHECK(r.output.find("holds a claims study made with budget \"quick\", 3 seeds, not budget \"full\", 5 seeds") !=
        std::string::npos);
  CHECK(tmp.entries() == std::vector<std::string>{"other", "quick"});
  CHECK(read_file(quick / "claims.json").find("\"quick\"") != std::string::npos);
}

TEST_CASE("headroom claims --text: the smoke study on the corpora end to end, resumed, a sweep rerun by its command") {
  const bool have = error_of([] { hr::check_installed("kjv"); }).empty() &&
                    error_of([] { hr::check_installed("fortunes-topic"); }).empty();
  if (!prerequisite(have, "the corpora kjv and fortunes-topic are not installed: scripts/setup.sh --data")) return;
  const TempDir tmp("claims_text_smoke");
  const fs::path dir = tmp / "study";
  CliResult r = run_headroom("claims --text --budget smoke --jobs 2 --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("headroom claims on real text: budget smoke") != std::string::npos);
  const std::string md = read_file(dir / "claims.md");
  for (const char* id : {"8a", "8b", "9a", "9b", "10a", "10b"}) {
    CHECK(md.find(std::string("\n| ") + id + " | ") != std::string::npos);
  }
  // Claim 10 measured every finished model of the kjv sweep (at least 4 seeds a point).
  const std::string measured = "heads holding one offset for half their queries, over ";
  REQUIRE(md.find(measured) != std::string::npos);
  CHECK(std::stoul(md.substr(md.find(measured) + measured.size())) >= 4);
  CHECK(md.find("Real text (Debian's corpora), budget **smoke**") != std::string::npos);
  CHECK(count_of(md, " | supported, ") + count_of(md, " | contradicted, ") +
            count_of(md, " | inconclusive at this budget, ") ==
        6);
  for (const char* sweep : {"8-classifier-heads", "9-kjv-heads"}) {
    CHECK(fs::exists(dir / sweep / "results.csv"));
    CHECK(fs::exists(dir / sweep / "report.html"));
  }
  CHECK(nlohmann::json::parse(read_file(dir / "claims.json"))["suite"] == "text");
  // The synthetic study refuses this directory, and this one resumes with nothing to train.
  r = run_headroom("claims --budget smoke --out " + dir.string());
  CHECK(r.status == 2);
  r = run_headroom("claims --text --budget smoke --jobs 2 --out " + dir.string());
  CHECK(r.status == 0);
  CHECK(count_of(r.output, "finished before (skipped), 0 to run") == count_of(r.output, " to run\n"));
  check_printed_command(md, "8-classifier-heads", "ablate --corpus fortunes-topic");
}

TEST_CASE("headroom claims: the smoke study end to end, resumed, and one sweep rerun by its printed command") {
  const TempDir tmp("claims_smoke");
  const fs::path dir = tmp / "study";
  CliResult r = run_headroom("claims --budget smoke --jobs 2 --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string md = read_file(dir / "claims.md");
  for (const char* id : {"1", "2a", "2b", "2c", "3a", "3b", "4a", "4b", "5a", "5b", "6", "7"}) {
    CHECK(md.find(std::string("\n| ") + id + " | ") != std::string::npos);
  }
  CHECK(count_of(md, " | supported, ") + count_of(md, " | contradicted, ") +
            count_of(md, " | inconclusive at this budget, ") ==
        12);
  for (const char* sweep : {"2-attn-scale", "2-attn-scale-unit-init", "3-concat-vs-sum", "4-heads-lags",
                            "5-recall-narrow-heads", "6-kv-heads"}) {
    CHECK(fs::exists(dir / sweep / "sweep.json"));
    CHECK(fs::exists(dir / sweep / "results.csv"));
    CHECK(fs::exists(dir / sweep / "report.html"));
  }
  CHECK(fs::exists(dir / "claims.html"));
  // 3 points of 2 sets of 2 seeds, or of 3 when a round grew the sweep (smoke verdicts
  // depend on a few steps' rounding): then the compared points alone gained a seed.
  const std::string row = "| [4-heads-lags](4-heads-lags/summary.md) | ";
  REQUIRE(md.find(row) != std::string::npos);
  std::size_t finished = 0, grid = 0;
  REQUIRE(std::sscanf(md.c_str() + md.find(row) + row.size(), "%zu (%zu)", &finished, &grid) == 2);
  CHECK(((finished == 12 && grid == 12) || (grid == 18 && finished >= 14 && finished <= 18)));
  // The sweep's own summary says what kind of model it swept.
  CHECK(read_file(dir / "4-heads-lags" / "summary.md").find(", 1 layer, attention-only, no norm, ") != std::string::npos);
  CHECK(read_file(dir / "2-attn-scale" / "summary.md").find("attention-only, ") != std::string::npos);

  // Again: every run is finished, nothing trains.
  r = run_headroom("claims --budget smoke --jobs 2 --out " + dir.string());
  CHECK(r.status == 0);
  CHECK(count_of(r.output, "finished before (skipped), 0 to run") >= 6);  // rounds replayed: more sweep passes
  CHECK(count_of(r.output, "finished before (skipped), 0 to run") == count_of(r.output, " to run\n"));

  check_printed_command(md, "4-heads-lags",
                        "ablate --task lags --vocab 19 --layers 1 --attn-only --norm none --d-model 48");
}
