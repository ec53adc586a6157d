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
  if (options.d_model == 0) {
    throw std::invalid_argument(fmt::format("{}: d_model must be > 0, got 0", who));
  }
  if (options.warmup == 0) {
    // warmup^-1.5 would be infinite.
    throw std::invalid_argument(fmt::format("{}: warmup must be > 0, got 0", who));
  }
  detail::require_finite_positive(who, "scale", options.scale);
  return LrSchedule(LrScheduleKind::inverse_sqrt, options);
}

const std::vector<std::string>& LrSchedule::schedule_names() {
  static const std::vector<std::string> names = {"constant", "cosine", "inverse_sqrt"};
  return names;
}

LrSchedule LrSchedule::from_name(std::string_view name, const LrScheduleOptions& options) {
  if (name == "constant") return constant(options);
  if (name == "cosine") return warmup_cosine(options);
  if (name == "inverse_sqrt") return inverse_sqrt(options);
  throw std::invalid_argument(fmt::format("unknown lr schedule '{}'; valid names are {}", name,
                                          fmt::join(schedule_names(), ", ")));
}

std::string_view LrSchedule::name() const {
  switch (kind_) {
    case LrScheduleKind::constant: return "constant";
    case LrScheduleKind::warmup_cosine: return "cosine";
    case LrScheduleKind::inverse_sqrt: return "inverse_sqrt";
  }
  return "constant";  // unreachable; keeps -Wreturn-type quiet
}

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
      return o.scale / std::sqrt(static_cast<double>(o.d_model)) *
             std::min(1 / std::sqrt(t), t * std::pow(warmup, -1.5));
    }
  }
  return o.lr;  // unreachable
}

}  // namespace headroom
