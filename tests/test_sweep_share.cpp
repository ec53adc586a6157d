// One sweep directory shared by several processes (docs/design.md #24): runs are
// claimed by their locks, a killed process's run is resumed by another, every run
// ends exactly once (read back from attempts.log), and the reports are whole.
// Also --shard auto from a scheduler's environment, --resume DIR, --no-report, and
// the Slurm scripts and their submission through a stand-in sbatch (the real
// one-node Slurm is tests/test_slurm.sh).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "ablate/slurm.hpp"
#include "ablate/sweep.hpp"
#include "cli_runner.hpp"
#include "support.hpp"
#include "train/out_dir.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

using Env = std::map<std::string, std::string>;

hr::Shard shard_in(const Env& env) {
  return hr::shard_from_environment([&](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

struct Attempt {
  std::string event;  // start, finish, stop, fail
  long pid = 0;
  std::size_t step = 0;
};

// attempts.log, line by line: "<time> <event> pid=P host=H step=S".
std::vector<Attempt> attempts_of(const fs::path& run_dir) {
  std::vector<Attempt> out;
  for (const std::string& line : lines_of(read_file(run_dir / "attempts.log"))) {
    std::istringstream in(line);
    std::string when, event, word;
    in >> when >> event;
    Attempt a{.event = event, .pid = 0, .step = 0};
    while (in >> word) {
      if (word.rfind("pid=", 0) == 0) a.pid = std::stol(word.substr(4));
      if (word.rfind("step=", 0) == 0) a.step = std::stoull(word.substr(5));
    }
    out.push_back(a);
  }
  return out;
}

// The PID in a held run's .lock ("PID on HOST"), or 0.
long lock_holder(const fs::path& run_dir) {
  const std::string text = read_file(run_dir / hr::kLockFile);
  try {
    return text.empty() ? 0 : std::stol(text);
  } catch (const std::exception&) {
    return 0;
  }
}

// 8 runs, each long enough (300 steps, a checkpoint every 10) to be killed in the middle.
const std::string kGrid =
    "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 300 --warmup 5 --eval-every 50 "
    "--save-every 10 --heads 1,2 --dk 4,8 --seeds 2 --jobs 1 -q";

const std::string kSmall =
    "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 20 --warmup 5 --eval-every 10 "
    "--save-every 10 --heads 1,2 --seeds 2 --jobs 1 -q";

}  // namespace

// ---- --shard auto -----------------------------------------------------------------

TEST_CASE("--shard auto: a Slurm array task's shard from SLURM_ARRAY_TASK_ID, _MIN, _MAX, _COUNT and _STEP") {
  auto slurm = [](const std::string& id, const std::string& min, const std::string& max, const std::string& count) {
    return Env{{"SLURM_ARRAY_TASK_ID", id}, {"SLURM_ARRAY_TASK_MIN", min}, {"SLURM_ARRAY_TASK_MAX", max},
               {"SLURM_ARRAY_TASK_COUNT", count}};
  };
  for (int id = 0; id < 4; ++id) {
    const hr::Shard s = shard_in(slurm(std::to_string(id), "0", "3", "4"));  // --array=0-3
    CHECK(s.index == static_cast<std::size_t>(id + 1));
    CHECK(s.count == 4);
  }
  const hr::Shard one_based = shard_in(slurm("7", "1", "8", "8"));  // --array=1-8
  CHECK(one_based.index == 7);
  CHECK(one_based.count == 8);
  Env stepped = slurm("5", "1", "7", "4");  // --array=1-7:2 is 1,3,5,7
  stepped["SLURM_ARRAY_TASK_STEP"] = "2";
  CHECK(shard_in(stepped).index == 3);
  CHECK(shard_in(stepped).count == 4);
  // One task resubmitted alone (--array=5) trains every unfinished run: shard 1/1.
  CHECK(shard_in(slurm("5", "5", "5", "1")).count == 1);

  CHECK(error_of([&] { shard_in(slurm("4", "1", "5", "3")); }).find("not an evenly spaced range") !=
        std::string::npos);  // --array=1,4,5
  CHECK(error_of([&] { shard_in(slurm("x", "1", "5", "5")); }) ==
        "--shard auto: SLURM_ARRAY_TASK_ID is 'x' in this Slurm array task, not a whole number");
  CHECK(error_of([&] { shard_in(Env{{"SLURM_ARRAY_TASK_ID", "2"}}); }) ==
        "--shard auto: SLURM_ARRAY_TASK_MIN is not set in this Slurm array task, not a whole number");
  CHECK(error_of([&] { shard_in(slurm("9", "1", "5", "5")); }).find("not in its range") != std::string::npos);
  Env zero_step = slurm("1", "1", "5", "5");
  zero_step["SLURM_ARRAY_TASK_STEP"] = "0";
  CHECK(error_of([&] { shard_in(zero_step); }).find("not in its range") != std::string::npos);
}

TEST_CASE("--shard auto: Grid Engine's SGE_TASK_ID, FIRST, LAST and STEPSIZE, and no array at all") {
  const Env sge{{"SGE_TASK_ID", "4"}, {"SGE_TASK_FIRST", "2"}, {"SGE_TASK_LAST", "8"}, {"SGE_TASK_STEPSIZE", "2"}};
  CHECK(shard_in(sge).index == 2);
  CHECK(shard_in(sge).count == 4);
  const std::string none = error_of([] { shard_in(Env{}); });
  CHECK(none.find("not a task of a job array") != std::string::npos);
  CHECK(none.find("--shard K/N") != std::string::npos);
  // Outside an array SGE sets SGE_TASK_ID to "undefined": no array.
  CHECK(error_of([] { shard_in(Env{{"SGE_TASK_ID", "undefined"}}); }) == none);
}

TEST_CASE("--shard auto through the binary: the task's slice, or one line and status 2 outside an array") {
  const TempDir tmp("share_auto");
  const std::string out = " --out " + (tmp / "s").string();
  check_refused(kSmall + " --shard auto" + out, "not a task of a job array");
  CHECK_FALSE(fs::exists(tmp / "s"));
  check_refused(kSmall + " --shard 3" + out, "expected K/N");

  const CliResult r =
      run_program("env SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=2 SLURM_ARRAY_TASK_COUNT=2 " +
                      std::string(HEADROOM_BIN),
                  kSmall + " --shard auto --no-report" + out);
  INFO(r.output);
  REQUIRE(r.status == 0);
  // Shard 2/2 of h1-dk16-s0, h1-dk16-s1, h2-dk8-s0, h2-dk8-s1: the runs at odd indices.
  CHECK_FALSE(fs::exists(tmp / "s" / "runs" / "h1-dk16-s0" / "result.json"));
  CHECK(fs::exists(tmp / "s" / "runs" / "h1-dk16-s1" / "result.json"));
  CHECK_FALSE(fs::exists(tmp / "s" / "runs" / "h2-dk8-s0" / "result.json"));
  CHECK(fs::exists(tmp / "s" / "runs" / "h2-dk8-s1" / "result.json"));
  CHECK_FALSE(fs::exists(tmp / "s" / "results.csv"));  // --no-report
}

// ---- claiming -----------------------------------------------------------------------

TEST_CASE("a run whose lock another process holds is passed over, then trained when it is free") {
  const TempDir tmp("share_held");
  const fs::path dir = tmp / "s";
  const std::string args = kSmall + " --out " + dir.string();
  // Plan the sweep (write sweep.json) without training: --slurm trains nothing here.
  REQUIRE(run_headroom(args + " --slurm").status == 0);
  const fs::path held_run = dir / "runs" / "h1-dk16-s1";
  fs::create_directories(held_run);
  {
    const hr::RunDirLock held = hr::RunDirLock::acquire(held_run);  // this test process is "another process"
    REQUIRE(held.held());
    const CliResult r = run_headroom(args);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("1 run of this sweep is still trained by other processes: h1-dk16-s1") != std::string::npos);
    CHECK_FALSE(fs::exists(held_run / "result.json"));
    CHECK_FALSE(fs::exists(held_run / "attempts.log"));
    CHECK(lines_of(read_file(dir / "results.csv")).size() == 4);  // the header and 3 runs
  }
  const CliResult again = run_headroom(args);
  INFO(again.output);
  CHECK(again.status == 0);
  CHECK(fs::exists(held_run / "result.json"));
  CHECK(lines_of(read_file(dir / "results.csv")).size() == 5);
  const std::vector<Attempt> a = attempts_of(held_run);
  REQUIRE(a.size() == 2);
  CHECK(a[0].event == "start");
  CHECK(a[0].step == 0);
  CHECK(a[1].event == "finish");
  CHECK(a[1].step == 20);
}

TEST_CASE("a restarted run keeps its lock file and attempts.log, and a fresh train accepts a directory of only those") {
  const TempDir tmp("share_restart");
  const fs::path dir = tmp / "s";
  const std::string args = kSmall + " --out " + dir.string();
  REQUIRE(run_headroom(args).status == 0);
  // A run that never saved a usable checkpoint: its directory with junk from a dead
  // process but no checkpoint, and no result.json. It starts over.
  const fs::path run = dir / "runs" / "h2-dk8-s0";
  CHECK(read_file(run / hr::kLockFile).find("\nfinished") != std::string::npos);  // the finished run's mark
  fs::remove(run / "result.json");
  fs::remove_all(run / "checkpoints");
  std::ofstream(run / hr::kLockFile) << "1 on elsewhere";  // as a process killed before its end leaves it
  const CliResult r = run_headroom(args);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::vector<Attempt> a = attempts_of(run);
  REQUIRE(a.size() == 4);  // the first life and the second
  CHECK(a[2].event == "start");
  CHECK(a[2].step == 0);
  CHECK(a[3].event == "finish");
  CHECK(fs::exists(run / hr::kLockFile));
  CHECK(fs::exists(run / "result.json"));
  // train --out into a directory that holds only a lock file and attempts.log: a new run.
  const fs::path bare = tmp / "bare";
  fs::create_directories(bare);
  std::ofstream(bare / hr::kLockFile) << "1 on elsewhere";
  std::ofstream(bare / "attempts.log") << "x start pid=1 host=elsewhere step=0\n";
  CHECK_FALSE(hr::check_out_dir(bare, hr::OutDirUse::fresh));
}

TEST_CASE("a run whose lock says finished is not trained again, even before its result.json is visible") {
  // On NFS a result.json written on another machine may be invisible here for a few
  // seconds; the mark in the lock file, read under the lock, is not.
  const TempDir tmp("share_mark");
  const fs::path dir = tmp / "s";
  const std::string args = kSmall + " --out " + dir.string();
  REQUIRE(run_headroom(args).status == 0);
  const fs::path run = dir / "runs" / "h1-dk16-s0";
  const std::string log = read_file(run / "attempts.log");
  fs::rename(run / "result.json", tmp / "hidden.json");  // not visible here
  const CliResult r = run_headroom(args);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(read_file(run / "attempts.log") == log);  // no new claim
  CHECK_FALSE(fs::exists(run / "result.json"));
  fs::rename(tmp / "hidden.json", run / "result.json");
  CHECK(run_headroom("ablate --merge " + dir.string() + " --out " + dir.string()).status == 0);
}

TEST_CASE("four processes on one sweep directory, one killed with SIGKILL mid-run and restarted: every run once") {
  const TempDir tmp("share_stress");
  const fs::path dir = tmp / "s";
  const std::string args = kGrid + " --out " + dir.string();

  std::vector<Child> children;
  for (int i = 0; i < 4; ++i) children.push_back(spawn_headroom(args, tmp / fmt::format("p{}.log", i)));
  const pid_t victim = children[0].pid;

  // Wait until the victim holds a run that has saved a checkpoint, then kill it there.
  std::string killed_run;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (killed_run.empty() && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir / "runs", ec)) {
      if (lock_holder(e.path()) != victim || fs::exists(e.path() / "result.json")) continue;
      bool has_checkpoint = false;
      for (const fs::directory_entry& c : fs::directory_iterator(e.path() / "checkpoints", ec)) {
        has_checkpoint = has_checkpoint || c.path().filename().string().rfind("step-", 0) == 0;
      }
      if (has_checkpoint) killed_run = e.path().filename().string();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE_MESSAGE(!killed_run.empty(), "the first process never held a run with a checkpoint");
  REQUIRE(::kill(victim, SIGKILL) == 0);
  CHECK(wait_for(children[0]) == 128 + SIGKILL);
  children[0] = spawn_headroom(args, tmp / "p0-restarted.log");
  for (const Child& c : children) {
    const int status = wait_for(c);
    INFO(c.log.string() << ":\n" << read_file(c.log));
    CHECK(status == 0);
  }

  const hr::SweepPlan plan = hr::read_sweep_plan(dir);
  REQUIRE(plan.runs.size() == 8);
  std::size_t starts = 0;
  std::set<long> trainers;
  for (const hr::PlannedRun& run : plan.runs) {
    const fs::path run_dir = dir / "runs" / run.id;
    const std::vector<Attempt> a = attempts_of(run_dir);
    INFO(run.id << ": " << read_file(run_dir / "attempts.log"));
    REQUIRE(!a.empty());
    // Each claim is a start, then its end; a start with no end is the killed process's,
    // and only then does another start follow: no run was trained twice at a time.
    std::size_t finishes = 0;
    std::optional<Attempt> open;
    for (const Attempt& x : a) {
      if (x.event == "start") {
        ++starts;
        trainers.insert(x.pid);
        if (open) CHECK(open->pid == victim);
        open = x;
      } else {
        REQUIRE(open);
        CHECK(x.pid == open->pid);
        CHECK(x.event == "finish");
        ++finishes;
        open.reset();
      }
    }
    CHECK(finishes == 1);
    CHECK_FALSE(open);
    if (run.id == killed_run) {
      REQUIRE(a.size() == 3);  // killed, then resumed and finished
      CHECK(a[0].pid == victim);
      CHECK(a[1].step > 0);    // from the victim's checkpoint, not from scratch
      CHECK(a[1].pid != victim);
    } else {
      CHECK(a.size() == 2);
    }
    CHECK(fs::exists(run_dir / "result.json"));
  }
  CHECK(starts == plan.runs.size() + 1);
  CHECK(trainers.size() >= 2);  // the work was shared

  // The same sweep in one process: the same results, the resumed run included.
  const fs::path alone = tmp / "alone";
  const CliResult r = run_headroom(kGrid + " --out " + alone.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(results_without_timing(dir / "results.csv") == results_without_timing(alone / "results.csv"));
  CHECK(lines_of(read_file(dir / "results.csv")).size() == 9);
}

// ---- --resume DIR, --merge DIR --out DIR ---------------------------------------------

TEST_CASE("--resume DIR trains the sweep that DIR/sweep.json defines, and takes no grid or training flags") {
  const TempDir tmp("share_resume");
  const fs::path dir = tmp / "s";
  REQUIRE(run_headroom(kSmall + " --out " + dir.string() + " --slurm").status == 0);
  check_refused("ablate --resume " + dir.string() + " --heads 4", "--heads");
  check_refused("ablate --resume " + dir.string() + " --lr 0.1", "--lr");
  check_refused("ablate --resume " + dir.string() + " --out " + dir.string(), "--out");
  check_refused("ablate --resume " + (tmp / "nothing").string(), "is not a headroom ablate directory");
  check_refused("ablate --heads 2", "--out is required");
  const CliResult r = run_headroom("ablate --resume " + dir.string() + " --jobs 2 -q");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const fs::path alone = tmp / "alone";
  REQUIRE(run_headroom(kSmall + " --out " + alone.string()).status == 0);
  CHECK(results_without_timing(dir / "results.csv") == results_without_timing(alone / "results.csv"));

  // --merge DIR --out DIR rebuilds DIR's reports; status 1 while a run is missing.
  fs::remove(dir / "results.csv");
  CHECK(run_headroom("ablate --merge " + dir.string() + " --out " + dir.string()).status == 0);
  CHECK(results_without_timing(dir / "results.csv") == results_without_timing(alone / "results.csv"));
  fs::remove(dir / "runs" / "h2-dk8-s1" / "result.json");
  const CliResult partial = run_headroom("ablate --merge " + dir.string() + " --out " + dir.string());
  CHECK(partial.status == 1);
  CHECK(partial.output.find("not finished in any of them: h2-dk8-s1") != std::string::npos);
  CHECK(lines_of(read_file(dir / "results.csv")).size() == 4);
}

// ---- --slurm ------------------------------------------------------------------------

TEST_CASE("--slurm writes an array script and a merge script for the grid, and trains nothing") {
  const TempDir tmp("share_slurm");
  const fs::path dir = tmp / "s";
  const CliResult r = run_headroom(kSmall + " --threads 2 --out " + dir.string() +
                                   " --slurm --tasks 3 --sbatch=--time=0:10:00 --sbatch=--partition=debug");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(dir / "sweep.json"));
  CHECK_FALSE(fs::exists(dir / "runs" / "h1-dk16-s0"));
  const std::string array = read_file(dir / "slurm" / "array.sbatch");
  const std::string merge = read_file(dir / "slurm" / "merge.sbatch");
  INFO(array << "\n" << merge);
  CHECK(array.rfind("#!/bin/bash\n", 0) == 0);
  CHECK(array.find("#SBATCH --array=1-3\n") != std::string::npos);
  CHECK(array.find("#SBATCH --cpus-per-task=2\n") != std::string::npos);  // 1 job x 2 threads
  CHECK(array.find("#SBATCH --time=0:10:00\n#SBATCH --partition=debug\n") != std::string::npos);
  CHECK(array.find(fmt::format("#SBATCH --output={}\n", (dir / "slurm" / "array-%A_%a.out").string())) !=
        std::string::npos);
  CHECK(array.find(fmt::format("ablate --resume {} --shard auto --jobs 1 --no-report\n", dir.string())) !=
        std::string::npos);
  CHECK(array.find(fmt::format("cd {}\n", fs::current_path().string())) != std::string::npos);
  CHECK(merge.find(fmt::format("ablate --merge {0} --out {0} --target-acc 0.99\n", dir.string())) != std::string::npos);
  CHECK(merge.find("#SBATCH --array") == std::string::npos);
  CHECK(merge.find("#SBATCH --cpus-per-task=1\n") != std::string::npos);
  CHECK((fs::status(dir / "slurm" / "array.sbatch").permissions() & fs::perms::owner_exec) != fs::perms::none);

  // Each task, run as Slurm would (bash, the array variables set), trains its shard.
  for (int task = 1; task <= 3; ++task) {
    const CliResult t = run_program(fmt::format("env SLURM_ARRAY_TASK_ID={} SLURM_ARRAY_TASK_MIN=1 "
                                                "SLURM_ARRAY_TASK_MAX=3 SLURM_ARRAY_TASK_COUNT=3 bash",
                                                task),
                                    (dir / "slurm" / "array.sbatch").string());
    INFO(t.output);
    CHECK(t.status == 0);
  }
  const CliResult m = run_program("bash", (dir / "slurm" / "merge.sbatch").string());
  INFO(m.output);
  CHECK(m.status == 0);
  const fs::path alone = tmp / "alone";
  REQUIRE(run_headroom(kSmall + " --threads 2 --out " + alone.string()).status == 0);
  CHECK(results_without_timing(dir / "results.csv") == results_without_timing(alone / "results.csv"));

  check_refused(kSmall + " --out " + (tmp / "t").string() + " --slurm --tasks 5", "--tasks 5: must be from 1 to");
  check_refused(kSmall + " --out " + (tmp / "t").string() + " --slurm --sbatch=time", "--sbatch 'time'");
  check_refused(kSmall + " --out " + (tmp / "t").string() + " --submit", "--slurm");
  check_refused(kSmall + " --out " + (tmp / "t").string() + " --slurm --shard 1/2", "--shard");
  CHECK_FALSE(fs::exists(tmp / "t"));
}

TEST_CASE("--slurm --submit submits the array, then the merge with afterany on it (a stand-in sbatch)") {
  const TempDir tmp("share_submit");
  const fs::path bin = tmp / "bin";
  fs::create_directories(bin);
  // sbatch --parsable prints the job id; this one records its arguments and prints 41, then 42.
  const fs::path calls = tmp / "calls.txt";
  tmp.write("bin/sbatch", fmt::format("#!/bin/sh\necho \"$@\" >> {0}\nn=$(wc -l < {0})\necho $((40 + n))\n",
                                      calls.string()));
  fs::permissions(bin / "sbatch", fs::perms::owner_all);
  const fs::path dir = tmp / "s";
  const CliResult r = run_program("env PATH=" + bin.string() + ":/usr/bin:/bin " + std::string(HEADROOM_BIN),
                                  kSmall + " --out " + dir.string() + " --slurm --submit");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("slurm: submitted array job 41 (4 tasks) and merge job 42 (after the array)") !=
        std::string::npos);
  const std::vector<std::string> lines = lines_of(read_file(calls));
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "--parsable " + (dir / "slurm" / "array.sbatch").string());
  CHECK(lines[1] == "--parsable --dependency=afterany:41 " + (dir / "slurm" / "merge.sbatch").string());

  // No sbatch on PATH: refused before anything is written.
  const CliResult none = run_program("env PATH=/nonexistent " + std::string(HEADROOM_BIN),
                                     kSmall + " --out " + (tmp / "t").string() + " --slurm --submit");
  CHECK(none.status == 2);
  CHECK(none.output.find("--submit: sbatch is not on PATH") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "t"));

  // An sbatch that fails: its message, status 1.
  tmp.write("bin/sbatch", "#!/bin/sh\necho 'sbatch: error: invalid partition specified: nope' >&2\nexit 1\n");
  const CliResult failed = run_program("env PATH=" + bin.string() + ":/usr/bin:/bin " + std::string(HEADROOM_BIN),
                                       kSmall + " --out " + (tmp / "u").string() + " --slurm --submit");
  CHECK(failed.status == 1);
  CHECK(failed.output.find("invalid partition specified: nope") != std::string::npos);
}
