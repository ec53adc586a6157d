// Task::patch_pair (docs/design.md #22): for every task, the corrupted row differs
// from the clean one where the task's rule says and nowhere else among the inputs
// the answer depends on, its answer differs, and it is the answer the task's own
// rule gives for the corrupted row (checked here by re-deriving the rule from the
// layout in toy_tasks.cpp); tasks whose vocab leaves the rule no spare token refuse.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "data/task.hpp"
#include "support.hpp"

namespace hr = headroom;

namespace {

using Row = std::vector<hr::Index>;

// The positions <= t (the inputs the answer at t may depend on) where a and b differ.
std::vector<std::size_t> input_diffs(const Row& a, const Row& b, std::size_t t) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i <= t; ++i) {
    if (a[i] != b[i]) out.push_back(i);
  }
  return out;
}

constexpr int kPairs = 200;

// Draws pairs and hands each (with its task) to check, after the checks every task shares.
template <typename Check>
void for_pairs(const std::string& name, hr::TaskOptions options, Check check) {
  const auto task = hr::make_task(name, options);
  hr::Rng rng(17);
  for (int k = 0; k < kPairs; ++k) {
    const hr::PatchPair p = task->patch_pair(rng);
    INFO(name << " pair " << k << " clean " << doctest::toString(p.clean) << " corrupted " << doctest::toString(p.corrupted)
              << " t " << p.position);
    REQUIRE(p.clean.size() == options.seq_len + 1);
    REQUIRE(p.corrupted.size() == options.seq_len + 1);
    REQUIRE(p.position < options.seq_len);
    CHECK(p.clean_answer == p.clean[p.position + 1]);
    CHECK(p.corrupted_answer == p.corrupted[p.position + 1]);
    CHECK(p.clean_answer != p.corrupted_answer);
    check(p, *task);
  }
}

}  // namespace

TEST_CASE("copy and reverse pairs change the one source token the answer copies") {
  const hr::TaskOptions o{.vocab = 8, .seq_len = 10};
  const std::size_t n = 5;
  for (const bool reverse : {false, true}) {
    for_pairs(reverse ? "reverse" : "copy", o, [&](const hr::PatchPair& p, const hr::Task&) {
      for (const Row* row : {&p.clean, &p.corrupted}) {
        CHECK((*row)[n] == hr::kSep);
        for (std::size_t j = 0; j < n; ++j) CHECK((*row)[n + 1 + j] == (*row)[reverse ? n - 1 - j : j]);
      }
      const std::size_t i = p.position - n;
      CHECK(input_diffs(p.clean, p.corrupted, p.position) == std::vector<std::size_t>{reverse ? n - 1 - i : i});
    });
  }
}

TEST_CASE("sort pairs change the first answer, the minimum") {
  const hr::TaskOptions o{.vocab = 7, .seq_len = 8};
  const std::size_t n = 4;
  for_pairs("sort", o, [&](const hr::PatchPair& p, const hr::Task&) {
    CHECK(p.position == n);
    for (const Row* row : {&p.clean, &p.corrupted}) {
      Row sorted(row->begin(), row->begin() + n);
      std::sort(sorted.begin(), sorted.end());
      CHECK(Row(row->begin() + n + 1, row->begin() + 2 * n + 1) == sorted);
    }
    CHECK(p.corrupted_answer == *std::min_element(p.corrupted.begin(), p.corrupted.begin() + n));
  });
}

TEST_CASE("recall pairs change the queried value") {
  const hr::TaskOptions o{.vocab = 12, .seq_len = 10};
  const std::size_t pairs = 4;
  for_pairs("recall", o, [&](const hr::PatchPair& p, const hr::Task&) {
    CHECK(p.position == 2 * pairs + 1);
    for (const Row* row : {&p.clean, &p.corrupted}) {
      std::size_t q = 0;
      while (q < pairs && (*row)[2 * q] != (*row)[2 * pairs + 1]) ++q;
      REQUIRE(q < pairs);
      CHECK((*row)[2 * pairs + 2] == (*row)[2 * q + 1]);
    }
    const auto d = input_diffs(p.clean, p.corrupted, p.position);
    REQUIRE(d.size() == 1);
    CHECK(d[0] % 2 == 1);  // a value, not a key
  });
}

TEST_CASE("induction and repeat pairs change the token the induction head copies to one absent from the row") {
  for (const std::string name : {"induction", "repeat"}) {
    for_pairs(name, {.vocab = 16, .seq_len = 12}, [&](const hr::PatchPair& p, const hr::Task&) {
      for (const Row* row : {&p.clean, &p.corrupted}) {
        // The answer is the successor of the input's latest earlier occurrence.
        const hr::Index input = (*row)[p.position];
        std::size_t earlier = p.position;
        for (std::size_t i = 0; i < p.position; ++i) {
          if ((*row)[i] == input) earlier = i;
        }
        REQUIRE(earlier < p.position);
        CHECK((*row)[p.position + 1] == (*row)[earlier + 1]);
      }
      const auto d = input_diffs(p.clean, p.corrupted, p.position);
      REQUIRE(d.size() == 1);
      CHECK(p.corrupted[d[0]] == p.corrupted_answer);
      CHECK(std::count(p.clean.begin(), p.clean.end(), p.corrupted_answer) == 0);  // absent from the clean row
    });
  }
}

TEST_CASE("before pairs swap a and b in the sequence") {
  const hr::TaskOptions o{.vocab = 12, .seq_len = 9};
  const std::size_t n = 6;
  for_pairs("before", o, [&](const hr::PatchPair& p, const hr::Task&) {
    CHECK(p.position == n + 2);
    for (const Row* row : {&p.clean, &p.corrupted}) {
      const auto s = row->begin();
      const auto a = std::find(s, s + n, (*row)[n + 1]), b = std::find(s, s + n, (*row)[n + 2]);
      REQUIRE(a != s + n);
      REQUIRE(b != s + n);
      CHECK((*row)[n + 3] == (a < b ? *a : *b));
    }
    const auto d = input_diffs(p.clean, p.corrupted, p.position);
    REQUIRE(d.size() == 2);
    CHECK(p.clean[d[0]] == p.corrupted[d[1]]);
    CHECK(p.clean[d[1]] == p.corrupted[d[0]]);
  });
}

TEST_CASE("lagdiff and lagsum pairs change b") {
  for (const bool difference : {true, false}) {
    const hr::TaskOptions o{.vocab = 10, .seq_len = 11};
    const std::size_t P = 7;
    for_pairs(difference ? "lagdiff" : "lagsum", o, [&](const hr::PatchPair& p, const hr::Task&) {
      CHECK(p.position % 4 == 2);
      for (const Row* row : {&p.clean, &p.corrupted}) {
        const std::size_t q = p.position - 2;
        const auto a = static_cast<std::size_t>((*row)[q] - hr::kFirstContent);
        const auto b = static_cast<std::size_t>((*row)[q + 1] - hr::kFirstContent);
        CHECK((*row)[q + 3] == hr::kFirstContent + static_cast<hr::Index>(difference ? (a + P - b) % P : (a + b) % P));
      }
      CHECK(input_diffs(p.clean, p.corrupted, p.position) == std::vector<std::size_t>{p.position - 1});
    });
  }
}

TEST_CASE("lags and lags_argmax pairs change one token at a lag and the argmax label") {
  const hr::TaskOptions o{.vocab = 9, .seq_len = 21, .lags = {1, 3}, .context = 5, .lag_beta = 1.0, .task_seed = 3};
  // lags's target_nll is -log p(y | x) under the true tables; lags_argmax shares them
  // (same options), so the argmax label is the one of least nll under `lags`.
  const auto truth = hr::make_task("lags", o);
  for (const std::string name : {"lags", "lags_argmax"}) {
    for_pairs(name, o, [&](const hr::PatchPair& p, const hr::Task&) {
      CHECK(p.position % 7 == 5);  // a query: b (n + 2) + n
      for (Row row : {p.clean, p.corrupted}) {
        const hr::Index label = row[p.position + 1];
        const double nll = truth->row_target_nll(row, p.position);
        for (hr::Index y = hr::kFirstContent; y < 9; ++y) {
          row[p.position + 1] = y;
          if (y != label) CHECK(truth->row_target_nll(row, p.position) > nll);
        }
      }
      const auto d = input_diffs(p.clean, p.corrupted, p.position);
      REQUIRE(d.size() == 1);
      CHECK((p.position - d[0] == 1 || p.position - d[0] == 3));
    });
  }
}

TEST_CASE("patch pairs are refused when the vocab leaves the rule no spare token") {
  hr::Rng rng(0);
  // induction at seq_len 12 uses 9 distinct content tokens: vocab 12 has none to spare.
  CHECK(error_of([&] { hr::make_task("induction", {.vocab = 12, .seq_len = 12})->patch_pair(rng); }) ==
        "induction: vocab 12 has no content token left for a corrupted patch pair (every one is in the row): needs at "
        "least 13");
  CHECK(error_of([&] { hr::make_task("repeat", {.vocab = 9, .seq_len = 12})->patch_pair(rng); })
            .find("repeat: vocab 9 has no content token left") == 0);
  CHECK(error_of([&] { hr::make_task("recall", {.vocab = 5, .seq_len = 4})->patch_pair(rng); }) ==
        "recall: vocab 5 has 1 value token, none left to change the queried value to in a corrupted patch pair: needs "
        "at least 6");
  CHECK(error_of([&] {
          hr::make_task("lags", {.vocab = 6, .seq_len = 9, .lags = {1}, .context = 3, .lag_beta = 0.0})->patch_pair(rng);
        }).find("lags: no change of one token at a lag changes the argmax label") == 0);
}
