#include "train/init_from.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nn/config.hpp"
#include "nn/config_json.hpp"
#include "nn/convert.hpp"

namespace headroom {
namespace {

[[noreturn]] void refuse(const TrainConfig& c, const std::string& what) {
  throw std::invalid_argument(fmt::format("--init-from {}: {}", c.optim.init_from, what));
}

}  // namespace

std::string init_from_hash(const std::filesystem::path& model_file) {
  std::ifstream in(model_file, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("{}: cannot be read", model_file.string()));
  std::uint64_t h = 0xcbf29ce484222325ull;
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h ^= static_cast<unsigned char>(buffer[static_cast<std::size_t>(i)]);
      h *= 0x100000001b3ull;
    }
  }
  return fmt::format("fnv1a64:{:016x}", h);
}

InitSource read_init_source(const std::string& init_from) {
  if (init_from.empty()) throw std::invalid_argument("--init-from: the path is empty; give a run directory or model file");
  LoadedRun run = load_run(init_from);
  std::string hash = init_from_hash(run.file);
  return {.run = std::move(run), .hash = std::move(hash)};
}

void check_init_data(const TrainConfig& c, const InitSource& source) {
  const std::string& file = source.run.source;
  // The data: config.json's data section against the one DIR's model was trained on.
  const DataDescription& d = source.run.data;
  const bool their_text = d.task.empty();
  DataConfig theirs = c.data;
  theirs.task = their_text ? c.data.task : d.task;
  theirs.text = d.text;
  theirs.val_text = d.val_text;
  theirs.corpus = d.corpus;
  theirs.labelled = d.labelled;
  theirs.seq_len = d.seq_len;
  if (!their_text) theirs.vocab = d.vocab;
  for (const std::string& key : their_text ? std::vector<std::string>{} : task_option_keys(d.task)) {
    if (key == "lags") theirs.lags = d.lags;
    if (key == "context") theirs.context = d.context;
    if (key == "lag_beta") theirs.lag_beta = d.lag_beta;
    if (key == "task_seed") theirs.task_seed = d.task_seed;
  }
  if (their_text != reads_text(c.data)) {
    refuse(c, fmt::format("{} was trained on {} but this run trains on {}", file,
                          their_text ? d.source_name() : "task " + d.task, data_source(c.data)));
  }
  const nlohmann::json ours = data_json(c.data), want = data_json(theirs);
  for (const auto& [key, value] : want.items()) {
    if (ours.at(key) != value) {
      refuse(c, fmt::format("{} was trained with data.{} {} but this run has {}; the data must be the model's", file,
                            key, value.dump(), ours.at(key).dump()));
    }
  }
}

void check_init_from_outside(const InitSource& source, const std::filesystem::path& out_dir) {
  std::error_code file_ec, dir_ec;
  const std::filesystem::path file = std::filesystem::weakly_canonical(source.run.file, file_ec);
  std::filesystem::path dir = std::filesystem::weakly_canonical(out_dir, dir_ec);
  if (file_ec || dir_ec) return;
  if (dir.filename().empty()) dir = dir.parent_path();  // "m/" is "m"
  const auto [end, unused] = std::mismatch(dir.begin(), dir.end(), file.begin(), file.end());
  if (end != dir.end()) return;
  throw std::invalid_argument(fmt::format(
      "--init-from {}: the model lies inside --out {}, which --overwrite would delete before it is read; write the "
      "new run to another --out",
      source.run.source, out_dir.string()));
}

void check_init_source(const TrainConfig& c, const InitSource& source) {
  const std::string& file = source.run.source;
  if (!c.optim.init_from_hash.empty() && c.optim.init_from_hash != source.hash) {
    refuse(c, fmt::format("{} has changed since the run recorded it (train.init_from_hash {}, the file's {})", file,
                          c.optim.init_from_hash, source.hash));
  }
  check_init_data(c, source);
  // The model: DIR's but for n_kv_heads and dropout, which holds no weights: a run may
  // start dropping, or stop, from any trained model.
  const ModelConfig& from = source.run.config();
  try {
    (void)pooled_kv_config(from, c.model.n_kv_heads);
  } catch (const std::invalid_argument& e) {
    refuse(c, e.what());
  }
  ModelConfig expected = from;
  expected.n_kv_heads = c.model.n_kv_heads;
  expected.dropout = c.model.dropout;
  const nlohmann::json run_model = to_json(c.model.resolved()), init_model = to_json(expected.resolved());
  for (const auto& [key, value] : init_model.items()) {
    if (run_model.at(key) != value) {
      refuse(c, fmt::format("{}'s model has {} {} but this run's has {}; only n_kv_heads (it mean-pools) and dropout may "
                            "differ",
                            file, key, value.dump(), run_model.at(key).dump()));
    }
  }
}

void load_init_weights(const TrainConfig& config, TransformerLM<float>& model) {
  InitSource source = read_init_source(config.optim.init_from);
  check_init_source(config, source);
  model.load_state_dict(pool_kv_heads(source.run.model().state_dict(), source.run.config(), config.model.n_kv_heads));
}

}  // namespace headroom
