// data/: the toy tasks follow their documented layouts exactly, the splits never
// share an example, batches are reproducible, and the character dataset reads,
// encodes and windows a real file. Errors are checked word for word.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "data/char_dataset.hpp"
#include "data/task.hpp"
#include "data/utf8.hpp"
#include "support.hpp"

using headroom::Batch;
using headroom::CharDataset;
using headroom::Index;
using headroom::IndexArray;
using headroom::Rng;
using headroom::Split;
using headroom::TaskOptions;
using Row = std::vector<Index>;

namespace {

constexpr Index kPad = headroom::kPad, kSep = headroom::kSep, kQuery = headroom::kQuery;

Row row_of(const Batch& b, std::size_t i) {
  const std::size_t len = b.tokens.shape(1);
  return Row(b.tokens.data() + i * len, b.tokens.data() + (i + 1) * len);
}

std::vector<bool> mask_of(const Batch& b, std::size_t i) {
  const std::size_t len = b.target_mask.shape(1);
  return std::vector<bool>(b.target_mask.data() + i * len, b.target_mask.data() + (i + 1) * len);
}

// The mask a layout should have: targets t in [first, last] count, nothing else.
std::vector<bool> counted_range(std::size_t seq_len, std::size_t first, std::size_t last) {
  std::vector<bool> m(seq_len, false);
  for (std::size_t t = first; t <= last; ++t) m[t] = true;
  return m;
}

Batch draw(const std::string& task, TaskOptions o, std::size_t rows, Split split = Split::train,
           std::uint64_t seed = 7) {
  Rng rng(seed);
  return headroom::make_task(task, o)->sample(rows, split, rng);
}

bool same(const Batch& a, const Batch& b) {
  return a.tokens == b.tokens && a.target_mask == b.target_mask;
}

}  // namespace

TEST_CASE("every task: shapes, ids in 0 .. V-1, at least one counted target per row") {
  for (const std::string& name : headroom::task_names()) {
    for (const TaskOptions& o : {TaskOptions{.vocab = 16, .seq_len = 12},
                                TaskOptions{.vocab = 16, .seq_len = 13},
                                TaskOptions{.vocab = 40, .seq_len = 33}}) {
      CAPTURE(name);
      CAPTURE(o.seq_len);
      const auto task = headroom::make_task(name, o);
      CHECK(task->name() == name);
      CHECK(task->vocab_size() == o.vocab);
      CHECK(task->seq_len() == o.seq_len);
      for (const Split split : {Split::train, Split::val}) {
        Rng rng(1);
        const Batch b = task->sample(64, split, rng);
        REQUIRE(b.tokens.shape() == std::vector<std::size_t>{64, o.seq_len + 1});
        REQUIRE(b.target_mask.shape() == std::vector<std::size_t>{64, o.seq_len});
        CHECK(xt::amin(b.tokens)() >= 0);
        CHECK(xt::amax(b.tokens)() < static_cast<Index>(o.vocab));
        for (std::size_t i = 0; i < 64; ++i) {
          const std::vector<bool> m = mask_of(b, i);
          CHECK(std::count(m.begin(), m.end(), true) >= 1);
          // A pad target never counts.
          for (std::size_t t = 0; t < o.seq_len; ++t) {
            if (b.tokens(i, t + 1) == kPad) CHECK_FALSE(m[t]);
          }
        }
      }
    }
  }
}

TEST_CASE("copy, reverse, sort: source | answer (pad), exactly the answer counts") {
  for (const std::size_t seq_len : {9u, 10u}) {
    const std::size_t n = seq_len / 2;
    for (const std::string name : {"copy", "reverse", "sort"}) {
      CAPTURE(name);
      CAPTURE(seq_len);
      const Batch b = draw(name, {.vocab = 12, .seq_len = seq_len}, 500);
      for (std::size_t i = 0; i < 500; ++i) {
        const Row row = row_of(b, i);
        Row source(row.begin(), row.begin() + n);
        const Row answer(row.begin() + n + 1, row.begin() + 2 * n + 1);
        for (const Index id : source) CHECK((id >= headroom::kFirstContent && id < 12));
        CHECK(row[n] == kSep);
        if (seq_len % 2 == 1) CHECK(row.back() == kPad);
        if (name == "reverse") std::reverse(source.begin(), source.end());
        if (name == "sort") std::sort(source.begin(), source.end());
        CHECK(answer == source);
        CHECK(mask_of(b, i) == counted_range(seq_len, n, 2 * n - 1));
      }
    }
  }
}

TEST_CASE("recall: k v pairs ? k v, distinct keys, the answer is the query key's value") {
  // V = 15: key pool [3, 9) (K = 6), value pool [9, 15). T = 11: p = 4 pairs and a pad.
  const std::size_t seq_len = 11, p = 4;
  const Batch b = draw("recall", {.vocab = 15, .seq_len = seq_len}, 1000);
  std::set<std::size_t> queried;  // which pair was asked about, over all rows
  for (std::size_t i = 0; i < 1000; ++i) {
    const Row row = row_of(b, i);
    std::set<Index> keys;
    for (std::size_t j = 0; j < p; ++j) {
      CHECK((row[2 * j] >= 3 && row[2 * j] < 9));
      CHECK((row[2 * j + 1] >= 9 && row[2 * j + 1] < 15));
      keys.insert(row[2 * j]);
    }
    CHECK(keys.size() == p);
    CHECK(row[2 * p] == kQuery);
    CHECK(row[2 * p + 3] == kPad);
    const Index query = row[2 * p + 1];
    std::size_t pair = p;
    for (std::size_t j = 0; j < p; ++j) {
      if (row[2 * j] == query) pair = j;
    }
    REQUIRE(pair < p);
    queried.insert(pair);
    CHECK(row[2 * p + 2] == row[2 * pair + 1]);
    CHECK(mask_of(b, i) == counted_range(seq_len, 2 * p + 1, 2 * p + 1));
  }
  CHECK(queried.size() == p);  // every pair position gets asked about
}

TEST_CASE("induction: a segment and its repeat at random offsets among distinct fillers, the repeat after its first token counts") {
  for (const std::size_t seq_len : {8u, 11u, 16u}) {
    const std::size_t L = std::max<std::size_t>(2, (seq_len + 1) / 3);
    CAPTURE(seq_len);
    const Batch b = draw("induction", {.vocab = 40, .seq_len = seq_len}, 2000);
    std::set<std::size_t> starts, gaps;
    for (std::size_t i = 0; i < 2000; ++i) {
      const Row row = row_of(b, i);
      // Exactly one token, the segment's first, occurs twice; all others once.
      std::map<Index, std::vector<std::size_t>> at;
      for (std::size_t p = 0; p < row.size(); ++p) at[row[p]].push_back(p);
      CHECK(at.size() == row.size() - L);
      for (const auto& [id, where] : at) CHECK((id >= 3 && id < 40));
      // The segment at s and its repeat at r: the first token seen twice.
      std::size_t r = 0;
      while (r < row.size() && at[row[r]].front() == r) ++r;
      REQUIRE(r < row.size());
      const std::size_t s = at[row[r]].front();
      CHECK(r >= s + L);
      REQUIRE(r + L <= row.size());
      for (std::size_t j = 0; j < L; ++j) CHECK(row[s + j] == row[r + j]);
      CHECK(mask_of(b, i) == counted_range(seq_len, r, r + L - 2));
      starts.insert(s);
      gaps.insert(r - s);
    }
    // Both the start and the distance vary: no fixed offset copies the answer.
    CHECK(starts.size() > 1);
    CHECK(gaps.size() > 1);
  }
}

TEST_CASE("repeat: n distinct tokens and their repeat, the repeat after its first token counts") {
  for (const std::size_t seq_len : {9u, 10u}) {
    const std::size_t n = (seq_len + 1) / 2;
    CAPTURE(seq_len);
    const Batch b = draw("repeat", {.vocab = 12, .seq_len = seq_len}, 500);
    for (std::size_t i = 0; i < 500; ++i) {
      const Row row = row_of(b, i);
      const Row first(row.begin(), row.begin() + n), repeat(row.begin() + n, row.begin() + 2 * n);
      CHECK(std::set<Index>(first.begin(), first.end()).size() == n);
      for (const Index id : first) CHECK((id >= 3 && id < 12));
      CHECK(repeat == first);
      if (seq_len % 2 == 0) CHECK(row.back() == kPad);
      // Target t is row[t + 1]: the repeat's 2nd .. nth tokens sit at n+1 .. 2n-1.
      CHECK(mask_of(b, i) == counted_range(seq_len, n, 2 * n - 2));
    }
  }
}

TEST_CASE("before: n distinct tokens ? a b, the answer is whichever of a and b occurs first") {
  // T = 10: n = 7 of the 9 content tokens [3, 12).
  const std::size_t seq_len = 10, n = 7;
  const Batch b = draw("before", {.vocab = 12, .seq_len = seq_len}, 2000);
  std::set<std::pair<std::size_t, std::size_t>> asked;  // (position of a, position of b)
  std::size_t answer_is_a = 0;
  for (std::size_t i = 0; i < 2000; ++i) {
    const Row row = row_of(b, i);
    const Row s(row.begin(), row.begin() + n);
    CHECK(std::set<Index>(s.begin(), s.end()).size() == n);
    for (const Index id : s) CHECK((id >= 3 && id < 12));
    CHECK(row[n] == kQuery);
    const auto pa = static_cast<std::size_t>(std::find(s.begin(), s.end(), row[n + 1]) - s.begin());
    const auto pb = static_cast<std::size_t>(std::find(s.begin(), s.end(), row[n + 2]) - s.begin());
    REQUIRE(pa < n);
    REQUIRE(pb < n);
    CHECK(pa != pb);
    asked.insert({pa, pb});
    CHECK(row[n + 3] == s[std::min(pa, pb)]);
    answer_is_a += row[n + 3] == row[n + 1];
    CHECK(mask_of(b, i) == counted_range(seq_len, n + 2, n + 2));
  }
  CHECK(asked.size() == n * (n - 1));  // every ordered pair of positions gets asked
  // The earlier token is asked first about half the time: no shortcut by position.
  CHECK(answer_is_a > 900);
  CHECK(answer_is_a < 1100);
}

TEST_CASE("lags, lags_argmax: blocks of n content tokens ? label, as many as fit, only the labels count") {
  for (const std::string name : {"lags", "lags_argmax"}) {
    for (const std::size_t seq_len : {9u, 20u, 31u}) {
      CAPTURE(name);
      CAPTURE(seq_len);
      const std::size_t n = 4, blocks = (seq_len + 1) / (n + 2);
      const Batch b = draw(name, {.vocab = 12, .seq_len = seq_len, .lags = {1, 3}, .context = n}, 300);
      std::vector<bool> want(seq_len, false);
      for (std::size_t k = 0; k < blocks; ++k) want[k * (n + 2) + n] = true;
      for (std::size_t i = 0; i < 300; ++i) {
        const Row row = row_of(b, i);
        CHECK(mask_of(b, i) == want);
        for (std::size_t p = 0; p < row.size(); ++p) {
          const bool in_block = p < blocks * (n + 2);
          if (!in_block) {
            CHECK(row[p] == kPad);
          } else if (p % (n + 2) == n) {
            CHECK(row[p] == kQuery);
          } else {
            CHECK((row[p] >= 3 && row[p] < 12));
          }
        }
        for (std::size_t t = 0; t < seq_len; ++t) {
          const double nll = b.target_nll[i * seq_len + t];
          if (!want[t] || name == "lags_argmax") {
            CHECK(nll == 0.0);
          } else {
            CHECK(nll > 0.0);
            CHECK(std::isfinite(nll));
          }
        }
      }
    }
  }
}

TEST_CASE("lags: the truth is the task seed's, not the run's, and lags_argmax's label is the most likely one") {
  const TaskOptions o{.vocab = 6, .seq_len = 7, .lags = {1, 2}, .context = 2};
  TaskOptions other = o;
  other.task_seed = 1;
  // The same draws under the same task seed: the same rows and nll; under another
  // task seed the contexts are the same (a label takes one uniform either way, and
  // draw does not reject) but the probabilities differ.
  const auto a = headroom::make_task("lags", o), again = headroom::make_task("lags", o),
             b = headroom::make_task("lags", other);
  Rng ra(5), rb(5), rc(5);
  std::size_t nll_differs = 0;
  for (int i = 0; i < 200; ++i) {
    const Batch x = a->draw(ra), y = again->draw(rb), z = b->draw(rc);
    CHECK(same(x, y));
    CHECK(x.target_nll == y.target_nll);
    nll_differs += x.target_nll != z.target_nll ? 1 : 0;
    for (const std::size_t q : {2u, 6u}) {
      CHECK(x.tokens(0, q - 2) == z.tokens(0, q - 2));
      CHECK(x.tokens(0, q - 1) == z.tokens(0, q - 1));
    }
  }
  CHECK(nll_differs > 100);
  // Per context (the two tokens before a query), the label of least nll under lags
  // is lags_argmax's label.
  std::map<std::pair<Index, Index>, std::pair<double, Index>> best;  // context -> (least nll, its label)
  const Batch many = draw("lags", o, 4000);
  for (std::size_t i = 0; i < 4000; ++i) {
    for (const std::size_t q : {2u, 6u}) {
      const std::pair<Index, Index> context{many.tokens(i, q - 2), many.tokens(i, q - 1)};
      const double nll = many.target_nll[i * 7 + q];
      auto [it, fresh] = best.try_emplace(context, nll, many.tokens(i, q + 1));
      if (!fresh && nll < it->second.first) it->second = {nll, many.tokens(i, q + 1)};
    }
  }
  CHECK(best.size() == 9);
  const Batch argmax = draw("lags_argmax", o, 500);
  for (std::size_t i = 0; i < 500; ++i) {
    for (const std::size_t q : {2u, 6u}) {
      const std::pair<Index, Index> context{argmax.tokens(i, q - 2), argmax.tokens(i, q - 1)};
      CHECK(argmax.tokens(i, q + 1) == best.at(context).second);
    }
  }
}

TEST_CASE("lagdiff, lagsum: quadruples a b | c over Z_p, as many as fit, the c's count") {
  for (const std::string name : {"lagdiff", "lagsum"}) {
    for (const std::size_t seq_len : {3u, 10u, 15u}) {
      CAPTURE(name);
      CAPTURE(seq_len);
      const std::size_t quads = (seq_len + 1) / 4, p = 7;
      const Batch b = draw(name, {.vocab = 3 + p, .seq_len = seq_len}, 300);
      std::vector<bool> want(seq_len, false);
      for (std::size_t k = 0; k < quads; ++k) want[4 * k + 2] = true;
      std::set<Index> answers;
      for (std::size_t i = 0; i < 300; ++i) {
        const Row row = row_of(b, i);
        CHECK(mask_of(b, i) == want);
        for (std::size_t k = 0; k < quads; ++k) {
          const auto a = static_cast<std::size_t>(row[4 * k] - 3), c2 = static_cast<std::size_t>(row[4 * k + 1] - 3);
          REQUIRE(a < p);
          REQUIRE(c2 < p);
          CHECK(row[4 * k + 2] == kSep);
          const std::size_t c = name == "lagdiff" ? (a + p - c2) % p : (a + c2) % p;
          CHECK(row[4 * k + 3] == static_cast<Index>(3 + c));
          answers.insert(row[4 * k + 3]);
        }
        for (std::size_t q = 4 * quads; q < row.size(); ++q) CHECK(row[q] == kPad);
      }
      CHECK(answers.size() == p);
    }
  }
}

TEST_CASE("recall with a large key vocabulary: vocab 259 gives 128 keys and 128 values") {
  const Batch b = draw("recall", {.vocab = 259, .seq_len = 130}, 200);
  std::set<Index> keys, values;
  for (std::size_t i = 0; i < 200; ++i) {
    const Row row = row_of(b, i);
    for (std::size_t k = 0; k < 64; ++k) {
      keys.insert(row[2 * k]);
      values.insert(row[2 * k + 1]);
    }
  }
  CHECK(*keys.begin() == 3);
  CHECK(*keys.rbegin() == 3 + 127);
  CHECK(keys.size() == 128);
  CHECK(*values.begin() == 3 + 128);
  CHECK(*values.rbegin() == 258);
}

TEST_CASE("the same seed gives identical batches, another seed or a later draw differs") {
  for (const std::string& name : headroom::task_names()) {
    CAPTURE(name);
    const TaskOptions o{.vocab = 16, .seq_len = 12};
    for (const Split split : {Split::train, Split::val}) {
      CHECK(same(draw(name, o, 32, split, 3), draw(name, o, 32, split, 3)));
      CHECK_FALSE(same(draw(name, o, 32, split, 3), draw(name, o, 32, split, 4)));
    }
    const auto task = headroom::make_task(name, o);
    Rng rng(3);
    const Batch first = task->sample(32, Split::train, rng);
    CHECK_FALSE(same(first, task->sample(32, Split::train, rng)));
  }
}

TEST_CASE("train and val never share an example") {
  // Small example spaces, so that without the hash split the two would collide
  // constantly: copy with 4 content tokens and n = 3 has 64 distinct examples.
  for (const auto& [name, o] : std::vector<std::pair<std::string, TaskOptions>>{
           {"copy", {.vocab = 7, .seq_len = 6}},
           {"reverse", {.vocab = 7, .seq_len = 6}},
           {"sort", {.vocab = 7, .seq_len = 6}},
           {"recall", {.vocab = 9, .seq_len = 6}},
           {"induction", {.vocab = 8, .seq_len = 5}},
           {"repeat", {.vocab = 8, .seq_len = 5}},
           {"lags", {.vocab = 5, .seq_len = 7, .lags = {1, 2}, .context = 2}},
           {"lags_argmax", {.vocab = 6, .seq_len = 7, .lags = {1, 2}, .context = 2}},
           {"lagdiff", {.vocab = 6, .seq_len = 7}},
           {"lagsum", {.vocab = 6, .seq_len = 7}},
           {"before", {.vocab = 7, .seq_len = 7}},
           {"copy", {.vocab = 16, .seq_len = 12}},
           {"recall", {.vocab = 16, .seq_len = 12}}}) {
    CAPTURE(name);
    CAPTURE(o.vocab);
    const Batch train = draw(name, o, 3000, Split::train, 11);
    const Batch val = draw(name, o, 3000, Split::val, 12);
    std::set<Row> train_rows, val_rows;
    for (std::size_t i = 0; i < 3000; ++i) {
      train_rows.insert(row_of(train, i));
      const Row v = row_of(val, i);
      CHECK(headroom::example_split(v) == Split::val);
      val_rows.insert(v);
    }
    CHECK(val_rows.size() > 1);  // a real split, not an empty side
    for (const Row& v : val_rows) CHECK(train_rows.count(v) == 0);
  }
}

TEST_CASE("example_hash is FNV-1a 64 of the ids' bytes then fmix64, val iff hash % 8 == 0") {
  // Golden values from this Python (FNV-1a over each id as 8 little-endian bytes,
  // then MurmurHash3's fmix64); they pin the split, which must never change:
  //   def h(ids):
  //     M = 2**64 - 1; x = 0xCBF29CE484222325
  //     for i in ids:
  //       for byte in (i & M).to_bytes(8, 'little'): x = ((x ^ byte) * 0x100000001B3) & M
  //     x ^= x >> 33; x = (x * 0xFF51AFD7ED558CCD) & M; x ^= x >> 33
  //     x = (x * 0xC4CEB9FE1A85EC53) & M; x ^= x >> 33; return x
  const Row val_row{3, 4, 5, 1, 3, 4, 5}, train_row{3, 4, 5, 1, 3, 4, 6};
  CHECK(headroom::example_hash(val_row) == 0x8B9BD2A05FA19398ull);
  CHECK(headroom::example_hash(train_row) == 0xE4BB5C03F378BBF4ull);
  CHECK(headroom::example_hash(Row{}) == 0xEFD01F60BA992926ull);
  CHECK(headroom::example_split(val_row) == Split::val);
  CHECK(headroom::example_split(train_row) == Split::train);
}

TEST_CASE("render_example: specials as symbols, each run of counted targets in brackets") {
  const Row row{5, 9, kSep, 5, 9, kQuery, 7, kPad};
  // counted[t] is about row[t + 1]: here the targets "|", "5" and "7".
  const bool counted[] = {false, true, true, false, false, true, false};
  CHECK(headroom::render_example(row, counted) == "5 9 [| 5] 9 ? [7] _");
  const bool none[] = {false, false, false, false, false, false, false};
  CHECK(headroom::render_example(row, none) == "5 9 | 5 9 ? 7 _");
  CHECK_THROWS_WITH_AS(headroom::render_example(row, std::span<const bool>(counted, 3)),
                       "render_example: mask has 3 entries for a row of 8 tokens (needs one fewer)",
                       headroom::DataError);
}

TEST_CASE("example(): a seeded training example of each task at V = 16, T = 8") {
  // Pinned: a change here means the generator changed, and with it every seeded run.
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"copy", "copy: 8 8 7 15 | [8 8 7 15]"},
      {"reverse", "reverse: 8 8 7 15 | [15 7 8 8]"},
      {"sort", "sort: 8 8 7 15 | [7 8 8 15]"},
      {"recall", "recall: 5 12 6 11 3 13 ? 3 [13]"},
      {"induction", "induction: 15 5 13 15 [5 13] 9 11 3"},
      {"repeat", "repeat: 8 6 3 5 8 [6 3 5] _"},
      {"lagdiff", "lagdiff: 8 8 | [3] 7 15 | [8] _"},
      {"lagsum", "lagsum: 8 8 | [13] 7 15 | [6] _"},
      {"before", "before: 8 6 3 5 10 ? 5 8 [8]"},
  };
  for (const auto& [name, line] : expected) {
    CHECK(headroom::make_task(name, {.vocab = 16, .seq_len = 8})->example() == line);
  }
  // lags's default context 8 needs T >= 9: its examples are at context 2 (two blocks).
  CHECK(headroom::make_task("lags", {.vocab = 16, .seq_len = 8, .context = 2})->example() == "lags: 8 8 ? [5] 15 14 ? [15] _");
  CHECK(headroom::make_task("lags_argmax", {.vocab = 16, .seq_len = 8, .context = 2})->example() ==
        "lags_argmax: 8 8 ? [6] 7 15 ? [13] _");
  CHECK(headroom::make_task("lags", {.vocab = 16, .seq_len = 39})->example() ==
        "lags: 8 8 7 15 14 9 6 6 ? [15] 12 13 12 5 3 8 6 8 ? [10] 15 7 8 14 12 5 9 6 ? [14] 10 8 13 12 10 7 9 3 ? [14]");
}

TEST_CASE("task errors name the task, the value and the requirement") {
  using headroom::make_task;
  CHECK_THROWS_WITH_AS(make_task("copi", {}),
                       "unknown task 'copi': valid names are copy, reverse, sort, recall, induction, repeat, before, "
                       "lags, lags_argmax, lagdiff, lagsum",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("copy", {.vocab = 4, .seq_len = 8}),
                       "copy: vocab 4 is too small: needs at least 5 (3 special + 2 content)",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("sort", {.vocab = 2, .seq_len = 8}),
                       "sort: vocab 2 is too small: needs at least 5 (3 special + 2 content)",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("reverse", {.vocab = 16, .seq_len = 1}),
                       "reverse: seq_len 1 is too short: needs at least 2 (one token, the "
                       "separator and its answer)",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("recall", {.vocab = 6, .seq_len = 8}),
                       "recall: vocab 6 is too small: needs at least 9 (3 special + 3 keys + 3 "
                       "values for the 3 pairs of seq_len 8)",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("recall", {.vocab = 16, .seq_len = 3}),
                       "recall: seq_len 3 is too short: needs at least 4 (one key-value pair, the "
                       "query marker, a key and its value)",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("repeat", {.vocab = 10, .seq_len = 16}),
                       "repeat: vocab 10 is too small: needs at least 11 (3 special + 8 "
                       "distinct content tokens for the first half of seq_len 16)",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("repeat", {.vocab = 16, .seq_len = 2}),
                       "repeat: seq_len 2 is too short: needs at least 3 (two tokens and their "
                       "repeat)",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("induction", {.vocab = 14, .seq_len = 16}),
                       "induction: vocab 14 is too small: needs at least 15 (3 special + 12 distinct content tokens: "
                       "a segment of 5 and 7 fillers for the 17 tokens of seq_len 16)",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("induction", {.vocab = 16, .seq_len = 2}),
                       "induction: seq_len 2 is too short: needs at least 3 (a segment of two tokens and its repeat)",
                       headroom::DataError);
  for (const std::string lags : {"lags", "lags_argmax"}) {
    CAPTURE(lags);
    CHECK_THROWS_WITH_AS(make_task(lags, {.vocab = 4, .seq_len = 9}),
                         (lags + ": vocab 4 is too small: needs at least 5 (3 special + 2 content)").c_str(), headroom::DataError);
    CHECK_THROWS_WITH_AS(make_task(lags, {.vocab = 16, .seq_len = 8}),
                         (lags + ": seq_len 8 is too short: needs at least 9 (one block: 8 content tokens, the query "
                                "marker and the label)").c_str(),
                         headroom::DataError);
    CHECK_THROWS_WITH_AS(make_task(lags, {.vocab = 4100, .seq_len = 9}),
                         (lags + ": vocab 4100 is too large: its tables are C x C for C = V - 3 content tokens, and C "
                                "may be at most 4096 (vocab 4099)").c_str(),
                         headroom::DataError);
    CHECK_THROWS_WITH_AS(make_task(lags, {.vocab = 16, .seq_len = 9, .lags = {}}),
                         (lags + ": lags is empty: the label needs at least one offset").c_str(), headroom::DataError);
    CHECK_THROWS_WITH_AS(make_task(lags, {.vocab = 16, .seq_len = 9, .lags = {0, 1}}),
                         (lags + ": offset 0 in lags [0, 1]: offsets are >= 1 (1 is the token just before the query)").c_str(),
                         headroom::DataError);
    CHECK_THROWS_WITH_AS(make_task(lags, {.vocab = 16, .seq_len = 9, .lags = {2, 1, 2}}),
                         (lags + ": offset 2 is listed twice in lags [2, 1, 2]").c_str(), headroom::DataError);
    CHECK_THROWS_WITH_AS(make_task(lags, {.vocab = 16, .seq_len = 9, .lags = {1, 9}}),
                         (lags + ": offset 9 in lags [1, 9] is beyond the context 8: a block holds 8 content tokens "
                                "before its query").c_str(),
                         headroom::DataError);
    CHECK_THROWS_WITH_AS(make_task(lags, {.vocab = 16, .seq_len = 9, .context = 0}),
                         (lags + ": context must be at least 1, got 0").c_str(), headroom::DataError);
    CHECK_THROWS_WITH_AS(make_task(lags, {.vocab = 16, .seq_len = 9, .lag_beta = -1}),
                         (lags + ": lag_beta must be a finite number >= 0, got -1").c_str(), headroom::DataError);
    CHECK_NOTHROW(make_task(lags, {.vocab = 5, .seq_len = 9, .lags = {8}}));
  }
  for (const std::string mod : {"lagdiff", "lagsum"}) {
    CAPTURE(mod);
    CHECK_THROWS_WITH_AS(make_task(mod, {.vocab = 4, .seq_len = 8}),
                         (mod + ": vocab 4 is too small: needs at least 5 (3 special + 2 content: p >= 2)").c_str(),
                         headroom::DataError);
    CHECK_THROWS_WITH_AS(make_task(mod, {.vocab = 16, .seq_len = 2}),
                         (mod + ": seq_len 2 is too short: needs at least 3 (one quadruple a b | c)").c_str(), headroom::DataError);
    CHECK_NOTHROW(make_task(mod, {.vocab = 5, .seq_len = 3}));
  }
  CHECK_THROWS_WITH_AS(make_task("before", {.vocab = 10, .seq_len = 12}),
                       "before: vocab 10 is too small: needs at least 12 (3 special + 9 distinct content "
                       "tokens for the sequence of seq_len 12)",
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(make_task("before", {.vocab = 16, .seq_len = 4}),
                       "before: seq_len 4 is too short: needs at least 5 (two tokens, the query marker, "
                       "two query tokens and the answer)",
                       headroom::DataError);
  // Exactly at the minimum is fine.
  CHECK_NOTHROW(make_task("before", {.vocab = 12, .seq_len = 12}));
  CHECK_NOTHROW(make_task("before", {.vocab = 5, .seq_len = 5}));
  CHECK_NOTHROW(make_task("recall", {.vocab = 9, .seq_len = 8}));
  CHECK_NOTHROW(make_task("induction", {.vocab = 15, .seq_len = 16}));
  CHECK_NOTHROW(make_task("repeat", {.vocab = 11, .seq_len = 16}));
  CHECK_NOTHROW(make_task("copy", {.vocab = 5, .seq_len = 2}));

  Rng rng(0);
  CHECK_THROWS_WITH_AS(make_task("sort", {})->sample(0, Split::train, rng),
                       "sort: batch size must be positive, got 0", headroom::DataError);
  // copy at V = 5, T = 2 has two examples, "3 | 3" and "4 | 4"; both hash to train.
  CHECK(headroom::example_split(Row{3, kSep, 3}) == Split::train);
  CHECK(headroom::example_split(Row{4, kSep, 4}) == Split::train);
  CHECK_THROWS_WITH_AS(make_task("copy", {.vocab = 5, .seq_len = 2})->sample(1, Split::val, rng),
                       "copy: drew 65536 examples without one in the val split: vocab 5 and "
                       "seq_len 2 allow too few distinct examples to split them train/val (about "
                       "1 in 8 goes to val)",
                       headroom::DataError);
}

// ---- CharDataset ---------------------------------------------------------------------

namespace {

// 38 characters (44 bytes), 9 distinct; "ö" is 2 bytes and "€" 3 bytes in UTF-8.
const std::string kText = "a cab ö bad€\nabc dab ba€ö\ncab bad cb!\n";

}  // namespace

TEST_CASE("CharDataset: sorted code points as the vocabulary, encode and decode round-trip") {
  const TempDir dir("vocab");
  const CharDataset ds(dir.write("t.txt", kText), {.seq_len = 3});
  const std::u32string expected = U"\n !abcd\u00f6\u20ac";
  CHECK(ds.alphabet() == expected);
  CHECK(ds.vocab_size() == 9);
  CHECK(ds.size() == 38);
  CHECK(ds.encode("ab\u20ac\n") == IndexArray{3, 4, 8, 0});
  CHECK(ds.decode(IndexArray{3, 4, 8, 0, 7}) == "ab\u20ac\n\u00f6");
  CHECK(ds.decode(ds.encode(kText)) == kText);
  CHECK(ds.name() == (dir.path() / "t.txt").string());
}

TEST_CASE("CharDataset: split sizes, and every window is contiguous text from its split") {
  const TempDir dir("windows");
  const std::filesystem::path file = dir.write("t.txt", kText);
  CHECK(CharDataset(file, {.seq_len = 3}).split_size(Split::train) == 34);  // floor(0.9 * 38)
  CHECK(CharDataset(file, {.seq_len = 3}).split_size(Split::val) == 4);

  const std::size_t seq_len = 3;
  const CharDataset ds(file, {.seq_len = seq_len, .train_fraction = 0.75});
  REQUIRE(ds.split_size(Split::train) == 28);  // floor(0.75 * 38)
  REQUIRE(ds.split_size(Split::val) == 10);
  const IndexArray all = ds.encode(kText);
  for (const Split split : {Split::train, Split::val}) {
    CAPTURE(headroom::split_name(split));
    const std::size_t begin = split == Split::train ? 0 : 28, end = split == Split::train ? 28 : 38;
    Rng rng(5);
    const Batch b = ds.sample(200, split, rng);
    REQUIRE(b.tokens.shape() == std::vector<std::size_t>{200, seq_len + 1});
    CHECK(std::all_of(b.target_mask.begin(), b.target_mask.end(), [](bool m) { return m; }));
    std::set<std::size_t> starts;
    for (std::size_t i = 0; i < 200; ++i) {
      const Row row = row_of(b, i);
      std::size_t found = end;
      for (std::size_t s = begin; s + seq_len + 1 <= end; ++s) {
        if (std::equal(row.begin(), row.end(), all.begin() + static_cast<std::ptrdiff_t>(s))) {
          found = s;
        }
      }
      CHECK(found < end);
      starts.insert(found);
    }
    // Every start in the split is reachable: 25 in train, 7 in val.
    CHECK(starts.size() == end - begin - seq_len);
  }
  Rng a(9), b(9), c(10);
  CHECK(same(ds.sample(16, Split::train, a), ds.sample(16, Split::train, b)));
  a = Rng(9);
  CHECK_FALSE(same(ds.sample(16, Split::train, a), ds.sample(16, Split::train, c)));
}

TEST_CASE("CharDataset errors name the file and the values") {
  const TempDir dir("errors");
  const auto named = [](const std::filesystem::path& p) { return "CharDataset: '" + p.string() + "'"; };

  const std::filesystem::path missing = dir.path() / "missing.txt";
  CHECK_THROWS_WITH_AS(CharDataset{missing}, (named(missing) + ": no such file").c_str(),
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(CharDataset{dir.path()}, (named(dir.path()) + ": is a directory, not a regular file").c_str(),
                       headroom::DataError);
  const auto empty = dir.write("empty.txt", "");
  CHECK_THROWS_WITH_AS(CharDataset{empty}, (named(empty) + ": the file is empty").c_str(),
                       headroom::DataError);
  const auto latin1 = dir.write("latin1.txt", "ab\xFF" "cd");
  CHECK_THROWS_WITH_AS(
      CharDataset{latin1},
      (named(latin1) + ": invalid UTF-8 at byte offset 2, line 1 (byte 0xFF: not a UTF-8 lead byte)").c_str(),
      headroom::DataError);
  const auto cut = dir.write("cut.txt", "abc\xE2\x82");
  CHECK_THROWS_WITH_AS(
      CharDataset{cut},
      (named(cut) + ": invalid UTF-8 at byte offset 3, line 1 (byte 0xE2: sequence cut short)").c_str(),
      headroom::DataError);

  const auto text = dir.write("t.txt", kText);
  CHECK_THROWS_WITH_AS(CharDataset(text, {.seq_len = 4}),
                       (named(text) + ": 38 characters give the val split 4 characters, fewer "
                                      "than seq_len + 1 = 5 (train_fraction 0.9)")
                           .c_str(),
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(CharDataset(text, {.seq_len = 40, .train_fraction = 0.5}),
                       (named(text) + ": 38 characters give the train split 19 characters, "
                                      "fewer than seq_len + 1 = 41 (train_fraction 0.5)")
                           .c_str(),
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(CharDataset(text, {.train_fraction = 1.0}),
                       "CharDataset: train_fraction 1 is not in (0, 1)", headroom::DataError);
  CHECK_THROWS_WITH_AS(CharDataset(text, {.seq_len = 0}),
                       "CharDataset: seq_len must be positive, got 0", headroom::DataError);

  const CharDataset ds(text, {.seq_len = 3});
  CHECK_THROWS_WITH_AS(ds.encode("abz"),
                       ("CharDataset::encode: character U+007A 'z' at position 2 is not in the "
                        "vocabulary of '" + text.string() + "'").c_str(),
                       headroom::DataError);
  CHECK_THROWS_WITH_AS(ds.decode(IndexArray{0, 9}),
                       ("CharDataset::decode: id 9 is out of range for vocab 9 of '" +
                        text.string() + "'").c_str(),
                       headroom::DataError);
  Rng rng(0);
  CHECK_THROWS_WITH_AS(ds.sample(0, Split::val, rng),
                       ("CharDataset '" + text.string() + "': batch size must be positive, got 0")
                           .c_str(),
                       headroom::DataError);
}

TEST_CASE("decode_utf8 rejects every ill-formed kind with the offset of its first byte") {
  const auto message = [](const std::string& bytes) {
    try {
      headroom::decode_utf8(bytes, "t");
    } catch (const headroom::DataError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(headroom::decode_utf8("a\u00e9\u20ac\U0001F600", "t") == U"a\u00e9\u20ac\U0001F600");
  CHECK(message("x\x80") == "t: invalid UTF-8 at byte offset 1 (byte 0x80: continuation byte "
                            "without a lead byte)");
  CHECK(message("\xC3(") == "t: invalid UTF-8 at byte offset 0 (byte 0xC3: sequence cut short)");
  CHECK(message("ab\xC0\x80") == "t: invalid UTF-8 at byte offset 2 (byte 0xC0: overlong encoding)");
  CHECK(message("\xE0\x80\xAF") == "t: invalid UTF-8 at byte offset 0 (byte 0xE0: overlong encoding)");
  CHECK(message("\xED\xA0\x80") == "t: invalid UTF-8 at byte offset 0 (byte 0xED: surrogate code "
                                   "point)");
  CHECK(message("\xF4\x90\x80\x80") == "t: invalid UTF-8 at byte offset 0 (byte 0xF4: code point "
                                       "above U+10FFFF)");
  CHECK(message("\xF8\x88\x80\x80\x80") == "t: invalid UTF-8 at byte offset 0 (byte 0xF8: not a "
                                           "UTF-8 lead byte)");
  std::string round_trip;
  for (const char32_t cp : U"a\u00e9\u20ac\U0001F600") headroom::append_utf8(round_trip, cp);
  CHECK(round_trip == std::string("a\u00e9\u20ac\U0001F600") + '\0');
}
