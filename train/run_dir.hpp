// A trained model as `headroom train --out DIR` leaves it, and what `headroom sample`
// and `headroom eval` need to read back:
//
//     DIR/config.json                                   the TrainConfig
//     DIR/model.safetensors                             the newest state, written when the run stops
//     DIR/checkpoints/step-00000500/model.safetensors   rolling checkpoints (+ train_state)
//
// Every model file carries, besides the model config (nn/checkpoint.hpp), a
// __metadata__ key "data": a JSON string that says what the model was trained on,
//
//     {"task": "copy", "text": "", "seq_len": 16, "vocab": 16}
//     {"task": "lags", "text": "", "seq_len": 39, "vocab": 16, "lags": [1, 2], "context": 8, "lag_beta": 1.0,
//      "task_seed": 0}
//     {"task": "", "text": "data/tiny.txt", "seq_len": 64, "vocab": 65, "alphabet": "\n !,.abc..."}
//     {"task": "", "text": "", "corpus": "kjv", "seq_len": 64, "vocab": 64, "alphabet": "\n !'(),..."}
//     {"task": "", "text": "", "corpus": "wordnet-pos", "seq_len": 96, "vocab": 90, "alphabet": " !\"...",
//      "labels": ["adj", "adv", "noun", "verb"]}
//
// where "alphabet" (text models and classifiers) is the character vocabulary as one
// UTF-8 string in id order, so a text model encodes and decodes without its training
// file; a classifier (data/labelled_dataset.hpp) also has "labels", its classes in
// token order; "corpus", "labelled" (a TSV file) and "val_text" are there when set,
// and the task options (data/task.hpp, task_option_keys) are there for exactly the
// tasks that read them, so that eval rebuilds the same hidden tables,
// and a key "step": the number of steps the weights have had, as decimal text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/char_vocab.hpp"
#include "data/dataset.hpp"
#include "data/task.hpp"
#include "nn/checkpoint.hpp"
#include "train/config.hpp"

namespace headroom {

// The metadata key under which a model file carries the data description.
inline constexpr const char* kDataMetadataKey = "data";
// The metadata key under which a model file written by train says its step.
inline constexpr const char* kStepMetadataKey = "step";

// The "data" metadata value for a checkpoint of a model trained on `dataset` (made
// from `data`): the alphabet comes from the dataset when it is a CharDataset.
std::string data_metadata(const DataConfig& data, const Dataset& dataset);

struct DataDescription {
  std::string task;         // a toy task's name, or empty for a text model
  std::string text;         // the training text file as given to train, or empty
  std::string val_text;     // its held-out file, or empty
  std::string corpus;       // a registered corpus (data/corpus.hpp), or empty
  std::string labelled;     // a label<TAB>text file, or empty
  std::size_t seq_len = 0;  // T the model was trained on
  std::size_t vocab = 0;
  std::u32string alphabet;  // text models and classifiers: the characters in id order
  std::vector<std::string> labels{};  // classifiers: the classes in token order
  // The task's options beyond vocab and seq_len (the defaults for a task that reads none).
  std::vector<std::size_t> lags = TaskOptions{}.lags;
  std::size_t context = TaskOptions{}.context;
  double lag_beta = TaskOptions{}.lag_beta;
  std::uint64_t task_seed = TaskOptions{}.task_seed;

  // A character-level language model: a text file or a text corpus.
  bool is_text() const { return !text.empty() || (!corpus.empty() && labels.empty()); }
  // A classifier: a labelled file or a labelled corpus.
  bool is_classifier() const { return !labels.empty(); }
  // "copy", "data/tiny.txt", "corpus kjv", "labelled reviews.tsv", for messages.
  std::string source_name() const;
  TaskOptions task_options() const {
    return {.vocab = vocab, .seq_len = seq_len, .lags = lags, .context = context, .lag_beta = lag_beta,
            .task_seed = task_seed};
  }
};

// Strict: the JSON must be an object with exactly the keys above ("alphabet" only
// and always for a text model or a classifier, "labels" for a classifier), of the
// right types, exactly one of task, text, corpus and labelled set, seq_len and vocab
// positive, an alphabet of sorted distinct characters, and vocab the alphabet's size
// (a text model) or 2 + its size + the labels' (a classifier). Errors are std::invalid_argument naming `source` and the key.
DataDescription parse_data_metadata(const std::string& json, const std::string& source);

// The data description of a model file's metadata, or a std::invalid_argument
// naming `source` when it has none (a file not written by `headroom train`).
DataDescription data_description(const std::map<std::string, std::string>& metadata, const std::string& source);

// The character vocabulary of a text model's description.
CharVocab char_vocab(const DataDescription& data, const std::string& source);

// DIR -> DIR/model.safetensors when it exists, else the newest (largest step)
// DIR/checkpoints/step-*/model.safetensors; a .safetensors file -> itself. Anything
// else (a missing path, a directory without a model, another kind of file) is a
// std::invalid_argument naming the path and what was looked for.
std::filesystem::path resolve_model_file(const std::filesystem::path& model);

// The config.json of the run a model file belongs to: beside it (DIR/model.safetensors)
// or three levels up (DIR/checkpoints/step-N/model.safetensors); nothing when neither
// exists. A config.json that does not parse is a std::invalid_argument naming it.
std::optional<TrainConfig> run_config_of(const std::filesystem::path& model_file);

// The validation batches `headroom eval` and `headroom heads` draw: by default the
// run's own (its config.json's eval_batches, batch and seed, else the global
// defaults), so they are the batches the trainer validated on; each given value
// overrides. threads is the run's, so that the sums come in the same order.
struct ValidationSettings {
  std::size_t batches = 0;
  std::size_t batch = 0;
  std::uint64_t seed = 0;
  int threads = 1;
};
ValidationSettings validation_settings(const std::filesystem::path& model_file, std::optional<std::size_t> batches,
                                       std::optional<std::size_t> batch, std::optional<std::uint64_t> seed);

// The data a model was trained on, rebuilt from its description: the toy task at its
// vocab and seq_len, or the text file, which must still be there (relative paths
// from the current directory) and hold the same characters. Errors are
// std::invalid_argument naming `source` (the model file) and ending with `remedy`,
// what the user can do instead.
std::unique_ptr<Dataset> own_dataset(const DataDescription& data, const std::string& source,
                                     const std::string& remedy);

// A trained model read back, as `headroom eval`, `sample`, `heads` and `attention`
// open it: the file a path names (resolve_model_file), the model and its
// __metadata__, and what it was trained on.
struct LoadedRun {
  std::filesystem::path file;  // the model file
  std::string source;          // file, for messages
  LoadedModel<float> loaded;   // config, metadata, model
  DataDescription data;
  std::optional<std::size_t> step;  // metadata "step"; none in files from before it was written

  TransformerLM<float>& model() { return *loaded.model; }
  const ModelConfig& config() const { return loaded.config; }
};

// resolve_model_file, load_model and data_description in one, with the checks that
// the data's vocabulary is the model's and that every weight is finite (a model
// with a NaN or Inf weight, from a run that diverged, is refused with the count and
// the first). Errors are std::invalid_argument (or the CheckpointError of a file that
// does not load) naming the file.
LoadedRun load_run(const std::filesystem::path& model);

}  // namespace headroom
