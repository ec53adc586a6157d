// Convergence and early stopping (issue 45): the rule on made-up curves, with cases
// on both sides of each threshold; patience in the trainer, exact across a resume;
// the status in `train`'s final lines, and its flags' bad values.
#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include "train/convergence.hpp"
#include "train/metrics.hpp"
#include "train/trainer.hpp"
#include "cli_runner.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

// Validations at `steps` with losses `losses`.
std::vector<hr::ValPoint> curve(const std::vector<std::size_t>& steps, const std::vector<double>& losses) {
  REQUIRE(steps.size() == losses.size());
  std::vector<hr::ValPoint> out;
  for (std::size_t i = 0; i < steps.size(); ++i) out.push_back({.step = steps[i], .val_loss = losses[i]});
  return out;
}

// Every `every` steps from `every`: 100, 200, ...
std::vector<hr::ValPoint> evenly(std::size_t every, const std::vector<double>& losses) {
  std::vector<std::size_t> steps;
  for (std::size_t i = 1; i <= losses.size(); ++i) steps.push_back(i * every);
  return curve(steps, losses);
}

// A curve on which the slope is exactly twice its standard error, plus `tilt` per
// step. Steps 0, 1, 7, 8 (centred: -4, -3, 3, 4, so Sxx = 50 and (n - 2) Sxx = 100);
// residuals 5/16 (1, -1, -1, 1), orthogonal to the constant and the step, so that
// SSR = 100/256 and se_b = 1/16; the slope -1/8 = -2 se_b. Every number is a short
// binary fraction, so the fit is exact in doubles and the comparison is too.
std::vector<hr::ValPoint> at_two_standard_errors(double tilt) {
  const std::vector<double> dx = {-4, -3, 3, 4};
  const std::vector<double> residual = {0.3125, -0.3125, -0.3125, 0.3125};
  std::vector<double> y;
  for (std::size_t i = 0; i < dx.size(); ++i) y.push_back(1 + (-0.125 + tilt) * dx[i] + residual[i]);
  return curve({0, 1, 7, 8}, y);
}

}  // namespace

TEST_CASE("convergence: a straight falling line is still falling") {
  // 0.02 per validation, with noise a tenth of that.
  std::vector<double> y;
  for (int i = 0; i < 10; ++i) y.push_back(2.0 - 0.02 * i + (i % 2 == 0 ? 0.002 : -0.002));
  const hr::Convergence c = hr::convergence(evenly(100, y), 1e-3);
  CHECK(c.status == hr::ConvergenceStatus::falling);
  CHECK(c.window == 5);
  CHECK(c.fall_per_eval == doctest::Approx(0.02).epsilon(0.2));
  CHECK(hr::to_string(c).rfind("falling: ", 0) == 0);
}

TEST_CASE("convergence: a flat noisy curve has converged") {
  const std::vector<double> y = {1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0};
  const hr::Convergence c = hr::convergence(evenly(50, y), 1e-3);
  CHECK(c.status == hr::ConvergenceStatus::converged);
  CHECK(c.window == 5);
  CHECK(std::abs(c.fall_per_eval) < 0.01);
}

TEST_CASE("convergence: a curve that falls then flattens has converged; only the last 5 validations count") {
  // Falls from 3 to 1 over the first five, then wobbles around 1.
  const std::vector<double> y = {3.0, 2.0, 1.5, 1.2, 1.0, 1.003, 0.998, 1.002, 0.999, 1.001};
  CHECK(hr::convergence(evenly(100, y), 1e-3).status == hr::ConvergenceStatus::converged);
  // The same curve cut after its seventh validation: its last five still fall.
  const std::vector<double> early(y.begin(), y.begin() + 7);
  CHECK(hr::convergence(evenly(100, early), 1e-3).status == hr::ConvergenceStatus::falling);
}

TEST_CASE("convergence: a fall below min_delta across the window has converged") {
  std::vector<double> y;
  for (int i = 0; i < 6; ++i) y.push_back(1.0 - 1e-5 * i);  // 4e-5 across the last five
  const hr::Convergence tiny = hr::convergence(evenly(10, y), 1e-3);
  CHECK(tiny.status == hr::ConvergenceStatus::converged);
  CHECK(tiny.fall_per_eval == doctest::Approx(1e-5));
  // Beyond its noise (there is none) and, with a smaller min_delta, beyond it too.
  CHECK(hr::convergence(evenly(10, y), 1e-5).status == hr::ConvergenceStatus::falling);
}

TEST_CASE("convergence: fewer than 3 validations, or a non-finite loss in the window, is unknown") {
  const hr::Convergence two = hr::convergence(evenly(100, {2.0, 1.0}), 1e-3);
  CHECK(two.status == hr::ConvergenceStatus::unknown);
  CHECK(two.window == 0);
  CHECK(std::isnan(two.fall_per_eval));
  CHECK(hr::to_string(two) == "unknown");
  CHECK(hr::convergence({}, 1e-3).status == hr::ConvergenceStatus::unknown);
  // Three is enough.
  CHECK(hr::convergence(evenly(100, {3.0, 2.0, 1.0}), 1e-3).status == hr::ConvergenceStatus::falling);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(hr::convergence(evenly(100, {3.0, 2.0, nan, 1.5, 1.0}), 1e-3).status == hr::ConvergenceStatus::unknown);
  // Outside the window it does not matter.
  CHECK(hr::convergence(evenly(100, {nan, 3.0, 2.0, 1.5, 1.0, 0.5}), 1e-3).status == hr::ConvergenceStatus::falling);
}

TEST_CASE("convergence: the slope against two standard errors, on both sides and exactly at it") {
  const hr::Convergence at = hr::convergence(at_two_standard_errors(0), 1e-3);
  CHECK(at.status == hr::ConvergenceStatus::converged);  // -b > 2 se_b is strict
  CHECK(at.fall_per_eval == 0.125 * 8 / 3);              // -b * (8 - 0) / (4 - 1)
  CHECK(hr::convergence(at_two_standard_errors(-1.0 / 1024), 1e-3).status == hr::ConvergenceStatus::falling);
  CHECK(hr::convergence(at_two_standard_errors(1.0 / 1024), 1e-3).status == hr::ConvergenceStatus::converged);
  // The fall across the window (8 steps x 1/8 = 1 nat) is far above min_delta, so the
  // noise alone decides these; a flat curve with the same residuals is not falling.
  CHECK(hr::convergence(at_two_standard_errors(0.125), 1e-3).status == hr::ConvergenceStatus::converged);
}

TEST_CASE("convergence: the fall across the window against min_delta, on both sides and exactly at it") {
  // A straight line, residuals exactly 0 (se_b = 0): 1/8 per step over 6 steps.
  const std::vector<hr::ValPoint> line = curve({0, 2, 4, 6}, {1.0, 0.75, 0.5, 0.25});
  const hr::Convergence at = hr::convergence(line, 0.75);
  CHECK(at.status == hr::ConvergenceStatus::converged);  // must exceed min_delta
  CHECK(at.fall_per_eval == 0.25);
  CHECK(hr::convergence(line, std::nextafter(0.75, 0.0)).status == hr::ConvergenceStatus::falling);
  CHECK(hr::convergence(line, std::nextafter(0.75, 1.0)).status == hr::ConvergenceStatus::converged);
  CHECK(hr::convergence(line, 0.0).status == hr::ConvergenceStatus::falling);
}

TEST_CASE("convergence: a rising curve has converged, and the status words read back") {
  const hr::Convergence c = hr::convergence(evenly(100, {1.0, 1.1, 1.2, 1.3, 1.4}), 1e-3);
  CHECK(c.status == hr::ConvergenceStatus::converged);
  CHECK(c.fall_per_eval == doctest::Approx(-0.1));
  for (const auto s : {hr::ConvergenceStatus::unknown, hr::ConvergenceStatus::falling, hr::ConvergenceStatus::converged}) {
    CHECK(hr::parse_convergence_status(hr::to_string(s)) == s);
  }
  CHECK_THROWS_WITH_AS(hr::parse_convergence_status("flat"), doctest::Contains("got 'flat'"), std::invalid_argument);
}

TEST_CASE("early stopping: patience counts validations without an improvement of more than min_delta") {
  // 0.8995 and 0.8992 are below the best (0.9), but not by more than 1e-3.
  const std::vector<hr::ValPoint> v = evenly(10, {1.0, 0.9, 0.8995, 0.8992, 0.85, 0.86, 0.855, 0.851});
  CHECK(hr::patience_stop(v, 1e-3, 2) == std::optional<std::size_t>(40));
  CHECK(hr::patience_stop(v, 1e-3, 3) == std::optional<std::size_t>(80));
  CHECK(hr::patience_stop(v, 1e-3, 4) == std::nullopt);
  CHECK(hr::patience_stop(v, 1e-3, 0) == std::nullopt);  // off
  // With min_delta 0 every lower loss is an improvement: 0.8995, 0.8992 and 0.85 are.
  CHECK(hr::patience_stop(v, 0.0, 2) == std::optional<std::size_t>(70));
  CHECK(hr::patience_stop(v, 0.0, 1) == std::optional<std::size_t>(60));

  hr::EarlyStopState s;
  for (std::size_t i = 0; i < 5; ++i) CHECK_FALSE(hr::observe(s, v[i], 1e-3, 5));
  CHECK(s.best == 0.85);
  CHECK(s.best_step == 50);
  CHECK(s.since_best == 0);
}

TEST_CASE("early stopping: small falls add up against the last improvement, and exactly min_delta is not one") {
  hr::EarlyStopState s;
  CHECK_FALSE(hr::observe(s, {.step = 1, .val_loss = 1.0}, 0.25, 5));
  CHECK_FALSE(hr::observe(s, {.step = 2, .val_loss = 0.75}, 0.25, 5));  // exactly min_delta below: not more
  CHECK(s.since_best == 1);
  CHECK(s.best == 1.0);
  CHECK_FALSE(hr::observe(s, {.step = 3, .val_loss = 0.7}, 0.25, 5));  // 0.3 below the best, in two falls
  CHECK(s.since_best == 0);
  CHECK(s.best_step == 3);
  // A NaN loss is no improvement.
  CHECK(hr::observe(s, {.step = 4, .val_loss = std::numeric_limits<double>::quiet_NaN()}, 0.25, 1));
}
