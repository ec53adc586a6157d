#include "cli/train_flags.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/validators.hpp"
#include "nn/config_fields.hpp"
#include "nn/config_json.hpp"
#include "nn/strict_json.hpp"
#include "train/config_fields.hpp"

namespace headroom::cli {
namespace {

const CLI::Validator* validator(FlagCheck check) {
  switch (check) {
    case FlagCheck::none: return nullptr;
    case FlagCheck::whole_number: return &kWholeNumber;
    case FlagCheck::positive_whole_number: return &kPositiveWholeNumber;
    case FlagCheck::positive: return &kPositive;
    case FlagCheck::non_negative: return &kNonNegative;
  }
  return nullptr;
}

// A default as the help shows it: numbers and text as fmt writes them, enums by name.
template <typename V>
auto shown(const V& v) {
  if constexpr (std::is_enum_v<V>) {
    return to_string(v);
  } else if constexpr (std::is_same_v<V, std::optional<double>>) {
    return v ? fmt::format("{}", *v) : std::string("auto");
  } else {
    return v;
  }
}

// What CLI11 reads a field's flag text as: an enum's name as text, an optional's value.
template <typename V>
struct FlagValue {
  using type = V;
};
template <typename V>
struct FlagValue<std::optional<V>> {
  using type = V;
};

// Registers the flag of each field of one section (a member of TrainConfig) that has
// one, except those in `skip`. The flags record setters in flags.given.
template <typename Section, typename ForEachField>
void add_section_flags(CLI::Option_group& group, TrainFlags& flags, Section TrainConfig::*section,
                       const char* section_key, ForEachField for_each, const std::vector<std::string>& skip) {
  const TrainConfig defaults;
  TrainFlags* f = &flags;
  for_each([&](const auto& field) {
    if (!field.flag || std::find(skip.begin(), skip.end(), field.key) != skip.end()) return;
    using V = std::remove_cvref_t<decltype(defaults.*section.*field.member)>;
    const auto member = field.member;
    const std::string key = fmt::format("{}.{}", section_key, field.key);
    const std::string name = flag_name(field.key, *field.flag);
    const V dflt = defaults.*section.*field.member;
    const std::string help = fmt::format(fmt::runtime(field.flag->help), shown(dflt));
    if constexpr (std::is_same_v<V, bool>) {
      // A switch: it sets the opposite of the default (--no-bias, --tie-embeddings).
      group.add_flag_callback(
          name, [f, key, section, member, on = !dflt] { f->given[key] = [=](TrainConfig& c) { c.*section.*member = on; }; },
          help);
      return;
    }
    using Read = std::conditional_t<std::is_enum_v<V>, std::string, typename FlagValue<V>::type>;
    const auto parse = field.parse;
    CLI::Option* option = group.add_option_function<Read>(
        name,
        [f, key, section, member, parse](const Read& value) {
          f->given[key] = [=](TrainConfig& c) {
            if constexpr (std::is_enum_v<V>) {
              c.*section.*member = parse(value);
            } else {
              c.*section.*member = value;
            }
          };
        },
        help);
    if (const CLI::Validator* check = validator(field.flag->check)) option->check(*check);
  });
}

}  // namespace

TrainConfig build_config(const TrainFlags& f, const std::string& config_file) {
  // A regular file of at most 1 MiB, strict JSON (nn/strict_json.hpp).
  const nlohmann::json object = config_file.empty() ? nlohmann::json() : read_strict_json_file(config_file);
  // Precedence, lowest first: the task's defaults, the config file, the flags.
  std::string task = TrainConfig{}.data.task;
  if (object.is_object() && object.contains("data") && object["data"].is_object() &&
      object["data"].contains("task") && object["data"]["task"].is_string()) {
    task = object["data"]["task"].get<std::string>();
  }
  if (const auto given = f.given.find("data.task"); given != f.given.end()) {
    TrainConfig probe;
    given->second(probe);
    task = probe.data.task;
  }
  TrainConfig c = task_defaults(task);
  if (!config_file.empty()) update_from_json(c, object, config_file);
  for (const auto& [key, set] : f.given) set(c);
  return c;
}

TrainFlagGroups add_train_flags(CLI::App& app, TrainFlags& flags, TrainFlagSet set) {
  // ablate sweeps these (and --seeds) with flags of its own.
  const std::vector<std::string> skip =
      set == TrainFlagSet::ablate ? std::vector<std::string>{"n_heads", "d_k", "n_kv_heads", "seed"}
                                  : std::vector<std::string>{};
  CLI::Option_group* model = app.add_option_group("Model");
  add_section_flags(*model, flags, &TrainConfig::model, "model", [](auto visit) { for_each_model_field(visit); },
                    skip);
  CLI::Option_group* data = app.add_option_group("Data");
  add_section_flags(*data, flags, &TrainConfig::data, "data", [](auto visit) { for_each_data_field(visit); }, skip);
  CLI::Option_group* opt = app.add_option_group("Training");
  add_section_flags(*opt, flags, &TrainConfig::optim, "train", [](auto visit) { for_each_optim_field(visit); }, skip);
  return {.model = model, .data = data, .training = opt};
}

}  // namespace headroom::cli
