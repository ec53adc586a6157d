// Flag validators with plain messages. CLI11 2.1 wraps "-4" into a huge unsigned
// value and prints its range checks with the whole double range, so we check the
// text ourselves.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

namespace headroom::cli {

// A CLI11 validator from a library parser: the text is valid when `parse` takes it,
// and its std::invalid_argument's message is CLI11's error otherwise.
template <typename Parse>
CLI::Validator parsed_by(Parse parse, const char* name) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          parse(text);
          return "";
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      name);
}

// Digits only: a count, a size or a seed.
inline const CLI::Validator kWholeNumber(
    [](std::string& text) -> std::string {
      const bool digits =
          !text.empty() && text.size() <= 19 && text.find_first_not_of("0123456789") == std::string::npos;
      return digits ? "" : "must be a whole number from 0 to 10^19 - 1, got " + text;
    },
    "N");

// Digits only, at least 1: a count that cannot be zero.
inline const CLI::Validator kCount(
    [](std::string& text) -> std::string {
      const bool digits =
          !text.empty() && text.size() <= 19 && text.find_first_not_of("0123456789") == std::string::npos;
      return digits && text.find_first_not_of('0') != std::string::npos
                 ? ""
                 : "must be a whole number from 1 to 10^19 - 1, got " + text;
    },
    "N");

// A size whose default is derived from other flags: 0 is not "the default", so say so.
inline const CLI::Validator kPositiveWholeNumber(
    [](std::string& text) -> std::string {
      const bool digits =
          !text.empty() && text.size() <= 19 && text.find_first_not_of("0123456789") == std::string::npos;
      if (digits && text.find_first_not_of('0') != std::string::npos) return "";
      return "must be a whole number >= 1 (leave the flag out for its default), got " + text;
    },
    "N");

// Whole numbers separated by commas, "1,2,3": a list field's flag (nn/config_field.hpp).
inline const CLI::Validator kWholeNumberList(
    [](std::string& text) -> std::string {
      std::size_t start = 0;
      for (;;) {
        const std::size_t comma = text.find(',', start);
        const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (item.empty() || item.size() > 19 || item.find_first_not_of("0123456789") != std::string::npos) {
          return "must be whole numbers separated by commas (1,2,3), got " + text;
        }
        if (comma == std::string::npos) return "";
        start = comma + 1;
      }
    },
    "N,N,...");

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

inline const CLI::Validator kFiniteNonNegative(
    [](std::string& text) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(text, v) || !(v >= 0) || !std::isfinite(v)) {
        return "must be a finite number >= 0, got " + text;
      }
      return "";
    },
    "NON-NEGATIVE");

// A probability that may be 0 but not 1: a dropout rate, which at 1 would drop everything.
inline const CLI::Validator kFraction(
    [](std::string& text) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(text, v) || !(v >= 0 && v < 1)) return "must be a number in [0, 1), got " + text;
      return "";
    },
    "P");

// A probability that may be 1 but not 0: top-p.
inline const CLI::Validator kProbability(
    [](std::string& text) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(text, v) || !(v > 0 && v <= 1)) return "must be a number in (0, 1], got " + text;
      return "";
    },
    "P");

}  // namespace headroom::cli
