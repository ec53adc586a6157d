// Every toy task at its own defaults reaches what docs/cli/train.md says it reaches
// ("What the default model reaches"): one real run of the binary per task, on the
// table's metric (validation accuracy, or for lags, whose labels are random, the
// excess loss), at the table's step. A run stopped there (--stop-after) is the first
// steps of the default run, its schedule included, so the check is of the defaults
// and not of a shorter run; the table's step is where the run first meets its bound,
// the earliest a test can look, since these are whole training runs.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "data/task.hpp"
#include "cli_runner.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

namespace {

enum class Metric { accuracy, excess };

// One row of the table: the bound the task's default run meets at `step`.
struct Reach {
  const char* task;
  std::size_t step;
  Metric metric;
  double bound;  // accuracy >= bound (a fraction), or excess loss <= bound (nats)
};

// As the table's "checked" column writes it: "acc >= 99% at step 100".
std::string cell(const Reach& r) {
  if (r.metric == Metric::accuracy) return fmt::format("acc >= {:g}% at step {}", 100 * r.bound, r.step);
  return fmt::format("excess <= {:g} at step {}", r.bound, r.step);
}

// The row of `task` in the table under "What the default model reaches" (the task
// table above it has rows of the same names), "" when there is none.
std::string docs_row(const std::string& task) {
  const std::string docs = read_file(fs::path(HEADROOM_SOURCE_DIR) / "docs" / "cli" / "train.md");
  const std::string start = fmt::format("| `{}` |", task);
  bool in_section = false;
  for (const std::string& line : lines_of(docs)) {
    if (line.rfind("#", 0) == 0) in_section = line == "### What the default model reaches";
    if (in_section && line.rfind(start, 0) == 0) return line;
  }
  return "";
}

// Trains `r.task` at its defaults up to r.step and checks the metric there, and that
// the docs state the same bound at the same step.
void check_reach(const Reach& r) {
  const std::string row = docs_row(r.task);
  INFO("docs/cli/train.md: " << row);
  CHECK_MESSAGE(row.find(cell(r)) != std::string::npos, "the table does not say " << cell(r));
  const TempDir tmp(std::string("task_defaults_") + r.task);
  const fs::path dir = tmp / "run";
  const CliResult run =
      run_headroom(fmt::format("train -q --task {} --stop-after {} --out {}", r.task, r.step, dir.string()));
  INFO(run.output);
  REQUIRE(run.status == 0);
  const std::vector<std::string> rows = lines_of(read_file(dir / "metrics.csv"));
  REQUIRE(rows.size() >= 2);
  REQUIRE(rows.front().rfind("step,train_loss,val_loss,val_accuracy,val_excess_loss,", 0) == 0);
  const std::vector<std::string> last = fields(rows.back());
  REQUIRE(last.size() >= 5);
  REQUIRE(last[0] == std::to_string(r.step));  // the run validates at the table's step
  const double accuracy = parse_number(last[3], "val_accuracy");
  const double excess = parse_number(last[4], "val_excess_loss");
  INFO("at step " << r.step << ": val accuracy " << accuracy << ", excess loss " << excess);
  if (r.metric == Metric::accuracy) {
    CHECK(accuracy >= r.bound);
  } else {
    CHECK(excess <= r.bound);
  }
}

}  // namespace

// One case per task, so that `ctest -j2` runs them side by side.
TEST_CASE("task defaults: copy") { check_reach({"copy", 100, Metric::accuracy, 0.99}); }
TEST_CASE("task defaults: reverse") { check_reach({"reverse", 100, Metric::accuracy, 0.99}); }
TEST_CASE("task defaults: sort") { check_reach({"sort", 600, Metric::accuracy, 0.99}); }
TEST_CASE("task defaults: recall") { check_reach({"recall", 3000, Metric::accuracy, 0.99}); }
TEST_CASE("task defaults: induction") { check_reach({"induction", 700, Metric::accuracy, 0.99}); }
TEST_CASE("task defaults: repeat") { check_reach({"repeat", 100, Metric::accuracy, 0.99}); }
TEST_CASE("task defaults: before") { check_reach({"before", 2500, Metric::accuracy, 0.99}); }
TEST_CASE("task defaults: lags") { check_reach({"lags", 900, Metric::excess, 0.03}); }
TEST_CASE("task defaults: lags_argmax") { check_reach({"lags_argmax", 200, Metric::accuracy, 0.99}); }
TEST_CASE("task defaults: lagdiff") { check_reach({"lagdiff", 700, Metric::accuracy, 0.99}); }
TEST_CASE("task defaults: lagsum") { check_reach({"lagsum", 400, Metric::accuracy, 0.99}); }

TEST_CASE("task defaults: every task has its case and its row in the table") {
  // The cases above, by name: a new task needs a row in the docs and a case here.
  const std::vector<std::string> checked = {"copy",   "reverse", "sort",        "recall",  "induction", "repeat",
                                            "before", "lags",    "lags_argmax", "lagdiff", "lagsum"};
  CHECK(headroom::task_names() == checked);
  for (const std::string& task : checked) {
    CAPTURE(task);
    CHECK_FALSE(docs_row(task).empty());
  }
}
