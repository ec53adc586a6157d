// Option checks shared by the optimizers and schedules (internal to optim/). Each
// throws std::invalid_argument as "<who>: <option> must be <rule>, got <value>"
// (docs/design.md #5); NaN fails every rule, since every comparison with it is false.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

namespace headroom::detail {

inline void require_finite_non_negative(std::string_view who, std::string_view option, double v) {
  if (!(std::isfinite(v) && v >= 0)) {
    throw std::invalid_argument(fmt::format("{}: {} must be finite and >= 0, got {}", who, option, v));
  }
}

inline void require_finite_positive(std::string_view who, std::string_view option, double v) {
  if (!(std::isfinite(v) && v > 0)) {
    throw std::invalid_argument(fmt::format("{}: {} must be finite and > 0, got {}", who, option, v));
  }
}

// v in [0, 1): Adam's betas, SGD's momentum.
inline void require_unit_interval_open(std::string_view who, std::string_view option, double v) {
  if (!(v >= 0 && v < 1)) {
    throw std::invalid_argument(fmt::format("{}: {} must be in [0, 1), got {}", who, option, v));
  }
}

}  // namespace headroom::detail
