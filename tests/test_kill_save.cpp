// Training killed (SIGKILL) at random moments of saving and pruning checkpoints, then
// resumed, over and over (issue 44): at every kill each visible checkpoint is whole
// (both files there, and each reads back with its checksums), the disk holds no more
// than the checkpoints --keep-checkpoints allows plus the one being written, and the
// run finally ends with no leftover of any killed save or prune.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
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
  std::uniform_int_distribution<int> delay_ms(0, 40);

  std::uintmax_t one_checkpoint = 0;  // the size of a whole checkpoint, once one is seen
  std::size_t newest = 0;             // the newest step saved so far
  int kills = 0;
  bool finished = false;
  for (int round = 0; round < 30 && !finished; ++round) {
    const std::string args =
        newest > 0 ? "train --resume " + run.string() + " -q" : train + " --out " + run.string() + " --overwrite";
    const fs::path log = tmp / fmt::format("round{}.log", round);
    const Child c = spawn_headroom(args, log);
    // Each round kills the process once it has saved a checkpoint past the newest
    // one, plus a random few milliseconds, so that every round makes progress
    // however slow the build (a sanitizer's) and the kill falls anywhere in the
    // cycle of saving and pruning that follows.
    int status = -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      int raw = 0;
      if (::waitpid(c.pid, &raw, WNOHANG) == c.pid) {
        status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
        break;
      }
      std::size_t seen = 0;
      std::error_code ec;
      for (const fs::directory_entry& e : fs::directory_iterator(run / "checkpoints", ec)) {
        const std::string name = e.path().filename().string();
        if (name.starts_with("step-")) seen = std::max<std::size_t>(seen, std::stoul(name.substr(5)));
      }
      if (seen > newest) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    INFO("round " << round << ": " << args << "\n" << read_file(log));
    if (status < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
      const bool killed = ::kill(c.pid, SIGKILL) == 0;
      status = wait_for(c);
      if (status == 0) {
        finished = true;  // it ended before the signal
        break;
      }
      REQUIRE(killed);
      CHECK(status == 128 + SIGKILL);
      ++kills;
    } else {
      REQUIRE(status == 0);  // it ended before it saved again: the run is done
      finished = true;
      break;
    }
    const CheckpointsSeen seen = look(run);
    REQUIRE(seen.complete > 0);  // it saved one past the newest before the kill
    CHECK(seen.complete <= kKeep + 1);  // the kept ones and the one just saved, before its prune
    if (one_checkpoint == 0) one_checkpoint = seen.bytes / seen.complete;
    // The kept ones, the one being saved and one a killed prune left hidden, at most.
    CHECK(seen.bytes <= (kKeep + 3) * one_checkpoint + one_checkpoint / 2);
    for (const fs::directory_entry& e : fs::directory_iterator(run / "checkpoints")) {
      const std::string name = e.path().filename().string();
      if (name.starts_with("step-")) newest = std::max<std::size_t>(newest, std::stoul(name.substr(5)));
    }
  }
  CHECK(kills >= 10);

  // The run, resumed to its end, leaves exactly its kept checkpoints and nothing hidden.
  if (!finished) {
    const CliResult r = run_headroom("train --resume " + run.string() + " -q");
    INFO(r.output);
    CHECK(r.status == 0);
  }
  const CheckpointsSeen end = look(run);
  CHECK(end.complete == kKeep);
  CHECK(end.hidden == 0);
  CHECK_NOTHROW((void)hr::read_safetensors(run / "model.safetensors"));
}
