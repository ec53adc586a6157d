// One row of a config field table: how a field of ModelConfig (nn/config_fields.hpp),
// DataConfig or OptimConfig (train/config_fields.hpp) is spelled in config.json and
// on the command line. Each table is the one place a field is named: the JSON writer
// and the strict reader, the unknown-key message and the train flags with their help
// are generated from it. Defaults stay where the struct declares them.
#pragma once

#include <optional>
#include <string>
#include <type_traits>

namespace headroom {

// How a flag's text is checked before it is read (cli/validators.hpp has one
// validator for each). Values that depend on other fields are checked later, by
// ModelConfig::resolved() and TrainConfig::validate().
// whole_number_list is the flag of a list field (std::vector<std::size_t>): whole
// numbers separated by commas, "1,2,3"; config.json holds it as an array [1, 2, 3].
enum class FlagCheck {
  none,
  whole_number,
  positive_whole_number,
  positive,
  non_negative,
  finite_non_negative,
  fraction,  // a number in [0, 1): a probability that must leave something
  whole_number_list
};

struct Flag {
  // "--heads"; empty: "--" and the key with '_' written '-' (d_model: --d-model).
  std::string name = {};
  // The --help text; a "{}" in it shows the field's default.
  std::string help = {};
  FlagCheck check = FlagCheck::none;
};

// A field `member` of Config under the config.json key `key`, with its flag (none:
// the field is set only through config.json). A bool field's flag is a switch that
// sets the opposite of the default (bias: --no-bias). An enum field carries the
// parser of its names; to_string(V) writes them.
template <typename Config, typename V>
struct Field {
  const char* key = nullptr;
  V Config::*member = nullptr;
  std::optional<Flag> flag = std::nullopt;
  V (*parse)(const std::string&) = nullptr;  // enums only
};

template <typename Config, typename V>
Field<Config, V> field(const char* key, V Config::*member, std::optional<Flag> flag = std::nullopt) {
  static_assert(!std::is_enum_v<V>, "an enum field needs its parser: use choice()");
  return {key, member, std::move(flag), nullptr};
}

template <typename Config, typename V>
Field<Config, V> choice(const char* key, V Config::*member, V (*parse)(const std::string&),
                        std::optional<Flag> flag = std::nullopt) {
  static_assert(std::is_enum_v<V>);
  return {key, member, std::move(flag), parse};
}

// The flag's spelling: its own, or the key's.
inline std::string flag_name(const char* key, const Flag& flag) {
  if (!flag.name.empty()) return flag.name;
  std::string name = std::string("--") + key;
  for (char& c : name) c = c == '_' ? '-' : c;
  return name;
}

}  // namespace headroom
