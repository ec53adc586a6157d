// `headroom ablate`'s grid: the sweep flags, the cartesian product with each point
// validated, sweep.json and the checks on a sweep directory, and merging shards.
// The runner is cli/ablate_run.cpp, the reports cli/ablate_report.cpp.
#include "ablate/sweep.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <unistd.h>

#include "autograd/whole_number.hpp"
#include "train/init_from.hpp"
#include "train/resources.hpp"
#include "train/trainer.hpp"
#include "nn/config_json.hpp"
#include "nn/safetensors.hpp"
#include "nn/strict_json.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "headroom ablate sweep 1";

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

// A directory that is empty but for kKeptEntries and temporaries (train/out_dir.hpp):
// nothing, or another process writing sweep.json this moment.
bool only_kept_entries(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_temporary_name(name) && !is_kept_entry(name)) return false;
  }
  return true;
}

bool whole_number(const std::string& s) { return parse_whole_number(s).has_value(); }  // autograd/whole_number.hpp

// A file or directory name from a label: letters, digits and . _ + - kept.
std::string path_safe(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '+' || c == '-';
    if (!keep) c = '_';
  }
  return out;
}

// Every config.json key by section, from a config whose model resolves.
nlohmann::json config_keys() {
  TrainConfig c;
  c.model.vocab = 16;
  c.model.max_len = 16;
  return to_json(c);
}

std::string key_list(const nlohmann::json& sections) {
  std::string out;
  for (const char* section : {"model", "data", "train"}) {
    std::string keys;
    for (const auto& [key, v] : sections[section].items()) keys += (keys.empty() ? "" : " ") + key;
    out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", section, keys);
  }
  return out;
}

// The value of config key `section.key` in a config.json object, as text for a table.
nlohmann::json config_value(const TrainConfig& config, const std::string& section, const std::string& key) {
  return to_json(config)[section][key];
}

// Every data key (the task options too: runs that differ in data.lags differ in data).
std::string data_key(const DataConfig& d) {
  return data_json(d).dump();
}

// sweep.json: a regular file, strict JSON (nn/strict_json.hpp).
nlohmann::json read_json_file(const fs::path& file) { return read_strict_json_file(file, kMaxSweepBytes); }

// The first place where two JSON values differ, as "path: A there, B here".
std::string first_difference(const nlohmann::json& there, const nlohmann::json& here) {
  const std::optional<JsonDifference> d = first_json_difference(there, here);  // nn/strict_json.hpp
  if (!d) return "";
  return fmt::format("{}: {} there, {} here", d->path.empty() ? "the whole file" : d->path, d->first, d->second);
}

// What makes two sweeps the same: everything in sweep.json but the reasons points
// were skipped for (error messages, which may be reworded between versions).
nlohmann::json definition(nlohmann::json sweep) {
  if (sweep.is_object()) sweep.erase("skipped");
  return sweep;
}

// How the sweep in a DIR (stored) and the one asked for (wanted) relate, by their
// definitions: the same sweep; one extending the other by more seeds (the same grid,
// and the shorter's seeds a prefix of the longer's, whose runs include the
// shorter's as they are); or different.
enum class Relation { same, wanted_extends, stored_extends, different };

bool seeds_extend(const nlohmann::json& longer, const nlohmann::json& shorter) {
  for (const char* key : {"format", "columns", "plot_axes"}) {
    if (longer.value(key, nlohmann::json()) != shorter.value(key, nlohmann::json())) return false;
  }
  const nlohmann::json& long_seeds = longer.at("seeds");
  const nlohmann::json& short_seeds = shorter.at("seeds");
  if (!long_seeds.is_array() || !short_seeds.is_array() || long_seeds.size() <= short_seeds.size()) return false;
  for (std::size_t i = 0; i < short_seeds.size(); ++i) {
    if (long_seeds[i] != short_seeds[i]) return false;
  }
  nlohmann::json kept = nlohmann::json::array();
  for (const nlohmann::json& run : longer.at("runs")) {
    for (const nlohmann::json& seed : short_seeds) {
      if (run.value("seed", nlohmann::json()) == seed) kept.push_back(run);
    }
  }
  return kept == shorter.at("runs");
}

Relation relate(const nlohmann::json& stored, const nlohmann::json& wanted) {
  if (stored == wanted) return Relation::same;
  try {
    if (seeds_extend(wanted, stored)) return Relation::wanted_extends;
    if (seeds_extend(stored, wanted)) return Relation::stored_extends;
  } catch (const nlohmann::json::exception&) {
    // A definition without seeds or runs is a different sweep.
  }
  return Relation::different;
}

}  // namespace

// ---- the flags --------------------------------------------------------------------

SweepAxis parse_count_axis(const std::string& flag, const std::string& key, const std::string& text,
                           bool allow_auto) {
  SweepAxis axis{.flag = flag, .section = "model", .key = key, .labels = {}, .values = {}};
  const std::string want = fmt::format("a comma-separated list of whole numbers >= 1{}, got '{}'",
                                       allow_auto ? " or auto (d_model / heads)" : "", text);
  for (const std::string& item : split(text, ',')) {
    if (allow_auto && item == "auto") {
      axis.values.emplace_back(0);
    } else if (whole_number(item) && item.find_first_not_of('0') != std::string::npos) {
      axis.values.emplace_back(std::stoull(item));
    } else {
      throw std::invalid_argument("expected " + want);
    }
    if (std::find(axis.labels.begin(), axis.labels.end(), item) != axis.labels.end()) {
      throw std::invalid_argument(fmt::format("{} is listed twice in '{}'", item, text));
    }
    axis.labels.push_back(item);
  }
  return axis;
}

SweepAxis parse_sweep_flag(const std::string& text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) throw std::invalid_argument(fmt::format("expected KEY=V1,V2,... (a config.json key), got '{}'", text));
  std::string key = text.substr(0, eq);
  std::string section;
  const nlohmann::json keys = config_keys();
  if (const std::size_t dot = key.find('.'); dot != std::string::npos) {
    section = key.substr(0, dot);
    key = key.substr(dot + 1);
    if (!keys.contains(section) || !keys[section].contains(key)) {
      throw std::invalid_argument(fmt::format("unknown key '{}.{}' ({})", section, key, key_list(keys)));
    }
  } else if (key == "vocab") {
    section = "data";  // the model's vocab comes from the data
  } else {
    for (const char* s : {"model", "data", "train"}) {
      if (keys[s].contains(key)) {
        section = s;
        break;
      }
    }
    if (section.empty()) throw std::invalid_argument(fmt::format("unknown key '{}' ({})", key, key_list(keys)));
  }
  const std::map<std::string, std::string> own_flag{
      {"n_heads", "--heads"}, {"d_k", "--dk"}, {"n_kv_heads", "--kv-heads"}, {"seed", "--seeds"}};
  if (const auto it = own_flag.find(key); it != own_flag.end()) {
    throw std::invalid_argument(fmt::format("sweep {} with {}, not --sweep", key, it->second));
  }
  if (section == "model" && key == "vocab") throw std::invalid_argument("model.vocab comes from the data; sweep data.vocab (vocab=...)");

  SweepAxis axis{.flag = "--sweep", .section = section, .key = key, .labels = {}, .values = {}};
  const std::string list = text.substr(eq + 1);
  // A list key (data.lags) takes each value as whole numbers joined by '+', since ','
  // separates the values: lags=1,1+2 sweeps [1] and [1, 2].
  const bool list_key = keys[section][key].is_array();
  for (const std::string& item : split(list, ',')) {
    if (item.empty()) throw std::invalid_argument(fmt::format("'{}' has an empty value", text));
    if (std::find(axis.labels.begin(), axis.labels.end(), item) != axis.labels.end()) {
      throw std::invalid_argument(fmt::format("{} is listed twice in '{}'", item, text));
    }
    if (list_key) {
      nlohmann::json value = nlohmann::json::array();
      for (const std::string& part : split(item, '+')) {
        if (!whole_number(part)) {
          throw std::invalid_argument(fmt::format("'{}': {} is a list: give each value as whole numbers joined by '+' ({}=1,1+2 sweeps [1] "
                          "and [1, 2]), got '{}'",
                          text, key, key, item));
        }
        value.push_back(std::stoull(part));
      }
      axis.labels.push_back(item);
      axis.values.push_back(std::move(value));
      continue;
    }
    nlohmann::json value = item;
    try {
      const nlohmann::json parsed = nlohmann::json::parse(item);
      if (parsed.is_number() || parsed.is_boolean() || parsed.is_null()) value = parsed;
    } catch (const nlohmann::json::parse_error&) {
    } catch (const nlohmann::json::out_of_range&) {  // 1e400: a number, but no double holds it
      throw std::invalid_argument(fmt::format("'{}': {} is a number out of range", text, item));
    }
    // The value must be one that config.json accepts for this key.
    TrainConfig probe = TrainConfig{};
    update_from_json(probe, nlohmann::json{{section, {{key, value}}}}, fmt::format("{}={}", key, item));
    axis.labels.push_back(item);
    axis.values.push_back(std::move(value));
  }
  return axis;
}

std::vector<std::uint64_t> parse_seeds(const std::string& text) {
  const std::string want = fmt::format(
      "expected a count N (seeds 0..N-1) or a comma-separated list of seeds (7, for the one seed 7), got '{}'", text);
  std::vector<std::uint64_t> seeds;
  if (text.find(',') == std::string::npos) {
    if (!whole_number(text) || text.find_first_not_of('0') == std::string::npos) throw std::invalid_argument(want);
    const std::uint64_t n = std::stoull(text);
    if (n > 10000) throw std::invalid_argument(fmt::format("{} seeds is more than the 10000 a sweep takes", n));
    for (std::uint64_t s = 0; s < n; ++s) seeds.push_back(s);
    return seeds;
  }
  std::vector<std::string> items = split(text, ',');
  if (items.back().empty()) items.pop_back();  // "7,"
  for (const std::string& item : items) {
    if (!whole_number(item)) throw std::invalid_argument(want);
    const std::uint64_t s = std::stoull(item);
    if (std::find(seeds.begin(), seeds.end(), s) != seeds.end()) throw std::invalid_argument(fmt::format("seed {} is listed twice in '{}'", s, text));
    seeds.push_back(s);
  }
  if (seeds.empty()) throw std::invalid_argument(want);
  return seeds;
}

std::vector<std::uint64_t> parse_seeds(const std::string& text, std::uint64_t offset) {
  if (offset > kMaxSeedOffset) throw std::invalid_argument(fmt::format("--seed-offset {}: at most {}", offset, kMaxSeedOffset));
  // A seed has at most 19 digits (below 10^19) and the offset at most 10^12: the sum
  // stays below 2^64.
  std::vector<std::uint64_t> seeds = parse_seeds(text);
  for (std::uint64_t& s : seeds) s += offset;
  return seeds;
}

std::uint64_t parse_seed_offset(const std::string& text) {
  if (!whole_number(text) || text.size() > 13 || std::stoull(text) > kMaxSeedOffset) {
    throw std::invalid_argument(
        fmt::format("expected a whole number from 0 to {}, got '{}'", kMaxSeedOffset, text));
  }
  return std::stoull(text);
}

Shard parse_shard(const std::string& text) {
  const std::vector<std::string> parts = split(text, '/');
  if (parts.size() != 2 || !whole_number(parts[0]) || !whole_number(parts[1])) {
    throw std::invalid_argument(fmt::format("expected K/N (the K-th of N slices, 1 <= K <= N), got '{}'", text));
  }
  const Shard s{.index = std::stoull(parts[0]), .count = std::stoull(parts[1])};
  if (s.count == 0 || s.index == 0 || s.index > s.count) {
    throw std::invalid_argument(fmt::format("K must be from 1 to N in K/N, got '{}'", text));
  }
  return s;
}

namespace {

// One scheduler's array variables.
struct ArrayVars {
  const char* scheduler;
  const char* id;
  const char* first;
  const char* last;
  const char* count;  // nullptr: the scheduler gives none
  const char* step;
};

constexpr std::array<ArrayVars, 2> kArrayVars{{
    {"Slurm", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_COUNT",
     "SLURM_ARRAY_TASK_STEP"},
    {"Grid Engine", "SGE_TASK_ID", "SGE_TASK_FIRST", "SGE_TASK_LAST", nullptr, "SGE_TASK_STEPSIZE"},
}};

}  // namespace

Shard shard_from_environment(const std::function<std::optional<std::string>(const std::string&)>& env) {
  for (const ArrayVars& v : kArrayVars) {
    const std::optional<std::string> id_text = env(v.id);
    if (!id_text || *id_text == "undefined") continue;  // SGE says "undefined" outside an array
    std::string shown;  // the variables as set, for messages
    auto number = [&](const char* name, std::optional<std::uint64_t> fallback) -> std::uint64_t {
      const std::optional<std::string> text = env(name);
      shown += fmt::format("{}{}={}", shown.empty() ? "" : " ", name, text ? *text : "(unset)");
      if (!text && fallback) return *fallback;
      const std::optional<std::uint64_t> n = text ? parse_whole_number(*text) : std::nullopt;
      if (!n) {
        throw std::invalid_argument(fmt::format("--shard auto: {} is {} in this {} array task, not a whole number", name,
                        text ? "'" + *text + "'" : std::string("not set"), v.scheduler));
      }
      return *n;
    };
    const std::uint64_t id = number(v.id, std::nullopt);
    const std::uint64_t first = number(v.first, std::nullopt);
    const std::uint64_t last = number(v.last, std::nullopt);
    const std::uint64_t step = number(v.step, 1);
    if (step == 0 || last < first || id < first || id > last || (id - first) % step != 0) {
      throw std::invalid_argument(fmt::format("--shard auto: the {} array task is not in its range ({}); give --shard K/N", v.scheduler,
                      shown));
    }
    const std::uint64_t tasks = (last - first) / step + 1;
    if (v.count != nullptr && number(v.count, std::nullopt) != tasks) {
      throw std::invalid_argument(fmt::format("--shard auto: the {} array is not an evenly spaced range of indices ({}); submit it as "
                      "--array=FIRST-LAST[:STEP], or give --shard K/N",
                      v.scheduler, shown));
    }
    return {.index = static_cast<std::size_t>((id - first) / step + 1), .count = static_cast<std::size_t>(tasks)};
  }
  throw std::invalid_argument("--shard auto: this process is not a task of a job array (neither SLURM_ARRAY_TASK_ID nor SGE_TASK_ID is "
      "set); submit it with sbatch --array (the script --slurm writes does), or give --shard K/N");
}

Shard shard_from_environment() {
  return shard_from_environment([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

// ---- the grid ---------------------------------------------------------------------

void check_grid_size(const SweepSpec& spec, std::size_t max_runs) {
  double runs = static_cast<double>(spec.seeds.size());  // a double: a product of long lists overflows nothing
  std::string factors;
  for (const SweepAxis& a : spec.axes) {
    runs *= static_cast<double>(a.values.size());
    factors += fmt::format("{} {}{} x ", a.values.size(), a.flag == "--sweep" ? "--sweep " : "",
                           a.flag == "--sweep" ? a.key : a.flag);
  }
  if (runs > static_cast<double>(max_runs)) {
    throw std::invalid_argument(fmt::format("the grid is {}{} seed{} = {:.0f} runs, more than --max-runs {}; raise --max-runs to run it all",
                    factors, spec.seeds.size(), spec.seeds.size() == 1 ? "" : "s", runs, max_runs));
  }
  // The plan itself, before any run trains: every point's config, checked, its id and
  // flags, and the report's rows.
  const std::optional<AvailableMemory> available = available_memory();
  if (available && runs * kPlanBytesPerRun > available->bytes) {
    throw std::invalid_argument(fmt::format(
        "the grid is {}{} seed{} = {:.0f} runs, whose plan alone needs about {} ({} per run) but this machine has {} "
        "available ({}); split it with --shard, or sweep fewer values",
        factors, spec.seeds.size(), spec.seeds.size() == 1 ? "" : "s", runs, format_bytes(runs * kPlanBytesPerRun),
        format_bytes(kPlanBytesPerRun), format_bytes(available->bytes), available->source));
  }
}

void check_sweep_memory(const SweepPlan& plan, std::size_t jobs) {
  const PlannedRun* largest = nullptr;
  double most = -1;
  for (const PlannedRun& run : plan.runs) {
    const double bytes = estimate_training_memory(run.config).total();
    if (bytes > most) {
      most = bytes;
      largest = &run;
    }
  }
  if (largest == nullptr) return;
  try {
    check_training_memory(largest->config, 0, std::min(jobs, plan.runs.size()));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("run {}: {}", largest->id, e.what()));
  }
}

SweepPlan plan_sweep(const SweepSpec& spec) {
  SweepPlan plan;
  plan.columns = {"n_heads", "d_k", "n_kv_heads"};
  plan.seeds = spec.seeds;
  bool kv_axis = false, lr_axis = false;
  for (const SweepAxis& a : spec.axes) {
    lr_axis = lr_axis || (a.section == "train" && a.key == "lr");
    if (a.values.empty()) throw std::invalid_argument(fmt::format("{} {} has no values", a.flag, a.key));
    if (a.flag == "--sweep") {
      if (std::find(plan.columns.begin(), plan.columns.end(), a.key) != plan.columns.end()) {
        throw std::invalid_argument(fmt::format("--sweep {} is given twice", a.key));
      }
      plan.columns.push_back(a.key);
    }
    kv_axis = kv_axis || a.key == "n_kv_heads";
    if (a.values.size() >= 2) plan.plot_axes.push_back(a.key);
  }
  if (spec.seeds.empty()) throw std::invalid_argument("a sweep needs at least one seed");
  // A text run has no task and takes its vocabulary from the text: sweeping either
  // over a text base would train the same run under several names (docs/design.md #11).
  const bool text_axis = std::any_of(spec.axes.begin(), spec.axes.end(), [](const SweepAxis& a) {
    return a.section == "data" && std::find(std::begin(kTextSourceKeys), std::end(kTextSourceKeys), a.key) !=
                                      std::end(kTextSourceKeys);
  });
  for (const SweepAxis& a : spec.axes) {
    if (reads_text(spec.base.data) && !text_axis && a.section == "data" && (a.key == "task" || a.key == "vocab")) {
      throw std::invalid_argument(fmt::format("--sweep {}: the base config trains on the {}, which has no task and takes its "
                      "vocabulary from the text, so every value would train the same run",
                      a.key, data_source(spec.base.data)));
    }
  }

  std::map<std::string, std::unique_ptr<Dataset>> datasets;  // validation only; each run makes its own
  std::optional<InitSource> init_source;  // read once, for every point
  std::map<std::string, std::string> point_desc;              // point id -> its description
  std::vector<std::pair<TrainConfig, std::string>> config_desc;  // each point's config and its description
  std::vector<std::size_t> at(spec.axes.size(), 0);           // the odometer over the axes
  for (;;) {
    TrainConfig c = spec.base;
    std::string desc, suffix;
    std::optional<std::string> reason;
    try {
      for (std::size_t i = 0; i < spec.axes.size(); ++i) {
        const SweepAxis& a = spec.axes[i];
        const std::string& label = a.labels[at[i]];
        desc += fmt::format("{}{}={}", desc.empty() ? "" : " ", a.key, label);
        update_from_json(c, nlohmann::json{{a.section, {{a.key, a.values[at[i]]}}}},
                         fmt::format("{} {}", a.flag, label));
        if (a.flag == "--sweep") suffix += fmt::format("-{}", path_safe(a.key + label));
      }
      // --preset llama --heads 4,8: kv heads 1 and 2, each point's own n_heads / 4.
      if (spec.kv_heads != nullptr && !kv_axis) c.model.n_kv_heads = spec.kv_heads(c.model.n_heads);
      // --sweep norm=pre,none: the points without norms get their own default rate.
      if (spec.lr_follows_model && !lr_axis) c.optim.lr = default_lr(c.model);
      // --init-from DIR: each point's data and model must be DIR's but for n_kv_heads, which pools.
      if (!c.optim.init_from.empty()) {
        if (!init_source) init_source = read_init_source(c.optim.init_from);
        check_init_data(c, *init_source);
      }
      c.validate();
      const std::string key = data_key(c.data);
      auto it = datasets.find(key);
      if (it == datasets.end()) it = datasets.emplace(key, make_dataset(c)).first;
      c = finalize(c, *it->second);
      if (init_source) check_init_source(c, *init_source);
    } catch (const std::invalid_argument& e) {
      reason = e.what();
    }
    if (reason) {
      plan.skipped.push_back({desc.empty() ? "the base config" : desc, *reason});
    } else {
      const ModelConfig& m = c.model;
      const std::string point =
          fmt::format("h{}-dk{}{}{}", m.n_heads, m.d_k, kv_axis ? fmt::format("-kv{}", m.n_kv_heads) : "", suffix);
      // c is finalized (its model resolved), so equal configs train the same runs.
      const auto seen = std::find_if(config_desc.begin(), config_desc.end(),
                                     [&](const auto& earlier) { return earlier.first == c; });
      if (seen != config_desc.end()) {
        plan.skipped.push_back({desc, fmt::format("the same runs as {}", seen->second)});
      } else if (const auto same_id = point_desc.find(point); same_id != point_desc.end()) {
        plan.skipped.push_back({desc, fmt::format("its run ids would be those of {} ({})", same_id->second, point)});
      } else {
        point_desc.emplace(point, desc.empty() ? point : desc);
        config_desc.emplace_back(c, fmt::format("{} ({})", desc.empty() ? point : desc, point));
        std::vector<nlohmann::json> values{m.n_heads, m.d_k, m.n_kv_heads};
        for (const SweepAxis& a : spec.axes) {
          if (a.flag == "--sweep") values.push_back(config_value(c, a.section, a.key));
        }
        for (std::uint64_t seed : spec.seeds) {
          PlannedRun run{.id = fmt::format("{}-s{}", point, seed), .point = point, .seed = seed, .values = values,
                         .config = c};
          run.config.optim.seed = seed;
          plan.runs.push_back(std::move(run));
        }
      }
    }
    // Next point: the last axis turns fastest.
    std::size_t i = spec.axes.size();
    while (i > 0 && ++at[i - 1] == spec.axes[i - 1].values.size()) at[--i] = 0;
    if (i == 0) break;
  }
  if (plan.runs.empty()) {
    const SkippedPoint& first = plan.skipped.front();
    if (plan.skipped.size() == 1) {
      throw std::invalid_argument(first.point == "the base config" ? first.reason : fmt::format("{}: {}", first.point, first.reason));
    }
    throw std::invalid_argument(fmt::format("none of the {} points of the grid is valid; the first, {}: {}", plan.skipped.size(), first.point,
                    first.reason));
  }
  return plan;
}

// ---- sweep.json -------------------------------------------------------------------

nlohmann::json to_json(const SweepPlan& plan) {
  nlohmann::json runs = nlohmann::json::array(), skipped = nlohmann::json::array();
  for (const PlannedRun& r : plan.runs) {
    runs.push_back({{"id", r.id}, {"point", r.point}, {"seed", r.seed}, {"values", r.values},
                    {"config", to_json(r.config)}});
  }
  for (const SkippedPoint& s : plan.skipped) skipped.push_back({{"point", s.point}, {"reason", s.reason}});
  return {{"format", kFormat}, {"columns", plan.columns}, {"plot_axes", plan.plot_axes}, {"seeds", plan.seeds},
          {"runs", runs}, {"skipped", skipped}};
}

SweepPlan sweep_plan_from_json(const nlohmann::json& j, const std::string& source) {
  try {
    if (!j.is_object() || j.value("format", "") != kFormat) {
      throw std::invalid_argument(fmt::format("{}: not a sweep definition written by headroom ablate (format '{}')", source, kFormat));
    }
    SweepPlan plan;
    plan.columns = j.at("columns").get<std::vector<std::string>>();
    plan.plot_axes = j.at("plot_axes").get<std::vector<std::string>>();
    plan.seeds = j.at("seeds").get<std::vector<std::uint64_t>>();
    for (const auto& r : j.at("runs")) {
      PlannedRun run{.id = r.at("id").get<std::string>(),
                     .point = r.at("point").get<std::string>(),
                     .seed = r.at("seed").get<std::uint64_t>(),
                     .values = r.at("values").get<std::vector<nlohmann::json>>(),
                     .config = {}};
      if (run.values.size() != plan.columns.size()) throw std::invalid_argument(fmt::format("{}: run {} has the wrong number of values", source, run.id));
      update_from_json(run.config, r.at("config"), source);
      plan.runs.push_back(std::move(run));
    }
    for (const auto& s : j.at("skipped")) {
      plan.skipped.push_back({s.at("point").get<std::string>(), s.at("reason").get<std::string>()});
    }
    return plan;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format("{}: malformed sweep definition: {}", source, e.what()));
  }
}

SweepPlan read_sweep_plan(const fs::path& dir) {
  const fs::path file = dir / "sweep.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) throw std::invalid_argument(fmt::format("{} is not a headroom ablate directory (it has no sweep.json)", dir.string()));
  return sweep_plan_from_json(read_json_file(file), file.string());
}

void check_sweep_dir(const fs::path& dir, const SweepPlan& plan) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  if (!fs::is_directory(dir, ec)) throw std::invalid_argument(fmt::format("--out {} exists and is not a directory", dir.string()));
  const fs::path file = dir / "sweep.json";
  if (!fs::exists(file, ec)) {
    if (only_kept_entries(dir)) return;  // empty, or a lock left by a process that died before writing sweep.json
    // write_sweep_json puts sweep.json in place before anything else, so entries seen
    // without it are a foreign directory's, unless another process started the same
    // sweep between the two looks: then sweep.json is there now, and is compared below.
    if (!fs::exists(file, ec)) {
      throw std::invalid_argument(fmt::format("--out {} is not empty and holds no sweep.json: give a new or empty directory", dir.string()));
    }
  }
  const nlohmann::json stored = definition(read_json_file(file));
  const nlohmann::json wanted = definition(to_json(plan));
  if (relate(stored, wanted) == Relation::different) {
    throw std::invalid_argument(fmt::format("{} holds a different sweep ({}); give another --out, or the flags that made it",
                    dir.string(), first_difference(stored, wanted)));
  }
}


void write_sweep_json(const fs::path& dir, const SweepPlan& plan) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::invalid_argument(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  // Under the lock, and sweep.json before runs/, so that a process checking DIR at the
  // same moment (check_sweep_dir, unlocked) sees an empty DIR or a whole sweep.json.
  const RunDirLock lock = lock_sweep_dir(dir);
  remove_stale_temporaries(dir, true);  // nobody else writes here now: what is left is stale
  if (fs::exists(dir / "sweep.json", ec)) {
    check_sweep_dir(dir, plan);  // another process may have written it since the caller's check
    // More seeds than DIR's: sweep.json becomes the longer sweep. Fewer: it stays.
    const nlohmann::json wanted = to_json(plan);
    if (relate(definition(read_json_file(dir / "sweep.json")), definition(wanted)) == Relation::wanted_extends) {
      write_file_atomically(dir / "sweep.json", wanted.dump(2) + "\n");
    }
  } else {
    write_file_atomically(dir / "sweep.json", to_json(plan).dump(2) + "\n");
  }
  fs::create_directories(dir / "runs", ec);
  if (ec) throw std::invalid_argument(fmt::format("cannot create {}: {}", (dir / "runs").string(), ec.message()));
}

RunDirLock lock_sweep_dir(const fs::path& dir) { return RunDirLock::wait(dir); }

bool run_finished(const fs::path& run_dir) {
  std::error_code ec;
  return fs::exists(run_dir / "result.json", ec);
}

// ---- merging shards ---------------------------------------------------------------

namespace {

// DIR/runs/<id> from one sweep directory into another, hard-linked where the file
// system allows and copied otherwise, all but its lock file, under a temporary name
// renamed into place. The caller holds the target's lock when there is a target: it
// is renamed aside, not removed, while the lock is held (on NFS a directory with an
// open file in it cannot be removed), and removed by the caller after releasing it.
fs::path bring_run(const fs::path& from, const fs::path& to) {
  const std::string name = to.filename().string();
  const fs::path tmp = to.parent_path() / fmt::format(".{}.merging-{}", name, ::getpid());
  const fs::path aside = to.parent_path() / fmt::format(".{}.replaced-{}", name, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const fs::directory_entry& e : fs::directory_iterator(from)) {
    if (e.path().filename() == kLockFile) continue;
    const fs::path dest = tmp / e.path().filename();
    std::error_code ec;
    fs::copy(e.path(), dest, fs::copy_options::recursive | fs::copy_options::create_hard_links, ec);
    if (ec) {
      fs::remove_all(dest);
      fs::copy(e.path(), dest, fs::copy_options::recursive);
    }
  }
  std::error_code ec;
  const bool had_target = fs::exists(to, ec);
  if (had_target) {
    fs::remove_all(aside);
    fs::rename(to, aside);
  }
  fs::rename(tmp, to);
  return had_target ? aside : fs::path();
}

}  // namespace

MergeOutcome merge_sweeps(const std::vector<fs::path>& from, const fs::path& into) {
  if (from.empty()) throw std::invalid_argument("--merge needs at least one directory");
  const SweepPlan plan = read_sweep_plan(from.front());
  const nlohmann::json wanted = definition(to_json(plan));
  for (std::size_t i = 1; i < from.size(); ++i) {
    const nlohmann::json other = definition(to_json(read_sweep_plan(from[i])));
    if (other != wanted) {
      throw std::invalid_argument(fmt::format("{} and {} hold different sweeps ({}); only shards of one sweep merge",
                      from.front().string(), from[i].string(), first_difference(wanted, other)));
    }
  }
  check_sweep_dir(into, plan);
  write_sweep_json(into, plan);
  const RunDirLock lock = lock_sweep_dir(into);
  MergeOutcome outcome;
  std::error_code ec;
  for (const PlannedRun& run : plan.runs) {
    const fs::path target = into / "runs" / run.id;
    if (run_finished(target)) {
      ++outcome.present;
      continue;
    }
    // A run being trained in `into` stays its process's; any other is swapped for the
    // finished copy while this holds its lock, so no process starts on it meanwhile.
    RunDirLock run_lock = fs::is_directory(target, ec) ? RunDirLock::try_acquire(target) : RunDirLock();
    if (fs::is_directory(target, ec) && !run_lock.held()) {
      outcome.missing.push_back(run.id);
      continue;
    }
    bool found = false;
    for (const fs::path& dir : from) {
      const fs::path source = dir / "runs" / run.id;
      if (fs::equivalent(dir, into, ec) || !run_finished(source)) continue;
      try {
        const fs::path aside = bring_run(source, target);
        { const RunDirLock released = std::move(run_lock); }  // let go before the old directory goes
        if (!aside.empty()) fs::remove_all(aside);
      } catch (const fs::filesystem_error& e) {
        throw std::invalid_argument(fmt::format("cannot copy {} to {}: {}", source.string(), target.string(), e.code().message()));
      }
      ++outcome.copied;
      found = true;
      break;
    }
    if (!found) outcome.missing.push_back(run.id);
  }
  return outcome;
}

}  // namespace headroom