// What the trainer sees of any data source: seeded batches of token rows for a
// decoder-only language model, split into train and val.
//
// Legend: B = batch, T = seq_len (model inputs per row), V = vocab_size.
// A row holds T+1 tokens: the model reads tokens[:, :T] and is scored on the
// next-token targets tokens[:, 1:], but only where target_mask is true, so a task
// can count its answer and ignore its prompt (cross_entropy takes the mask as is).
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/ops.hpp"  // IndexArray, Mask
#include "autograd/random.hpp"

namespace headroom {

// Bad data configuration or bad input files; a std::invalid_argument so the CLI
// prints it as one line (docs/design.md #5). Messages name the task or file and values.
class DataError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class Split { train, val };

// "train" or "val".
const char* split_name(Split split);

struct Batch {
  IndexArray tokens;  // (B, T+1), ids in [0, V)
  Mask target_mask;   // (B, T): true where the target tokens[b, t+1] counts
  // (B, T) row-major, or empty when the source does not know its distribution (a
  // text): -log p_true(tokens[b, t+1] | tokens[b, :t+1]) under the distribution the
  // rows are drawn from, where target_mask is true (0 elsewhere). Its mean over the
  // counted targets is the Bayes loss of those very targets, so a model's loss minus
  // it (the excess loss) has little sampling noise (docs/design.md #14).
  std::vector<double> target_nll{};

  bool knows_truth() const { return !target_nll.empty(); }
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  // A task's name ("copy") or a text dataset's file path.
  virtual std::string name() const = 0;
  virtual std::size_t vocab_size() const = 0;
  virtual std::size_t seq_len() const = 0;

  // `batch` rows drawn from `split`. Deterministic given rng's state: the same seed
  // gives bit-identical batches. Every row has at least one counted target.
  virtual Batch sample(std::size_t batch, Split split, Rng& rng) const = 0;

  // The validation batches of a source whose val split is a fixed set of items worth
  // scoring as a set (a classifier's): `batches` batches of `batch` rows, the same for
  // every seed; nothing for a source that validates on drawn batches.
  virtual std::optional<std::vector<Batch>> fixed_validation(std::size_t /*batches*/, std::size_t /*batch*/) const {
    return std::nullopt;
  }
};

}  // namespace headroom
