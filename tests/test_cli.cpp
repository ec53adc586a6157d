// `headroom` as a user meets it: the gradcheck table, --help, and one-line errors
// with exit status 2 for every kind of mistake.
#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cli_runner.hpp"

#include "autograd/gemm.hpp"
#include "cli/suggest.hpp"

TEST_CASE("headroom gradcheck prints a table and passes every op") {
  const CliResult r = run_headroom("gradcheck");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("op                 case") == 0);
  CHECK(r.output.find("matmul             broadcast batch axes both ways") != std::string::npos);
  CHECK(r.output.find("MultiHeadAttention MQA") != std::string::npos);
  CHECK(r.output.find("TransformerLM      loss, pre-norm") != std::string::npos);
  CHECK(r.output.find("FAIL") == std::string::npos);
  CHECK(r.output.find("over 38 ops and 8 modules:") != std::string::npos);
  CHECK(r.output.find(" 0 failed") != std::string::npos);
}

TEST_CASE("headroom gradcheck --op checks one op, --list names them all") {
  const CliResult one = run_headroom("gradcheck --op softmax --seed 5");
  INFO(one.output);
  CHECK(one.status == 0);
  CHECK(one.output.find("over 1 op: 5 passed, 0 failed (seed 5,") != std::string::npos);
  CHECK(one.output.find("layer_norm") == std::string::npos);

  const CliResult list = run_headroom("gradcheck --list");
  CHECK(list.status == 0);
  CHECK(count_lines(list.output) == 46);  // 38 ops and 8 modules
  CHECK(list.output.find("gelu_tanh\n") != std::string::npos);
  CHECK(list.output.find("MultiHeadAttention\n") != std::string::npos);

  const CliResult module = run_headroom("gradcheck --op TransformerBlock");
  INFO(module.output);
  CHECK(module.status == 0);
  CHECK(module.output.find("over 1 module: 9 passed, 0 failed") != std::string::npos);
}

TEST_CASE("a failing check exits 1 and prints the worst index and both values") {
  // An absurdly tight tolerance makes finite differences "fail": the failure path
  // of the table and its report, without planting a bug in an op.
  const CliResult r = run_headroom("gradcheck --op exp --atol 1e-30 --rtol 0");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("FAIL") != std::string::npos);
  CHECK(r.output.find("worst at (") != std::string::npos);
  CHECK(r.output.find("analytic ") != std::string::npos);
  CHECK(r.output.find(" vs numeric ") != std::string::npos);
}

TEST_CASE("help explains the command and its flags") {
  const CliResult top = run_headroom("--help");
  CHECK(top.status == 0);
  CHECK(top.output.find("gradcheck") != std::string::npos);
  const CliResult sub = run_headroom("gradcheck --help");
  CHECK(sub.status == 0);
  for (const char* flag : {"--seed", "--op", "--list", "--atol", "--rtol", "--eps", "--verbose"}) {
    CHECK_MESSAGE(sub.output.find(flag) != std::string::npos, "--help does not mention " << flag);
  }
}

namespace {

const std::vector<std::string> kCommands{"train",    "sample", "eval",   "convert", "params", "corpora", "attention",
                                         "heads",    "circuits", "patch", "ablate",  "claims", "gradcheck"};

std::size_t count_words(const std::string& text) {
  std::istringstream in(text);
  std::size_t n = 0;
  for (std::string word; in >> word;) ++n;
  return n;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A flag as a command's --help lists it: "  --d-model UINT:N      Model width" takes a
// value (one space, then its type), "  --no-bias      Linear layers..." does not.
struct ListedFlag {
  std::string name;
  bool takes_value = false;
};

// The flags listed in the section `heading` ("Model") of a command's --help.
std::vector<ListedFlag> flags_in_section(const std::string& help, const std::string& heading) {
  std::vector<ListedFlag> flags;
  bool inside = false;
  for (const std::string& line : lines_of(help)) {
    if (line == heading + ":") {
      inside = true;
    } else if (inside && line.rfind("  -", 0) == 0) {
      const std::size_t end = line.find(' ', 2);
      flags.push_back({line.substr(2, end - 2), end != std::string::npos && end + 1 < line.size() && line[end + 1] != ' '});
    } else if (inside) {
      break;
    }
  }
  return flags;
}

// `headroom args FLAG [VALUE]` for a flag that `excluder` refuses: exit status 2 and one
// line naming both.
void check_excluded(const std::string& args, const std::string& excluder, const ListedFlag& flag) {
  // A value every flag's own check accepts, so that the refusal is the exclusion.
  static const std::map<std::string, std::string> values{
      {"--sweep", "lr=0.1,0.2"}, {"--shard", "1/2"}, {"--dropout", "0.1"}};
  const auto it = values.find(flag.name);
  const std::string value = !flag.takes_value ? "" : it != values.end() ? " " + it->second : " 1";
  const CliResult r = check_refused(args + " " + flag.name + value, " excludes ");
  CHECK_MESSAGE(r.output.find(excluder) != std::string::npos, r.output);
  CHECK_MESSAGE(r.output.find(flag.name) != std::string::npos, r.output);
}

}  // namespace

TEST_CASE("headroom --help: one line per command, grouped by job, under 300 words") {
  const CliResult top = run_headroom("--help");
  INFO(top.output);
  REQUIRE(top.status == 0);
  CHECK(count_words(top.output) < 300);
  CHECK(count_lines(top.output) <= 40);
  CHECK(top.output.find("Usage: headroom COMMAND") != std::string::npos);
  CHECK(top.output.find("'headroom COMMAND --help'") != std::string::npos);
  for (const char* heading : {"\nTrain and use a model:\n", "\nLook inside a model:\n", "\nSweeps and claims:\n",
                              "\nTools:\n"}) {
    CHECK_MESSAGE(top.output.find(heading) != std::string::npos, "no heading " << heading);
  }
  // Each command on a line of its own, "  NAME  summary", once.
  for (const std::string& command : kCommands) {
    int listed = 0;
    for (const std::string& line : lines_of(top.output)) listed += line.rfind("  " + command + "  ", 0) == 0;
    CHECK_MESSAGE(listed == 1, command << " is listed " << listed << " times");
  }
  std::size_t command_lines = 0;
  for (const std::string& line : lines_of(top.output)) command_lines += line.rfind("  ", 0) == 0 && line[2] != '-';
  CHECK(command_lines == kCommands.size());  // and nothing else is
}

TEST_CASE("headroom CMD --help: a short paragraph, then each flag with its help on its line") {
  for (const std::string& command : kCommands) {
    const CliResult r = run_headroom(command + " --help");
    INFO(command << " --help:\n" << r.output);
    REQUIRE(r.status == 0);
    const std::string paragraph = r.output.substr(0, r.output.find("\n\n"));
    CHECK(paragraph.rfind("Usage", 0) != 0);
    CHECK(count_words(paragraph) <= 40);
    CHECK(r.output.find("\n\nUsage: headroom " + command + " [OPTIONS]\n") != std::string::npos);
    // Which flags refuse which is said in the flags' own help, not listed by CLI11.
    CHECK(r.output.find("Excludes:") == std::string::npos);
    CHECK(r.output.find("Needs:") == std::string::npos);
    // A help text never starts a line of its own: it follows its flag.
    CHECK(r.output.find("\n          ") == std::string::npos);
    CHECK(r.output.find("\n\n\n") == std::string::npos);
    // It ends with its manual, which is there.
    const std::size_t manual = r.output.find("\nManual: docs/cli/");
    REQUIRE(manual != std::string::npos);
    const std::string page = r.output.substr(manual + 9, r.output.find('\n', manual + 1) - manual - 9);
    CHECK_MESSAGE(std::filesystem::is_regular_file(std::string(HEADROOM_SOURCE_DIR) + "/" + page), page);
  }
  // The one place that names the flags a resumed run refuses.
  const std::string train = run_headroom("train --help").output;
  CHECK(train.find("  --resume DIR  ") != std::string::npos);
  CHECK(train.find("Not with --config, --out, --overwrite, --no-save or any Model, Data or Training flag but --steps, "
                   "--save-every, --keep-checkpoints, --max-bad-steps, --detect-anomaly, --patience and --min-delta") != std::string::npos);
}

// The refusals the help no longer lists flag by flag: a resumed run, a merge and a
// resumed sweep take their settings from their directory, so every flag that would
// change them is refused in one line naming both flags.
TEST_CASE("train --resume and ablate --merge/--resume refuse every flag that would change the run") {
  const std::string train_help = run_headroom("train --help").output;
  const std::vector<std::string> may_change{"--steps",          "--save-every", "--keep-checkpoints", "--max-bad-steps",
                                            "--detect-anomaly", "--patience",   "--min-delta"};
  std::size_t refused = 0;
  for (const char* section : {"Model", "Data", "Training"}) {
    const std::vector<ListedFlag> flags = flags_in_section(train_help, section);
    CHECK(flags.size() >= 5);
    for (const ListedFlag& flag : flags) {
      if (std::find(may_change.begin(), may_change.end(), flag.name) != may_change.end()) continue;
      check_excluded("train --resume runs/x", "--resume", flag);
      ++refused;
    }
  }
  CHECK(refused >= 45);
  // (--overwrite alone is refused first for wanting --out.)
  for (const ListedFlag& flag : {ListedFlag{"--config", true}, ListedFlag{"--out", true}, ListedFlag{"--no-save", false}}) {
    check_excluded("train --resume runs/x", "--resume", flag);
  }
  check_excluded("train --no-save", "--no-save", {"--out", true});
  check_refused("train --overwrite", "--overwrite requires --out");
  // What a resumed run may change passes the flags' checks (and fails here on the
  // missing directory).
  for (const std::string& flag : may_change) {
    const bool is_switch = flag == "--detect-anomaly";
    const CliResult r = run_headroom("train --resume /nonexistent/run " + flag + (is_switch ? "" : " 7"));
    INFO(flag << ": " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find("excludes") == std::string::npos);
  }

  const std::string ablate_help = run_headroom("ablate --help").output;
  for (const char* section : {"Model", "Data", "Training", "Sweep"}) {
    for (const ListedFlag& flag : flags_in_section(ablate_help, section)) {
      INFO(section << " " << flag.name);
      check_excluded("ablate --merge sweeps/a", "--merge", flag);
      const bool sweep_runs_it = flag.name == "--jobs" || flag.name == "--shard";  // each task's own
      if (!sweep_runs_it) check_excluded("ablate --resume sweeps/a", "--resume", flag);
    }
  }
  for (const char* flag : {"--config", "--resume", "--no-report", "--slurm"}) {
    check_excluded("ablate --merge sweeps/a", "--merge", {flag, std::string(flag) != "--no-report" && std::string(flag) != "--slurm"});
  }
  check_excluded("ablate --resume sweeps/a", "--resume", {"--out", true});
  check_excluded("ablate --resume sweeps/a", "--resume", {"--config", true});
  check_excluded("ablate --slurm --out sweeps/a", "--slurm", {"--shard", true});
  check_excluded("ablate --slurm --out sweeps/a", "--slurm", {"--no-report", false});
  check_refused("ablate --out sweeps/a --tasks 2", "--tasks requires --slurm");
}

TEST_CASE("did you mean: the nearest name within two edits and under half the typed length") {
  using headroom::cli::edit_distance;
  using headroom::cli::nearest_name;
  CHECK(edit_distance("steps", "steps") == 0);
  CHECK(edit_distance("stpes", "steps") == 1);  // neighbours swapped: one edit
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("ca", "abc") == 3);  // no swap shortcut across an insertion
  const std::vector<std::string> flags{"--seed", "--seeds", "--steps", "--eps"};
  CHECK(nearest_name("--sed", flags) == "--seed");
  CHECK(nearest_name("--stpes", flags) == "--steps");
  CHECK(nearest_name("--zzzz", flags).empty());  // nothing within two edits
  CHECK(nearest_name("abc", {"xyz", "abcd"}) == "abcd");
  CHECK(nearest_name("ab", {"abc"}).empty());  // one edit of two characters is half: not a typo
  CHECK(nearest_name("x", {"y"}).empty());
}

TEST_CASE("user mistakes get one line naming the problem and exit status 2") {
  struct Bad {
    const char* args;
    const char* says;
  };
  const Bad cases[] = {
      {"", "A subcommand is required"},
      {"gradchek", "unknown command 'gradchek' (did you mean 'gradcheck'?)"},
      {"xyz", "unknown command 'xyz'; commands: train, sample, eval, convert, params, corpora, attention"},
      {"gradcheck --sed 3", "unknown flag --sed (did you mean --seed?)"},
      {"gradcheck --sed=3", "unknown flag --sed (did you mean --seed?)"},
      {"train --stpes 10", "unknown flag --stpes (did you mean --steps?)"},  // a flag of an option group
      {"train --zzzz 1", "unknown flag --zzzz (see headroom train --help)"},  // nothing near it
      {"train --steps 10 stray", "not expected: stray"},
      // The typo, not "--model is required":
      {"sample --temprature 1", "unknown flag --temprature (did you mean --temperature?)"},
      {"sample", "--model is required"},
      {"gradcheck --op matmull", "unknown op or module 'matmull' (did you mean 'matmul'?)"},
      {"gradcheck --op zzzz", "unknown op or module 'zzzz'; ops are: "},
      {"gradcheck --atol -1", "--atol: must be a positive number, got -1"},
      {"gradcheck --rtol x", "--rtol: must be a number >= 0, got x"},
      {"gradcheck --eps 0", "--eps: must be a positive number, got 0"},
      {"gradcheck --seed -4", "--seed: must be a whole number from 0 to 10^19 - 1, got -4"},
  };
  for (const Bad& bad : cases) {
    check_refused(bad.args, bad.says);
  }
}

// --version names the GEMM library and its kernels, and who chose them: on an AMD CPU
// with AVX-512, Debian's BLIS 0.9 would pick its generic kernels, and on an Intel
// one with AVX-512 and no model number in its name its AVX2 ones, so headroom picks
// skx there (autograd/gemm.cpp, skx_kernels_reason); a BLIS_ARCH_TYPE the user set wins.
TEST_CASE("headroom --version names the GEMM kernels and who chose them") {
  // The children start without a BLIS_ARCH_TYPE of this test's environment, as a
  // user's shell would.
  const CliResult plain = run_program("env -u BLIS_ARCH_TYPE " HEADROOM_BIN, "--version");
  INFO(plain.output);
  REQUIRE(plain.status == 0);
  CHECK(plain.output.find("headroom 0.1.0\nGEMMs: ") == 0);
  if (plain.output.find("GEMMs: BLIS") == std::string::npos) return;  // an OpenBLAS build
#if defined(__x86_64__)
  if (headroom::skx_kernels_reason(headroom::this_cpu()) != nullptr) {
    CHECK(plain.output.find(", skx kernels (chosen by headroom: ") != std::string::npos);
  } else {
    CHECK(plain.output.find(" kernels (chosen by BLIS)") != std::string::npos);
  }
  // BLIS's arch_t 3 is haswell (AVX2), which every x86-64 BLIS build of Debian has.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    const CliResult chosen = run_program("env BLIS_ARCH_TYPE=3 " HEADROOM_BIN, "--version");
    INFO(chosen.output);
    CHECK(chosen.status == 0);
    CHECK(chosen.output.find(", haswell kernels (chosen by BLIS_ARCH_TYPE)") != std::string::npos);
  }
#endif
}
