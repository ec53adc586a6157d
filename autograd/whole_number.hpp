// Decimal whole numbers as headroom reads them from names and text it wrote itself
// or a user typed: a step in a directory name, a PID in a temporary's name, a token
// id. Only the digits 0-9, no sign, no spaces, at most 19 of them (so every value
// fits in 64 bits).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace headroom {

// The number `s` spells, or nothing when it is empty, holds anything but digits, or
// is longer than 19 digits.
inline std::optional<std::uint64_t> parse_whole_number(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

}  // namespace headroom
