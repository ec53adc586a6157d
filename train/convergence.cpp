#include "train/convergence.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace headroom {

std::string to_string(ConvergenceStatus status) {
  switch (status) {
    case ConvergenceStatus::unknown: return "unknown";
    case ConvergenceStatus::falling: return "falling";
    case ConvergenceStatus::converged: return "converged";
  }
  return "unknown";  // unreachable; keeps -Wreturn-type quiet
}

ConvergenceStatus parse_convergence_status(const std::string& word) {
  if (word == "unknown") return ConvergenceStatus::unknown;
  if (word == "falling") return ConvergenceStatus::falling;
  if (word == "converged") return ConvergenceStatus::converged;
  throw std::invalid_argument(fmt::format("convergence must be unknown, falling or converged; got '{}'", word));
}

Convergence convergence(const std::vector<ValPoint>& validations, double min_delta) {
  Convergence c;
  const std::size_t n = std::min(validations.size(), kConvergenceWindow);
  if (n < kConvergenceMinPoints) return c;
  const auto first = validations.end() - static_cast<std::ptrdiff_t>(n);
  if (std::any_of(first, validations.end(), [](const ValPoint& v) { return !std::isfinite(v.val_loss); })) return c;
  // Centred sums: the steps may be large and the losses close together, and centring
  // keeps the products small where the textbook n*Sxy - Sx*Sy would cancel.
  const auto count = static_cast<double>(n);
  double mean_x = 0, mean_y = 0;
  for (auto it = first; it != validations.end(); ++it) {
    mean_x += static_cast<double>(it->step);
    mean_y += it->val_loss;
  }
  mean_x /= count;
  mean_y /= count;
  double sxx = 0, sxy = 0;
  for (auto it = first; it != validations.end(); ++it) {
    const double dx = static_cast<double>(it->step) - mean_x;
    sxx += dx * dx;
    sxy += dx * (it->val_loss - mean_y);
  }
  if (!(sxx > 0)) return c;  // every step the same: no slope to fit
  const double b = sxy / sxx;
  double ssr = 0;
  for (auto it = first; it != validations.end(); ++it) {
    const double r = it->val_loss - mean_y - b * (static_cast<double>(it->step) - mean_x);
    ssr += r * r;
  }
  const double se_b = std::sqrt(ssr / ((count - 2) * sxx));
  const double span = static_cast<double>(validations.back().step - first->step);
  c.window = n;
  c.fall_per_eval = -b * span / (count - 1);
  const bool falling = b < 0 && -b > 2 * se_b && -b * span > min_delta;
  c.status = falling ? ConvergenceStatus::falling : ConvergenceStatus::converged;
  return c;
}

std::string to_string(const Convergence& c) {
  if (c.status == ConvergenceStatus::unknown) return "unknown";
  return fmt::format("{}: {:.4g} per validation over the last {} validations", to_string(c.status), c.fall_per_eval,
                     c.window);
}

bool observe(EarlyStopState& state, const ValPoint& validation, double min_delta, std::size_t patience) {
  // A NaN loss fails the comparison, so it counts as no improvement.
  if (validation.val_loss < state.best - min_delta) {
    state.best = validation.val_loss;
    state.best_step = validation.step;
    state.since_best = 0;
  } else {
    ++state.since_best;
  }
  return patience > 0 && state.since_best >= patience;
}

std::optional<std::size_t> patience_stop(const std::vector<ValPoint>& validations, double min_delta,
                                         std::size_t patience) {
  EarlyStopState state;
  for (const ValPoint& v : validations) {
    if (observe(state, v, min_delta, patience)) return v.step;
  }
  return std::nullopt;
}

}  // namespace headroom
