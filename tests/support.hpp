// Scaffolding the test files share: temporary directories that clean up after
// themselves, whole-file reads, the reader of the line-based fixtures under
// fixtures/, and prerequisites that skip a test on a developer's machine but fail
// it under CI.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <source_location>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

// ---- errors --------------------------------------------------------------------------

// The message of the std::invalid_argument that f throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// ---- files ---------------------------------------------------------------------------

// A fresh, empty directory, <system temp>/headroom_test_<name>_<pid>_<n>, removed
// with everything in it when the object goes out of scope: also when a failed
// REQUIRE leaves the test early.
class TempDir {
 public:
  explicit TempDir(const std::string& name);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& p) const { return path_ / p; }
  // The names of the entries in it, sorted.
  std::vector<std::string> entries() const;
  // The same for any directory.
  static std::vector<std::string> entries_of(const std::filesystem::path& dir);
  // Writes `bytes` verbatim to the file `name` in it, and returns that file's path.
  std::filesystem::path write(const std::string& name, const std::string& bytes) const;

 private:
  std::filesystem::path path_;
};

// The bytes of a file; "" when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// This machine's host name (gethostname), as lock files and attempts.log name it.
std::string this_host();

// An ablate sweep's results.csv without its last two columns, the timing ones
// (wall_s, tokens_per_s), which differ between any two runs of the same config.
std::string results_without_timing(const std::filesystem::path& csv);

// A run's metrics.csv without its timing column, tokens_per_s, which differs between
// any two runs of the same config; found by its name, since columns added later
// come after it.
std::string metrics_without_timing(const std::filesystem::path& csv);

// The lines of a text, without their newlines.
std::vector<std::string> lines_of(const std::string& text);
// The comma-separated cells of a CSV line: "a,,b," is four cells, the last two empty.
std::vector<std::string> fields(const std::string& line);

// ---- the line-based text fixtures (each fixture's header documents its records) ----

// A number as the fixture scripts write it; strtod, unlike operator>>, also reads
// "inf", "-inf" and "nan".
double parse_number(const std::string& token, const std::string& where);

// One record of a fixture: the words of a line, read in order, and "path:line" for
// the messages of the exceptions its readers throw.
class FixtureRecord {
 public:
  FixtureRecord(const std::string& line, std::string where) : where_(std::move(where)), words_(line) {}

  const std::string& where() const { return where_; }
  // The next word, if there is one.
  std::optional<std::string> try_next();
  // The next word; throws "<where>: missing <what>" at the end of the line.
  std::string next(const char* what);
  double next_number(const char* what) { return parse_number(next(what), where_); }
  // A whole number >= 0; throws "<where>: bad <what> <value>" for any other number.
  std::size_t next_count(const char* what);

 private:
  std::string where_;
  std::istringstream words_;
};

// Calls `on_record` with every line of the fixture at `path` that is neither blank
// nor a `#` comment. Throws, naming the script that regenerates it, when the file
// cannot be opened.
void for_each_record(const std::string& path, const std::string& script,
                     const std::function<void(FixtureRecord&)>& on_record);

// ---- prerequisites ------------------------------------------------------------------

// Whether a test's outside prerequisite (a program, a Python module) is there, for
//   if (!prerequisite(fs::exists(python), "/usr/bin/python3 is not installed")) return;
// When it is missing, the test is skipped with a message saying why, except under
// CI=true (.ci/run, which installs every prerequisite): there it is a failure. A
// skipped test makes its executable exit with kSkipExitCode when nothing failed, which
// CTest reports as "Skipped" (SKIP_RETURN_CODE, tests/CMakeLists.txt), not "Passed".
bool prerequisite(bool present, const std::string& missing,
                  std::source_location where = std::source_location::current());

// Automake's code for a skipped test, which CTest is told to read as one.
inline constexpr int kSkipExitCode = 77;

// Whether a prerequisite() of this process was missing outside CI.
bool prerequisite_skipped();
