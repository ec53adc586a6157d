// How the command files write a number into a CSV file.
#pragma once

#include <cmath>
#include <string>

#include <fmt/format.h>

namespace headroom::cli {

// Six significant digits, and an empty field for NaN (a value that does not exist,
// such as the score of a head with itself).
inline std::string csv_number(double v) { return std::isnan(v) ? std::string() : fmt::format("{:.6g}", v); }

}  // namespace headroom::cli
