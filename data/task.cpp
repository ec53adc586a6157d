#include "data/task.hpp"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "data/stable_hash.hpp"

namespace headroom {
namespace {

// Rejection sampling needs about 8 draws per val row and 8/7 per train row. A split
// that stays empty this long is (for all practical purposes) empty: the task's
// vocab and seq_len allow too few distinct examples to split.
constexpr std::size_t kMaxDrawsPerRow = std::size_t{1} << 16;

constexpr std::uint64_t kExampleSeed = 0;

}  // namespace

const char* split_name(Split split) { return split == Split::train ? "train" : "val"; }

Task::Task(std::string name, TaskOptions options)
    : name_(std::move(name)), vocab_(options.vocab), seq_len_(options.seq_len) {}

void Task::vocab_too_small(std::size_t needed, const std::string& why) const {
  throw DataError(fmt::format("{}: vocab {} is too small: needs at least {} ({})", name_, vocab_,
                              needed, why));
}

void Task::seq_len_too_short(std::size_t needed, const std::string& why) const {
  throw DataError(fmt::format("{}: seq_len {} is too short: needs at least {} ({})", name_,
                              seq_len_, needed, why));
}

Batch Task::sample(std::size_t batch, Split split, Rng& rng) const {
  if (batch == 0) throw DataError(fmt::format("{}: batch size must be positive, got 0", name_));
  const std::size_t row_len = seq_len_ + 1;
  Batch out{IndexArray::from_shape({batch, row_len}),  // (B, T+1)
            Mask::from_shape({batch, seq_len_}),       // (B, T)
            std::vector<double>(batch * seq_len_, 0.0)};  // (B, T)
  for (std::size_t b = 0; b < batch; ++b) {
    const std::span<Index> row(out.tokens.data() + b * row_len, row_len);
    const std::span<bool> counted(out.target_mask.data() + b * seq_len_, seq_len_);
    std::size_t draws = 0;
    do {
      if (draws++ == kMaxDrawsPerRow) {
        throw DataError(fmt::format(
            "{}: drew {} examples without one in the {} split: vocab {} and seq_len {} allow "
            "too few distinct examples to split them train/val (about 1 in 8 goes to val)",
            name_, kMaxDrawsPerRow, split_name(split), vocab_, seq_len_));
      }
      std::fill(row.begin(), row.end(), kPad);
      std::fill(counted.begin(), counted.end(), false);
      generate(rng, row, counted);
    } while (example_split(row) != split);
    for (std::size_t t = 0; t < seq_len_; ++t) {
      if (counted[t]) out.target_nll[b * seq_len_ + t] = target_nll(row, t);
    }
  }
  return out;
}

Batch Task::draw(Rng& rng) const {
  const std::size_t row_len = seq_len_ + 1;
  Batch out{IndexArray::from_shape({1, row_len}), Mask::from_shape({1, seq_len_}),
            std::vector<double>(seq_len_, 0.0)};
  const std::span<Index> row(out.tokens.data(), row_len);
  const std::span<bool> counted(out.target_mask.data(), seq_len_);
  std::fill(row.begin(), row.end(), kPad);
  std::fill(counted.begin(), counted.end(), false);
  generate(rng, row, counted);
  for (std::size_t t = 0; t < seq_len_; ++t) {
    if (counted[t]) out.target_nll[t] = target_nll(row, t);
  }
  return out;
}

PatchPair Task::patch_pair(Rng& rng) const {
  const std::size_t row_len = seq_len_ + 1;
  PatchPair pair;
  pair.clean.assign(row_len, kPad);
  std::unique_ptr<bool[]> counted(new bool[seq_len_]());
  generate(rng, pair.clean, std::span<bool>(counted.get(), seq_len_));
  pair.corrupted = pair.clean;
  const std::size_t t = corrupt(rng, pair.clean, pair.corrupted, std::span<const bool>(counted.get(), seq_len_));
  pair.position = t;
  pair.clean_answer = pair.clean[t + 1];
  pair.corrupted_answer = pair.corrupted[t + 1];
  if (t >= seq_len_ || !counted[t] || pair.clean_answer == pair.corrupted_answer) {
    throw std::logic_error(fmt::format("{}: the corruption left target {} unchanged or uncounted", name_, t));
  }
  return pair;
}

double Task::target_nll(std::span<const Index> /*row*/, std::size_t /*t*/) const { return 0.0; }

std::string Task::example() const {
  Rng rng(kExampleSeed);
  const Batch b = sample(1, Split::train, rng);
  return name_ + ": " +
         render_example(std::span<const Index>(b.tokens.data(), seq_len_ + 1),
                        std::span<const bool>(b.target_mask.data(), seq_len_));
}

std::uint64_t example_hash(std::span<const Index> row) {
  StableHash h;
  for (const Index id : row) h.add(static_cast<std::uint64_t>(id), 8);
  return h.finish();
}

Split example_split(std::span<const Index> row) {
  return example_hash(row) % 8 == 0 ? Split::val : Split::train;
}

std::string render_example(std::span<const Index> row, std::span<const bool> counted) {
  if (counted.size() + 1 != row.size()) {
    throw DataError(fmt::format("render_example: mask has {} entries for a row of {} tokens "
                                "(needs one fewer)",
                                counted.size(), row.size()));
  }
  std::string out;
  for (std::size_t i = 0; i < row.size(); ++i) {
    const bool in_answer = i > 0 && counted[i - 1];
    const bool opens = in_answer && (i == 1 || !counted[i - 2]);
    const bool closes = in_answer && (i == counted.size() || !counted[i]);
    if (i > 0) out += ' ';
    if (opens) out += '[';
    switch (row[i]) {
      case kPad: out += '_'; break;
      case kSep: out += '|'; break;
      case kQuery: out += '?'; break;
      default: out += fmt::format("{}", row[i]);
    }
    if (closes) out += ']';
  }
  return out;
}

}  // namespace headroom
