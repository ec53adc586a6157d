#include "claims/verdict.hpp"

#include <cmath>

#include <fmt/format.h>

namespace headroom {

std::string to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::supported:
      return "supported";
    case Verdict::contradicted:
      return "contradicted";
    case Verdict::inconclusive:
      break;
  }
  return "inconclusive at this budget";
}

Verdict exact_rule(const std::vector<ExactCheck>& checks) {
  if (checks.empty()) return Verdict::inconclusive;
  for (const ExactCheck& c : checks) {
    if (c.measured != c.expected) return Verdict::contradicted;
  }
  return Verdict::supported;
}

Verdict lower_rule(const SeedStats& a, const SeedStats& b, double margin) {
  switch (lower_outcome(a, b, margin)) {
    case LowerOutcome::lower_by_more_than_margin:
      return Verdict::supported;
    case LowerOutcome::higher:
    case LowerOutcome::equal:
      return Verdict::contradicted;
    case LowerOutcome::lower_within_margin:
    case LowerOutcome::within_noise:
    case LowerOutcome::unknown:
      break;
  }
  return Verdict::inconclusive;
}

LowerOutcome lower_outcome(const SeedStats& a, const SeedStats& b, double margin) {
  if (a.n < 2 || b.n < 2 || !std::isfinite(a.mean) || !std::isfinite(b.mean) || !std::isfinite(a.sd) ||
      !std::isfinite(b.sd)) {
    return LowerOutcome::unknown;
  }
  // The equality test comes first and "lower" asks for more than the margin, so that
  // the regions are disjoint: a true gap inside the margin can only end as "equal"
  // as seeds are added, never as "supported" on one seed set and "equal" on another.
  if (equal_within(a, b, margin)) return LowerOutcome::equal;
  if (differs_beyond_noise(a, b)) {
    if (a.mean > b.mean) return LowerOutcome::higher;
    return b.mean - a.mean > margin ? LowerOutcome::lower_by_more_than_margin : LowerOutcome::lower_within_margin;
  }
  return LowerOutcome::within_noise;
}

std::string describe(LowerOutcome outcome, double margin_value, const std::string& unit) {
  // A margin taken as a share of a measured value (5% of a speed) has many digits;
  // four significant ones say it.
  const std::string margin = fmt::format("{:.4g}", margin_value);
  switch (outcome) {
    case LowerOutcome::lower_by_more_than_margin:
      return fmt::format("lower beyond seed noise, by more than the {} {} margin", margin, unit);
    case LowerOutcome::lower_within_margin:
      return fmt::format("lower beyond seed noise, but by less than the {} {} margin (more seeds will show "
                         "whether it is equal)",
                         margin, unit);
    case LowerOutcome::higher:
      return "higher beyond seed noise";
    case LowerOutcome::equal:
      return fmt::format("equal within {} {} (the two-standard-error interval of the gap inside the margin)", margin,
                         unit);
    case LowerOutcome::within_noise:
      return "neither lower beyond seed noise nor shown equal";
    case LowerOutcome::unknown:
      break;
  }
  return "not comparable (fewer than 2 finished seeds)";
}

std::string lower_rule_text(const std::string& subject, double margin, const std::string& unit) {
  return fmt::format("supported when {0} is lower beyond seed noise (2 standard errors, Welch) and by more than {1} "
                     "{2}; contradicted when it is higher beyond noise, or the two are equal within {1} {2} (the "
                     "2-se interval of the gap inside +-{1}); else inconclusive",
                     subject, margin, unit);
}

namespace {

// Mean and standard error of one quantity over seeds; false below 2 finite seeds.
bool mean_and_se(const SeedStats& s, double& mean, double& se) {
  if (s.n < 2 || !std::isfinite(s.mean) || !std::isfinite(s.sd)) return false;
  mean = s.mean;
  se = s.sd / std::sqrt(static_cast<double>(s.n));
  return true;
}

}  // namespace

Verdict near_zero_rule(const SeedStats& x, double tolerance) {
  double mean = 0, se = 0;
  if (!mean_and_se(x, mean, se)) return Verdict::inconclusive;
  if (mean + 2 * se <= tolerance) return Verdict::supported;
  if (mean - 2 * se > tolerance) return Verdict::contradicted;
  return Verdict::inconclusive;
}

Verdict at_least_rule(const SeedStats& x, double threshold) {
  double mean = 0, se = 0;
  if (!mean_and_se(x, mean, se)) return Verdict::inconclusive;
  if (mean - 2 * se >= threshold) return Verdict::supported;
  if (mean + 2 * se < threshold) return Verdict::contradicted;
  return Verdict::inconclusive;
}

Verdict slope_rule(const SeedStats& slope, double predicted, double tolerance) {
  double mean = 0, se = 0;
  if (!mean_and_se(slope, mean, se)) return Verdict::inconclusive;
  const double off = std::abs(mean - predicted);
  if (off <= tolerance) return Verdict::supported;
  if (off - 2 * se > tolerance) return Verdict::contradicted;
  return Verdict::inconclusive;
}

Verdict all_of(const std::vector<Verdict>& parts) {
  if (parts.empty()) return Verdict::inconclusive;
  bool all_supported = true;
  for (Verdict v : parts) {
    if (v == Verdict::contradicted) return Verdict::contradicted;
    if (v != Verdict::supported) all_supported = false;
  }
  return all_supported ? Verdict::supported : Verdict::inconclusive;
}

double log_log_slope(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) return NAN;
  double sx = 0, sy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!(x[i] > 0) || !(y[i] > 0) || !std::isfinite(x[i]) || !std::isfinite(y[i])) return NAN;
    sx += std::log(x[i]);
    sy += std::log(y[i]);
  }
  const double n = static_cast<double>(x.size());
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double dx = std::log(x[i]) - mx;
    sxx += dx * dx;
    sxy += dx * (std::log(y[i]) - my);
  }
  if (sxx == 0) return NAN;
  return sxy / sxx;
}

}  // namespace headroom
