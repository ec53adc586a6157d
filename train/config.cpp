#include "train/config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

#include "data/task_defaults.hpp"
#include "nn/config_json.hpp"
#include "train/config_fields.hpp"
#include "train/optim_setup.hpp"

namespace headroom {
namespace {

// Reads one field's value, with the section and key in the message.
template <typename V>
V read(const nlohmann::json& v, const std::string& section, const std::string& key, const std::string& source,
       V (*parse)(const std::string&) = nullptr) {
  const std::string where = fmt::format("{}: '{}.{}'", source, section, key);
  if constexpr (std::is_enum_v<V>) {
    const std::string name = read<std::string>(v, section, key, source);
    try {
      return parse(name);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", where, e.what()));
    }
  } else if constexpr (std::is_same_v<V, int>) {
    const std::size_t n = read<std::size_t>(v, section, key, source);
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw std::invalid_argument(fmt::format("{} is too large, got {}", where, v.dump()));
    }
    return static_cast<int>(n);
  } else if constexpr (std::is_same_v<V, std::vector<std::size_t>>) {
    if (!v.is_array()) throw std::invalid_argument(fmt::format("{} must be an array of whole numbers, got {}", where, v.dump()));
    V out;
    for (const nlohmann::json& item : v) {
      if (!item.is_number_integer() || item.get<long long>() < 0) {
        throw std::invalid_argument(fmt::format("{} must be an array of whole numbers, got {}", where, v.dump()));
      }
      out.push_back(item.get<std::size_t>());
    }
    return out;
  } else {
    if constexpr (std::is_same_v<V, bool>) {
      if (!v.is_boolean()) throw std::invalid_argument(fmt::format("{} must be true or false, got {}", where, v.dump()));
    } else if constexpr (std::is_same_v<V, std::string>) {
      if (!v.is_string()) throw std::invalid_argument(fmt::format("{} must be a string, got {}", where, v.dump()));
    } else if constexpr (std::is_integral_v<V>) {
      if (!v.is_number_integer() || v.get<long long>() < 0) {
        throw std::invalid_argument(fmt::format("{} must be a non-negative integer, got {}", where, v.dump()));
      }
    } else {
      if (!v.is_number()) throw std::invalid_argument(fmt::format("{} must be a number, got {}", where, v.dump()));
    }
    return v.get<V>();
  }
}

template <typename V>
nlohmann::json json_value(const V& v) {
  if constexpr (std::is_enum_v<V>) {
    return to_string(v);
  } else {
    return v;
  }
}

// A section's fields as a JSON object.
template <typename Config, typename ForEachField>
nlohmann::json section_json(const Config& c, ForEachField for_each) {
  nlohmann::json j = nlohmann::json::object();
  for_each([&](const auto& f) { j[f.key] = json_value(c.*f.member); });
  return j;
}

// Reads `body` into a section's fields; an unknown key lists the section's keys.
template <typename Config, typename ForEachField>
void read_section(Config& c, const nlohmann::json& body, const std::string& section, const std::string& source,
                  ForEachField for_each) {
  if (!body.is_object()) throw std::invalid_argument(fmt::format("{}: '{}' must be a JSON object", source, section));
  for (const auto& item : body.items()) {
    // Named references, not structured bindings: the lambda captures them (clang 14).
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    bool known = false;
    std::string keys;
    for_each([&](const auto& f) {
      keys += (keys.empty() ? "" : ", ") + std::string(f.key);
      if (known || key != f.key) return;
      known = true;
      c.*f.member = read(v, section, key, source, f.parse);
    });
    if (!known) throw std::invalid_argument(fmt::format("{}: unknown key '{}.{}' (keys: {})", source, section, key, keys));
  }
}

const auto kDataFields = [](auto visit) { for_each_data_field(visit); };
const auto kOptimFields = [](auto visit) { for_each_optim_field(visit); };

}  // namespace

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "adamw") return OptimizerKind::adamw;
  if (name == "adam") return OptimizerKind::adam;
  if (name == "sgd") return OptimizerKind::sgd;
  throw std::invalid_argument(fmt::format("optimizer must be adamw, adam or sgd; got '{}'", name));
}

std::string to_string(OptimizerKind optimizer) {
  switch (optimizer) {
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::sgd: return "sgd";
  }
  return "adamw";  // unreachable; keeps -Wreturn-type quiet
}

namespace {

// One source of text at most, a registered corpus, and a held-out file only for a
// text file (a corpus and a labelled file split their items by hash).
void check_text_source(const DataConfig& d) {
  std::vector<std::string> set;
  for (const char* key : kTextSourceKeys) {
    const std::string& value = d.*text_source_member(key);
    if (!value.empty()) set.push_back(fmt::format("data.{} {}", key, value));
  }
  if (set.size() > 1) throw std::invalid_argument(fmt::format("{} and {}: give one source of text", set[0], set[1]));
  if (!d.corpus.empty()) (void)find_corpus(d.corpus);
  if (!d.val_text.empty() && d.text.empty()) {
    throw std::invalid_argument(fmt::format(
        "data.val_text {}: a held-out file goes with data.text ({})", d.val_text,
        reads_text(d) ? data_source(d) + " splits its items by a hash of their text" : "a task has no text"));
  }
}

}  // namespace

void TrainConfig::validate() const {
  const auto& d = data;
  const auto& o = optim;
  if (d.seq_len == 0) throw std::invalid_argument("seq_len must be positive, got 0");
  if (model.max_len != 0 && d.seq_len > model.max_len) {
    throw std::invalid_argument(fmt::format("seq_len {} is longer than the model's max_len {}", d.seq_len, model.max_len));
  }
  if (o.steps == 0) throw std::invalid_argument("steps must be positive, got 0");
  if (o.batch == 0) throw std::invalid_argument("batch must be positive, got 0");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) throw std::invalid_argument(fmt::format("lr must be a positive number, got {}", o.lr));
  if (!(o.clip >= 0) || !std::isfinite(o.clip)) throw std::invalid_argument(fmt::format("clip must be >= 0 (0 is off), got {}", o.clip));
  if (!(o.weight_decay >= 0)) throw std::invalid_argument(fmt::format("weight_decay must be >= 0, got {}", o.weight_decay));
  if (!(o.beta1 >= 0 && o.beta1 < 1)) throw std::invalid_argument(fmt::format("beta1 must be in [0, 1), got {}", o.beta1));
  if (!(o.beta2 >= 0 && o.beta2 < 1)) throw std::invalid_argument(fmt::format("beta2 must be in [0, 1), got {}", o.beta2));
  if (o.threads < 1 || o.threads > kMaxThreads) {
    throw std::invalid_argument(fmt::format("threads must be from 1 to {}, got {}", kMaxThreads, o.threads));
  }
  if (o.eval_every == 0) throw std::invalid_argument("eval_every must be positive, got 0");
  if (o.eval_batches == 0) throw std::invalid_argument("eval_batches must be positive, got 0");
  if (!(o.min_delta >= 0) || !std::isfinite(o.min_delta)) {
    throw std::invalid_argument(fmt::format("min_delta must be a finite number >= 0, got {}", o.min_delta));
  }
  if (o.keep_checkpoints == 0) throw std::invalid_argument("keep_checkpoints must be positive, got 0");
  if (o.max_bad_steps == 0) throw std::invalid_argument("max_bad_steps must be positive, got 0");
  check_text_source(d);
  if (const std::vector<std::string> unread = unread_data_keys(d); !unread.empty()) {
    const nlohmann::json value = section_json(d, kDataFields)[unread.front()];
    throw std::invalid_argument(fmt::format("data.{} {}: {} does not read it (only {} do), so it would be ignored", unread.front(),
                    value.dump(), reads_text(d) ? fmt::format("a {} run", text_source_key(d)) : "task " + d.task,
                    tasks_reading(unread.front())));
  }
  if (o.schedule == LrScheduleKind::warmup_cosine && o.warmup > o.steps) {
    throw std::invalid_argument(fmt::format("warmup {} is longer than steps {}", o.warmup, o.steps));
  }
  check_optimizer_settings(o);
}

TaskOptions task_options(const DataConfig& d) {
  return TaskOptions{.vocab = d.vocab,
                     .seq_len = d.seq_len,
                     .lags = d.lags,
                     .context = d.context,
                     .lag_beta = d.lag_beta,
                     .task_seed = d.task_seed};
}

std::string DataConfig::*text_source_member(std::string_view key) {
  if (key == "text") return &DataConfig::text;
  if (key == "corpus") return &DataConfig::corpus;
  if (key == "labelled") return &DataConfig::labelled;
  throw std::invalid_argument(fmt::format("'{}' is not a source of text (text, corpus, labelled)", key));
}

bool reads_text(const DataConfig& d) { return !d.text.empty() || !d.corpus.empty() || !d.labelled.empty(); }

std::string text_source_key(const DataConfig& d) {
  for (const char* key : kTextSourceKeys) {
    if (!(d.*text_source_member(key)).empty()) return key;
  }
  return "";
}

bool is_classifier(const DataConfig& d) {
  return !d.labelled.empty() || (!d.corpus.empty() && find_corpus(d.corpus).kind == CorpusKind::labelled);
}

bool is_char_model(const DataConfig& d) { return reads_text(d) && !is_classifier(d); }

std::string data_source(const DataConfig& d) {
  if (!d.text.empty()) return "text " + d.text;
  if (!d.corpus.empty()) return "corpus " + d.corpus;
  if (!d.labelled.empty()) return "labelled " + d.labelled;
  return "task " + d.task;
}

std::vector<std::string> unread_data_keys(const DataConfig& d) {
  const DataConfig defaults;
  const std::vector<std::string> reads = reads_text(d) ? std::vector<std::string>{} : task_option_keys(d.task);
  std::vector<std::string> out;
  for_each_data_field([&](const auto& f) {
    const std::string key = f.key;
    if (key == "task" || key == "seq_len" || key == "vocab" || key == "val_text") return;
    if (std::find(std::begin(kTextSourceKeys), std::end(kTextSourceKeys), key) != std::end(kTextSourceKeys)) return;
    if (std::find(reads.begin(), reads.end(), key) != reads.end()) return;
    if (!(d.*f.member == defaults.*f.member)) out.push_back(key);
  });
  return out;
}

std::string tasks_reading(const std::string& key) {
  std::vector<std::string> names;
  for (const std::string& t : task_names()) {
    const std::vector<std::string> keys = task_option_keys(t);
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) names.push_back(t);
  }
  if (names.empty()) return "no task";
  const std::string last = names.back();
  names.pop_back();
  return names.empty() ? last : fmt::format("{} and {}", fmt::join(names, ", "), last);
}

namespace {

void apply_settings(const TaskSettings& s, TrainConfig& c) {
  if (s.seq_len) c.data.seq_len = *s.seq_len;
  if (s.vocab) c.data.vocab = *s.vocab;
  if (s.batch) c.optim.batch = *s.batch;
  if (s.lr) c.optim.lr = *s.lr;
  if (s.constant_lr) c.optim.schedule = LrScheduleKind::constant;
  if (s.weight_decay) c.optim.weight_decay = *s.weight_decay;
  if (s.steps) c.optim.steps = *s.steps;
  if (s.eval_every) c.optim.eval_every = *s.eval_every;
}

}  // namespace

TrainConfig task_defaults(const std::string& task) {
  TrainConfig c;
  c.data.task = task;
  apply_settings(task_settings(task), c);
  return c;
}

TrainConfig text_defaults(const DataConfig& source) {
  TrainConfig c;
  apply_settings(text_settings(source.corpus, !source.labelled.empty()), c);
  return c;
}

double default_lr(const ModelConfig& model) {
  return model.norm == NormPlacement::none ? kNoNormLr : OptimConfig{}.lr;
}

std::size_t default_warmup(std::size_t steps) { return std::min<std::size_t>(100, steps / 10); }

nlohmann::json to_json(const TrainConfig& c) {
  return nlohmann::json{{"model", headroom::to_json(c.model)},
                        {"data", section_json(c.data, kDataFields)},
                        {"train", section_json(c.optim, kOptimFields)}};
}

nlohmann::json data_json(const DataConfig& d) { return section_json(d, kDataFields); }

void update_from_json(TrainConfig& c, const nlohmann::json& object, const std::string& source) {
  if (!object.is_object()) throw std::invalid_argument(fmt::format("{}: expected a JSON object with model, data and train", source));
  for (const auto& [section, body] : object.items()) {
    if (section == "model") {
      headroom::update_from_json(c.model, body, source);
    } else if (section == "data") {
      read_section(c.data, body, section, source, kDataFields);
    } else if (section == "train") {
      read_section(c.optim, body, section, source, kOptimFields);
    } else {
      throw std::invalid_argument(fmt::format("{}: unknown section '{}' (sections: model, data, train)", source, section));
    }
  }
}

}  // namespace headroom
