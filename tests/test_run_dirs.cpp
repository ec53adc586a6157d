// Run and model directories that cannot be mixed up (issue 13): `train --out` into a
// run or a foreign directory, the run's lock, a resume whose config.json was edited,
// model.safetensors as the newest state, leftovers of killed saves, the warm-up
// and learning-rate defaults, the default out dir and --no-save, and flags that meant
// nothing.
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nn/safetensors.hpp"
#include "train/config.hpp"
#include "train/out_dir.hpp"
#include "train/resume.hpp"
#include "train/run_dir.hpp"
#include "train/trainer.hpp"
#include "cli_runner.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

// A model that trains in well under a second.
const std::string kTiny =
    "train --task copy --vocab 8 --seq-len 6 --d-model 16 --heads 2 --layers 1 --eval-every 10 --save-every 10 -q ";

// The line of the output that carries the error, or "" when there is none.
std::string error_line(const std::string& output) {
  const std::size_t at = output.find("error: ");
  if (at == std::string::npos) return "";
  const std::size_t end = output.find('\n', at);
  return output.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// A PID that no process has now: kill(pid, 0) fails with ESRCH.
long dead_pid() {
  for (long pid = 4194000; pid > 1000; --pid) {
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return pid;
  }
  FAIL("no free PID found");
  return 0;
}

nlohmann::json read_json(const fs::path& file) { return nlohmann::json::parse(read_file(file)); }

void write_json(const fs::path& file, const nlohmann::json& j) { std::ofstream(file) << j.dump(2) << "\n"; }

// The "step" metadata of a model file, or "" without one.
std::string step_of_model(const fs::path& file) {
  const hr::SafetensorsFile f = hr::read_safetensors(file);
  const auto it = f.metadata.find("step");
  return it == f.metadata.end() ? "" : it->second;
}

hr::TrainConfig tiny_config() {
  hr::TrainConfig c;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_layers = 1;
  c.data = {.task = "copy", .text = "", .seq_len = 6, .vocab = 8};
  c.optim.steps = 20;
  c.optim.warmup = 2;
  c.optim.eval_every = 10;
  c.optim.save_every = 10;
  return c;
}

}  // namespace

TEST_CASE("train --out into a run is refused, --overwrite replaces only its files, --resume continues it") {
  const TempDir tmp("run_dirs_reuse");
  const fs::path dir = tmp / "r";
  REQUIRE(run_headroom(kTiny + "--steps 20 --warmup 2 --out " + dir.string()).status == 0);
  std::ofstream(dir / "notes.txt") << "mine\n";

  const CliResult again = run_headroom(kTiny + "--steps 10 --warmup 2 --out " + dir.string());
  INFO(again.output);
  CHECK(again.status == 2);
  CHECK(error_line(again.output) ==
        fmt::format("error: output directory {0} already holds a run (checkpoints/, config.json, loss.svg, "
                    "metrics.csv, ... (5 entries)); continue it with --resume {0}, or replace it with --overwrite",
                    dir.string()));
  CHECK(read_json(dir / "config.json")["train"]["steps"] == 20);  // untouched
  CHECK(fs::exists(dir / "checkpoints" / "step-00000020"));

  const CliResult replaced = run_headroom(kTiny + "--steps 10 --warmup 2 --overwrite --out " + dir.string());
  INFO(replaced.output);
  REQUIRE(replaced.status == 0);
  CHECK(read_json(dir / "config.json")["train"]["steps"] == 10);
  CHECK_FALSE(fs::exists(dir / "checkpoints" / "step-00000020"));  // the old run's checkpoints are gone
  CHECK(fs::exists(dir / "checkpoints" / "step-00000010"));
  CHECK(read_file(dir / "notes.txt") == "mine\n");  // never an unknown file

  const CliResult resumed = run_headroom("train -q --resume " + dir.string() + " --steps 20");
  INFO(resumed.output);
  CHECK(resumed.status == 0);
  CHECK(step_of_model(dir / "model.safetensors") == "20");
}

TEST_CASE("a non-empty directory that is not a run is refused, even with --overwrite, and left as it was") {
  const TempDir tmp("run_dirs_foreign");
  const fs::path dir = tmp / "d";
  fs::create_directories(dir / "b");
  std::ofstream(dir / "a.txt") << "x";
  for (const char* flags : {"", "--overwrite "}) {
    CAPTURE(flags);
    const CliResult r = run_headroom(kTiny + "--steps 10 " + flags + "--out " + dir.string());
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(error_line(r.output) ==
          fmt::format("error: output directory {} is not empty and is not a headroom run (a.txt, b/); choose "
                      "another --out, or empty it",
                      dir.string()));
    CHECK(count_lines(r.output) == 1);  // refused before the header
  }
  CHECK(tmp.entries() == std::vector<std::string>{"d"});
  CHECK(fs::exists(dir / "a.txt"));
  CHECK_FALSE(fs::exists(dir / "config.json"));
  CHECK_FALSE(fs::exists(dir / ".lock"));
}

TEST_CASE("train() itself refuses an out_dir that holds a run, so C++ callers get the check") {
  const TempDir tmp("run_dirs_library");
  hr::TrainConfig c = tiny_config();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::TrainOptions o;
  o.out_dir = tmp.path().string();
  hr::train(c, *data, o);
  CHECK_THROWS_WITH_AS(hr::train(c, *data, o), doctest::Contains("already holds a run"), std::invalid_argument);
  o.overwrite = true;
  CHECK(hr::train(c, *data, o).steps == 20);
}

TEST_CASE("a second process training into a locked directory is refused in one line") {
  const TempDir tmp("run_dirs_lock");
  const hr::RunDirLock held = hr::RunDirLock::acquire(tmp.path());
  REQUIRE(held.held());
  const CliResult r = run_headroom(kTiny + "--steps 10 --out " + tmp.path().string());
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(error_line(r.output) ==
        fmt::format("error: output directory {} is in use by another headroom process (pid {}); wait for it, or "
                    "choose another --out",
                    tmp.path().string(), fmt::format("{} on {}", ::getpid(), this_host())));
  CHECK_FALSE(fs::exists(tmp / "config.json"));
}

TEST_CASE("resume refuses an edited config.json with its first differing key, model keys included") {
  const TempDir tmp("run_dirs_edited");
  const fs::path dir = tmp.path();
  REQUIRE(run_headroom(kTiny + "--steps 30 --warmup 2 --lr 0.003 --stop-after 10 --out " + dir.string()).status == 0);
  const nlohmann::json original = read_json(dir / "config.json");

  SUBCASE("a changed lr") {
    nlohmann::json edited = original;
    edited["train"]["lr"] = 0.001;
    write_json(dir / "config.json", edited);
    const CliResult r = run_headroom("train -q --resume " + dir.string());
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(error_line(r.output) ==
          fmt::format("error: {}: train.lr: 0.003 in the checkpoint, 0.001 in {}",
                      (dir / "checkpoints" / "step-00000010").string(), (dir / "config.json").string()));
  }
  SUBCASE("a changed model, in one line instead of two whole configs") {
    nlohmann::json edited = original;
    edited["model"]["d_model"] = 32;
    write_json(dir / "config.json", edited);
    const CliResult r = run_headroom("train -q --resume " + dir.string());
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(error_line(r.output).find("model.d_model: 16 in the checkpoint, 32 in " + (dir / "config.json").string()) !=
          std::string::npos);
    CHECK(count_lines(r.output) == 5);  // the header, the example, "resuming ...", the Bayes loss, the error
  }
  SUBCASE("the keys that may change on resume") {
    nlohmann::json edited = original;
    edited["train"]["keep_checkpoints"] = 3;
    edited["train"]["max_bad_steps"] = 4;
    write_json(dir / "config.json", edited);
    const CliResult r = run_headroom("train -q --resume " + dir.string() + " --steps 40 --save-every 5");
    INFO(r.output);
    CHECK(r.status == 0);
  }
  SUBCASE("a checkpoint from before configs were recorded is checked on its model only") {
    const fs::path state = dir / "checkpoints" / "step-00000010" / "train_state.safetensors";
    hr::SafetensorsFile f = hr::read_safetensors(state);
    REQUIRE(f.metadata.erase("train_config") == 1);
    hr::write_safetensors(state, f);
    nlohmann::json edited = original;
    edited["train"]["lr"] = 0.001;
    write_json(dir / "config.json", edited);
    CHECK(run_headroom("train -q --resume " + dir.string()).status == 0);
  }
}

TEST_CASE("first_config_difference: the first key in order, may-change keys skipped, absent keys named") {
  const nlohmann::json a{{"model", {{"d_model", 16}}}, {"train", {{"lr", 0.003}, {"steps", 10}, {"seed", 1}}}};
  nlohmann::json b = a;
  CHECK(hr::first_config_difference(a, b, "c.json").empty());
  b["train"]["steps"] = 99;
  CHECK(hr::first_config_difference(a, b, "c.json").empty());
  b["train"]["seed"] = 2;
  b["train"]["lr"] = 0.1;
  CHECK(hr::first_config_difference(a, b, "c.json") == "train.lr: 0.003 in the checkpoint, 0.1 in c.json");
  b = a;
  b["data"] = {{"task", "copy"}};
  CHECK(hr::first_config_difference(a, b, "c.json") ==
        "data: absent in the checkpoint, {\"task\":\"copy\"} in c.json");  // a whole section
  b = a;
  b["model"]["n_heads"] = 2;
  CHECK(hr::first_config_difference(a, b, "c.json") == "model.n_heads: absent in the checkpoint, 2 in c.json");
  CHECK(hr::first_config_difference(b, a, "c.json") == "model.n_heads: 2 in the checkpoint, absent in c.json");
}

TEST_CASE("model.safetensors is the newest state: written on an early stop, and eval says its step") {
  const TempDir tmp("run_dirs_newest");
  const fs::path dir = tmp.path();
  REQUIRE(run_headroom(kTiny + "--steps 20 --warmup 2 --out " + dir.string()).status == 0);
  CHECK(step_of_model(dir / "model.safetensors") == "20");
  const CliResult r = run_headroom("train -q --resume " + dir.string() + " --steps 40 --stop-after 30");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(step_of_model(dir / "model.safetensors") == "30");
  CHECK(read_file(dir / "model.safetensors") ==
        read_file(dir / "checkpoints" / "step-00000030" / "model.safetensors"));
  const CliResult e = run_headroom("eval --model " + dir.string());
  INFO(e.output);
  CHECK(e.output.find("(copy, vocab 8, seq_len 6, step 30)") != std::string::npos);
  const CliResult s = run_headroom("sample --model " + dir.string() + " --count 1 --greedy");
  CHECK(s.output.find("copy model (vocab 8, seq_len 6, step 30)") != std::string::npos);
}

TEST_CASE("a resumed run has no model.safetensors until it stops, so a diverged one leaves none") {
  const TempDir tmp("run_dirs_resumed_model");
  hr::TrainConfig c = tiny_config();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::TrainOptions o;
  o.out_dir = tmp.path().string();
  hr::train(c, *data, o);
  REQUIRE(fs::exists(tmp / "model.safetensors"));
  c.optim.steps = 30;
  o.resume = true;
  bool seen_model = false;
  o.on_progress = [&](const hr::Progress&) { seen_model = seen_model || fs::exists(tmp / "model.safetensors"); };
  hr::train(c, *data, o);
  CHECK_FALSE(seen_model);
  CHECK(step_of_model(tmp / "model.safetensors") == "30");
  // Meanwhile --model DIR reads the newest checkpoint.
  fs::remove(tmp / "model.safetensors");
  CHECK(hr::resolve_model_file(tmp.path()) == tmp / "checkpoints" / "step-00000030" / "model.safetensors");
}

TEST_CASE("start-up removes what killed saves left: checkpoint temporaries and atomic-write temporaries") {
  const TempDir tmp("run_dirs_stale");
  const fs::path dir = tmp.path();
  REQUIRE(run_headroom(kTiny + "--steps 30 --warmup 2 --stop-after 10 --out " + dir.string()).status == 0);
  const long dead = dead_pid();
  const fs::path stale = dir / "checkpoints" / fmt::format(".step-00000020.tmp-{}", dead);
  fs::create_directories(stale);
  std::ofstream(stale / "model.safetensors") << "half";
  const fs::path old = dir / "checkpoints" / fmt::format(".step-00000010.old-{}", ::getpid());  // alive, but not ours
  fs::create_directories(old);
  const fs::path half = dir / fmt::format("config.json.tmp.{}.0", dead);
  std::ofstream(half) << "{";
  const CliResult r = run_headroom("train -q --resume " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_FALSE(fs::exists(stale));
  CHECK_FALSE(fs::exists(old));  // under the run's lock, every temporary is stale
  CHECK_FALSE(fs::exists(half));
}

TEST_CASE("remove_stale_temporaries without the lock removes only those of dead processes") {
  const TempDir tmp("run_dirs_stale_unlocked");
  const long dead = dead_pid();
  fs::create_directories(tmp / "checkpoints" / fmt::format(".step-00000005.tmp-{}", dead));
  fs::create_directories(tmp / "checkpoints" / fmt::format(".step-00000006.tmp-{}", ::getpid()));
  fs::create_directories(tmp / "checkpoints" / "step-00000004");
  tmp.write(fmt::format("sweep.json.tmp.{}.3", dead), "{");
  tmp.write("notes.tmp.txt", "mine");
  CHECK(hr::remove_stale_temporaries(tmp.path(), false) == 2);
  CHECK(tmp.entries() == std::vector<std::string>{"checkpoints", "notes.tmp.txt"});
  CHECK(fs::exists(tmp / "checkpoints" / fmt::format(".step-00000006.tmp-{}", ::getpid())));
  CHECK(fs::exists(tmp / "checkpoints" / "step-00000004"));
}

TEST_CASE("ablate removes what killed processes left in its sweep and run directories") {
  const TempDir tmp("run_dirs_ablate");
  const fs::path dir = tmp.path();
  const std::string sweep =
      "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 20 --warmup 2 --eval-every 10 "
      "--save-every 10 --heads 2 --dk auto --seeds 1 --jobs 1 --out " + dir.string();
  REQUIRE(run_headroom(sweep).status == 0);
  const long dead = dead_pid();
  const fs::path half = dir / fmt::format("sweep.json.tmp.{}.0", dead);
  std::ofstream(half) << "{";
  const fs::path stale = dir / "runs" / "h2-dk8-s0" / "checkpoints" / fmt::format(".step-00000010.tmp-{}", dead);
  fs::create_directories(stale);
  const CliResult r = run_headroom(sweep);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_FALSE(fs::exists(half));
  CHECK_FALSE(fs::exists(stale));
}

TEST_CASE("warm-up scales with a short run unless given, and config.json records it") {
  const TempDir tmp("run_dirs_warmup");
  const CliResult r = run_headroom(kTiny + "--steps 50 --out " + (tmp / "a").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(read_json(tmp / "a" / "config.json")["train"]["warmup"] == 5);
  CHECK(hr::default_warmup(50) == 5);
  CHECK(hr::default_warmup(1000) == 100);
  CHECK(hr::default_warmup(5000) == 100);
  // Given, it is used as given, and checked.
  const CliResult given = run_headroom(kTiny + "--steps 50 --warmup 100 --no-save");
  CHECK(given.status == 2);
  CHECK(error_line(given.output) == "error: warmup 100 is longer than steps 50");
  tmp.write("c.json", R"({"train": {"warmup": 7, "steps": 50}})");
  REQUIRE(run_headroom(kTiny + "--config " + (tmp / "c.json").string() + " --out " + (tmp / "b").string()).status ==
          0);
  CHECK(read_json(tmp / "b" / "config.json")["train"]["warmup"] == 7);
}

TEST_CASE("a model without norms trains at kNoNormLr unless a flag, the file or the task gives an lr") {
  const TempDir tmp("run_dirs_no_norm_lr");
  CHECK(hr::default_lr(hr::ModelConfig{}) == hr::OptimConfig{}.lr);
  hr::ModelConfig no_norm;
  no_norm.norm = hr::NormPlacement::none;
  CHECK(hr::default_lr(no_norm) == hr::kNoNormLr);
  CHECK(hr::kNoNormLr > 2 * hr::OptimConfig{}.lr);
  // --help states the rule with the constant's value.
  CHECK(run_headroom("train --help").output.find(fmt::format("{} for a model without norms", hr::kNoNormLr)) !=
        std::string::npos);
  std::string output;  // the last run's
  const auto lr_of = [&](const std::string& name, const std::string& flags) {
    const CliResult r = run_headroom("train -q --d-model 16 --heads 2 --layers 1 --eval-every 2 " + flags +
                                     " --out " + (tmp / name).string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    output = r.output;
    return read_json(tmp / name / "config.json")["train"]["lr"].get<double>();
  };
  // Not given: the rule, said before the run.
  CHECK(lr_of("none", "--task copy --vocab 8 --seq-len 6 --steps 2 --norm none") == hr::kNoNormLr);
  CHECK(output.find(fmt::format("lr {}: the default for a model without norms", hr::kNoNormLr)) != std::string::npos);
  CHECK(lr_of("post", "--task copy --vocab 8 --seq-len 6 --steps 2 --norm post") == hr::OptimConfig{}.lr);
  CHECK(lr_of("attn_only", "--task lags --steps 2 --norm none --attn-only") == hr::kNoNormLr);
  // Given by a flag, a config file or the task: kept, and nothing said.
  CHECK(lr_of("flag", "--task copy --vocab 8 --seq-len 6 --steps 2 --norm none --lr 0.003") == 0.003);
  CHECK(output.find("the default for a model without norms") == std::string::npos);
  tmp.write("c.json", R"({"train": {"lr": 0.005}})");
  CHECK(lr_of("file", "--task copy --vocab 8 --seq-len 6 --steps 2 --norm none --config " + (tmp / "c.json").string())== 0.005);
  CHECK(lr_of("recall", "--task recall --steps 2 --norm none") ==
        hr::task_defaults("recall").optim.lr);
  // A resume reads config.json's lr, whatever the rule would say now.
  CHECK(lr_of("resumed", "--task copy --vocab 8 --seq-len 6 --norm none --lr 0.004 --steps 4 --stop-after 2") == 0.004);
  const CliResult resumed = run_headroom("train -q --resume " + (tmp / "resumed").string());
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  CHECK(read_json(tmp / "resumed" / "config.json")["train"]["lr"] == 0.004);
}

TEST_CASE("a resume to a step the run has passed says so, before the warm-up check") {
  const TempDir tmp("run_dirs_resume_steps");
  const fs::path dir = tmp.path();
  REQUIRE(run_headroom(kTiny + "--steps 300 --warmup 100 --stop-after 10 --out " + dir.string()).status == 0);
  for (const char* steps : {"5", "10"}) {
    CAPTURE(steps);
    const CliResult r = run_headroom("train -q --resume " + dir.string() + " --steps " + steps);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(error_line(r.output) ==
          fmt::format("error: {} is already at step 10 of steps {}: nothing to resume; pass a larger --steps to "
                      "train further",
                      (dir / "checkpoints" / "step-00000010").string(), steps));
  }
}

TEST_CASE("without --out, train saves to runs/TASK, then runs/TASK-2, and says so, and --no-save keeps nothing") {
  const TempDir tmp("run_dirs_default");
  const std::string in_tmp = "cd " + tmp.path().string() + " && " + HEADROOM_BIN;
  const CliResult first = run_program(in_tmp, kTiny + "--steps 10");
  INFO(first.output);
  REQUIRE(first.status == 0);
  CHECK(first.output.find("saving to runs/copy (--out DIR to choose, --no-save to keep nothing)") !=
        std::string::npos);
  CHECK(fs::exists(tmp / "runs" / "copy" / "model.safetensors"));
  const CliResult second = run_program(in_tmp, kTiny + "--steps 10");
  CHECK(second.output.find("saving to runs/copy-2") != std::string::npos);
  CHECK(fs::exists(tmp / "runs" / "copy-2" / "model.safetensors"));
  CHECK(step_of_model(tmp / "runs" / "copy" / "model.safetensors") == "10");  // the first run, untouched

  fs::remove_all(tmp / "runs");
  const CliResult none = run_program(in_tmp, kTiny + "--steps 10 --no-save");
  INFO(none.output);
  CHECK(none.status == 0);
  CHECK(none.output.find("not saved (--no-save)") != std::string::npos);
  CHECK(tmp.entries().empty());
  CHECK(hr::default_out_dir(hr::TrainConfig{}, tmp / "runs") == tmp / "runs" / "copy");
  hr::TrainConfig text;
  text.data.text = "data/tiny.txt";
  CHECK(hr::default_out_dir(text, tmp / "runs") == tmp / "runs" / "tiny");
}

TEST_CASE("--out '', --resume '' and --stop-after 0 are refused in one line, and --stop-after past --steps just finishes") {
  const TempDir tmp("run_dirs_flags");
  const CliResult empty = run_headroom(kTiny + "--steps 10 --out ''");
  CHECK(empty.status == 2);
  CHECK(error_line(empty.output) ==
        "error: --out: the path is empty; give a directory, or --no-save for a run that saves nothing");
  const CliResult no_resume = run_headroom("train --resume ''");
  CHECK(no_resume.status == 2);
  CHECK(error_line(no_resume.output) == "error: --resume: the path is empty; give the directory of the run to continue");
  const CliResult zero = run_headroom(kTiny + "--steps 10 --stop-after 0 --no-save");
  CHECK(zero.status == 2);
  CHECK(error_line(zero.output) == "error: --stop-after 0: the step to stop after must be at least 1");
  const CliResult past = run_headroom(kTiny + "--steps 10 --stop-after 10 --out " + tmp.path().string());
  INFO(past.output);
  CHECK(past.status == 0);
  CHECK(past.output.find("final: train loss") != std::string::npos);
  CHECK(step_of_model(tmp / "model.safetensors") == "10");
}
