// `headroom` as a user meets it: the gradcheck table, --help, and one-line errors
// with exit status 2 for every kind of mistake.
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
      {"xyz", "unknown command 'xyz'; commands: train, sample, eval, convert, params, attention"},
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
