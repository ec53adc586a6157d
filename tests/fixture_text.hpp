// Shared pieces of the readers of the line-based text fixtures under fixtures/
// (each fixture's header documents its own records).
#pragma once

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

// A number as the fixture scripts write it; strtod, unlike operator>>, also reads
// "inf", "-inf" and "nan".
inline double parse_number(const std::string& token, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(token.c_str(), &end);
  if (token.empty() || end != token.c_str() + token.size())
    throw std::runtime_error(fmt::format("{}: '{}' is not a number", where, token));
  return v;
}

// Opens a fixture, or throws naming the script that regenerates it.
inline std::ifstream open_fixture(const std::string& path, const std::string& script) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot open {}; regenerate it with /usr/bin/python3 {}", path, script));
  return in;
}
