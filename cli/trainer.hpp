// The training loop behind `headroom train`: data, model, optimizer and schedule
// from a TrainConfig; validation on held-out batches; config.json and metrics.csv
// in the output directory; progress through a callback.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cli/train_config.hpp"
#include "data/dataset.hpp"
#include "nn/transformer.hpp"

namespace headroom::cli {

struct EvalResult {
  double loss = 0;      // mean cross-entropy over counted targets
  double accuracy = 0;  // argmax == target, over counted targets
  std::size_t counted = 0;
};

// Loss and accuracy on `batches` validation batches drawn from a generator seeded
// with `seed`: the same batches at every evaluation of a run. Runs under NoGrad in
// eval mode and restores training mode.
EvalResult evaluate(TransformerLM<float>& model, const Dataset& data, std::size_t batches, std::size_t batch,
                    std::uint64_t seed);

struct Progress {
  std::size_t step = 0;
  std::size_t steps = 0;
  double train_loss = 0;  // mean since the previous report
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double elapsed_s = 0;
  bool evaluated = false;  // val is set on this report
  EvalResult val{};
};

struct TrainSummary {
  std::size_t steps = 0;
  std::size_t parameters = 0;
  std::size_t skipped_steps = 0;  // updates skipped for a non-finite gradient norm
  double final_train_loss = 0;
  EvalResult final_val{};
  double best_val_accuracy = 0;
  std::size_t best_step = 0;
  double wall_s = 0;
  double tokens_per_s = 0;
};

// The data source a config names: a text file when data.text is set, else a task.
std::unique_ptr<Dataset> make_dataset(const TrainConfig& config);

// Fills in what follows from the data (model.vocab, model.max_len) and checks the
// whole config. Throws std::invalid_argument with one line naming the problem.
TrainConfig finalize(TrainConfig config, const Dataset& data);

// Trains. With a non-empty out_dir, writes out_dir/config.json before the first step
// and appends a row to out_dir/metrics.csv at every evaluation (flushed, so a crash
// loses nothing written). on_progress is called after every step; report.evaluated
// marks the steps with a validation.
TrainSummary train(const TrainConfig& config, const Dataset& data, const std::string& out_dir,
                   const std::function<void(const Progress&)>& on_progress);

}  // namespace headroom::cli
