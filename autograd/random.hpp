// headroom's one random number generator (docs/design.md #6).
//
// xoshiro256** (Blackman and Vigna, 2018) seeded through splitmix64. Uniforms take
// the top 53 bits of a draw; normals use the Box-Muller transform on two such
// uniforms. Nothing goes through <random>'s distributions, whose algorithms differ
// between standard libraries, so a seed gives the same numbers everywhere.
#pragma once

#include <array>
#include <cstdint>

namespace headroom {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0);

  std::uint64_t next_u64();
  // Uniform in [0, 1).
  double uniform();
  // Uniform in [lo, hi).
  double uniform(double lo, double hi);
  // Uniform integer in [0, n); n must be positive.
  std::uint64_t below(std::uint64_t n);
  // Standard normal.
  double normal();

  // The full state, for checkpoints and exact resume.
  using State = std::array<std::uint64_t, 4>;
  State state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  State s_;
};

// The seed of stream `stream` of `seed`: independent generators from one user seed,
// so that how many numbers one part of a program draws never shifts another's.
constexpr std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t stream) {
  return seed * 0x9E3779B97F4A7C15ull + stream;
}

}  // namespace headroom
