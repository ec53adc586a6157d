// Starting a run from a trained model's weights instead of a random init
// (`headroom train --init-from DIR`, "uptraining" in Ainslie et al. 2023;
// docs/design.md #19). The run's model is DIR's, except that n_kv_heads may be a
// divisor of DIR's: then the weights are mean-pooled (nn/convert.hpp). The run's data
// must be DIR's data. The optimizer starts fresh and the step counter at 0.
// config.json records train.init_from (the path as given) and train.init_from_hash
// (init_from_hash of the model file), so that a run, and a sweep of runs, says which
// weights it started from; a resumed run reads its own checkpoint, never DIR.
#pragma once

#include <filesystem>
#include <string>

#include "nn/transformer.hpp"
#include "train/config.hpp"
#include "train/run_dir.hpp"

namespace headroom {

// "fnv1a64:" and 16 hex digits: FNV-1a 64 over the file's bytes. Identifies the
// weights (and their metadata), not a security hash.
std::string init_from_hash(const std::filesystem::path& model_file);

// The model DIR holds (load_run), with its file's hash.
struct InitSource {
  LoadedRun run;
  std::string hash;
};
InitSource read_init_source(const std::string& init_from);

// Checks that `config` (finalized) may start from `source`: the data keys (task, text,
// seq_len, vocab of a toy task, and the options the task reads) equal DIR's data
// description, the model equals DIR's but for n_kv_heads, which must divide DIR's,
// and config.optim.init_from_hash, when set, is the source's. A
// std::invalid_argument naming --init-from, the key and both values otherwise.
void check_init_source(const TrainConfig& config, const InitSource& source);
// Its data half alone, for a config not yet finalized (before the data is made).
void check_init_data(const TrainConfig& config, const InitSource& source);

// Refuses a source that lies inside `out_dir` when the run will replace what
// `out_dir` holds (--overwrite): the model would be deleted before it is read.
void check_init_from_outside(const InitSource& source, const std::filesystem::path& out_dir);

// check_init_source, then `model` (built from config.model) gets DIR's weights,
// pooled to config.model.n_kv_heads.
void load_init_weights(const TrainConfig& config, TransformerLM<float>& model);

}  // namespace headroom
