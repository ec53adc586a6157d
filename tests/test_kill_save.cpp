// Training killed (SIGKILL) at random moments of saving and pruning checkpoints, then
// resumed, over and over (issue 44): at every kill each visible checkpoint is whole
// (both files there, and each reads back with its checksums), the disk holds no more
// than the checkpoints --keep-checkpoints allows plus the one being written, and the
// run finally ends with no leftover of any killed save or prune.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "nn/safetensors.hpp"
#include "cli_runner.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

struct CheckpointsSeen {
  std::size_t complete = 0;  // step-N directories, every one checked whole
  std::size_t hidden = 0;    // .step-N.* work directories of a save or prune
  std::uintmax_t bytes = 0;  // everything under checkpoints/
};

CheckpointsSeen look(const fs::path& run) {
  CheckpointsSeen seen;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(run / "checkpoints", ec)) {
    if (e.is_regular_file(ec)) seen.bytes += e.file_size(ec);
  }
  for (const fs::directory_entry& e : fs::directory_iterator(run / "checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(".")) {
      ++seen.hidden;
      continue;
    }
    INFO(e.path().string());
    REQUIRE(name.starts_with("step-"));
    // Whole: both files, and both read back (their checksums match their data).
    CHECK_NOTHROW((void)hr::read_safetensors(e.path() / "model.safetensors"));
    CHECK_NOTHROW((void)hr::read_safetensors(e.path() / "train_state.safetensors"));
    ++seen.complete;
  }
  return seen;
}

}  // namespace

TEST_CASE("train killed at random points of saving and pruning: every visible checkpoint is whole, the disk bound holds") {
  const TempDir tmp("kill_save");
  const fs::path run = tmp / "run";
  constexpr std::size_t kKeep = 2;
  // A checkpoint every step, so that most moments of the run are inside a save or a
  // prune; a model large enough (about 0.4 MB a checkpoint) that writing one takes
  // a while.
  const std::string train = fmt::format(
      "train --task copy --vocab 12 --seq-len 8 --d-model 64 --heads 2 --layers 2 --batch 4 --steps 400 "
      "--eval-every 400 --save-every 1 --keep-checkpoints {} -q",
      kKeep);
  std::mt19937 rng(44);
  std::uniform_int_distribution<int> delay_ms(5, 120);

  std::uintmax_t one_checkpoint = 0;  // the size of a whole checkpoint, once one is seen
  int kills = 0, resumed = 0;
  bool started = false;
  for (int round = 0; round < 30; ++round) {
    const std::string args = started ? "train --resume " + run.string() + " -q" : train + " --out " + run.string() + " --overwrite";
    const Child c = spawn_headroom(args, tmp / fmt::format("round{}.log", round));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    const bool killed = ::kill(c.pid, SIGKILL) == 0;
    const int status = wait_for(c);
    INFO("round " << round << ": " << args << "\n" << read_file(tmp / fmt::format("round{}.log", round)));
    if (status == 0) break;  // finished before the kill
    REQUIRE(killed);
    CHECK(status == 128 + SIGKILL);
    ++kills;
    const CheckpointsSeen seen = look(run);
    CHECK(seen.complete <= kKeep + 1);  // the kept ones and the one just saved, before its prune
    if (seen.complete > 0 && one_checkpoint == 0) one_checkpoint = seen.bytes / seen.complete;
    // The kept ones, the one being saved and one a killed prune left hidden, at most.
    if (one_checkpoint > 0) CHECK(seen.bytes <= (kKeep + 3) * one_checkpoint + one_checkpoint / 2);
    if (seen.complete > 0) {
      started = true;
      ++resumed;
    }
  }
  CHECK(kills >= 10);
  CHECK(resumed >= 5);

  // The run, resumed to its end, leaves exactly its kept checkpoints and nothing hidden.
  if (started) {
    const CliResult r = run_headroom("train --resume " + run.string() + " -q");
    INFO(r.output);
    CHECK(r.status == 0);
  } else {
    REQUIRE(run_headroom(train + " --out " + run.string() + " --overwrite").status == 0);
  }
  const CheckpointsSeen end = look(run);
  CHECK(end.complete == kKeep);
  CHECK(end.hidden == 0);
  CHECK_NOTHROW((void)hr::read_safetensors(run / "model.safetensors"));
}
