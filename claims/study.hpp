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
  std::size_t seeds = 0;          // seeds 0..seeds-1

  // The SweepSpec `headroom ablate` builds from command(): the task's defaults, then
  // the base settings, then the axes and seeds through ablate's parsers.
  SweepSpec spec() const;
  // "headroom ablate --task lags ... --seeds 3 --out DIR/4-heads-lags".
  std::string command(const std::filesystem::path& dir) const;
};

struct Study {
  Budget budget = Budget::quick;
  std::size_t seeds = 0;
  std::vector<ClaimSweep> sweeps;
  const ClaimSweep& sweep(const std::string& name) const;  // std::out_of_range if none
};

// The sweeps of a budget. seeds: --seeds (>= 2), else the budget's own (quick 3,
// full 5, smoke 2); a std::invalid_argument for fewer than 2.
Study make_study(Budget budget, std::optional<std::size_t> seeds = std::nullopt);

// DIR/claims.json: the budget and the seeds a claims directory was made with.
nlohmann::json study_json(const Study& study);

}  // namespace headroom
