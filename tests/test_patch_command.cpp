// `headroom patch` (docs/cli/patch.md): on a trained induction model and a text
// model, its tables and files, the identities a single pair makes exact (patching
// the one changed embedding, or the final stream at the answer, recovers all of LD;
// any other position nothing), and every bad input refused in one line before
// anything is written.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cli_runner.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<std::vector<std::string>> csv_rows(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(f, line)) {
    std::vector<std::string> cells;
    std::stringstream s(line);
    std::string cell;
    while (std::getline(s, cell, ',')) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

// One trained model per test binary run: a 2-layer, 2-head attention-only induction model.
const fs::path& induction_model() {
  static const TempDir dir("patch_induction");
  static const bool trained = [] {
    const CliResult r = run_headroom("train --task induction --seq-len 12 --vocab 16 --d-model 16 --layers 2 "
                                     "--heads 2 --attn-only --steps 40 --eval-every 40 -q --out " +
                                     dir.path().string());
    INFO(r.output);
    return r.status == 0;
  }();
  REQUIRE(trained);
  return dir.path();
}

}  // namespace

TEST_CASE("headroom patch on task pairs prints the tables and writes the CSVs and SVGs") {
  const fs::path& model = induction_model();
  const TempDir out("patch_out");
  const CliResult r = run_headroom("patch --model " + model.string() + " --pairs 6 --seed 2 --out " +
                                   (out.path() / "p").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("LD        clean ") != std::string::npos);
  CHECK(r.output.find("heads (head_out") != std::string::npos);
  CHECK(r.output.find("agreement: Pearson r ") != std::string::npos);
  const auto heads = csv_rows(out.path() / "p" / "patch_heads.csv");
  REQUIRE(heads.size() == 1 + 2 * 2);
  CHECK(heads[0] == std::vector<std::string>{"layer", "head", "exact", "attribution"});
  CHECK(heads[4][0] == "1");
  CHECK(heads[4][1] == "1");
  const auto resid = csv_rows(out.path() / "p" / "patch_resid.csv");
  REQUIRE(resid.size() == 1 + 3 * 12);
  // Rows: resid_pre of layer 0 at positions 0 .. 11, layer 1, then the final stream.
  CHECK(resid[1 + 3 * 12 - 1][0] == "final");
  // An induction corruption never touches position 0 (it changes the token after an
  // earlier one): patching the embedding there recovers exactly nothing.
  CHECK(resid[1][0] == "0");
  CHECK(resid[1][1] == "0");
  CHECK(std::stod(resid[1][2]) == 0.0);
  CHECK(std::stod(resid[1][3]) == 0.0);
  CHECK(csv_rows(out.path() / "p" / "patch_pattern.csv").size() == 1 + 2 * 2);
  for (const char* svg : {"patch_heads.svg", "patch_resid.svg", "patch_pattern.svg"}) {
    const std::string text = read_file(out.path() / "p" / svg);
    CHECK(text.rfind("<svg", 0) == 0);
    CHECK(text.find("exact patching") != std::string::npos);
  }
}

TEST_CASE("headroom patch on one given pair: the changed embedding and the final stream at the answer recover all") {
  const fs::path& model = induction_model();
  const TempDir out("patch_one");
  // Induction layout, T = 12: the segment 4 5 6 7 at 1 and its repeat at 7; the
  // corrupted row changes the token after 4's first occurrence (position 2).
  const std::string clean = "3 4 5 6 7 8 9 4 5 6 7 10";
  const std::string corrupted = "3 4 11 6 7 8 9 4 5 6 7 10";
  const CliResult r = run_headroom("patch --model " + model.string() + " --clean '" + clean + "' --corrupted '" +
                                   corrupted + "' --answer 11 --wrong 12 --what resid --out " + out.path().string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_FALSE(fs::exists(out.path() / "patch_heads.csv"));
  const auto resid = csv_rows(out.path() / "patch_resid.csv");
  REQUIRE(resid.size() == 1 + 3 * 12);
  for (std::size_t i = 1; i < resid.size(); ++i) {
    const std::string& layer = resid[i][0];
    const int t = std::stoi(resid[i][1]);
    const double exact = std::stod(resid[i][2]);
    INFO("layer " << layer << " position " << t);
    if (layer == "0") CHECK(exact == doctest::Approx(t == 2 ? 1.0 : 0.0).epsilon(1e-4));
    if (layer == "final") CHECK(exact == doctest::Approx(t == 11 ? 1.0 : 0.0).epsilon(1e-4));
    // Before the changed position nothing differs: the attribution is 0 there too.
    if (t < 2) CHECK(std::stod(resid[i][3]) == 0.0);
  }
}

TEST_CASE("headroom patch on a text model needs a pair, and runs on one") {
  const TempDir dir("patch_text");
  const fs::path text = dir.path() / "t.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 20; ++i) f << "the cat sat on the mat. the hat sat on the cat. a bat sat on a hat.\n";
  }
  const CliResult trained = run_headroom("train --text " + text.string() + " --seq-len 8 --d-model 16 --layers 1 "
                                         "--heads 2 --steps 5 --eval-every 5 -q --out " + (dir.path() / "m").string());
  INFO(trained.output);
  REQUIRE(trained.status == 0);
  const std::string m = (dir.path() / "m").string();
  check_refused("patch --model " + m, "is a text model, which has no task to draw pairs from");
  const CliResult r = run_headroom("patch --model " + m + " --clean 'the cat' --corrupted 'the bat' --answer ' ' "
                                   "--wrong s --what heads");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("one pair from the command line: answer '␣' vs 's'") != std::string::npos);
  check_refused("patch --model " + m + " --clean 'the cat' --corrupted 'the bat' --answer Z --wrong s",
                "--answer");
}

TEST_CASE("headroom patch refuses bad input in one line before writing anything") {
  const std::string m = induction_model().string();
  const TempDir dir("patch_refused");
  const std::string out = " --out " + (dir.path() / "never").string();
  check_refused("patch", "--model");
  check_refused("patch --model " + (dir.path() / "none").string() + out, "none");
  check_refused("patch --model " + m + " --pairs 0" + out, "--pairs");
  check_refused("patch --model " + m + " --pairs 5000" + out, "--pairs 5000: at most 4096");
  check_refused("patch --model " + m + " --what everything" + out, "--what");
  check_refused("patch --model " + m + " --clean '3 4' --corrupted '3 5' --answer 4" + out,
                "--wrong: missing: a pair from the command line needs --clean, --corrupted, --answer and --wrong");
  check_refused("patch --model " + m + " --clean '3 4 5' --corrupted '3 5' --answer 4 --wrong 5" + out,
                "--corrupted: 2 tokens, but --clean has 3");
  check_refused("patch --model " + m + " --clean '3 4' --corrupted '3 5' --answer 16 --wrong 5" + out, "--answer");
  check_refused("patch --model " + m + " --clean '3 4' --corrupted '3 5' --answer 4 --wrong 4" + out,
                "--wrong '4': is the same token as --answer");
  check_refused("patch --model " + m + " --clean '3 4' --corrupted '3 5' --answer 4 --wrong 5 --pairs 3" + out,
                "--pairs 3: draws pairs of the model's task; it does not go with --clean");
  check_refused("patch --model " + m + " --clean '3 4 5 6 7 8 9 10 11 12 13 14 15' --corrupted "
                "'3 4 5 6 7 8 9 10 11 12 13 14 3' --answer 4 --wrong 5" + out,
                "--clean: 13 tokens are more than the model's max_len 12");
  // Identical inputs: the recovered fractions would all be 0 / 0 (it printed nan).
  check_refused("patch --model " + m + " --clean '3 4 5' --corrupted '3 4 5' --answer 4 --wrong 5" + out,
                "--corrupted '3 4 5': is the same input as --clean");
  CHECK_FALSE(fs::exists(dir.path() / "never"));
  const fs::path file = dir.path() / "file";
  std::ofstream(file) << "x";
  check_refused("patch --model " + m + " --out " + file.string(), "--out");
}

TEST_CASE("headroom patch --help explains the metric and the flags") {
  const CliResult r = run_headroom("patch --help");
  REQUIRE(r.status == 0);
  CHECK(r.output.find("(LD_patched - LD_corrupted) / (LD_clean - LD_corrupted)") != std::string::npos);
  for (const char* flag : {"--pairs", "--seed", "--what", "--clean", "--corrupted", "--answer", "--wrong", "--out"}) {
    CHECK(r.output.find(flag) != std::string::npos);
  }
}

TEST_CASE("headroom patch runs on the other model options: GQA, rope, rmsnorm, swiglu, qk-norm, post-norm, key smear") {
  const TempDir dir("patch_options");
  const std::vector<std::string> models = {
      "--task copy --heads 4 --kv-heads 2 --pos rope --norm-type rmsnorm --ffn swiglu --qk-norm",
      "--task before --heads 2 --norm post --tie-embeddings --pos-qk-only",
      "--task lagsum --heads 2 --norm none --key-smear",
  };
  for (std::size_t i = 0; i < models.size(); ++i) {
    const fs::path m = dir.path() / std::to_string(i);
    const CliResult trained = run_headroom("train " + models[i] + " --seq-len 10 --vocab 10 --d-model 16 --layers 2 "
                                           "--steps 3 --eval-every 3 -q --out " + m.string());
    INFO(models[i] << "\n" << trained.output);
    REQUIRE(trained.status == 0);
    const CliResult r = run_headroom("patch --model " + m.string() + " --pairs 4 --out " + (m / "p").string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    const auto resid = csv_rows(m / "p" / "patch_resid.csv");
    REQUIRE(resid.size() == 1 + 3 * 10);
    // lagsum's corruption changes a b, never the a at position 0: patching the
    // embedding there recovers exactly nothing.
    if (i == 2) CHECK(std::stod(resid[1][2]) == 0.0);
  }
}
