// `headroom circuits` end to end on a tiny trained model: the attribution it writes
// sums to the logit it prints and equals the library's, the per-head and composition
// CSVs and the SVG are there with the right rows, and user mistakes are one line with
// exit status 2 (docs/cli/circuits.md).
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cli_runner.hpp"
#include "interp/decompose.hpp"
#include "support.hpp"
#include "train/run_dir.hpp"

namespace fs = std::filesystem;
namespace hr = headroom;

namespace {

// 2 attention-only layers of 2 heads on repeat, seq_len 8, vocab 12.
const fs::path& circuits_model() {
  static const TempDir tmp("circuits_model");
  static const fs::path dir = [] {
    const fs::path& d = tmp.path();
    const CliResult train = run_headroom(
        "train --task repeat --seq-len 8 --vocab 12 --d-model 16 --heads 2 --layers 2 --attn-only --steps 30 "
        "--warmup 5 --eval-every 30 --eval-batches 1 -q --out " + d.string());
    INFO(train.output);
    REQUIRE(train.status == 0);
    return d;
  }();
  return dir;
}

// The number after `key` in the output.
double number_after(const std::string& output, const std::string& key) {
  const std::size_t at = output.find(key);
  REQUIRE_MESSAGE(at != std::string::npos, "no '" << key << "' in\n" << output);
  return std::stod(output.substr(at + key.size()));
}

}  // namespace

TEST_CASE("headroom circuits: the attribution sums to the printed logit and equals the library's") {
  const fs::path& model = circuits_model();
  const TempDir out("circuits_out");
  const fs::path dir = out.path() / "c";
  const CliResult r = run_headroom("circuits --model " + model.string() +
                                   " --input '3 4 5 6 3 4 5' --position 6 --answer 6 --wrong 7 --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const double logit = number_after(r.output, "answer 6: logit ");
  const double difference = number_after(r.output, "logit difference 6 - 7: ");
  CHECK(r.output.find("K-composition") != std::string::npos);

  const std::vector<std::string> dla = lines_of(read_file(dir / "dla.csv"));
  REQUIRE(!dla.empty());
  CHECK(dla[0] == "part,kind,layer,head,logit,difference");
  // embed, pos_embed, 2 x (2 heads + attn_bias), ln_f_bias
  REQUIRE(dla.size() == 1 + 9);
  hr::LoadedRun run = hr::load_run(model);
  hr::IndexArray row = {{3, 4, 5, 6, 3, 4, 5}};
  const auto d = hr::decompose_residual(run.model(), row, std::size_t{6});
  double sum_logit = 0, sum_difference = 0;
  for (std::size_t i = 1; i < dla.size(); ++i) {
    const std::vector<std::string> f = fields(dla[i]);
    REQUIRE(f.size() == 6);
    CHECK(f[0] == d.parts[i - 1].name);
    CHECK(std::stod(f[4]) == doctest::Approx(d.logits(i - 1, 6)).epsilon(1e-5));
    CHECK(std::stod(f[5]) == doctest::Approx(d.logits(i - 1, 6) - d.logits(i - 1, 7)).epsilon(1e-5));
    sum_logit += std::stod(f[4]);
    sum_difference += std::stod(f[5]);
  }
  CHECK(sum_logit == doctest::Approx(logit).epsilon(1e-3));
  CHECK(sum_difference == doctest::Approx(difference).epsilon(1e-3));
  CHECK(logit == doctest::Approx(d.model_logits(6)).epsilon(1e-3));

  const std::vector<std::string> heads = lines_of(read_file(dir / "head_circuits.csv"));
  REQUIRE(heads.size() == 1 + 4);
  CHECK(heads[0].rfind("layer,head,copying,qk_sv1,", 0) == 0);
  for (std::size_t i = 1; i < heads.size(); ++i) {
    const double copying = std::stod(fields(heads[i])[2]);
    CHECK(copying >= -1.0);
    CHECK(copying <= 1.0);
  }
  const std::vector<std::string> comp = lines_of(read_file(dir / "composition.csv"));
  REQUIRE(comp.size() == 1 + 4);  // 2 readers x 2 writers
  CHECK(comp[0] == "reader_layer,reader_head,writer_layer,writer_head,q,k,v");
  CHECK(comp[1].rfind("1,0,0,0,", 0) == 0);
  const std::string svg = read_file(dir / "composition.svg");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("K-composition") != std::string::npos);
}

TEST_CASE("headroom circuits: user mistakes are one line and exit status 2, naming the value") {
  const fs::path& dir = circuits_model();
  const std::string m = "circuits --model " + dir.string() + " ";
  const fs::path missing = dir / "nope";
  check_refused("circuits --model " + missing.string(), "model '" + missing.string() + "': no such file or directory");
  check_refused(m + "--input '3 4 5' --position 3", "--position 3: is outside the input's 3 tokens [0, 3)");
  check_refused(m + "--answer 12", "--answer 12: is outside the model's vocabulary [0, 12)");
  check_refused(m + "--wrong 40", "--wrong 40: is outside the model's vocabulary [0, 12)");
  check_refused(m + "--answer 3 --wrong 3", "--wrong 3: is --answer itself");
  check_refused(m + "--input '3 99'", "--input: token 99 is out of range");
  check_refused(m + "--input 3 --example 1", "--input excludes --example");
  check_refused(m + "--top 0", "--top");
  check_refused(m + "--out " + (dir / "model.safetensors").string(), "is a file, not a directory");
  // Not made where it cannot be: under a file, or at a symbolic link to nothing; and
  // refused before the analysis is printed (one line).
  check_refused(m + "--out " + (dir / "model.safetensors/sub").string(), "cannot be made: '" + (dir / "model.safetensors").string() + "' is a file");
  const TempDir links("circuits_links");
  fs::create_symlink(links / "nowhere", links / "dangling");
  check_refused(m + "--out " + (links / "dangling").string(), "is a symbolic link to nothing");
  // Made, with its missing parents, as --help says.
  const CliResult made = run_headroom(m + "--out " + (links / "a/b/c").string());
  INFO(made.output);
  CHECK(made.status == 0);
  CHECK(fs::exists(links / "a/b/c/dla.csv"));
  const CliResult help = run_headroom("circuits --help");
  CHECK(help.status == 0);
  for (const char* flag : {"--model", "--input", "--example", "--position", "--answer", "--wrong", "--top", "--out"}) {
    INFO(flag);
    CHECK(help.output.find(flag) != std::string::npos);
  }
}
