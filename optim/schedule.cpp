// The schedules' formulas and sources are in schedule.hpp.
#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "optim/validate.hpp"

namespace headroom {

LrSchedule LrSchedule::constant(const LrScheduleOptions& options) {
  detail::require_finite_non_negative("constant schedule", "lr", options.lr);
  return LrSchedule(LrScheduleKind::constant, options);
}

LrSchedule LrSchedule::warmup_cosine(const LrScheduleOptions& options) {
  const char* who = "cosine schedule";
  detail::require_finite_non_negative(who, "lr", options.lr);
  if (options.total_steps == 0) {
    throw std::invalid_argument(fmt::format("{}: total_steps must be > 0, got 0", who));
  }
  if (options.warmup > options.total_steps) {
    throw std::invalid_argument(fmt::format("{}: warmup={} must be <= total_steps={}", who,
                                            options.warmup, options.total_steps));
  }
  if (!(options.min_lr >= 0 && options.min_lr <= options.lr)) {
    throw std::invalid_argument(fmt::format("{}: min_lr must be in [0, lr={}], got {}", who,
                                            options.lr, options.min_lr));
  }
  return LrSchedule(LrScheduleKind::warmup_cosine, options);
}

LrSchedule LrSchedule::inverse_sqrt(const LrScheduleOptions& options) {
  const char* who = "inverse_sqrt schedule";
  if (options.warmup == 0) {
    // sqrt(warmup / t) would be 0 from the first step.
    throw std::invalid_argument(fmt::format("{}: warmup must be > 0, got 0", who));
  }
  detail::require_finite_positive(who, "lr", options.lr);
  return LrSchedule(LrScheduleKind::inverse_sqrt, options);
}

const std::vector<std::string>& LrSchedule::schedule_names() {
  static const std::vector<std::string> names = {"constant", "cosine", "inverse_sqrt"};  // LrScheduleKind's order
  return names;
}

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::constant;
  if (name == "cosine") return LrScheduleKind::warmup_cosine;
  if (name == "inverse_sqrt") return LrScheduleKind::inverse_sqrt;
  throw std::invalid_argument(fmt::format("unknown lr schedule '{}'; valid names are {}", name,
                                          fmt::join(LrSchedule::schedule_names(), ", ")));
}

std::string to_string(LrScheduleKind kind) {
  return LrSchedule::schedule_names().at(static_cast<std::size_t>(kind));
}

LrSchedule LrSchedule::of_kind(LrScheduleKind kind, const LrScheduleOptions& options) {
  switch (kind) {
    case LrScheduleKind::constant: return constant(options);
    case LrScheduleKind::warmup_cosine: return warmup_cosine(options);
    case LrScheduleKind::inverse_sqrt: return inverse_sqrt(options);
  }
  return constant(options);  // unreachable
}

LrSchedule LrSchedule::from_name(std::string_view name, const LrScheduleOptions& options) {
  return of_kind(parse_lr_schedule(std::string(name)), options);
}

std::string_view LrSchedule::name() const { return schedule_names().at(static_cast<std::size_t>(kind_)); }

double LrSchedule::lr_at(std::size_t step) const {
  if (step == 0) {
    throw std::invalid_argument("LrSchedule::lr_at: steps count from 1 (the first update), got 0");
  }
  const LrScheduleOptions& o = options_;
  const double t = static_cast<double>(step);
  switch (kind_) {
    case LrScheduleKind::constant:
      return o.lr;
    case LrScheduleKind::warmup_cosine: {
      if (step <= o.warmup) return o.lr * t / static_cast<double>(o.warmup);
      if (step >= o.total_steps) return o.min_lr;
      const double progress = (t - static_cast<double>(o.warmup)) /
                              static_cast<double>(o.total_steps - o.warmup);
      return o.min_lr + (o.lr - o.min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
    }
    case LrScheduleKind::inverse_sqrt: {
      const double warmup = static_cast<double>(o.warmup);
      return o.lr * std::min(t / warmup, std::sqrt(warmup / t));
    }
  }
  return o.lr;  // unreachable
}

}  // namespace headroom
