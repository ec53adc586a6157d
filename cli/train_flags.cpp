#include "cli/train_flags.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/validators.hpp"
#include "data/task_defaults.hpp"
#include "nn/config_fields.hpp"
#include "nn/config_json.hpp"
#include "nn/convert.hpp"
#include "nn/strict_json.hpp"
#include "train/config_fields.hpp"
#include "train/init_from.hpp"

namespace headroom::cli {
namespace {

const CLI::Validator* validator(FlagCheck check) {
  switch (check) {
    case FlagCheck::none: return nullptr;
    case FlagCheck::whole_number: return &kWholeNumber;
    case FlagCheck::positive_whole_number: return &kPositiveWholeNumber;
    case FlagCheck::positive: return &kPositive;
    case FlagCheck::non_negative: return &kNonNegative;
    case FlagCheck::finite_non_negative: return &kFiniteNonNegative;
    case FlagCheck::fraction: return &kFraction;
    case FlagCheck::whole_number_list: return &kWholeNumberList;
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
  } else if constexpr (std::is_same_v<V, std::vector<std::size_t>>) {
    return fmt::format("{}", fmt::join(v, ","));
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
// A list is read as its text, "1,2,3" (checked by kWholeNumberList), and split by the setter.
template <>
struct FlagValue<std::vector<std::size_t>> {
  using type = std::string;
};

std::vector<std::size_t> whole_number_list(const std::string& text) {
  std::vector<std::size_t> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    out.push_back(std::stoull(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

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
            } else if constexpr (std::is_same_v<V, std::vector<std::size_t>>) {
              c.*section.*member = whole_number_list(value);
            } else {
              c.*section.*member = value;
            }
          };
        },
        help);
    if (const CLI::Validator* check = validator(field.flag->check)) option->check(*check);
  });
}

bool given(const TrainFlags& f, const std::string& key) { return f.given.find(key) != f.given.end(); }

// The data keys as the flags set them (the defaults where no flag is given).
DataConfig flag_data(const TrainFlags& f) {
  TrainConfig probe;
  for (const char* key : {"data.task", "data.text", "data.corpus", "data.labelled", "data.vocab"}) {
    if (const auto it = f.given.find(key); it != f.given.end()) it->second(probe);
  }
  return probe.data;
}

// <section>.<key> of a --config file, when it is there.
const nlohmann::json* file_key(const nlohmann::json& object, const char* section, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto body = object.find(section);
  if (body == object.end() || !body->is_object()) return nullptr;
  const auto value = body->find(key);
  return value == body->end() ? nullptr : &*value;
}
const nlohmann::json* file_data_key(const nlohmann::json& object, const char* key) {
  return file_key(object, "data", key);
}

// A text run (--text, --corpus or --labelled) has no task and takes its vocabulary
// from the text, so --task and --vocab next to one would be ignored: we refuse them,
// from the flags and from the file alike, and two sources at once. Flags override the
// file, so a flag that picks the data (a source or --task) replaces the file's choice
// and the keys that go with it; see "Text or task" in docs/cli/train.md. Returns
// whether the run trains on a text.
bool check_data_source(const TrainFlags& f, const nlohmann::json& object, const std::string& config_file) {
  const DataConfig flags = flag_data(f);
  std::vector<std::string> given_sources, given_flags;
  for (const char* key : kTextSourceKeys) {
    if (given(f, fmt::format("data.{}", key)) && !(flags.*text_source_member(key)).empty()) {
      given_sources.push_back(fmt::format("--{} {}", key, flags.*text_source_member(key)));
      given_flags.push_back(fmt::format("--{}", key));
    }
  }
  if (given_sources.size() > 1) {
    throw std::invalid_argument(fmt::format("{} and {}: give one source of text", given_sources[0], given_sources[1]));
  }
  if (!given_sources.empty()) {
    if (given(f, "data.task")) {
      throw std::invalid_argument(fmt::format("--task {}: a {} run has no task ({}); give one or the other",
                                              flags.task, given_flags[0], given_sources[0]));
    }
    if (given(f, "data.vocab")) {
      throw std::invalid_argument(fmt::format("--vocab {}: a {} run takes its vocabulary from the text ({})",
                                              flags.vocab, given_flags[0], given_sources[0]));
    }
    return true;  // over the file's data.task and data.vocab and its other sources
  }
  for (const char* key : kTextSourceKeys) {
    if (given(f, fmt::format("data.{}", key))) return false;  // an empty source given: the file's task
  }
  if (given(f, "data.task")) return false;  // over the file's text
  std::string file_source;
  for (const char* key : kTextSourceKeys) {
    const nlohmann::json* value = file_data_key(object, key);
    if (value != nullptr && value->is_string() && !value->get<std::string>().empty()) {
      file_source = fmt::format("'data.{}' {}", key, value->get<std::string>());
      break;
    }
  }
  if (file_source.empty()) return false;
  if (given(f, "data.vocab")) {
    throw std::invalid_argument(fmt::format(
        "--vocab {}: {} sets {}, and a text run takes its vocabulary from the text (add --task to train on a task "
        "instead)",
        flags.vocab, config_file, file_source));
  }
  // What headroom itself writes for a text run is the defaults: those say nothing.
  const DataConfig defaults;
  const nlohmann::json* task = file_data_key(object, "task");
  if (task != nullptr && task->is_string() && task->get<std::string>() != defaults.task) {
    throw std::invalid_argument(fmt::format("{}: 'data.task' {} next to {}: a text run has no task; remove one of them",
                                            config_file, task->get<std::string>(), file_source));
  }
  const nlohmann::json* vocab = file_data_key(object, "vocab");
  if (vocab != nullptr && vocab->is_number_integer() && vocab->get<long long>() != static_cast<long long>(defaults.vocab)) {
    throw std::invalid_argument(fmt::format(
        "{}: 'data.vocab' {} next to {}: a text run takes its vocabulary from the text; remove 'data.vocab'",
        config_file, vocab->dump(), file_source));
  }
  return true;
}

// --init-from DIR given as a flag: the model is DIR's (train/init_from.hpp). A model
// flag that disagrees with it is refused, naming the flag and both values, except
// --kv-heads, which mean-pools, and --dropout, which holds no weights; so are --preset
// and a --config file's model keys, which would be ignored.
void apply_init_from(const TrainFlags& f, const nlohmann::json& object, const std::string& config_file,
                     TrainConfig& c) {
  if (!f.preset.empty()) {
    throw std::invalid_argument(fmt::format("--preset {}: with --init-from {} the model is that run's; leave it out",
                                            f.preset, c.optim.init_from));
  }
  if (file_key(object, "model", "d_model") != nullptr || (object.is_object() && object.contains("model"))) {
    throw std::invalid_argument(fmt::format(
        "{}: has a 'model' section, but with --init-from {} the model is that run's; remove the section",
        config_file, c.optim.init_from));
  }
  const InitSource source = read_init_source(c.optim.init_from);
  const ModelConfig& from = source.run.config();
  ModelConfig m = from;
  for_each_model_field([&](const auto& field) {
    if (!field.flag) return;
    const auto it = f.given.find(fmt::format("model.{}", field.key));
    if (it == f.given.end()) return;
    TrainConfig probe;
    probe.model = from;
    it->second(probe);
    if (std::string(field.key) == "n_kv_heads") {
      try {
        (void)pooled_kv_config(from, probe.model.n_kv_heads);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("--kv-heads {}: --init-from {}: {}", probe.model.n_kv_heads,
                                                c.optim.init_from, e.what()));
      }
      m.n_kv_heads = probe.model.n_kv_heads;
      return;
    }
    if (std::string(field.key) == "dropout") {
      m.dropout = probe.model.dropout;
      return;
    }
    if (!(probe.model.*field.member == from.*field.member)) {
      throw std::invalid_argument(fmt::format(
          "{} {}: --init-from {} has {} {}; the model is that run's (only --kv-heads, which mean-pools, and "
          "--dropout may differ)",
          flag_name(field.key, *field.flag), shown(probe.model.*field.member), c.optim.init_from, field.key,
          shown(from.*field.member)));
    }
  });
  c.model = m;
  c.optim.init_from_hash = source.hash;
}

}  // namespace

TrainConfig build_config(const TrainFlags& f, const std::string& config_file, OpenDefaults* open) {
  if (open != nullptr) *open = OpenDefaults{};
  const ModelPreset* preset = nullptr;
  if (!f.preset.empty()) {
    try {
      preset = &find_preset(f.preset);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("--preset {}: {}", f.preset, e.what()));
    }
  }
  // A regular file of at most 1 MiB, strict JSON (nn/strict_json.hpp).
  const nlohmann::json object = config_file.empty() ? nlohmann::json() : read_strict_json_file(config_file);
  // Precedence, lowest first: the task's defaults, the preset, the config file, the flags.
  const bool text_run = check_data_source(f, object, config_file);
  bool source_flag = false;
  for (const char* key : kTextSourceKeys) source_flag = source_flag || given(f, fmt::format("data.{}", key));
  const DataConfig defaults;
  std::string task = defaults.task;  // a text run takes the global defaults
  if (const nlohmann::json* file_task = file_data_key(object, "task");
      !text_run && file_task != nullptr && file_task->is_string()) {
    task = file_task->get<std::string>();
  }
  if (given(f, "data.task")) task = flag_data(f).task;
  // A run on real text takes its source's defaults: the flags' source, else the file's.
  DataConfig source = flag_data(f);
  if (text_run && !source_flag) {
    for (const char* key : kTextSourceKeys) {
      const nlohmann::json* value = file_data_key(object, key);
      if (value != nullptr && value->is_string()) source.*text_source_member(key) = value->get<std::string>();
    }
  }
  TrainConfig c = text_run ? text_defaults(source) : task_defaults(task);
  if (preset != nullptr) apply_preset(*preset, c.model);
  if (!config_file.empty()) update_from_json(c, object, config_file);
  for (const auto& [key, set] : f.given) set(c);
  // A preset key the final model would not read drops out, where neither the file nor
  // a flag set it: `--preset llama --attn-only` has no feed-forward to make SwiGLU, and
  // `--norm none` no norm to make RMSNorm (docs/design.md #11 refuses only what the user wrote).
  const auto preset_only = [&](const char* key) {
    return preset != nullptr && !given(f, fmt::format("model.{}", key)) && file_key(object, "model", key) == nullptr;
  };
  const ModelConfig plain_model;
  if (c.model.attn_only && preset_only("ffn")) c.model.ffn = plain_model.ffn;
  if (c.model.norm == NormPlacement::none && preset_only("norm_type")) c.model.norm_type = plain_model.norm_type;
  // The preset's n_kv_heads follows the final n_heads, unless the file or a flag set it.
  if (preset != nullptr && preset->kv_heads != nullptr && preset_only("n_kv_heads")) {
    c.model.n_kv_heads = preset->kv_heads(c.model.n_heads);
    if (open != nullptr) open->kv_heads = preset->kv_heads;
  }
  // A flag that picks the data replaces the file's pick: --task its text, a source its
  // other sources (and a held-out file that went with its text).
  if (given(f, "data.task") && !source_flag) {
    c.data.text.clear();
    c.data.corpus.clear();
    c.data.labelled.clear();
    if (!given(f, "data.val_text")) c.data.val_text.clear();
  }
  if (source_flag) {
    const DataConfig flags = flag_data(f);
    for (const char* key : kTextSourceKeys) {
      if (!given(f, fmt::format("data.{}", key))) {
        (c.data.*text_source_member(key)).clear();
      }
    }
    if (flags.text.empty() && !given(f, "data.val_text")) c.data.val_text.clear();
  }
  if (text_run) {
    // --text over the file's task: config.json says what a text run is made of.
    c.data.task = defaults.task;
    c.data.vocab = defaults.vocab;
  }
  // The task options (data.lags, ...) are read by some tasks only: a flag for one the
  // run's data does not read is refused, and a flag that picks the data replaces the
  // file's values of those the new pick does not read (docs/design.md #11).
  const std::vector<std::string> reads = reads_text(c.data) ? std::vector<std::string>{} : task_option_keys(c.data.task);
  const TrainConfig plain;
  const nlohmann::json data_values = data_json(c.data);
  for_each_data_field([&](const auto& field) {
    const std::string key = field.key;
    if (key == "task" || key == "seq_len" || key == "vocab" || key == "val_text") return;
    if (std::find(std::begin(kTextSourceKeys), std::end(kTextSourceKeys), key) != std::end(kTextSourceKeys)) return;
    if (std::find(reads.begin(), reads.end(), key) != reads.end()) return;
    if (given(f, "data." + key)) {
      const nlohmann::json& v = data_values[key];
      // As the flag was written: 1,2 for a list, 2 for a double 2.
      std::string shown_value = v.is_number_float() ? fmt::format("{}", v.get<double>()) : v.dump();
      if (v.is_array()) {
        shown_value.clear();
        for (const auto& item : v) shown_value += (shown_value.empty() ? "" : ",") + item.dump();
      }
      throw std::invalid_argument(fmt::format(
          "{} {}: {} does not read it (only {} do), so it would be ignored", flag_name(field.key, *field.flag),
          shown_value, reads_text(c.data) ? fmt::format("a --{} run", text_source_key(c.data)) : "--task " + c.data.task,
          tasks_reading(key)));
    }
    if (given(f, "data.task") || source_flag) c.data.*field.member = plain.data.*field.member;
  });
  // Warm-up scales with the run unless given (train/config.hpp, default_warmup).
  if (file_key(object, "train", "warmup") == nullptr && !given(f, "train.warmup")) {
    c.optim.warmup = default_warmup(c.optim.steps);
  }
  if (given(f, "train.init_from")) {
    apply_init_from(f, object, config_file, c);
  } else if (!c.optim.init_from.empty() && c.optim.init_from_hash.empty()) {
    c.optim.init_from_hash = init_from_hash(read_init_source(c.optim.init_from).run.file);
  }
  // The rate follows the final model (--init-from's included) unless given
  // (train/config.hpp, default_lr); a task's own rate counts as given: it was chosen
  // for that task.
  const bool task_lr = !text_run && task_settings(task).lr.has_value();
  if (file_key(object, "train", "lr") == nullptr && !given(f, "train.lr") && !task_lr) {
    c.optim.lr = default_lr(c.model);
    if (open != nullptr) open->lr = true;
  }
  return c;
}

void check_flags_read(const TrainFlags& f, const std::vector<TrainConfig>& runs) {
  struct Conditional {
    const char* key;
    const char* flag;
    bool (*reads)(const OptimConfig&);
    std::string (*value)(const OptimConfig&);
    const char* when;
  };
  const Conditional conditionals[] = {
      {"train.momentum", "--momentum", [](const OptimConfig& o) { return o.optimizer == OptimizerKind::sgd; },
       [](const OptimConfig& o) { return fmt::format("{}", o.momentum); }, "only --optimizer sgd has momentum"},
      {"train.beta1", "--beta1", [](const OptimConfig& o) { return o.optimizer != OptimizerKind::sgd; },
       [](const OptimConfig& o) { return fmt::format("{}", o.beta1); }, "--optimizer sgd has no Adam moments"},
      {"train.beta2", "--beta2", [](const OptimConfig& o) { return o.optimizer != OptimizerKind::sgd; },
       [](const OptimConfig& o) { return fmt::format("{}", o.beta2); }, "--optimizer sgd has no Adam moments"},
      {"train.decay_embeddings", "--decay-embeddings",
       [](const OptimConfig& o) { return o.optimizer == OptimizerKind::adamw; },
       [](const OptimConfig& o) { return std::string(o.decay_embeddings ? "" : "0"); },
       "only --optimizer adamw leaves the embeddings out of its decay"},
      {"train.min_lr", "--min-lr", [](const OptimConfig& o) { return o.schedule == LrScheduleKind::warmup_cosine; },
       [](const OptimConfig& o) { return fmt::format("{}", o.min_lr); }, "only --schedule cosine decays to a floor"},
      {"train.warmup", "--warmup", [](const OptimConfig& o) { return o.schedule != LrScheduleKind::constant; },
       [](const OptimConfig& o) { return fmt::format("{}", o.warmup); }, "--schedule constant has no warm-up"},
  };
  for (const Conditional& c : conditionals) {
    if (!given(f, c.key) || runs.empty()) continue;
    if (std::none_of(runs.begin(), runs.end(), [&](const TrainConfig& r) { return c.reads(r.optim); })) {
      TrainConfig probe;
      f.given.at(c.key)(probe);
      // 0 turns the thing off, which is what these runs do anyway (--warmup 0 --schedule constant).
      if (c.value(probe.optim) == "0") continue;
      const std::string value = c.value(probe.optim);  // empty for a switch
      throw std::invalid_argument(fmt::format("{}{}{}: {}, so it would be ignored; leave it out", c.flag,
                                              value.empty() ? "" : " ", value, c.when));
    }
  }
}

std::string preset_help() {
  std::string out = "A named set of model keys, applied over the task's defaults and under --config and every flag "
                    "(config.json records the keys, not the name):";
  for (const ModelPreset& p : model_presets()) out += fmt::format(" {}: {} ({});", p.name, describe_preset(p), p.summary);
  out.back() = '.';
  return out;
}

TrainFlagGroups add_train_flags(CLI::App& app, TrainFlags& flags, TrainFlagSet set) {
  // ablate sweeps these (and --seeds) with flags of its own.
  std::vector<std::string> skip;
  if (set == TrainFlagSet::ablate) skip = {"n_heads", "d_k", "n_kv_heads", "seed"};
  // A text's vocabulary is read from the text.
  if (set == TrainFlagSet::params) skip = {"text", "val_text", "corpus", "labelled"};
  CLI::Option_group* model = app.add_option_group("Model");
  model->add_option("--preset", flags.preset, preset_help())->type_name("NAME");
  add_section_flags(*model, flags, &TrainConfig::model, "model", [](auto visit) { for_each_model_field(visit); },
                    skip);
  CLI::Option_group* data = app.add_option_group("Data");
  add_section_flags(*data, flags, &TrainConfig::data, "data", [](auto visit) { for_each_data_field(visit); }, skip);
  if (set == TrainFlagSet::params) return {.model = model, .data = data, .training = nullptr};
  CLI::Option_group* opt = app.add_option_group("Training");
  add_section_flags(*opt, flags, &TrainConfig::optim, "train", [](auto visit) { for_each_optim_field(visit); }, skip);
  return {.model = model, .data = data, .training = opt};
}

}  // namespace headroom::cli
