// Flag validators with plain messages. CLI11 2.1 wraps "-4" into a huge unsigned
// value and prints its range checks with the whole double range, so we check the
// text ourselves.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace headroom::cli {

// Digits only: a count, a size or a seed.
inline const CLI::Validator kWholeNumber(
    [](std::string& text) -> std::string {
      const bool digits =
          !text.empty() && text.size() <= 19 && text.find_first_not_of("0123456789") == std::string::npos;
      return digits ? "" : "must be a whole number from 0 to 10^19 - 1, got " + text;
    },
    "N");

inline const CLI::Validator kPositive(
    [](std::string& text) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(text, v) || !(v > 0)) return "must be a positive number, got " + text;
      return "";
    },
    "POSITIVE");

inline const CLI::Validator kNonNegative(
    [](std::string& text) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(text, v) || !(v >= 0)) return "must be a number >= 0, got " + text;
      return "";
    },
    "NON-NEGATIVE");

}  // namespace headroom::cli
