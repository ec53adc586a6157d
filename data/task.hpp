// Seeded toy sequence tasks for probing what attention heads do: copy, reverse,
// sort, associative recall, induction, repeat, before (which of two tokens came
// first), lags and lags_argmax (a label drawn from a hidden table of the tokens at
// fixed offsets), lagdiff and lagsum (modular arithmetic). Each task fixes a token layout for rows
// of T+1 tokens over a vocabulary of V ids; the layouts are documented at the top
// of each task in toy_tasks.cpp and summarised in data/README.md.
//
// Every task reserves the same low ids: 0 pad (shown "_"), 1 separator ("|"),
// 2 query marker ("?"). Content tokens are the ids [3, V). Pad fills a row whose
// layout is shorter than T+1; targets that are pad never count.
//
// Train and val never share an example, by construction rather than by chance: an
// example (its row of T+1 tokens) belongs to val iff a fixed hash of it is 0 mod 8
// (example_split), and each split is sampled by rejection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace headroom {

inline constexpr Index kPad = 0;
inline constexpr Index kSep = 1;
inline constexpr Index kQuery = 2;
inline constexpr Index kFirstContent = 3;

struct TaskOptions {
  std::size_t vocab = 16;   // V: token ids are [0, V)
  std::size_t seq_len = 12; // T: model inputs per row; rows hold T+1 tokens
  // lags and lags_argmax only (task_option_keys); the other tasks refuse other values.
  std::vector<std::size_t> lags = {1, 2};  // K: the offsets before the query the label reads
  std::size_t context = 8;                 // n: content tokens per block
  double lag_beta = 1.0;                   // the tables' entries are N(0, lag_beta^2)
  std::uint64_t task_seed = 0;             // seeds the tables (not the run's seed)

  friend bool operator==(const TaskOptions&, const TaskOptions&) = default;
};

// A matched pair for activation patching (docs/design.md #22): a row as generate
// writes it and the same row corrupted by the task's rule (toy_tasks.cpp, at each
// task), which changes the answer at one counted target and as little else as the
// rule allows. Both rows hold T+1 tokens; the model reads tokens [0, T).
struct PatchPair {
  std::vector<Index> clean;      // (T+1)
  std::vector<Index> corrupted;  // (T+1)
  std::size_t position = 0;      // t: the answer is row[t + 1], predicted at input t
  Index clean_answer = 0;        // clean[t + 1]
  Index corrupted_answer = 0;    // corrupted[t + 1]; never clean_answer
};

class Task : public Dataset {
 public:
  std::string name() const override { return name_; }
  std::size_t vocab_size() const override { return vocab_; }
  std::size_t seq_len() const override { return seq_len_; }

  // Draws rows by rejection until each lands in `split` (see example_split). Throws
  // DataError when batch is 0, or when the task's vocab and seq_len allow so few
  // distinct examples that `split` is empty (or nearly so).
  Batch sample(std::size_t batch, Split split, Rng& rng) const override;

  // One training example at this task's vocab and seq_len (a fixed seed), on one
  // line, counted targets in brackets: "copy: 3 7 4 5 | [3 7 4 5]".
  std::string example() const;

  // One example as generate writes it, in whichever split it falls (no rejection): a
  // Batch of one row with its mask and target_nll. For tests of the distribution.
  Batch draw(Rng& rng) const;

  // One clean row drawn as draw does (either split), corrupted by the task's rule.
  // Throws DataError naming the vocab needed when the task's vocab leaves the rule
  // no spare token (induction, repeat, recall), and when no single change of the
  // rule alters the answer (lags with lag_beta 0).
  PatchPair patch_pair(Rng& rng) const;

  // target_nll for a row of this task's layout (public for tests of patch pairs).
  double row_target_nll(std::span<const Index> row, std::size_t t) const { return target_nll(row, t); }

 protected:
  Task(std::string name, TaskOptions options);

  // Writes one example into a row that arrives filled with kPad and a mask that
  // arrives all false: generate writes its tokens and sets its counted targets
  // (counted[t] is about row[t + 1]).
  virtual void generate(Rng& rng, std::span<Index> row, std::span<bool> counted) const = 0;

  // -log p_true(row[t + 1] | row[0 .. t]) for a counted target t of a row generate
  // wrote, under generate's distribution. The default, 0, is for a task whose counted
  // targets are determined by their context (copy, sort, recall, ...); a task with
  // random labels (lags) overrides it. tests/test_truth.cpp checks every task's value against
  // the conditional frequencies of rows drawn by generate.
  virtual double target_nll(std::span<const Index> row, std::size_t t) const;

  // The task's corruption for patch_pair: `corrupted` arrives as a copy of the
  // `clean` row generate wrote (counted its mask); the task changes it by its rule,
  // so that it is again a row generate could write, and returns the counted target t
  // whose answer row[t + 1] it changed. Only lags also rewrites `clean` (its label
  // at t becomes the most likely one).
  virtual std::size_t corrupt(Rng& rng, std::span<Index> clean, std::span<Index> corrupted,
                              std::span<const bool> counted) const = 0;

  // "copy: vocab 4 is too small: needs at least 5 (<why>)"
  [[noreturn]] void vocab_too_small(std::size_t needed, const std::string& why) const;
  // "copy: seq_len 1 is too short: needs at least 2 (<why>)"
  [[noreturn]] void seq_len_too_short(std::size_t needed, const std::string& why) const;

 private:
  std::string name_;
  std::size_t vocab_;
  std::size_t seq_len_;
};

// A fixed 64-bit hash of a row (FNV-1a over the ids' little-endian bytes, then the
// MurmurHash3 finaliser so the low bits are well mixed); the same on every platform.
std::uint64_t example_hash(std::span<const Index> row);
// Split::val iff example_hash(row) % 8 == 0: about one example in eight is val.
Split example_split(std::span<const Index> row);

// Ids as numbers, specials as "_", "|", "?"; the tokens that are counted targets
// (row[t + 1] where counted[t]) are wrapped in brackets, one pair per run.
// counted.size() must be row.size() - 1.
std::string render_example(std::span<const Index> row, std::span<const bool> counted);

// The task called `name` (one of task_names()), or a DataError listing the valid
// names. Also throws when options do not fit the task.
std::unique_ptr<Task> make_task(const std::string& name, TaskOptions options);
std::vector<std::string> task_names();

// The TaskOptions keys beyond vocab and seq_len that task `name` reads: "lags",
// "context", "lag_beta", "task_seed" for lags and lags_argmax, none for the others
// (nor for a name that is not a task). A value given for a key the task does not
// read is refused upstream (docs/design.md #11).
std::vector<std::string> task_option_keys(const std::string& name);

}  // namespace headroom
