#include "train/run_dir.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/whole_number.hpp"
#include "data/char_dataset.hpp"
#include "data/labelled_dataset.hpp"
#include "data/task.hpp"
#include "data/utf8.hpp"
#include "nn/strict_json.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;

std::string utf8_of(const std::u32string& text) {
  std::string out;
  for (const char32_t cp : text) append_utf8(out, cp);
  return out;
}

std::size_t positive_integer(const nlohmann::json& object, const char* key, const std::string& where) {
  const nlohmann::json& v = object.at(key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0) {
    throw std::invalid_argument(fmt::format("{}: key '{}' must be a positive integer, got {}", where, key, v.dump()));
  }
  return v.get<std::size_t>();
}

std::string string_value(const nlohmann::json& object, const char* key, const std::string& where) {
  const nlohmann::json& v = object.at(key);
  if (!v.is_string()) throw std::invalid_argument(fmt::format("{}: key '{}' must be a string, got {}", where, key, v.dump()));
  return v.get<std::string>();
}

// The step number of a "step-00000500" directory name, or nothing for any other name.
std::optional<std::uint64_t> checkpoint_step(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.size() > kPrefix.size() + 19 || name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  std::uint64_t step = 0;
  for (std::size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  return step;
}

// The newest DIR/checkpoints/step-*/model.safetensors, or nothing.
std::optional<fs::path> newest_checkpoint(const fs::path& dir) {
  std::error_code ec;
  const fs::path checkpoints = dir / "checkpoints";
  if (!fs::is_directory(checkpoints, ec)) return std::nullopt;
  std::optional<fs::path> newest;
  std::uint64_t newest_step = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(checkpoints, ec)) {
    const std::optional<std::uint64_t> step = checkpoint_step(entry.path().filename().string());
    const fs::path file = entry.path() / "model.safetensors";
    if (!step || !fs::is_regular_file(file, ec)) continue;
    if (!newest || *step > newest_step) {
      newest = file;
      newest_step = *step;
    }
  }
  return newest;
}

}  // namespace

std::string data_metadata(const DataConfig& data, const Dataset& dataset) {
  const bool text = reads_text(data);
  nlohmann::json j{{"task", text ? std::string() : data.task},
                   {"text", data.text},
                   {"seq_len", dataset.seq_len()},
                   {"vocab", dataset.vocab_size()}};
  if (!data.val_text.empty()) j["val_text"] = data.val_text;
  if (!data.corpus.empty()) j["corpus"] = data.corpus;
  if (!data.labelled.empty()) j["labelled"] = data.labelled;
  if (const auto* chars = dynamic_cast<const CharDataset*>(&dataset)) j["alphabet"] = utf8_of(chars->alphabet());
  if (const auto* items = dynamic_cast<const LabelledDataset*>(&dataset)) {
    j["alphabet"] = utf8_of(items->vocab().alphabet());
    j["labels"] = items->labels();
  }
  if (!text && !task_option_keys(data.task).empty()) {
    j["lags"] = data.lags;
    j["context"] = data.context;
    j["lag_beta"] = data.lag_beta;
    j["task_seed"] = data.task_seed;
  }
  return j.dump();
}

std::string DataDescription::source_name() const {
  if (!text.empty()) return text;
  if (!corpus.empty()) return "corpus " + corpus;
  if (!labelled.empty()) return "labelled " + labelled;
  return task;
}

namespace {

// The optional string keys: a text's held-out file and the two other sources of text.
void read_text_sources(const nlohmann::json& j, const std::string& where, DataDescription& d) {
  for (const auto& [key, member] : {std::pair{"val_text", &DataDescription::val_text},
                                    std::pair{"corpus", &DataDescription::corpus},
                                    std::pair{"labelled", &DataDescription::labelled}}) {
    if (!j.contains(key)) continue;
    d.*member = string_value(j, key, where);
    if ((d.*member).empty()) throw std::invalid_argument(fmt::format("{}: key '{}' is empty (leave it out)", where, key));
  }
  const int sources = !d.task.empty() + !d.text.empty() + !d.corpus.empty() + !d.labelled.empty();
  if (sources != 1) {
    throw std::invalid_argument(fmt::format(
        "{}: exactly one of keys 'task', 'text', 'corpus' and 'labelled' must be set, got task '{}', text '{}', "
        "corpus '{}' and labelled '{}'",
        where, d.task, d.text, d.corpus, d.labelled));
  }
  if (!d.val_text.empty() && d.text.empty()) {
    throw std::invalid_argument(fmt::format("{}: key 'val_text' goes with key 'text'", where));
  }
}

// A classifier's "labels": distinct non-empty names, sorted (their tokens' order).
void read_labels(const nlohmann::json& j, const std::string& where, DataDescription& d) {
  const nlohmann::json& labels = j.at("labels");
  if (!labels.is_array() || labels.size() < 2 ||
      !std::all_of(labels.begin(), labels.end(), [](const nlohmann::json& v) { return v.is_string() && !v.get<std::string>().empty(); })) {
    throw std::invalid_argument(fmt::format("{}: key 'labels' must be an array of two or more names, got {}", where, labels.dump()));
  }
  d.labels = labels.get<std::vector<std::string>>();
  if (std::adjacent_find(d.labels.begin(), d.labels.end(), std::greater_equal<>()) != d.labels.end()) {
    throw std::invalid_argument(fmt::format("{}: key 'labels' must be sorted without repeats, got {}", where, labels.dump()));
  }
}

}  // namespace

DataDescription parse_data_metadata(const std::string& json, const std::string& source) {
  const std::string where = fmt::format("{}: metadata '{}'", source, kDataMetadataKey);
  nlohmann::json j;
  try {
    j = parse_strict_json(json, where);
  } catch (const JsonSyntaxError& e) {
    throw std::invalid_argument(fmt::format("{} is not valid JSON: {}", where, e.detail()));
  }
  if (!j.is_object()) throw std::invalid_argument(fmt::format("{} must be a JSON object, got {}", where, j.dump()));
  const std::vector<std::string> option_keys{"lags", "context", "lag_beta", "task_seed"};
  const std::vector<std::string> keys{"task",   "text",  "val_text", "corpus",   "labelled", "seq_len", "vocab",
                                      "alphabet", "labels", "lags",   "context", "lag_beta", "task_seed"};
  for (const auto& [key, value] : j.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      throw std::invalid_argument(fmt::format("{}: unknown key '{}' (keys: {})", where, key, fmt::join(keys, ", ")));
    }
  }
  for (const char* key : {"task", "text", "seq_len", "vocab"}) {
    if (!j.contains(key)) throw std::invalid_argument(fmt::format("{}: key '{}' is missing", where, key));
  }
  DataDescription d;
  d.task = string_value(j, "task", where);
  d.text = string_value(j, "text", where);
  d.seq_len = positive_integer(j, "seq_len", where);
  d.vocab = positive_integer(j, "vocab", where);
  read_text_sources(j, where, d);
  const bool task = !d.task.empty();
  const std::vector<std::string> reads = task ? task_option_keys(d.task) : std::vector<std::string>{};
  for (const std::string& key : option_keys) {
    const bool read = std::find(reads.begin(), reads.end(), key) != reads.end();
    if (j.contains(key) != read) {
      if (read) throw std::invalid_argument(fmt::format("{}: key '{}' is missing (task '{}' reads it)", where, key, d.task));
      throw std::invalid_argument(fmt::format("{}: key '{}' is for tasks {} only ({})", where, key, tasks_reading(key),
                      task ? fmt::format("task '{}'", d.task) : "a text model"));
    }
  }
  if (!reads.empty()) {
    const nlohmann::json& lags = j.at("lags");
    if (!lags.is_array() || !std::all_of(lags.begin(), lags.end(), [](const nlohmann::json& v) { return v.is_number_unsigned(); })) {
      throw std::invalid_argument(fmt::format("{}: key 'lags' must be an array of whole numbers, got {}", where, lags.dump()));
    }
    d.lags = lags.get<std::vector<std::size_t>>();
    d.context = positive_integer(j, "context", where);
    if (!j.at("lag_beta").is_number()) throw std::invalid_argument(fmt::format("{}: key 'lag_beta' must be a number, got {}", where, j.at("lag_beta").dump()));
    d.lag_beta = j.at("lag_beta").get<double>();
    if (!j.at("task_seed").is_number_unsigned()) {
      throw std::invalid_argument(fmt::format("{}: key 'task_seed' must be a whole number, got {}", where, j.at("task_seed").dump()));
    }
    d.task_seed = j.at("task_seed").get<std::uint64_t>();
  }
  if (task) {
    for (const char* key : {"alphabet", "labels"}) {
      if (j.contains(key)) throw std::invalid_argument(fmt::format("{}: key '{}' is for text models only (task '{}')", where, key, d.task));
    }
    return d;
  }
  if (!j.contains("alphabet")) throw std::invalid_argument(fmt::format("{}: key 'alphabet' is missing (a text model needs it)", where));
  const std::string alphabet = string_value(j, "alphabet", where);
  d.alphabet = decode_utf8(alphabet, where + ": key 'alphabet'");
  (void)CharVocab(d.alphabet, where);  // checks it is sorted and distinct
  if (j.contains("labels")) read_labels(j, where, d);
  if (!d.text.empty() && d.is_classifier()) {
    throw std::invalid_argument(fmt::format("{}: key 'labels' is for classifiers only (text '{}')", where, d.text));
  }
  if (!d.labelled.empty() && !d.is_classifier()) {
    throw std::invalid_argument(fmt::format("{}: key 'labels' is missing (a classifier needs it)", where));
  }
  const std::size_t expected = d.is_classifier() ? 2 + d.alphabet.size() + d.labels.size() : d.alphabet.size();
  if (expected != d.vocab) {
    throw std::invalid_argument(fmt::format("{}: key 'alphabet' has {} characters{} but key 'vocab' is {}", where,
                                            d.alphabet.size(),
                                            d.is_classifier() ? fmt::format(" and 'labels' {} names, for vocab {},", d.labels.size(), expected) : "",
                                            d.vocab));
  }
  return d;
}

DataDescription data_description(const std::map<std::string, std::string>& metadata, const std::string& source) {
  const auto it = metadata.find(kDataMetadataKey);
  if (it == metadata.end()) {
    throw std::invalid_argument(fmt::format("{}: no '{}' metadata saying what the model was trained on (not a model written by headroom "
                    "train)",
                    source, kDataMetadataKey));
  }
  return parse_data_metadata(it->second, source);
}

CharVocab char_vocab(const DataDescription& data, const std::string& source) {
  return CharVocab(data.alphabet, fmt::format("the model {}", source));
}

fs::path resolve_model_file(const fs::path& model) {
  std::error_code ec;
  const fs::file_status status = fs::status(model, ec);
  if (!fs::exists(status)) {
    throw std::invalid_argument(fmt::format("model '{}': no such file or directory (expected a run directory written by headroom train "
                    "--out, or a .safetensors file)",
                    model.string()));
  }
  if (fs::is_directory(status)) {
    const fs::path final_model = model / "model.safetensors";
    if (fs::is_regular_file(final_model, ec)) return final_model;
    if (std::optional<fs::path> newest = newest_checkpoint(model)) return *newest;
    throw std::invalid_argument(fmt::format("model directory '{}' has neither model.safetensors nor checkpoints/step-*/model.safetensors",
                    model.string()));
  }
  if (fs::is_regular_file(status) && model.extension() == ".safetensors") return model;
  throw std::invalid_argument(fmt::format("model '{}' is neither a run directory nor a .safetensors file", model.string()));
}

std::optional<TrainConfig> run_config_of(const fs::path& model_file) {
  std::error_code ec;
  const fs::path dir = model_file.parent_path();
  std::vector<fs::path> candidates{dir / "config.json"};
  // DIR/checkpoints/step-N/model.safetensors belongs to DIR.
  if (dir.parent_path().filename() == "checkpoints") candidates.push_back(dir.parent_path().parent_path() / "config.json");
  for (const fs::path& file : candidates) {
    if (!fs::is_regular_file(file, ec)) continue;
    TrainConfig config;
    update_from_json(config, read_strict_json_file(file), file.string());
    return config;
  }
  return std::nullopt;
}

ValidationSettings validation_settings(const fs::path& model_file, std::optional<std::size_t> batches,
                                       std::optional<std::size_t> batch, std::optional<std::uint64_t> seed) {
  const std::optional<TrainConfig> run = run_config_of(model_file);
  const OptimConfig defaults = run ? run->optim : OptimConfig{};
  if (defaults.threads < 1 || defaults.threads > kMaxThreads) {
    throw std::invalid_argument(fmt::format("{}: 'train.threads' must be from 1 to {}, got {}", model_file.string(), kMaxThreads,
                    defaults.threads));
  }
  return {.batches = batches.value_or(defaults.eval_batches),
          .batch = batch.value_or(defaults.batch),
          .seed = seed.value_or(defaults.seed),
          .threads = defaults.threads};
}

namespace {

// The data rebuilt must have the model's vocabulary: the same characters, and for a
// classifier the same labels.
void check_same_vocab(const DataDescription& data, const std::u32string& alphabet, const std::vector<std::string>& labels,
                      const std::string& source, const std::string& remedy) {
  if (alphabet == data.alphabet && labels == data.labels) return;
  throw std::invalid_argument(fmt::format(
      "{} has changed since {} was trained on it: {} ({} now, {} then); {}", data.source_name(), source,
      labels == data.labels ? "its characters are no longer the model's vocabulary" : "its labels are not the model's",
      labels == data.labels ? alphabet.size() : labels.size(), labels == data.labels ? data.alphabet.size() : data.labels.size(),
      remedy));
}

void require_file(const std::string& file, const std::string& source, const std::string& remedy) {
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    throw std::invalid_argument(
        fmt::format("{} was trained on '{}', which is not there (from this directory); {}", source, file, remedy));
  }
}

}  // namespace

std::unique_ptr<Dataset> own_dataset(const DataDescription& data, const std::string& source,
                                     const std::string& remedy) {
  if (!data.text.empty()) {
    require_file(data.text, source, remedy);
    if (!data.val_text.empty()) require_file(data.val_text, source, remedy);
    const CharDatasetOptions options{.seq_len = data.seq_len};
    auto chars = data.val_text.empty() ? std::make_unique<CharDataset>(data.text, options)
                                       : std::make_unique<CharDataset>(data.text, data.val_text, options);
    if (chars->alphabet() != data.alphabet) {
      throw std::invalid_argument(fmt::format(
          "'{}' has changed since {} was trained on it: its characters are no longer the model's vocabulary ({} now, "
          "{} then); {}",
          data.text, source, chars->alphabet().size(), data.alphabet.size(), remedy));
    }
    return chars;
  }
  if (!data.labelled.empty()) require_file(data.labelled, source, remedy);
  if (!data.corpus.empty() || !data.labelled.empty()) {
    const Corpus corpus = data.corpus.empty() ? read_labelled_tsv(data.labelled) : load_corpus(data.corpus);
    if (corpus.kind == CorpusKind::text) {
      auto chars = std::make_unique<CharDataset>(CharDataset::of_corpus(corpus, data.seq_len));
      check_same_vocab(data, chars->alphabet(), {}, source, remedy);
      return chars;
    }
    auto items = std::make_unique<LabelledDataset>(corpus, data.seq_len);
    check_same_vocab(data, items->vocab().alphabet(), items->labels(), source, remedy);
    return items;
  }
  return make_task(data.task, data.task_options());
}

LoadedRun load_run(const fs::path& model) {
  LoadedRun run;
  run.file = resolve_model_file(model);
  run.source = run.file.string();
  run.loaded = load_model<float>(run.file);
  run.data = data_description(run.loaded.metadata, run.source);
  if (const auto it = run.loaded.metadata.find(kStepMetadataKey); it != run.loaded.metadata.end()) {
    run.step = parse_whole_number(it->second);
    if (!run.step) {
      throw std::invalid_argument(fmt::format("{}: metadata '{}' must be a step number, got '{}'", run.source, kStepMetadataKey, it->second));
    }
  }
  if (run.data.vocab != run.loaded.config.vocab) {
    throw std::invalid_argument(fmt::format("{}: the data metadata says vocab {} but the model has vocab {}",
                                            run.source, run.data.vocab, run.loaded.config.vocab));
  }
  // A model with a NaN or Inf weight has no meaningful loss or sample to give.
  if (const NonFiniteValues bad = non_finite_values(run.model()); bad.count > 0) {
    throw std::invalid_argument(fmt::format(
        "{}: {} of {} weights are not finite (the first: {}[{}] = {}); the run that wrote it diverged, so it cannot "
        "be evaluated or sampled (retrain it, with a lower --lr)",
        run.source, bad.count, run.model().parameter_count(), bad.first_name, bad.first_index,
        std::isnan(bad.first_value) ? std::string("nan") : fmt::format("{}", bad.first_value)));
  }
  return run;
}

}  // namespace headroom
