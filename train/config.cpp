#include "train/config.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "nn/config_json.hpp"

namespace headroom {
namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

template <typename V>
V read(const nlohmann::json& v, const std::string& section, const std::string& key, const std::string& source) {
  const std::string where = fmt::format("{}: '{}.{}'", source, section, key);
  if constexpr (std::is_same_v<V, bool>) {
    if (!v.is_boolean()) bad(fmt::format("{} must be true or false, got {}", where, v.dump()));
  } else if constexpr (std::is_same_v<V, std::string>) {
    if (!v.is_string()) bad(fmt::format("{} must be a string, got {}", where, v.dump()));
  } else if constexpr (std::is_integral_v<V>) {
    if (!v.is_number_integer() || v.get<long long>() < 0) {
      bad(fmt::format("{} must be a non-negative integer, got {}", where, v.dump()));
    }
  } else {
    if (!v.is_number()) bad(fmt::format("{} must be a number, got {}", where, v.dump()));
  }
  return v.get<V>();
}

}  // namespace

void TrainConfig::validate() const {
  const auto& d = data;
  const auto& o = optim;
  if (d.seq_len == 0) bad("seq_len must be positive, got 0");
  if (model.max_len != 0 && d.seq_len > model.max_len) {
    bad(fmt::format("seq_len {} is longer than the model's max_len {}", d.seq_len, model.max_len));
  }
  if (o.optimizer != "adamw" && o.optimizer != "adam" && o.optimizer != "sgd") {
    bad(fmt::format("optimizer must be adamw, adam or sgd; got '{}'", o.optimizer));
  }
  if (o.steps == 0) bad("steps must be positive, got 0");
  if (o.batch == 0) bad("batch must be positive, got 0");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) bad(fmt::format("lr must be a positive number, got {}", o.lr));
  if (!(o.clip >= 0) || !std::isfinite(o.clip)) bad(fmt::format("clip must be >= 0 (0 is off), got {}", o.clip));
  if (!(o.weight_decay >= 0)) bad(fmt::format("weight_decay must be >= 0, got {}", o.weight_decay));
  if (o.threads < 1) bad(fmt::format("threads must be at least 1, got {}", o.threads));
  if (o.eval_every == 0) bad("eval_every must be positive, got 0");
  if (o.eval_batches == 0) bad("eval_batches must be positive, got 0");
  if (o.keep_checkpoints == 0) bad("keep_checkpoints must be positive, got 0");
  if (o.max_bad_steps == 0) bad("max_bad_steps must be positive, got 0");
  if (o.schedule == "cosine" && o.warmup > o.steps) {
    bad(fmt::format("warmup {} is longer than steps {}", o.warmup, o.steps));
  }
}

TrainConfig task_defaults(const std::string& task) {
  TrainConfig c;
  c.data.task = task;
  if (task == "recall") {
    c.data.seq_len = 6;
    c.data.vocab = 32;
    c.optim.batch = 64;
    c.optim.lr = 1e-3;
    c.optim.schedule = "constant";
    c.optim.weight_decay = 0.1;
    c.optim.steps = 6000;
    c.optim.eval_every = 500;
  } else if (task == "before") {
    // Learns steadily but needs more than the global 1000 steps to reach 99%.
    c.optim.steps = 3000;
    c.optim.eval_every = 250;
  }
  return c;
}

nlohmann::json to_json(const TrainConfig& c) {
  const auto& d = c.data;
  const auto& o = c.optim;
  return nlohmann::json{
      {"model", headroom::to_json(c.model)},
      {"data", {{"task", d.task}, {"text", d.text}, {"seq_len", d.seq_len}, {"vocab", d.vocab}}},
      {"train",
       {{"optimizer", o.optimizer}, {"steps", o.steps}, {"batch", o.batch}, {"lr", o.lr},
        {"schedule", o.schedule}, {"warmup", o.warmup}, {"min_lr", o.min_lr}, {"clip", o.clip},
        {"weight_decay", o.weight_decay}, {"momentum", o.momentum}, {"seed", o.seed},
        {"threads", o.threads}, {"eval_every", o.eval_every}, {"eval_batches", o.eval_batches},
        {"save_every", o.save_every}, {"keep_checkpoints", o.keep_checkpoints},
        {"max_bad_steps", o.max_bad_steps}, {"detect_anomaly", o.detect_anomaly}}}};
}

void update_from_json(TrainConfig& c, const nlohmann::json& object, const std::string& source) {
  if (!object.is_object()) bad(fmt::format("{}: expected a JSON object with model, data and train", source));
  for (const auto& [section, body] : object.items()) {
    if (section == "model") {
      headroom::update_from_json(c.model, body, source);
      continue;
    }
    if (section != "data" && section != "train") {
      bad(fmt::format("{}: unknown section '{}' (sections: model, data, train)", source, section));
    }
    if (!body.is_object()) bad(fmt::format("{}: '{}' must be a JSON object", source, section));
    for (const auto& [key, v] : body.items()) {
      auto& d = c.data;
      auto& o = c.optim;
      if (section == "data") {
        if (key == "task") d.task = read<std::string>(v, section, key, source);
        else if (key == "text") d.text = read<std::string>(v, section, key, source);
        else if (key == "seq_len") d.seq_len = read<std::size_t>(v, section, key, source);
        else if (key == "vocab") d.vocab = read<std::size_t>(v, section, key, source);
        else bad(fmt::format("{}: unknown key 'data.{}' (keys: task, text, seq_len, vocab)", source, key));
        continue;
      }
      if (key == "optimizer") o.optimizer = read<std::string>(v, section, key, source);
      else if (key == "steps") o.steps = read<std::size_t>(v, section, key, source);
      else if (key == "batch") o.batch = read<std::size_t>(v, section, key, source);
      else if (key == "lr") o.lr = read<double>(v, section, key, source);
      else if (key == "schedule") o.schedule = read<std::string>(v, section, key, source);
      else if (key == "warmup") o.warmup = read<std::size_t>(v, section, key, source);
      else if (key == "min_lr") o.min_lr = read<double>(v, section, key, source);
      else if (key == "clip") o.clip = read<double>(v, section, key, source);
      else if (key == "weight_decay") o.weight_decay = read<double>(v, section, key, source);
      else if (key == "momentum") o.momentum = read<double>(v, section, key, source);
      else if (key == "seed") o.seed = read<std::uint64_t>(v, section, key, source);
      else if (key == "threads") o.threads = static_cast<int>(read<std::size_t>(v, section, key, source));
      else if (key == "eval_every") o.eval_every = read<std::size_t>(v, section, key, source);
      else if (key == "eval_batches") o.eval_batches = read<std::size_t>(v, section, key, source);
      else if (key == "save_every") o.save_every = read<std::size_t>(v, section, key, source);
      else if (key == "keep_checkpoints") o.keep_checkpoints = read<std::size_t>(v, section, key, source);
      else if (key == "max_bad_steps") o.max_bad_steps = read<std::size_t>(v, section, key, source);
      else if (key == "detect_anomaly") o.detect_anomaly = read<bool>(v, section, key, source);
      else {
        bad(fmt::format("{}: unknown key 'train.{}' (keys: optimizer, steps, batch, lr, schedule, warmup, "
                        "min_lr, clip, weight_decay, momentum, seed, threads, eval_every, eval_batches, save_every, "
                        "keep_checkpoints, max_bad_steps, detect_anomaly)",
                        source, key));
      }
    }
  }
}

}  // namespace headroom
