// The toy tasks and their registry. Shared conventions (task.hpp): ids 0, 1, 2
// are pad "_", separator "|" and query "?"; content tokens are [3, V); a row holds
// T+1 tokens; counted[t] says whether the target row[t + 1] is scored.
#include <algorithm>
#include <cmath>
#include <limits>
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

// A content token of [3, 3 + content) other than `avoid`, uniformly (content >= 2).
Index other_content(Rng& rng, Index avoid, std::size_t content) {
  Index id = draw_from(rng, kFirstContent, content - 1);
  return id >= avoid ? id + 1 : id;
}

// A content token that occurs nowhere in row, uniformly; `task` and `why` name the
// vocab needed when there is none.
Index absent_content(Rng& rng, std::span<const Index> row, std::size_t vocab, const std::string& task,
                     std::size_t needed) {
  std::vector<Index> absent;
  for (Index id = kFirstContent; id < static_cast<Index>(vocab); ++id) {
    if (std::find(row.begin(), row.end(), id) == row.end()) absent.push_back(id);
  }
  if (absent.empty()) {
    throw DataError(fmt::format("{}: vocab {} has no content token left for a corrupted patch pair (every one is in "
                                "the row): needs at least {}",
                                task, vocab, needed));
  }
  return absent[rng.below(absent.size())];
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
//
// Patch pairs (corrupt): copy and reverse pick a counted target t = n + i uniformly
// (its answer a_{i+1}) and change the one source token it copies (s_{i+1} for copy,
// s_{n-i} for reverse) to another content token, uniformly; the answer is rewritten,
// and a_1 .. a_i, inputs before t, stay as they were. sort takes t = n, whose answer
// is min s: when min s > 3 one uniformly chosen source token becomes a token below
// min s (the new minimum), uniformly; when min s = 3 every 3 in s becomes a token
// above 3, uniformly (the minimum rises). Either way the first answer changes.
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
    for (Index& id : source) id = draw_from(rng, kFirstContent, content);
    row[n_] = kSep;
    write_answer(row);
    std::fill_n(counted.begin() + static_cast<std::ptrdiff_t>(n_), n_, true);
  }

  std::size_t corrupt(Rng& rng, std::span<Index> /*clean*/, std::span<Index> row,
                      std::span<const bool> /*counted*/) const override {
    const std::size_t content = vocab_size() - kSpecials;
    const std::span<Index> source = row.subspan(0, n_);
    std::size_t t = n_;
    if (rule_ == Rule::sort) {
      const Index low = *std::min_element(source.begin(), source.end());
      if (low > kFirstContent) {
        source[rng.below(n_)] = draw_from(rng, kFirstContent, static_cast<std::size_t>(low - kFirstContent));
      } else {
        for (Index& id : source) {
          if (id == kFirstContent) id = draw_from(rng, kFirstContent + 1, content - 1);
        }
      }
    } else {
      const std::size_t i = rng.below(n_);
      t = n_ + i;
      const std::size_t from = rule_ == Rule::copy ? i : n_ - 1 - i;
      source[from] = other_content(rng, source[from], content);
    }
    write_answer(row);
    return t;
  }

 private:
  // The answer a (row[n+1 .. 2n]) from the source s (row[0 .. n-1]) by the rule.
  void write_answer(std::span<Index> row) const {
    const std::span<Index> source = row.subspan(0, n_);
    const std::span<Index> answer = row.subspan(n_ + 1, n_);
    std::copy(source.begin(), source.end(), answer.begin());
    if (rule_ == Rule::reverse) std::reverse(answer.begin(), answer.end());
    if (rule_ == Rule::sort) std::sort(answer.begin(), answer.end());
  }

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
//
// Patch pairs (corrupt): t = 2p + 1; the queried value v_q (at 2q + 1, and the
// answer) becomes another value token, uniformly. Needs two value tokens (V >= 6).
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

  std::size_t corrupt(Rng& rng, std::span<Index> /*clean*/, std::span<Index> row,
                      std::span<const bool> /*counted*/) const override {
    const std::size_t values = vocab_size() - kSpecials - keys_;
    if (values < 2) {
      throw DataError(fmt::format("recall: vocab {} has {} value token, none left to change the queried value to in "
                                  "a corrupted patch pair: needs at least 6",
                                  vocab_size(), values));
    }
    const std::size_t t = 2 * pairs_ + 1;
    std::size_t q = 0;
    while (row[2 * q] != row[t]) ++q;
    const Index first_value = kFirstContent + static_cast<Index>(keys_);
    const Index v = first_value + other_content(rng, row[2 * q + 1] - first_value + kFirstContent, values) -
                    kFirstContent;
    row[2 * q + 1] = v;
    row[t + 1] = v;
    return t;
  }

 private:
  std::size_t pairs_;  // p
  std::size_t keys_;   // K, the size of the key pool
};

// induction. With L = max(2, floor((T + 1) / 3)) and F = T + 1 - 2L:
//
//   position  0 .. s-1   s .. s+L-1    s+L .. r-1   r .. r+L-1    r+L .. T
//   token     f ..       g_1 .. g_L    f ..         g_1 .. g_L    f ..
//
// A segment g of L content tokens, then its repeat; the segment starts at s, drawn
// uniformly from 0 .. F, and the repeat at r, drawn uniformly from s + L .. s + L +
// (F - s). Every other position holds a filler token f, and the T + 1 - L tokens of
// the segment and the fillers are all distinct. The repeat after its first token
// counts: t = r .. r+L-2 (input g_i of the repeat, target g_{i+1}, i = 1 .. L-1).
// g_1 at r is the row's only token seen twice, so each counted target is determined
// by its context (find the earlier occurrence of the current token, copy its
// successor), and, since s and r - s vary from row to row, no fixed offset finds it.
// g_1 of the repeat does not count: nothing before it says where the repeat starts.
// Needs T >= 3 (L >= 2) and V >= 3 + T + 1 - L.
//
// Patch pairs (corrupt): t = r + i for i uniform in 0 .. L-2 (input g_{i+1} of the
// repeat, target g_{i+2}). The token after g_{i+1}'s first occurrence, g_{i+2} at
// s + i + 1 (the one an induction head copies), becomes a content token absent from
// the row, uniformly, and so does its repeat at r + i + 1, the answer: the only
// input before t that changes is s + i + 1. Needs one content token beyond the
// row's: V >= 4 + T + 1 - L.
class InductionTask : public Task {
 public:
  explicit InductionTask(TaskOptions options)
      : Task("induction", options), len_(std::max<std::size_t>(2, (options.seq_len + 1) / 3)) {
    if (options.seq_len < 3) seq_len_too_short(3, "a segment of two tokens and its repeat");
    const std::size_t distinct = options.seq_len + 1 - len_;
    if (options.vocab < kSpecials + distinct) {
      vocab_too_small(kSpecials + distinct,
                      fmt::format("3 special + {} distinct content tokens: a segment of {} and {} fillers for the "
                                  "{} tokens of seq_len {}",
                                  distinct, len_, distinct - len_, options.seq_len + 1, options.seq_len));
    }
  }

 protected:
  void generate(Rng& rng, std::span<Index> row, std::span<bool> counted) const override {
    const std::size_t spare = row.size() - 2 * len_;  // F
    std::vector<Index> tokens(row.size() - len_);   // the segment, then the fillers
    draw_distinct(rng, kFirstContent, vocab_size() - kSpecials, tokens);
    const std::size_t s = rng.below(spare + 1);
    const std::size_t r = s + len_ + rng.below(spare - s + 1);
    std::size_t filler = len_;
    for (std::size_t p = 0; p < row.size(); ++p) {
      if (p >= s && p < s + len_) {
        row[p] = tokens[p - s];
      } else if (p >= r && p < r + len_) {
        row[p] = tokens[p - r];
      } else {
        row[p] = tokens[filler++];
      }
    }
    std::fill_n(counted.begin() + static_cast<std::ptrdiff_t>(r), len_ - 1, true);
  }

  std::size_t corrupt(Rng& rng, std::span<Index> /*clean*/, std::span<Index> row,
                      std::span<const bool> /*counted*/) const override {
    // The repeat starts at the first token seen before; s is where it was seen.
    std::size_t r = 1, s = 0;
    for (;; ++r) {
      const auto* earlier = std::find(row.data(), row.data() + r, row[r]);
      if (earlier != row.data() + r) {
        s = static_cast<std::size_t>(earlier - row.data());
        break;
      }
    }
    const std::size_t i = rng.below(len_ - 1);
    const Index fresh = absent_content(rng, row, vocab_size(), name(), kSpecials + row.size() - len_ + 1);
    row[s + i + 1] = fresh;
    row[r + i + 1] = fresh;
    return r + i;
  }

 private:
  std::size_t len_;  // L, the segment's length
};

// repeat (the first induction layout). With n = floor((T + 1) / 2):
//
//   position  0 .. n-1      n .. 2n-1      2n (only when T is even)
//   token     s_1 .. s_n    s_1 .. s_n     _
//
// s holds n distinct content tokens, so that within the repeat every token after
// its first is determined by an induction head (find the earlier occurrence of the
// current token, copy its successor). Every repeat starts at the same place, so a
// head that attends n - 1 positions back (a positional copy) solves it as well:
// `induction` is the layout where only the induction rule works. Those targets count: t = n .. 2n-2 (input
// s_i of the repeat, target s_{i+1}, for i = 1 .. n-1). The repeat's first token
// does not count: it follows s_n, which occurs nowhere earlier.
// Needs T >= 3 (n >= 2, one counted target) and V >= 3 + n.
//
// Patch pairs (corrupt): t = n + i for i uniform in 0 .. n-2 (input s_{i+1} of the
// repeat, target s_{i+2}); s_{i+2}, at i + 1 and at n + i + 1 (the answer), becomes
// a content token absent from the row, uniformly. Needs V >= 4 + n.
class RepeatTask : public Task {
 public:
  explicit RepeatTask(TaskOptions options)
      : Task("repeat", options), n_((options.seq_len + 1) / 2) {
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

  std::size_t corrupt(Rng& rng, std::span<Index> /*clean*/, std::span<Index> row,
                      std::span<const bool> /*counted*/) const override {
    const std::size_t i = rng.below(n_ - 1);
    const Index fresh = absent_content(rng, row, vocab_size(), name(), kSpecials + n_ + 1);
    row[i + 1] = fresh;
    row[n_ + i + 1] = fresh;
    return n_ + i;
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
//
// Patch pairs (corrupt): t = n + 2; a and b swap their positions in s, so the other
// one comes first and is the answer. The query is unchanged.
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

  std::size_t corrupt(Rng& /*rng*/, std::span<Index> /*clean*/, std::span<Index> row,
                      std::span<const bool> /*counted*/) const override {
    const auto s = row.subspan(0, n_);
    const auto i = std::find(s.begin(), s.end(), row[n_ + 1]);
    const auto j = std::find(s.begin(), s.end(), row[n_ + 2]);
    std::iter_swap(i, j);
    row[n_ + 3] = i < j ? *i : *j;  // whichever of the two now comes first
    return n_ + 2;
  }

 private:
  std::size_t n_;  // length of the sequence
};

// lags and lags_argmax. With n = context, K = lags and B = floor((T + 1) / (n + 2))
// blocks:
//
//   position  0 .. n-1      n    n+1    n+2 .. 2n+1    2n+2   2n+3   ..   (pad to T)
//   token     x_1 .. x_n    ?    y      x_1 .. x_n     ?      y      ..   _
//
// Each block's x are drawn uniformly from the C = V - 3 content tokens, with
// repetition, independently of the other blocks. Its label y is a content token
// drawn from
//
//   p(y | x) = softmax_y( sum over k in K of A_k[x_{n+1-k}, y] )
//
// (x_{n+1-k} is the token k positions before the query), where each table A_k is
// C x C with entries N(0, lag_beta^2), drawn from Rng(task_seed) in the order
// (k in the order K lists them, row, column): the truth is the task's, not the
// run's, so every run of a sweep learns the same tables. lags_argmax has the same
// rows with y = argmax_y of the same logits (the first on a tie), so its labels are
// determined. Only the labels count: t = b (n + 2) + n for b = 0 .. B-1 (input ?,
// target y). lags's target_nll is -log p(y | x), computed in double.
// Needs offsets >= 1, distinct, at most n; T >= n + 1 (one block); V >= 5.
//
// Patch pairs (corrupt): t = the query of a block b drawn uniformly. Both rows'
// label there is the argmax of the true logits (lags_argmax's label; for lags the
// most likely one, which lags draws with positive probability), so the answers are
// the labels a perfect model ranks first. One token at a lag, x_{n+1-k}, becomes
// another content token: the candidates (k, token) are tried in a uniformly random
// order, and the first that changes the argmax is taken. A DataError when none does
// (lag_beta 0: every label ties).
class LagsTask : public Task {
 public:
  LagsTask(std::string name, bool argmax, TaskOptions options)
      : Task(std::move(name), options), argmax_(argmax), lags_(options.lags), n_(options.context),
        lag_beta_(options.lag_beta) {
    const std::string listed = fmt::format("[{}]", fmt::join(lags_, ", "));
    if (n_ == 0) throw DataError(fmt::format("{}: context must be at least 1, got 0", this->name()));
    if (lags_.empty()) throw DataError(fmt::format("{}: lags is empty: the label needs at least one offset", this->name()));
    for (std::size_t i = 0; i < lags_.size(); ++i) {
      if (lags_[i] == 0) {
        throw DataError(fmt::format("{}: offset 0 in lags {}: offsets are >= 1 (1 is the token just before the "
                                    "query)",
                                    this->name(), listed));
      }
      if (lags_[i] > n_) {
        throw DataError(fmt::format("{}: offset {} in lags {} is beyond the context {}: a block holds {} content "
                                    "tokens before its query",
                                    this->name(), lags_[i], listed, n_, n_));
      }
      if (std::find(lags_.begin(), lags_.begin() + static_cast<std::ptrdiff_t>(i), lags_[i]) !=
          lags_.begin() + static_cast<std::ptrdiff_t>(i)) {
        throw DataError(fmt::format("{}: offset {} is listed twice in lags {}", this->name(), lags_[i], listed));
      }
    }
    if (!(options.lag_beta >= 0) || !std::isfinite(options.lag_beta)) {
      throw DataError(fmt::format("{}: lag_beta must be a finite number >= 0, got {}", this->name(), options.lag_beta));
    }
    if (options.seq_len + 1 < n_ + 2) {
      seq_len_too_short(n_ + 1, fmt::format("one block: {} content tokens, the query marker and the label", n_));
    }
    if (options.vocab < kSpecials + 2) vocab_too_small(kSpecials + 2, "3 special + 2 content");
    content_ = options.vocab - kSpecials;
    if (content_ > kMaxTableSide) {
      vocab_too_small_for_tables(options.vocab);
    }
    blocks_ = (options.seq_len + 1) / (n_ + 2);
    tables_.resize(lags_.size() * content_ * content_);  // (|K|, C, C)
    Rng table_rng(options.task_seed);
    for (double& a : tables_) a = table_rng.normal();
    // A label's logit is a sum of one entry of each table: finite for every row
    // exactly when lag_beta times the sum of the tables' largest entries is. Beyond
    // that the softmax, and so the Bayes loss, is NaN.
    double largest = 0;
    for (std::size_t j = 0; j < lags_.size(); ++j) {
      double m = 0;
      for (std::size_t i = 0; i < content_ * content_; ++i) m = std::max(m, std::abs(tables_[j * content_ * content_ + i]));
      largest += m;
    }
    const double limit = std::numeric_limits<double>::max() / 2 / std::max(largest, 1.0);
    if (options.lag_beta > limit) {
      throw DataError(fmt::format("{}: lag_beta {} makes the label logits overflow, so the Bayes loss is not finite; "
                                  "at task_seed {} it may be at most {:.3g}",
                                  this->name(), options.lag_beta, options.task_seed, limit));
    }
    for (double& a : tables_) a *= options.lag_beta;
  }

 protected:
  void generate(Rng& rng, std::span<Index> row, std::span<bool> counted) const override {
    std::vector<double> logits(content_);
    for (std::size_t b = 0; b < blocks_; ++b) {
      const std::size_t q = b * (n_ + 2) + n_;  // the query's position
      for (std::size_t i = q - n_; i < q; ++i) row[i] = draw_from(rng, kFirstContent, content_);
      row[q] = kQuery;
      label_logits(row, q, logits);
      std::size_t y = 0;
      if (argmax_) {
        y = static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      } else {
        // Inverse CDF of the softmax; the last label takes what rounding leaves.
        const double top = *std::max_element(logits.begin(), logits.end());
        double z = 0;
        for (const double l : logits) z += std::exp(l - top);
        double u = rng.uniform() * z;
        y = content_ - 1;
        for (std::size_t c = 0; c + 1 < content_; ++c) {
          u -= std::exp(logits[c] - top);
          if (u < 0) {
            y = c;
            break;
          }
        }
      }
      row[q + 1] = kFirstContent + static_cast<Index>(y);
      counted[q] = true;
    }
  }

  std::size_t corrupt(Rng& rng, std::span<Index> clean, std::span<Index> row,
                      std::span<const bool> /*counted*/) const override {
    const std::size_t q = rng.below(blocks_) * (n_ + 2) + n_;
    std::vector<double> logits(content_);
    const auto argmax = [&](std::span<const Index> r) {
      label_logits(r, q, logits);
      return kFirstContent + static_cast<Index>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    };
    const Index label = argmax(clean);
    clean[q + 1] = row[q + 1] = label;
    std::vector<std::pair<std::size_t, Index>> candidates;  // (lag index j, new token)
    for (std::size_t j = 0; j < lags_.size(); ++j) {
      for (Index id = kFirstContent; id < kFirstContent + static_cast<Index>(content_); ++id) {
        if (id != clean[q - lags_[j]]) candidates.emplace_back(j, id);
      }
    }
    for (std::size_t i = candidates.size(); i > 1; --i) std::swap(candidates[i - 1], candidates[rng.below(i)]);
    for (const auto& [j, id] : candidates) {
      row[q - lags_[j]] = id;
      const Index changed = argmax(row);
      if (changed != label) {
        row[q + 1] = changed;
        return q;
      }
      row[q - lags_[j]] = clean[q - lags_[j]];
    }
    throw DataError(fmt::format("{}: no change of one token at a lag changes the argmax label (lag_beta {} gives "
                                "every label the same logit?): corrupted patch pairs need labels that differ",
                                name(), lag_beta_));
  }

  double target_nll(std::span<const Index> row, std::size_t t) const override {
    if (argmax_) return 0.0;
    std::vector<double> logits(content_);
    label_logits(row, t, logits);
    const double top = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (const double l : logits) z += std::exp(l - top);
    const auto y = static_cast<std::size_t>(row[t + 1] - kFirstContent);
    return top + std::log(z) - logits[y];
  }

 private:
  // C x C x |K| at C = 4096, K = {1}: 128 MiB of doubles. A larger table is a typo
  // (a text-sized vocabulary), not a task.
  static constexpr std::size_t kMaxTableSide = 4096;

  [[noreturn]] void vocab_too_small_for_tables(std::size_t vocab) const {
    throw DataError(fmt::format("{}: vocab {} is too large: its tables are C x C for C = V - 3 content tokens, and C "
                                "may be at most {} (vocab {})",
                                name(), vocab, kMaxTableSide, kMaxTableSide + kSpecials));
  }

  // The logits of the label of the block whose query is at q: sum over k of
  // A_k[x at q - k, :].
  void label_logits(std::span<const Index> row, std::size_t q, std::span<double> logits) const {
    std::fill(logits.begin(), logits.end(), 0.0);
    for (std::size_t j = 0; j < lags_.size(); ++j) {
      const auto x = static_cast<std::size_t>(row[q - lags_[j]] - kFirstContent);
      const double* a = tables_.data() + (j * content_ + x) * content_;
      for (std::size_t y = 0; y < content_; ++y) logits[y] += a[y];
    }
  }

  bool argmax_;
  std::vector<std::size_t> lags_;  // K
  std::size_t n_;                  // content tokens per block
  double lag_beta_;
  std::size_t content_ = 0;        // C
  std::size_t blocks_ = 0;         // B
  std::vector<double> tables_;     // (|K|, C, C): A_k[x, y]
};

// lagdiff and lagsum (arithmetic mod p). With p = V - 3 and Q = floor((T + 1) / 4):
//
//   position  0   1   2   3    4   5   6   7    ..   (pad to T)
//   token     a   b   |   c    a   b   |   c    ..   _
//
// The content id 3 + i stands for i in Z_p; the separator | plays "=". a and b are
// uniform in Z_p, independently in each quadruple; c = (a - b) mod p for lagdiff
// and (a + b) mod p for lagsum. The c's count: t = 4i + 2 for i = 0 .. Q-1 (input |,
// target c). Needs T >= 3 (one quadruple) and V >= 5 (p >= 2).
//
// Patch pairs (corrupt): t = 4i + 2 for a quadruple i drawn uniformly; b becomes
// another element of Z_p, uniformly, and c is recomputed (it changes: b -> a +- b
// is one-to-one mod p).
class ModularTask : public Task {
 public:
  ModularTask(std::string name, bool difference, TaskOptions options)
      : Task(std::move(name), options), difference_(difference), quads_((options.seq_len + 1) / 4) {
    if (quads_ < 1) seq_len_too_short(3, "one quadruple a b | c");
    if (options.vocab < kSpecials + 2) vocab_too_small(kSpecials + 2, "3 special + 2 content: p >= 2");
  }

 protected:
  void generate(Rng& rng, std::span<Index> row, std::span<bool> counted) const override {
    const std::size_t p = vocab_size() - kSpecials;
    for (std::size_t i = 0; i < quads_; ++i) {
      const std::size_t a = rng.below(p);
      const std::size_t b = rng.below(p);
      const std::size_t c = difference_ ? (a + p - b) % p : (a + b) % p;
      row[4 * i] = kFirstContent + static_cast<Index>(a);
      row[4 * i + 1] = kFirstContent + static_cast<Index>(b);
      row[4 * i + 2] = kSep;
      row[4 * i + 3] = kFirstContent + static_cast<Index>(c);
      counted[4 * i + 2] = true;
    }
  }

  std::size_t corrupt(Rng& rng, std::span<Index> /*clean*/, std::span<Index> row,
                      std::span<const bool> /*counted*/) const override {
    const std::size_t p = vocab_size() - kSpecials;
    const std::size_t i = rng.below(quads_);
    row[4 * i + 1] = other_content(rng, row[4 * i + 1], p);
    const auto a = static_cast<std::size_t>(row[4 * i] - kFirstContent);
    const auto b = static_cast<std::size_t>(row[4 * i + 1] - kFirstContent);
    row[4 * i + 3] = kFirstContent + static_cast<Index>(difference_ ? (a + p - b) % p : (a + b) % p);
    return 4 * i + 2;
  }

 private:
  bool difference_;
  std::size_t quads_;  // Q
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
      {"repeat", [](TaskOptions o) { return std::make_unique<RepeatTask>(o); }},
      {"before", [](TaskOptions o) { return std::make_unique<BeforeTask>(o); }},
      {"lags", [](TaskOptions o) { return std::make_unique<LagsTask>("lags", false, o); }},
      {"lags_argmax", [](TaskOptions o) { return std::make_unique<LagsTask>("lags_argmax", true, o); }},
      {"lagdiff", [](TaskOptions o) { return std::make_unique<ModularTask>("lagdiff", true, o); }},
      {"lagsum", [](TaskOptions o) { return std::make_unique<ModularTask>("lagsum", false, o); }},
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

std::vector<std::string> task_option_keys(const std::string& name) {
  if (name == "lags" || name == "lags_argmax") return {"lags", "context", "lag_beta", "task_seed"};
  return {};
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  return names;
}

}  // namespace headroom
