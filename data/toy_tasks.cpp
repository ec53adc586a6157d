// The toy tasks and their registry. Shared conventions (task.hpp): ids 0, 1, 2
// are pad "_", separator "|" and query "?"; content tokens are [3, V); a row holds
// T+1 tokens; counted[t] says whether the target row[t + 1] is scored.
#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "data/task.hpp"

namespace headroom {
namespace {

constexpr std::size_t kSpecials = static_cast<std::size_t>(kFirstContent);

Index draw_from(Rng& rng, Index first, std::size_t count) {
  return first + static_cast<Index>(rng.below(count));
}

// out.size() distinct ids from [first, first + count), in random order: the first
// steps of a Fisher-Yates shuffle of the pool.
void draw_distinct(Rng& rng, Index first, std::size_t count, std::span<Index> out) {
  std::vector<Index> pool(count);
  std::iota(pool.begin(), pool.end(), first);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::swap(pool[i], pool[i + rng.below(count - i)]);
    out[i] = pool[i];
  }
}

// copy, reverse, sort. With n = floor(T / 2):
//
//   position  0 .. n-1      n     n+1 .. 2n      2n+1 (only when T is odd)
//   token     s_1 .. s_n    |     a_1 .. a_n     _
//
// s is drawn uniformly from the content tokens, with repetition. The answer a is
//   copy:    s
//   reverse: s_n .. s_1
//   sort:    s in ascending id order
// Exactly the answer counts: targets t = n .. 2n-1 (the input there is the
// separator or an answer token, the target the next answer token).
// Needs T >= 2 (n >= 1) and V >= 5 (two content tokens, or there is nothing to learn).
class SeparatedAnswerTask : public Task {
 public:
  enum class Rule { copy, reverse, sort };

  SeparatedAnswerTask(std::string name, Rule rule, TaskOptions options)
      : Task(std::move(name), options), rule_(rule), n_(options.seq_len / 2) {
    if (n_ < 1) seq_len_too_short(2, "one token, the separator and its answer");
    if (options.vocab < kSpecials + 2) vocab_too_small(kSpecials + 2, "3 special + 2 content");
  }

 protected:
  void generate(Rng& rng, std::span<Index> row, std::span<bool> counted) const override {
    const std::size_t content = vocab_size() - kSpecials;
    const std::span<Index> source = row.subspan(0, n_);
    const std::span<Index> answer = row.subspan(n_ + 1, n_);
    for (Index& id : source) id = draw_from(rng, kFirstContent, content);
    row[n_] = kSep;
    std::copy(source.begin(), source.end(), answer.begin());
    if (rule_ == Rule::reverse) std::reverse(answer.begin(), answer.end());
    if (rule_ == Rule::sort) std::sort(answer.begin(), answer.end());
    std::fill_n(counted.begin() + static_cast<std::ptrdiff_t>(n_), n_, true);
  }

 private:
  Rule rule_;
  std::size_t n_;  // source length
};

// recall (associative recall). With p = floor((T - 2) / 2) pairs:
//
//   position  0    1    ..  2p-2  2p-1   2p   2p+1   2p+2   2p+3 (only when T is odd)
//   token     k_1  v_1  ..  k_p   v_p    ?    k_q    v_q    _
//
// Keys come from the lower half of the content tokens, [3, 3 + K) with
// K = floor((V - 3) / 2), and are distinct within a row; values come from the upper
// half [3 + K, V), with repetition. The query key k_q is one of the row's keys,
// chosen uniformly; the answer is its value. Only that target counts: t = 2p + 1
// (input k_q, target v_q). Needs T >= 4 (p >= 1) and K >= p, i.e. V >= 3 + 2p.
class RecallTask : public Task {
 public:
  explicit RecallTask(TaskOptions options)
      : Task("recall", options), pairs_(options.seq_len >= 4 ? (options.seq_len - 2) / 2 : 0) {
    if (pairs_ < 1) {
      seq_len_too_short(4, "one key-value pair, the query marker, a key and its value");
    }
    keys_ = (options.vocab - std::min(options.vocab, kSpecials)) / 2;
    if (keys_ < pairs_) {
      vocab_too_small(kSpecials + 2 * pairs_,
                      fmt::format("3 special + {0} keys + {0} values for the {0} pairs of "
                                  "seq_len {1}",
                                  pairs_, options.seq_len));
    }
  }

 protected:
  void generate(Rng& rng, std::span<Index> row, std::span<bool> counted) const override {
    const Index first_value = kFirstContent + static_cast<Index>(keys_);
    const std::size_t values = vocab_size() - kSpecials - keys_;
    std::vector<Index> keys(pairs_);
    draw_distinct(rng, kFirstContent, keys_, keys);
    for (std::size_t i = 0; i < pairs_; ++i) {
      row[2 * i] = keys[i];
      row[2 * i + 1] = draw_from(rng, first_value, values);
    }
    const std::size_t q = rng.below(pairs_);
    row[2 * pairs_] = kQuery;
    row[2 * pairs_ + 1] = row[2 * q];
    row[2 * pairs_ + 2] = row[2 * q + 1];
    counted[2 * pairs_ + 1] = true;
  }

 private:
  std::size_t pairs_;  // p
  std::size_t keys_;   // K, the size of the key pool
};

// induction. With n = floor((T + 1) / 2):
//
//   position  0 .. n-1      n .. 2n-1      2n (only when T is even)
//   token     s_1 .. s_n    s_1 .. s_n     _
//
// s holds n distinct content tokens, so that within the repeat every token after
// its first is determined by an induction head (find the earlier occurrence of the
// current token, copy its successor). Those targets count: t = n .. 2n-2 (input
// s_i of the repeat, target s_{i+1}, for i = 1 .. n-1). The repeat's first token
// does not count: it follows s_n, which occurs nowhere earlier.
// Needs T >= 3 (n >= 2, one counted target) and V >= 3 + n.
class InductionTask : public Task {
 public:
  explicit InductionTask(TaskOptions options)
      : Task("induction", options), n_((options.seq_len + 1) / 2) {
    if (n_ < 2) seq_len_too_short(3, "two tokens and their repeat");
    if (options.vocab < kSpecials + n_) {
      vocab_too_small(kSpecials + n_, fmt::format("3 special + {} distinct content tokens for "
                                                  "the first half of seq_len {}",
                                                  n_, options.seq_len));
    }
  }

 protected:
  void generate(Rng& rng, std::span<Index> row, std::span<bool> counted) const override {
    draw_distinct(rng, kFirstContent, vocab_size() - kSpecials, row.subspan(0, n_));
    std::copy_n(row.begin(), n_, row.begin() + static_cast<std::ptrdiff_t>(n_));
    std::fill_n(counted.begin() + static_cast<std::ptrdiff_t>(n_), n_ - 1, true);
  }

 private:
  std::size_t n_;  // length of the sequence and of its repeat
};

// before (which of two came first). With n = T - 3:
//
//   position  0 .. n-1      n    n+1   n+2   n+3
//   token     s_1 .. s_n    ?    a     b     [a or b]
//
// s holds n distinct content tokens; a and b are two different tokens of s, in
// random order. The answer is whichever of a and b occurs earlier in s. Only it
// counts: t = n + 2 (input b, target the answer).
//
// The answer depends on two positions of s chosen by content (where a is, where b
// is), and on nothing else: no fixed offset finds them. A head that attends to both
// sums what it reads from them, and a sum of two positions says nothing about which
// is first; two heads can each fetch one. Needs T >= 5 (n >= 2) and V >= 3 + n.
class BeforeTask : public Task {
 public:
  explicit BeforeTask(TaskOptions options)
      : Task("before", options), n_(options.seq_len >= 3 ? options.seq_len - 3 : 0) {
    if (n_ < 2) seq_len_too_short(5, "two tokens, the query marker, two query tokens and the answer");
    if (options.vocab < kSpecials + n_) {
      vocab_too_small(kSpecials + n_, fmt::format("3 special + {} distinct content tokens for the sequence of "
                                                  "seq_len {}",
                                                  n_, options.seq_len));
    }
  }

 protected:
  void generate(Rng& rng, std::span<Index> row, std::span<bool> counted) const override {
    draw_distinct(rng, kFirstContent, vocab_size() - kSpecials, row.subspan(0, n_));
    // Two different positions i < j of s; which of them is asked first is a coin flip.
    const std::size_t i = rng.below(n_);
    std::size_t j = rng.below(n_ - 1);
    j += j >= i ? 1 : 0;
    const std::size_t first = std::min(i, j);
    row[n_] = kQuery;
    row[n_ + 1] = row[i];
    row[n_ + 2] = row[j];
    row[n_ + 3] = row[first];
    counted[n_ + 2] = true;
  }

 private:
  std::size_t n_;  // length of the sequence
};

using Factory = std::function<std::unique_ptr<Task>(TaskOptions)>;

const std::vector<std::pair<std::string, Factory>>& registry() {
  using Rule = SeparatedAnswerTask::Rule;
  static const std::vector<std::pair<std::string, Factory>> tasks = {
      {"copy",
       [](TaskOptions o) { return std::make_unique<SeparatedAnswerTask>("copy", Rule::copy, o); }},
      {"reverse",
       [](TaskOptions o) {
         return std::make_unique<SeparatedAnswerTask>("reverse", Rule::reverse, o);
       }},
      {"sort",
       [](TaskOptions o) { return std::make_unique<SeparatedAnswerTask>("sort", Rule::sort, o); }},
      {"recall", [](TaskOptions o) { return std::make_unique<RecallTask>(o); }},
      {"induction", [](TaskOptions o) { return std::make_unique<InductionTask>(o); }},
      {"before", [](TaskOptions o) { return std::make_unique<BeforeTask>(o); }},
  };
  return tasks;
}

}  // namespace

std::unique_ptr<Task> make_task(const std::string& name, TaskOptions options) {
  for (const auto& [task_name, factory] : registry()) {
    if (task_name == name) return factory(options);
  }
  throw DataError(fmt::format("unknown task '{}': valid names are {}", name,
                              fmt::join(task_names(), ", ")));
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  return names;
}

}  // namespace headroom
