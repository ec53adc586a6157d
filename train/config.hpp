// Everything a training run is made of: the model, the data and the optimisation,
// with documented defaults, validation, and the JSON form written to
// DIR/config.json (and read back by --config).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/task.hpp"
#include "nn/config.hpp"
#include "optim/schedule.hpp"
#include "train/convergence.hpp"

namespace headroom {

// The most threads a config may ask for: a config is part of a run's record, so one
// made on a bigger machine still runs on a smaller one, but a million threads is a
// typo (docs/cli/train.md).
inline constexpr int kMaxThreads = 256;

enum class OptimizerKind { adamw, adam, sgd };

OptimizerKind parse_optimizer(const std::string& name);  // "adamw" | "adam" | "sgd"
std::string to_string(OptimizerKind optimizer);

// Each field's key and flag are in train/config_fields.hpp.
struct DataConfig {
  std::string task = "copy";  // a toy task (data/task.hpp), used when text is empty
  std::string text;           // a UTF-8 text file for a character-level model
  std::string val_text{};     // with text: a held-out file to validate on (else text's last tenth)
  std::string corpus{};       // a registered corpus (data/corpus.hpp): a text or a labelled one
  std::string labelled{};     // a label<TAB>text file for a classifier
  std::size_t seq_len = 16;   // T
  std::size_t vocab = 16;     // toy tasks only; a text's vocabulary comes from the file
  // lags and lags_argmax only (data/task.hpp, task_option_keys); refused elsewhere.
  std::vector<std::size_t> lags = {1, 2};  // the offsets before the query the label reads
  std::size_t context = 8;                 // content tokens per block
  double lag_beta = 1.0;                   // the hidden tables' entries are N(0, lag_beta^2)
  std::uint64_t task_seed = 0;             // seeds the hidden tables, so every run sees the same truth

  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

// The keys that pick a run's text instead of a task, in the order they are named.
inline constexpr const char* kTextSourceKeys[] = {"text", "corpus", "labelled"};

// The member a key of kTextSourceKeys names.
std::string DataConfig::*text_source_member(std::string_view key);

// Whether the run reads text (a file, a corpus or a labelled file) rather than a toy
// task: it then has no task, no vocab and no task options.
bool reads_text(const DataConfig& data);
// The key of kTextSourceKeys that is set ("text"), or "" for a task.
std::string text_source_key(const DataConfig& data);
// Whether the run trains a character-level language model: a text file or a text
// corpus (kjv), whose losses are per character and whose samples are text.
bool is_char_model(const DataConfig& data);
// Whether the run trains a classifier: a labelled file or a labelled corpus.
bool is_classifier(const DataConfig& data);
// What the run trains on, for messages: "task copy", "text data/tiny.txt", "corpus
// kjv", "labelled reviews.tsv".
std::string data_source(const DataConfig& data);

// The options make_task takes for the toy task of `data`.
TaskOptions task_options(const DataConfig& data);

// The data keys beyond task, text, seq_len and vocab that hold a value other than
// the default although the data does not read them (a text run reads none; a task,
// its task_option_keys): TrainConfig::validate refuses the first (docs/design.md #11).
std::vector<std::string> unread_data_keys(const DataConfig& data);

// The tasks that read data key `key` ("lags and lags_argmax"), for messages.
std::string tasks_reading(const std::string& key);

struct OptimConfig {
  OptimizerKind optimizer = OptimizerKind::adamw;
  std::size_t steps = 1000;
  std::size_t batch = 32;
  double lr = 3e-3;                 // the peak rate
  LrScheduleKind schedule = LrScheduleKind::warmup_cosine;  // "cosine"
  std::size_t warmup = 100;         // `headroom train`'s default is default_warmup(steps)
  double min_lr = 0.0;              // cosine floor
  double clip = 1.0;                // global gradient-norm clip; 0 turns it off
  double weight_decay = 0.01;       // AdamW decoupled / Adam, SGD L2
  bool decay_embeddings = false;    // AdamW: decay *emb.weight too (excluded_from_decay, optim/optimizer.hpp)
  double momentum = 0.9;            // SGD
  double beta1 = 0.9;               // Adam and AdamW: the moments' decay rates
  double beta2 = 0.999;
  std::uint64_t seed = 0;
  int threads = 1;                  // threads for the GEMMs and headroom's loops (set_threads)
  std::size_t eval_every = 100;     // steps between validations
  std::size_t eval_batches = 8;     // validation batches per evaluation
  // Early stopping (train/convergence.hpp): the run ends after `patience` validations
  // in a row whose val loss is not below the best by more than min_delta; 0 is off,
  // and steps stays the cap. min_delta is also the least fall across the window that
  // counts a run as still falling (the convergence status), so it is read either way.
  std::size_t patience = 0;
  double min_delta = kDefaultMinDelta;  // nats
  std::size_t save_every = 500;     // steps between rolling checkpoints (with an output directory); 0 is off
  std::size_t keep_checkpoints = 2; // rolling checkpoints kept
  std::size_t max_bad_steps = 10;   // consecutive non-finite steps before the run stops
  bool detect_anomaly = false;      // name the op that made the first NaN or Inf (slower)
  // At every validation, each head's statistics into tracked_heads.csv (train/head_log.hpp;
  // the trainer needs TrainOptions::track_heads), docs/design.md #23.
  bool track_heads = false;
  // Start from this model's weights (train/init_from.hpp, docs/design.md #19); "" is a random init.
  std::string init_from{};
  std::string init_from_hash{};      // init_from_hash of its model file, recorded when the run starts

  friend bool operator==(const OptimConfig&, const OptimConfig&) = default;
};

struct TrainConfig {
  // model.vocab comes from the data; model.max_len 0 means seq_len.
  ModelConfig model = [] {
    ModelConfig m;
    m.max_len = 0;
    return m;
  }();
  DataConfig data;
  OptimConfig optim;

  // Checks the data and training values, with the key and the value in the
  // message (the model is checked when the data has fixed its vocabulary).
  void validate() const;

  friend bool operator==(const TrainConfig&, const TrainConfig&) = default;
};

// The defaults for a task: the global defaults above, with the task's own settings
// (data/task_defaults.hpp) where it needs others to reach 99% validation accuracy.
TrainConfig task_defaults(const std::string& task);
// The defaults for a run on real text (data/task_defaults.hpp, text_settings): those
// of a corpus or a labelled file, the global ones for a text file.
TrainConfig text_defaults(const DataConfig& source);

// The peak rate of a model without norms (`--norm none`) when no flag, config file or
// task gives one. With GPT-2's 0.02 initialisation and no LayerNorm to rescale the
// residual stream, such a model's logits start tiny, and at the global rate it barely
// leaves that start within a run of the default length. A higher rate is no better
// the other way: the two-layer model without norms stalls at the start at 0.03.
// docs/cli/train.md ("Learning rate and warm-up") has the runs behind the choice.
inline constexpr double kNoNormLr = 0.01;

// The peak rate the CLI uses for `model` when no flag, config file or task gives one:
// kNoNormLr without norms, else OptimConfig's. config.json records the value used.
double default_lr(const ModelConfig& model);

// The warm-up the CLI uses when none is given (by flag or config file): a tenth of
// the run, at most 100 steps, so that a short run works with the defaults and a
// long one warms up as it always did. config.json records the value used.
std::size_t default_warmup(std::size_t steps);

nlohmann::json to_json(const TrainConfig& config);
// config.json's data section alone (to_json resolves the model, which needs its vocab).
nlohmann::json data_json(const DataConfig& data);
// Strict: unknown keys and wrong types are errors naming the source and the key.
void update_from_json(TrainConfig& config, const nlohmann::json& object, const std::string& source);

}  // namespace headroom
