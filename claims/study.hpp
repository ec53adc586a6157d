// The fixed set of sweeps `headroom claims` runs (docs/cli/claims.md): each one an
// ordinary `headroom ablate` directory under DIR, built from the same parsers as the
// command line, so that the command line printed for it (command()) reruns or
// extends exactly that sweep.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/sweep.hpp"

namespace headroom {

// quick: the <= 15 minute study on 2 cores; full: the study of docs/cli/claims.md;
// smoke: a few steps of every sweep, for the test suite only (not a budget to read
// anything from).
enum class Budget { quick, full, smoke };

// Which claims a study checks: the seeds' claims on synthetic tasks with a known
// answer (the default), or the same questions on real text from Debian's corpora
// (`headroom claims --text`: the classifier anecdote on fortunes-topic and heads at
// fixed computation on kjv, data/corpus.hpp). A directory holds one suite.
enum class Suite { synthetic, text };

std::string to_string(Suite suite);  // "synthetic", "text"

std::string to_string(Budget budget);
Budget parse_budget(const std::string& name);  // "quick" | "full" | "smoke"

// One base setting of a sweep: the config key, its value, and the flags that give it.
struct BaseSetting {
  std::string key;      // "model.n_layers"
  nlohmann::json value; // 1
  std::string flags;    // "--layers 1"
};

// One sweep flag as `headroom ablate` takes it: {"--heads", "1,2,4"}, {"--sweep", "attn_scale=null,1"}.
struct AxisFlag {
  std::string flag;
  std::string text;
};

struct ClaimSweep {
  std::string name;               // its directory under DIR: "4-heads-lags"
  std::string about;              // one line: what it measures, for which claims
  std::vector<BaseSetting> base;  // in command-line order; data.task first
  std::vector<AxisFlag> axes;     // in ablate's axis order: --heads, --dk, --kv-heads, then each --sweep
  std::size_t seeds = 0;          // seeds seed_offset .. seed_offset + seeds - 1: both seed sets
  std::uint64_t seed_offset = 0;

  // The SweepSpec `headroom ablate` builds from command(): the task's defaults, then
  // the base settings, then the axes and seeds through ablate's parsers.
  SweepSpec spec() const;
  // "headroom ablate --task lags ... --seeds 6 --out DIR/4-heads-lags" (and
  // --seed-offset N when it is not 0).
  std::string command(const std::filesystem::path& dir) const;
};

// Every verdict is computed on two disjoint sets of seeds and settled only where
// they agree (claims/run.hpp): set A holds the seeds at even positions from the
// offset (offset, offset + 2, ...), set B the odd ones, so a study of n seeds a set
// trains 2n seeds a point, and running it with more seeds extends both sets.
enum class SeedSet { a, b };
std::string to_string(SeedSet set);  // "A", "B"

struct Study {
  Budget budget = Budget::quick;
  Suite suite = Suite::synthetic;
  std::size_t seeds = 0;           // per seed set: each point trains 2 * seeds
  std::uint64_t seed_offset = 0;   // the first seed: another offset replicates the study on other seeds
  // Seeds until decided: a claim not settled with `seeds` a set gives the points it
  // compares one more seed a set per round, up to this many (claims/run.hpp). Not
  // part of the directory's identity: a rerun may raise it.
  std::size_t max_seeds = 0;
  // The set `seed` (one of this study's) belongs to.
  SeedSet set_of(std::uint64_t seed) const { return (seed - seed_offset) % 2 == 0 ? SeedSet::a : SeedSet::b; }
  std::vector<ClaimSweep> sweeps;
  const ClaimSweep& sweep(const std::string& name) const;  // std::out_of_range if none
  // The sweep with `per_set` seeds in each set (2 * per_set seeds a point).
  ClaimSweep grown(const std::string& name, std::size_t per_set) const;
};

// The sweeps of a budget and suite. seeds: --seeds, per seed set (>= 2), else the
// budget's own (synthetic: quick 3, full 5, smoke 2; text: quick 2, full 3, smoke 2);
// a std::invalid_argument for fewer than 2. seed_offset: the first seed
// (--seed-offset, at most kMaxSeedOffset). max_seeds: --max-seeds (>= seeds), else
// the budget's (synthetic: quick 3, full 10, smoke 3; text: quick 2, full 5, smoke
// 3), at least `seeds`.
Study make_study(Budget budget, std::optional<std::size_t> seeds = std::nullopt, std::uint64_t seed_offset = 0,
                 std::optional<std::size_t> max_seeds = std::nullopt, Suite suite = Suite::synthetic);

// The corpora a study's sweeps read (data/corpus.hpp names), in sweep order, each once.
std::vector<std::string> study_corpora(const Study& study);

// DIR/claims.json: the budget, the seeds per set and the seed offset a claims
// directory was made with, and its suite when it is not the synthetic one (so a
// directory made before suites existed still matches).
nlohmann::json study_json(const Study& study);

}  // namespace headroom
