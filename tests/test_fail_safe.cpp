// A command that fails leaves every file as it found it, and numbers that cannot mean
// anything are refused before anything is written (issue 44): --init-from inside the
// --out that --overwrite would delete, a resume whose metrics.csv is gone, --overwrite
// stopped by an immutable file, an lr beyond float and SGD momentum 5, a subnormal
// sampling temperature, convert's --out, a lag_beta whose Bayes loss overflows, and a
// sweep run whose result.json was deleted.
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

namespace {

// A run that trains in well under a second, stopped at step 20 of 40 with a
// checkpoint, so that it can be resumed.
const std::string kRun =
    "train --task copy --vocab 8 --seq-len 6 --d-model 16 --heads 2 --layers 1 --steps 40 --eval-every 10 "
    "--save-every 10 -q ";

// kRun into tmp/name, with `extra` flags (in place of its own where they overlap).
fs::path trained(const TempDir& tmp, const std::string& name, const std::string& extra = "") {
  const fs::path dir = tmp / name;
  std::string args = kRun;
  if (extra.find("--heads") != std::string::npos) args.replace(args.find("--heads 2 "), 10, "");
  const CliResult r = run_headroom(args + extra + " --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  return dir;
}

// Every regular file under `dir` with its bytes, to compare a directory before and after.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != ".lock") {
      files[fs::relative(e.path(), dir).string()] = read_file(e.path());
    }
  }
  return files;
}

// chattr +i on a file for the life of the object, where the file system has it.
class Immutable {
 public:
  explicit Immutable(fs::path file) : file_(std::move(file)) {
    ok_ = std::system(("chattr +i '" + file_.string() + "' 2>/dev/null").c_str()) == 0;
  }
  ~Immutable() {
    if (ok_) (void)std::system(("chattr -i '" + file_.string() + "'").c_str());
  }
  Immutable(const Immutable&) = delete;
  Immutable& operator=(const Immutable&) = delete;
  bool ok() const { return ok_; }

 private:
  fs::path file_;
  bool ok_ = false;
};

}  // namespace

TEST_CASE("train --init-from inside the --out that --overwrite would delete is refused, and the source kept") {
  const TempDir tmp("fail_init_from");
  const fs::path run = trained(tmp, "m");
  const auto before = snapshot(run);
  check_refused(kRun + "--init-from " + run.string() + " --out " + run.string() + " --overwrite",
                "the model lies inside --out");
  check_refused(kRun + "--init-from " + (run / "checkpoints/step-00000040/model.safetensors").string() + " --out " +
                    run.string() + "/ --overwrite",
                "the model lies inside --out");
  CHECK(snapshot(run) == before);
  // Elsewhere it is fine.
  const CliResult ok = run_headroom(kRun + "--init-from " + run.string() + " --out " + (tmp / "uptrained").string());
  INFO(ok.output);
  CHECK(ok.status == 0);
}

TEST_CASE("a resume refused for a missing metrics.csv leaves the run as it was") {
  const TempDir tmp("fail_resume");
  const fs::path run = trained(tmp, "r", "--stop-after 20");
  fs::remove(run / "metrics.csv");
  const auto before = snapshot(run);
  REQUIRE(before.count("model.safetensors") == 1);
  const CliResult r = run_headroom("train --resume " + run.string() + " -q");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("metrics.csv") != std::string::npos);
  CHECK(snapshot(run) == before);  // model.safetensors included
}

TEST_CASE("--overwrite that cannot remove the old run whole removes none of it") {
  const TempDir tmp("fail_overwrite");
  const fs::path run = trained(tmp, "o");
  const fs::path pinned = run / "checkpoints/step-00000040/model.safetensors";
  const auto before = snapshot(run);
  const Immutable immutable(pinned);
  if (!prerequisite(immutable.ok(), "chattr +i is not available here (root on ext4 or similar is needed)")) return;
  check_refused(kRun + "--out " + run.string() + " --overwrite", "immutable");
  CHECK(snapshot(run) == before);  // config.json, metrics.csv, the model and every checkpoint
}

TEST_CASE("an lr beyond float and SGD momentum 5 are refused before the run directory exists") {
  const TempDir tmp("fail_optim");
  const fs::path out = tmp / "never";
  check_refused(kRun + "--lr 1e308 --out " + out.string(), "lr must be at most 3.40282e+38");
  check_refused(kRun + "--optimizer sgd --momentum 5 --out " + out.string(), "momentum must be in [0, 1), got 5");
  std::ofstream(tmp / "c.json") << R"({"train": {"lr": 1e308}})";
  check_refused(kRun + "--config " + (tmp / "c.json").string() + " --out " + out.string(), "lr must be at most");
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("sample refuses a subnormal temperature instead of printing garbage") {
  const TempDir tmp("fail_temperature");
  const fs::path run = trained(tmp, "s");
  check_refused("sample --model " + run.string() + " --prompt '1 2 3' --tokens 4 --temperature 1e-320",
                "temperature 1e-320 is subnormal");
  const CliResult tiny = run_headroom("sample --model " + run.string() + " --prompt '1 2 3' --tokens 4 --temperature 1e-300");
  INFO(tiny.output);
  CHECK((tiny.status == 0 || tiny.output.find("is too small for the model's logits") != std::string::npos));
  CHECK(tiny.output.find("nan") == std::string::npos);
}

TEST_CASE("convert's --out: refused in one line where it cannot be written, and written whole or not at all") {
  const TempDir tmp("fail_convert");
  const fs::path run = trained(tmp, "c", "--heads 4");
  const std::string convert = "convert --model " + run.string() + " --kv-heads 2 --out ";
  fs::create_symlink(tmp / "nowhere", tmp / "dangling");
  check_refused(convert + (tmp / "dangling").string(), "is a symbolic link to nothing");
  check_refused(convert + (run / "config.json/sub").string(), "is a file");
  fs::create_directory(tmp / "locked");
  const Immutable immutable(tmp / "locked");
  if (prerequisite(immutable.ok(), "chattr +i is not available here")) {
    check_refused(convert + (tmp / "locked/new").string(), "cannot be made: cannot write in");
  }
  // Made with its parents, holding both files and nothing else.
  const CliResult ok = run_headroom(convert + (tmp / "a/b/gqa").string());
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK(TempDir::entries_of(tmp / "a/b/gqa") == std::vector<std::string>{"config.json", "model.safetensors"});
  CHECK(TempDir::entries_of(tmp / "a/b") == std::vector<std::string>{"gqa"});  // no temporary left
}

TEST_CASE("a lag_beta whose Bayes loss would overflow is refused with the largest that works") {
  check_refused("train --task lags --lag-beta 1e308 --steps 1 --no-save", "makes the label logits overflow");
}

TEST_CASE("a finished sweep run whose result.json was deleted is trained again") {
  const TempDir tmp("fail_sweep");
  const fs::path out = tmp / "s";
  const std::string ablate = "ablate --task copy --vocab 8 --seq-len 6 --d-model 8 --layers 1 --heads 1,2 --steps 4 "
                             "--warmup 0 --batch 4 --eval-every 4 --eval-batches 1 --jobs 1 --out " +
                             out.string();
  REQUIRE(run_headroom(ablate).status == 0);
  fs::path run;
  for (const fs::directory_entry& e : fs::directory_iterator(out / "runs")) run = e.path();
  REQUIRE(fs::exists(run / "result.json"));
  fs::remove(run / "result.json");
  // Its lock still says finished, as of long ago (past the time another machine's
  // result.json may take to be seen here).
  const std::string lock = read_file(run / ".lock");
  std::ofstream(run / ".lock") << lock.substr(0, lock.find('\n')) << "\nfinished 1000000000";
  const CliResult again = run_headroom(ablate);
  INFO(again.output);
  CHECK(again.status == 0);
  CHECK(fs::exists(run / "result.json"));
  CHECK(again.output.find("Not finished") == std::string::npos);
}

TEST_CASE("a model file without checksums loads with a note, and one with a flipped byte is refused, naming the tensor") {
  const TempDir tmp("fail_checksums");
  const fs::path run = trained(tmp, "k");
  const std::string bytes = read_file(run / "model.safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  // The same file as an older headroom wrote it: no crc32c keys.
  for (auto it = header["__metadata__"].begin(); it != header["__metadata__"].end();) {
    it = it.key().starts_with("crc32c:") ? header["__metadata__"].erase(it) : std::next(it);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string old(8, '\0');
  for (int i = 0; i < 8; ++i) old[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  old += text + bytes.substr(8 + n);
  const fs::path old_file = tmp.write("old.safetensors", old);
  const CliResult r = run_headroom("eval --model " + old_file.string());
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("note: " + old_file.string() + " carries no checksums") != std::string::npos);
  // A flipped bit in the data of the checksummed file: refused, naming the tensor.
  std::string flipped = bytes;
  flipped[flipped.size() - 3] = static_cast<char>(flipped[flipped.size() - 3] ^ 0x04);
  const fs::path bad = tmp.write("bad.safetensors", flipped);
  check_refused("eval --model " + bad.string(), "the data does not match its checksum");
}
