// Loss and accuracy of a model on held-out data, counted over the targets a batch
// marks (a toy task's answer tokens; every character of a text).
//
// Legend: B = batch rows, T = tokens the model reads per row, V = vocabulary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "autograd/random.hpp"
#include "data/dataset.hpp"
#include "nn/transformer.hpp"

namespace headroom {

struct EvalResult {
  double loss = 0;      // mean cross-entropy over counted targets
  double accuracy = 0;  // argmax == target, over counted targets
  std::size_t counted = 0;
  // The mean of Batch::target_nll over the same targets, when every batch knows its
  // distribution (a task); empty for a text.
  std::optional<double> bayes_loss{};
  // The in-context-learning score (Olsson et al., 2022, who take the loss at token
  // 500 minus the loss at token 50): the mean next-token loss over every target in
  // the last quarter of the context, t in [T - q, T), minus the mean over the first
  // quarter, t in [0, q), q = max(1, floor(T / 4)); over all targets, counted or not,
  // except a task's pad targets (id 0 where the batch knows its truth). Negative
  // when the model predicts better late in the context, i.e. uses its context.
  // evaluate_batches sets it; empty where no target falls in either window.
  std::optional<double> icl_score{};

  // loss - bayes_loss: how far the model is from the best any model can do on these
  // targets (docs/design.md #14); empty when the Bayes loss is unknown.
  std::optional<double> excess_loss() const {
    if (!bayes_loss) return std::nullopt;
    return loss - *bayes_loss;
  }
};

// Eval mode and no tape for a scope; the model's own mode comes back after it.
class EvalScope {
 public:
  explicit EvalScope(TransformerLM<float>& model);
  ~EvalScope();
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  NoGrad no_grad_;
  TransformerLM<float>& model_;
  bool was_training_;
};

// A text model's loss, in nats per character, in bits per character (loss / ln 2):
// the unit character-level results are usually quoted in. The one conversion that
// train's progress, metrics.csv and eval's report all use. A toy task's targets are
// tokens, not characters, so its losses have no bits per character.
double bits_per_char(double nats_per_char);

// The seed of a run's validation batches (stream 2 of its seed): `headroom eval`
// draws the same batches as the trainer did.
constexpr std::uint64_t validation_seed(std::uint64_t seed) { return stream_seed(seed, 2); }

// The `batches` validation batches of `batch` rows that evaluate() draws for `seed`,
// or the source's fixed ones (Dataset::fixed_validation: a classifier's).
std::vector<Batch> validation_batches(const Dataset& data, std::size_t batches, std::size_t batch, std::uint64_t seed);

// The Bayes loss of the counted targets of the given batches (the mean of their
// target_nll), exactly as evaluate_batches reports it, without a model: empty when a
// batch does not know its distribution. `headroom train` shows it before the first step.
std::optional<double> bayes_loss(const std::vector<Batch>& batches);

// Loss and accuracy over the counted targets of the given batches, with the model's
// heads gated as they are. Runs under NoGrad in eval mode and restores the mode the
// model was in.
EvalResult evaluate_batches(TransformerLM<float>& model, const std::vector<Batch>& batches);

// evaluate_batches on validation_batches(data, batches, batch, seed): the same
// batches at every evaluation of a run.
EvalResult evaluate(TransformerLM<float>& model, const Dataset& data, std::size_t batches, std::size_t batch,
                    std::uint64_t seed);

// Every id of `ids` but the first, predicted once: windows of T+1 ids with stride T
// (the last one shorter when the text does not divide evenly), `batch` windows at a
// time, at most max_batches batches (0: all). Each target sees the context of its
// own window only, as in training. `batches_done` receives the batches read.
// Restores the model's mode, as evaluate_batches does.
EvalResult evaluate_windows(TransformerLM<float>& model, std::span<const Index> ids, std::size_t T, std::size_t batch,
                            std::size_t max_batches, std::size_t& batches_done);

}  // namespace headroom
