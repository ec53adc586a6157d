#include "train/resume.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/whole_number.hpp"
#include "nn/checkpoint.hpp"
#include "nn/config_json.hpp"
#include "nn/strict_json.hpp"
#include "optim/adam.hpp"
#include "optim/sgd.hpp"
#include "train/convergence.hpp"
#include "train/metrics.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "train_state.safetensors";
constexpr const char* kPrefix = "step-";

// A JSON number, or null for NaN and Inf (JSON has neither); read back as NaN.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double read_number(const json& v) { return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>(); }

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw CheckpointError(fmt::format("cannot open directory {}: {}", dir.string(), std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw CheckpointError(fmt::format("cannot sync directory {}: {}", dir.string(), std::strerror(err)));
}

// The step of a checkpoint directory's name, or nullopt for anything else
// (temporary directories included).
std::optional<std::size_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  return parse_whole_number(std::string_view(name).substr(std::strlen(kPrefix)));
}

// Out of sight first, by a rename, then deleted: a kill between the two leaves a
// hidden ".step-N.pruned-PID" that the next start removes (remove_stale_temporaries,
// train/out_dir.hpp), never a half-deleted step-N that no prune would see again.
void prune(const fs::path& dir) {
  std::error_code ec;
  const fs::path gone = dir.parent_path() / fmt::format(".{}.pruned-{}", dir.filename().string(), ::getpid());
  fs::rename(dir, gone, ec);
  if (!ec) fs::remove_all(gone, ec);
}

std::vector<std::pair<std::size_t, fs::path>> complete_checkpoints(const fs::path& out_dir) {
  std::vector<std::pair<std::size_t, fs::path>> found;
  const fs::path root = out_dir / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return found;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const auto step = step_of(entry.path());
    if (step && fs::exists(entry.path() / kModelFile) && fs::exists(entry.path() / kStateFile)) {
      found.emplace_back(*step, entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

[[noreturn]] void bad_state(const fs::path& file, const std::string& what) {
  throw CheckpointError(fmt::format("{}: {}", file.string(), what));
}

// The config a checkpoint recorded against the run's; checkpoints from before
// configs were recorded have none, and pass on their model config alone.
void check_recorded_config(const SafetensorsFile& st, const fs::path& dir, const fs::path& state_file,
                           const TrainConfig& config, const std::string& config_source) {
  const auto it = st.metadata.find("train_config");
  if (it == st.metadata.end()) return;
  json recorded;
  try {
    recorded = json::parse(it->second);
  } catch (const json::exception& e) {
    bad_state(state_file, fmt::format("malformed 'train_config': {}", e.what()));
  }
  const std::string difference = first_config_difference(recorded, to_json(config), config_source);
  if (!difference.empty()) throw CheckpointError(fmt::format("{}: {}", dir.string(), difference));
}

}  // namespace

fs::path checkpoint_dir(const fs::path& out_dir, std::size_t step) {
  return out_dir / "checkpoints" / fmt::format("{}{:08}", kPrefix, step);
}

std::optional<fs::path> latest_checkpoint(const fs::path& out_dir) {
  auto all = complete_checkpoints(out_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

fs::path save_training_checkpoint(const fs::path& out_dir, const TrainConfig& config,
                                  const TransformerLM<float>& model, const Optimizer<float>& optimizer,
                                  const LoopState& state, const std::map<std::string, std::string>& model_metadata,
                                  std::size_t keep) {
  SafetensorsFile train_state;
  json param_steps = json::object(), has_momentum = json::object();
  for (const auto& [name, param] : optimizer.parameters()) {
    if (const auto* adam = dynamic_cast<const AdamFamily<float>*>(&optimizer)) {
      const AdamState<float>& s = adam->state(name);
      train_state.tensors.push_back(to_record("exp_avg/" + name, s.exp_avg));
      train_state.tensors.push_back(to_record("exp_avg_sq/" + name, s.exp_avg_sq));
      param_steps[name] = s.step;
    } else if (const auto* sgd = dynamic_cast<const SGD<float>*>(&optimizer)) {
      const SGDState<float>& s = sgd->state(name);
      train_state.tensors.push_back(to_record("momentum_buffer/" + name, s.momentum_buffer));
      has_momentum[name] = s.has_momentum_buffer;
    }
  }
  json rng = json::array();
  for (std::uint64_t word : state.data_rng) rng.push_back(fmt::format("{:016x}", word));
  json meta{
      {"step", state.step},
      {"optimizer", std::string(optimizer.name())},
      {"optimizer_steps", optimizer.step_count()},
      {"param_steps", param_steps},
      {"has_momentum", has_momentum},
      {"skipped_steps", state.skipped_steps},
      {"consecutive_bad", state.consecutive_bad},
      {"best_val_accuracy", number(state.best_val_accuracy)},
      {"best_step", state.best_step},
      {"last_train_loss", number(state.last_train_loss)},
      {"last_val",
       {{"loss", number(state.last_val.loss)},
        {"accuracy", number(state.last_val.accuracy)},
        {"counted", state.last_val.counted}}},
      {"loss_since", number(state.loss_since)},
      {"steps_since", state.steps_since},
      {"tokens_since", state.tokens_since},
      {"elapsed_s", number(state.elapsed_s)},
      {"data_rng", rng},
  };
  // Known only for data that knows its distribution; a checkpoint without them (a
  // text, or one made before they were recorded) reads as unknown.
  if (state.last_val.bayes_loss) meta["last_val"]["bayes_loss"] = number(*state.last_val.bayes_loss);
  if (state.best_excess_loss) meta["best_excess_loss"] = number(*state.best_excess_loss);
  train_state.metadata["state"] = meta.dump();
  train_state.metadata["train_config"] = to_json(config).dump();

  const fs::path final_dir = checkpoint_dir(out_dir, state.step);
  const fs::path root = final_dir.parent_path();
  const fs::path tmp = root / fmt::format(".{}.tmp-{}", final_dir.filename().string(), ::getpid());
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw CheckpointError(fmt::format("cannot create {}: {}", root.string(), ec.message()));
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) throw CheckpointError(fmt::format("cannot create {}: {}", tmp.string(), ec.message()));
  try {
    save_checkpoint(tmp / kModelFile, model, config.model, model_metadata);
    write_safetensors(tmp / kStateFile, train_state);
    if (fs::exists(final_dir)) {  // the same step saved again (after a resume): replace it
      const fs::path old = root / fmt::format(".{}.old-{}", final_dir.filename().string(), ::getpid());
      fs::rename(final_dir, old);
      fs::rename(tmp, final_dir);
      fs::remove_all(old);
    } else {
      fs::rename(tmp, final_dir);
    }
    fsync_directory(root);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw CheckpointError(fmt::format("cannot save checkpoint {}: {}", final_dir.string(), e.what()));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }

  // Rolling: keep the newest `keep`, never the one just written.
  auto all = complete_checkpoints(out_dir);
  const std::size_t keep_n = std::max<std::size_t>(keep, 1);
  for (std::size_t i = 0; i + keep_n < all.size(); ++i) {
    if (all[i].second != final_dir) prune(all[i].second);
  }
  return final_dir;
}

LoopState load_training_checkpoint(const fs::path& dir, const TrainConfig& config, TransformerLM<float>& model,
                                   Optimizer<float>& optimizer, const std::string& config_source) {
  const fs::path model_file = dir / kModelFile;
  const fs::path state_file = dir / kStateFile;
  const SafetensorsFile model_ckpt = read_safetensors(model_file);
  const ModelConfig saved = checkpoint_config(model_ckpt, model_file.string());
  const std::string model_difference =
      first_config_difference(json{{"model", to_json(saved.resolved())}},
                              json{{"model", to_json(config.model.resolved())}}, config_source);
  if (!model_difference.empty()) throw CheckpointError(fmt::format("{}: {}", dir.string(), model_difference));
  load_checkpoint(model_ckpt, model, model_file.string());

  const SafetensorsFile st = read_safetensors(state_file);
  check_recorded_config(st, dir, state_file, config, config_source);
  const auto it = st.metadata.find("state");
  if (it == st.metadata.end()) bad_state(state_file, "no 'state' in __metadata__");
  LoopState s;
  try {
    const json meta = json::parse(it->second);
    s.step = meta.at("step").get<std::size_t>();
    const std::string opt_name = meta.at("optimizer").get<std::string>();
    if (opt_name != optimizer.name()) {
      bad_state(state_file, fmt::format("saved by optimizer {}, but the run uses {}", opt_name, optimizer.name()));
    }
    for (const auto& [name, param] : optimizer.parameters()) {
      auto tensor = [&](const std::string& key) {
        const TensorRecord* r = st.find(key + "/" + name);
        if (r == nullptr) bad_state(state_file, fmt::format("no tensor '{}/{}'", key, name));
        return from_record<float>(*r, state_file.string());
      };
      if (auto* adam = dynamic_cast<AdamFamily<float>*>(&optimizer)) {
        adam->set_state(name, AdamState<float>{.step = meta.at("param_steps").at(name).get<std::size_t>(),
                                               .exp_avg = tensor("exp_avg"),
                                               .exp_avg_sq = tensor("exp_avg_sq")});
      } else if (auto* sgd = dynamic_cast<SGD<float>*>(&optimizer)) {
        sgd->set_state(name, SGDState<float>{.has_momentum_buffer = meta.at("has_momentum").at(name).get<bool>(),
                                             .momentum_buffer = tensor("momentum_buffer")});
      }
    }
    const std::size_t expected = optimizer.parameters().size() * (dynamic_cast<SGD<float>*>(&optimizer) ? 1 : 2);
    if (st.tensors.size() != expected) {
      bad_state(state_file, fmt::format("{} state tensors, expected {}", st.tensors.size(), expected));
    }
    optimizer.set_step_count(meta.at("optimizer_steps").get<std::size_t>());
    s.skipped_steps = meta.at("skipped_steps").get<std::size_t>();
    s.consecutive_bad = meta.at("consecutive_bad").get<std::size_t>();
    s.best_val_accuracy = read_number(meta.at("best_val_accuracy"));
    s.best_step = meta.at("best_step").get<std::size_t>();
    s.last_train_loss = read_number(meta.at("last_train_loss"));
    const json& v = meta.at("last_val");
    s.last_val = {.loss = read_number(v.at("loss")), .accuracy = read_number(v.at("accuracy")),
                  .counted = v.at("counted").get<std::size_t>()};
    if (v.contains("bayes_loss")) s.last_val.bayes_loss = read_number(v.at("bayes_loss"));
    if (meta.contains("best_excess_loss")) s.best_excess_loss = read_number(meta.at("best_excess_loss"));
    s.loss_since = read_number(meta.at("loss_since"));
    s.steps_since = meta.at("steps_since").get<std::size_t>();
    s.tokens_since = meta.at("tokens_since").get<std::size_t>();
    s.elapsed_s = read_number(meta.at("elapsed_s"));
    const json& rng = meta.at("data_rng");
    if (!rng.is_array() || rng.size() != s.data_rng.size()) bad_state(state_file, "'data_rng' must hold 4 words");
    for (std::size_t i = 0; i < s.data_rng.size(); ++i) {
      s.data_rng[i] = std::stoull(rng.at(i).get<std::string>(), nullptr, 16);
    }
  } catch (const json::exception& e) {
    bad_state(state_file, fmt::format("malformed state: {}", e.what()));
  } catch (const std::logic_error& e) {  // stoull; CheckpointError is an invalid_argument: rethrow it as is
    if (dynamic_cast<const CheckpointError*>(&e) != nullptr) throw;
    bad_state(state_file, fmt::format("malformed state: {}", e.what()));
  }
  if (const auto step = step_of(dir); step && *step != s.step) {
    bad_state(state_file, fmt::format("holds step {}, but its directory says step {}", s.step, *step));
  }
  return s;
}

const std::vector<std::string>& resume_may_change() {
  static const std::vector<std::string> keys{"steps",         "save_every", "keep_checkpoints", "max_bad_steps",
                                             "detect_anomaly", "patience",   "min_delta"};
  return keys;
}

std::string first_config_difference(const json& checkpoint, const json& run, const std::string& source) {
  // The keys a resume may change are left out of both sides.
  json a = checkpoint, b = run;
  for (json* side : {&a, &b}) {
    if (!side->is_object() || !side->contains("train") || !(*side)["train"].is_object()) continue;
    for (const std::string& key : resume_may_change()) (*side)["train"].erase(key);
  }
  const std::optional<JsonDifference> d = first_json_difference(a, b);  // nn/strict_json.hpp
  if (!d) return "";
  return fmt::format("{}: {} in the checkpoint, {} in {}", d->path, d->first, d->second, source);
}

fs::path checkpoint_to_resume(const fs::path& out_dir, const OptimConfig& optim) {
  const auto all = complete_checkpoints(out_dir);
  if (all.empty()) throw std::invalid_argument(fmt::format("{} has no checkpoint to resume from", out_dir.string()));
  const auto& [step, dir] = all.back();
  if (step >= optim.steps) {
    throw std::invalid_argument(fmt::format("{} is already at step {} of steps {}: nothing to resume; pass a "
                                            "larger --steps to train further",
                                            dir.string(), step, optim.steps));
  }
  if (const std::optional<std::size_t> at = patience_ran_out(out_dir, step, optim)) {
    throw std::invalid_argument(fmt::format(
        "{} stopped at step {}, out of patience: {} validations in a row without the val loss falling more than "
        "--min-delta {} below its last improvement: nothing to resume; pass a larger --patience, a smaller "
        "--min-delta or --patience 0 to train further",
        out_dir.string(), *at, optim.patience, optim.min_delta));
  }
  return dir;
}

std::optional<std::size_t> patience_ran_out(const fs::path& out_dir, std::size_t step, const OptimConfig& optim) {
  if (optim.patience == 0) return std::nullopt;
  // The rows up to the step, as a resume keeps them: a torn row after it is no error.
  const std::string text = MetricsWriter::initial_text(out_dir, true, step);
  const std::vector<ValPoint> seen = validations(read_metrics_text(text, (out_dir / "metrics.csv").string()));
  return patience_stop(seen, optim.min_delta, optim.patience);
}

std::size_t record_step(LoopState& state, bool updated, double loss) {
  if (updated) {
    state.consecutive_bad = 0;
    state.loss_since += loss;
    ++state.steps_since;
  } else {
    ++state.skipped_steps;
    ++state.consecutive_bad;
  }
  return state.consecutive_bad;
}

}  // namespace headroom
