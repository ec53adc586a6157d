// Whether a run's validation loss was still falling when it stopped, and the
// early-stopping rule that ends a run once it stops improving. Both read the run's
// validation rows as metrics.csv records them (train/metrics.hpp, as_recorded), so
// that the trainer, a resumed run and a reader of the file decide alike.
//
// The convergence rule (docs/cli/train.md, "Convergence and early stopping"):
//
//   Window: the last W = 5 validations (all of them if fewer); with fewer than 3 the
//   status is unknown. Fit val_loss against step by least squares in the window:
//   slope b, and its standard error se_b from the residuals (n - 2 degrees of
//   freedom; if the residuals are exactly 0, se_b = 0). The loss is still falling
//   when b < 0, -b > 2 se_b, and the fitted fall across the window,
//   -b * (last step - first step of the window), exceeds min_delta (the minimum
//   improvement of early stopping; default 1e-3 nats). Otherwise it has converged:
//   it stopped improving at this budget. A window holding a non-finite loss is
//   unknown.
//
// Early stopping: a validation improves on the best so far when its loss is below
// that best by more than min_delta (the best is the loss of the last improvement, so
// many small falls add up until they count); the first finite validation always
// does. With patience P > 0, the run stops at the P-th validation in a row without
// an improvement.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace headroom {

inline constexpr std::size_t kConvergenceWindow = 5;     // W, validations
inline constexpr std::size_t kConvergenceMinPoints = 3;  // fewer: unknown
inline constexpr double kDefaultMinDelta = 1e-3;         // nats; OptimConfig::min_delta's default

// One validation of a run: metrics.csv's step and val_loss.
struct ValPoint {
  std::size_t step = 0;
  double val_loss = 0;
};

enum class ConvergenceStatus { unknown, falling, converged };

// "unknown" | "falling" | "converged": result.json's and results.csv's words.
std::string to_string(ConvergenceStatus status);
// The inverse of to_string; std::invalid_argument naming the word otherwise.
ConvergenceStatus parse_convergence_status(const std::string& word);

struct Convergence {
  ConvergenceStatus status = ConvergenceStatus::unknown;
  // The fitted fall of the loss per validation interval, -b * (last - first) / (n - 1):
  // positive when the loss falls. NaN when unknown.
  double fall_per_eval = std::numeric_limits<double>::quiet_NaN();
  std::size_t window = 0;  // validations fitted (0 when unknown for want of them)
};

// The rule above on a run's validations, in step order.
Convergence convergence(const std::vector<ValPoint>& validations, double min_delta);

// "falling: 0.0123 per validation over the last 5 validations", for logs and tests;
// the CLI words its own lines.
std::string to_string(const Convergence& c);

// Early stopping's running state, a function of the validations seen so far.
struct EarlyStopState {
  double best = std::numeric_limits<double>::infinity();  // the loss of the last improvement
  std::size_t best_step = 0;
  std::size_t since_best = 0;  // validations since it
};

// Adds one validation. Returns whether patience is exhausted after it (always false
// when patience is 0, which is off).
bool observe(EarlyStopState& state, const ValPoint& validation, double min_delta, std::size_t patience);

// The step of the validation at which early stopping would have ended a run with
// these validations, if any: the first at which patience was exhausted.
std::optional<std::size_t> patience_stop(const std::vector<ValPoint>& validations, double min_delta,
                                         std::size_t patience);

}  // namespace headroom
