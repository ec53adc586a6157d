// `headroom train` and the trainer behind it: a tiny model learns `copy`, the files
// it writes, determinism, --config with flags overriding it, and one-line errors.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "train/trainer.hpp"
#include "cli_runner.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("headroom_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

// A model small enough to train in a second or two.
hr::TrainConfig tiny_copy() {
  hr::TrainConfig c;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_layers = 2;
  c.data = {.task = "copy", .text = "", .seq_len = 8, .vocab = 8};
  c.optim.steps = 300;
  c.optim.batch = 32;
  c.optim.warmup = 20;
  c.optim.eval_every = 50;
  c.optim.eval_batches = 4;
  return c;
}

}  // namespace

TEST_CASE("training smoke: a tiny model learns copy to 99% validation accuracy") {
  const hr::TrainConfig raw = tiny_copy();
  auto data = hr::make_dataset(raw);
  const hr::TrainConfig config = hr::finalize(raw, *data);
  std::size_t reports = 0, evaluations = 0;
  const hr::TrainSummary s = hr::train(config, *data, "", [&](const hr::Progress& p) {
    ++reports;
    evaluations += p.evaluated ? 1 : 0;
  });
  CHECK(reports == 300);
  CHECK(evaluations == 6);
  INFO("val accuracy " << s.final_val.accuracy << ", loss " << s.final_val.loss);
  CHECK(s.final_val.accuracy >= 0.99);
  CHECK(s.final_val.loss < 0.1);
  CHECK(s.final_val.counted == 4u * 32 * 4);  // 4 batches of 32 rows, 4 answer tokens each
}

TEST_CASE("the same seed gives a bit-identical loss curve; another seed does not") {
  hr::TrainConfig c = tiny_copy();
  c.optim.steps = 40;
  c.optim.eval_every = 10;
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  auto curve = [&](std::uint64_t seed) {
    hr::TrainConfig run = c;
    run.optim.seed = seed;
    std::vector<double> losses;
    hr::train(run, *data, "", [&](const hr::Progress& p) {
      losses.push_back(p.train_loss);
      if (p.evaluated) losses.push_back(p.val.loss);
    });
    return losses;
  };
  const auto a = curve(3), b = curve(3), other = curve(4);
  CHECK(a == b);
  CHECK(a != other);
}

TEST_CASE("headroom train writes config.json and metrics.csv and ends with a summary") {
  const fs::path dir = fresh_dir("files");
  const CliResult r = run_headroom("train --task copy --vocab 8 --seq-len 8 --d-model 32 --heads 2 --steps 60 "
                                   "--eval-every 20 --warmup 5 --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("example: copy:") != std::string::npos);
  CHECK(r.output.find("step     20/60") != std::string::npos);  // plain lines when not a terminal
  CHECK(r.output.find("final: train loss") != std::string::npos);

  const std::string config = read_file(dir / "config.json");
  for (const char* key : {"\"d_model\": 32", "\"n_heads\": 2", "\"d_k\": 16", "\"vocab\": 8", "\"max_len\": 8",
                          "\"task\": \"copy\"", "\"steps\": 60", "\"schedule\": \"cosine\"", "\"tie_embeddings\""}) {
    CHECK_MESSAGE(config.find(key) != std::string::npos, "config.json lacks " << key);
  }
  const std::string metrics = read_file(dir / "metrics.csv");
  std::istringstream lines(metrics);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) rows.push_back(line);
  REQUIRE(rows.size() == 4);  // header + steps 20, 40, 60
  CHECK(rows[0] == "step,train_loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s");
  CHECK(rows[3].rfind("60,", 0) == 0);
  fs::remove_all(dir);
}

TEST_CASE("--config reads a written config.json and flags override it") {
  const fs::path dir = fresh_dir("config");
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "in.json");
    f << R"({"model": {"d_model": 16, "n_heads": 4}, "data": {"task": "reverse", "vocab": 8, "seq_len": 6},
             "train": {"steps": 7, "eval_every": 7, "warmup": 2}})";
  }
  const CliResult r = run_headroom("train --config " + (dir / "in.json").string() + " --heads 2 --out " +
                                   (dir / "out").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("reverse (vocab 8, seq_len 6), d_model 16, 2 layers, 2 heads") != std::string::npos);
  const std::string written = read_file(dir / "out" / "config.json");
  CHECK(written.find("\"n_heads\": 2") != std::string::npos);
  CHECK(written.find("\"steps\": 7") != std::string::npos);

  // The written config.json is itself a valid --config.
  const CliResult again = run_headroom("train -q --config " + (dir / "out" / "config.json").string());
  INFO(again.output);
  CHECK(again.status == 0);
  fs::remove_all(dir);
}

TEST_CASE("headroom train: bad input gets one line naming the problem and exit status 2") {
  const fs::path dir = fresh_dir("bad");
  fs::create_directories(dir);
  {
    std::ofstream(dir / "unknown.json") << R"({"train": {"stepz": 5}})";
    std::ofstream(dir / "wrongtype.json") << R"({"model": {"d_model": "big"}})";
    std::ofstream(dir / "broken.json") << R"({"model": )";
    std::ofstream(dir / "empty.txt");
  }
  struct Bad {
    std::string args;
    const char* says;
  };
  const std::string d = dir.string();
  const Bad cases[] = {
      {"train --heads 3", "d_model=64 is not a multiple of n_heads=3; give d_k explicitly"},
      {"train --heads 8 --kv-heads 3", "n_heads=8 is not a multiple of n_kv_heads=3"},
      {"train --d-model 0", "d_model must be positive, got 0"},
      {"train --steps 0", "steps must be positive, got 0"},
      {"train --batch 0", "batch must be positive, got 0"},
      {"train --lr -1", "--lr: must be a positive number, got -1"},
      {"train --steps -1", "--steps: must be a whole number from 0 to 10^19 - 1, got -1"},
      {"train --seed -4", "--seed: must be a whole number from 0 to 10^19 - 1, got -4"},
      {"train --batch abc", "--batch: must be a whole number from 0 to 10^19 - 1, got abc"},
      {"train --clip -0.5", "--clip: must be a number >= 0, got -0.5"},
      {"train --warmup 200 --steps 100", "warmup 200 is longer than steps 100"},
      {"train --seq-len 32 --max-len 16", "seq_len 32 is longer than the model's max_len 16"},
      {"train --task copyy", "copyy"},
      {"train --task recall --vocab 6 --seq-len 8", "recall: vocab 6 is too small"},
      {"train --norm middle", "norm must be 'pre' or 'post', got 'middle'"},
      {"train --activation swish", "activation must be one of gelu, gelu_tanh, relu; got 'swish'"},
      {"train --pos rotary", "pos must be 'learned' or 'sinusoidal', got 'rotary'"},
      {"train --optimizer lion", "optimizer must be adamw, adam or sgd; got 'lion'"},
      {"train --schedule linear", "linear"},
      {"train --threads 0", "threads must be at least 1, got 0"},
      {"train --stepz 5", "stepz"},
      {"train --text " + d + "/missing.txt", "missing.txt"},
      {"train --text " + d + "/empty.txt", "empty.txt"},
      {"train --config " + d + "/nope.json", "cannot read config file"},
      {"train --config " + d + "/unknown.json", "unknown key 'train.stepz'"},
      {"train --config " + d + "/wrongtype.json", "'d_model' must be a non-negative integer, got \"big\""},
      {"train --config " + d + "/broken.json", "not valid JSON"},
      {"train --eval-every 0", "eval_every must be positive, got 0"},
      {"train --keep-checkpoints 0", "keep_checkpoints must be positive, got 0"},
      {"train --max-bad-steps 0", "max_bad_steps must be positive, got 0"},
      {"train --save-every -1", "--save-every: must be a whole number from 0 to 10^19 - 1, got -1"},
      {"train --stop-after soon", "--stop-after: must be a whole number from 0 to 10^19 - 1, got soon"},
      {"train --dk 0", "--dk: must be a whole number >= 1 (leave the flag out for its default), got 0"},
      {"train --heads 4 --kv-heads 8", "n_kv_heads=8"},
      {"train --task copy --vocab 4", "copy: vocab 4 is too small"},
      {"train --resume " + d + "/run --lr 0.1", "excludes --resume"},
  };
  for (const Bad& bad : cases) {
    const CliResult r = run_headroom(bad.args + " --out " + d + "/run");
    INFO("headroom " << bad.args << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK(count_lines(r.output) == 1);
    CHECK(r.output.find(bad.says) != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "run"));  // nothing written for a run that never started
    fs::remove_all(dir / "run");
  }
  fs::remove_all(dir);
}

// ---- checkpoints, resume, interrupts and bad steps ----------------------------

namespace {

// metrics.csv without its timing column (tokens/s differs between any two runs).
std::string metrics_without_timing(const fs::path& dir) {
  std::istringstream lines(read_file(dir / "metrics.csv"));
  std::string line, out;
  while (std::getline(lines, line)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

hr::TrainConfig tiny_resumable() {
  hr::TrainConfig c = tiny_copy();
  c.optim.steps = 60;
  c.optim.warmup = 10;
  c.optim.eval_every = 10;
  c.optim.save_every = 20;
  return c;
}

}  // namespace

TEST_CASE("a run stopped at step k and resumed is bit-identical to the uninterrupted run") {
  const fs::path whole = fresh_dir("resume_whole"), parts = fresh_dir("resume_parts");
  hr::TrainConfig c = tiny_resumable();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  for (const char* optimizer : {"adamw", "sgd"}) {
    CAPTURE(optimizer);
    c.optim.optimizer = hr::parse_optimizer(optimizer);
    fs::remove_all(whole);
    fs::remove_all(parts);
    hr::TrainOptions once;
    once.out_dir = whole.string();
    const hr::TrainSummary a = hr::train(c, *data, once);
    CHECK(a.steps == 60);
    CHECK_FALSE(a.stopped_early);

    // Stopped at 35 (between evaluations and saves) and at 47, then to the end.
    hr::TrainOptions chunk;
    chunk.out_dir = parts.string();
    chunk.stop_after = 35;
    const hr::TrainSummary b1 = hr::train(c, *data, chunk);
    CHECK(b1.stopped_early);
    CHECK(b1.steps == 35);
    CHECK_FALSE(fs::exists(parts / "model.safetensors"));  // only a finished run writes it
    chunk.resume = true;
    chunk.stop_after = 47;
    const hr::TrainSummary b2 = hr::train(c, *data, chunk);
    CHECK(b2.start_step == 35);
    CHECK(b2.steps == 47);
    chunk.stop_after = 0;
    const hr::TrainSummary b3 = hr::train(c, *data, chunk);
    CHECK(b3.start_step == 47);
    CHECK(b3.steps == 60);

    CHECK(metrics_without_timing(parts) == metrics_without_timing(whole));
    CHECK(read_file(parts / "model.safetensors") == read_file(whole / "model.safetensors"));
    CHECK(b3.final_val.loss == a.final_val.loss);
    CHECK(b3.best_step == a.best_step);
    // Rolling checkpoints: the newest keep_checkpoints (2) remain.
    CHECK(fs::exists(parts / "checkpoints" / "step-00000060"));
    CHECK(fs::exists(parts / "checkpoints" / "step-00000047"));
    CHECK_FALSE(fs::exists(parts / "checkpoints" / "step-00000040"));
  }
  fs::remove_all(whole);
  fs::remove_all(parts);
}

TEST_CASE("resume refuses a finished run, a checkpoint of another model and a corrupt state file") {
  const fs::path dir = fresh_dir("resume_bad");
  hr::TrainConfig c = tiny_resumable();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::TrainOptions o;
  o.out_dir = dir.string();
  o.stop_after = 20;
  hr::train(c, *data, o);
  o.resume = true;
  o.stop_after = 0;

  SUBCASE("a different model") {
    hr::TrainConfig other = c;
    other.model.d_model = 16;
    other.model = other.model.resolved();
    CHECK_THROWS_WITH_AS(hr::train(other, *data, o), doctest::Contains("differs from the run's"),
                         std::invalid_argument);
  }
  SUBCASE("a corrupt training state") {
    std::ofstream(dir / "checkpoints" / "step-00000020" / "train_state.safetensors") << "garbage";
    CHECK_THROWS_WITH_AS(hr::train(c, *data, o), doctest::Contains("train_state.safetensors"), std::invalid_argument);
  }
  SUBCASE("a finished run") {
    hr::train(c, *data, o);
    CHECK_THROWS_WITH_AS(hr::train(c, *data, o), doctest::Contains("already at step 60 of steps 60"),
                         std::invalid_argument);
  }
  SUBCASE("nothing to resume from") {
    fs::remove_all(dir / "checkpoints");
    CHECK_THROWS_WITH_AS(hr::train(c, *data, o), doctest::Contains("has no checkpoint to resume from"),
                         std::invalid_argument);
  }
  fs::remove_all(dir);
}

// The step number in "interrupted at step N" of a run's output.
static std::size_t interrupted_step(const std::string& output) {
  const std::string marker = "interrupted at step ";
  const std::size_t at = output.find(marker);
  REQUIRE_MESSAGE(at != std::string::npos, "no '" << marker << "' in the output");
  return std::stoull(output.substr(at + marker.size()));
}

TEST_CASE("Ctrl-C and SIGTERM save a checkpoint, and --resume continues from it") {
  const fs::path dir = fresh_dir("sigint");
  // timeout sends SIGINT after 3 s to a run that would take hours, to the process and
  // then to its process group: the run sees the signal twice within microseconds and
  // must treat the copy as the same request, not as a second Ctrl-C that kills.
  const CliResult r = run_program("timeout --preserve-status -s INT 3",
                                  std::string(HEADROOM_BIN) +
                                      " train --steps 10000000 --warmup 10 --eval-every 1000000 "
                                      "--save-every 0 --out " + dir.string());
  INFO(r.output);
  CHECK(r.status == 130);
  const std::size_t step = interrupted_step(r.output);
  CHECK(step >= 1);
  CHECK(r.output.find("continue with: headroom train --resume " + dir.string()) != std::string::npos);
  const fs::path ckpt = dir / "checkpoints" / fmt::format("step-{:08}", step);
  CHECK(fs::exists(ckpt / "model.safetensors"));
  CHECK(fs::exists(ckpt / "train_state.safetensors"));

  // SIGTERM (kill, docker stop, a batch scheduler) stops a resumed run the same way.
  const CliResult term =
      run_program("timeout --preserve-status -s TERM 2", std::string(HEADROOM_BIN) + " train --resume " + dir.string());
  INFO(term.output);
  CHECK(term.status == 128 + SIGTERM);
  const std::size_t term_step = interrupted_step(term.output);
  CHECK(term_step > step);
  CHECK(fs::exists(dir / "checkpoints" / fmt::format("step-{:08}", term_step) / "train_state.safetensors"));

  const CliResult resumed =
      run_headroom("train --resume " + dir.string() + " --steps " + std::to_string(term_step + 3));
  INFO(resumed.output);
  CHECK(resumed.status == 0);
  CHECK(resumed.output.find("done: 3 steps") != std::string::npos);
  CHECK(fs::exists(dir / "model.safetensors"));

  const CliResult changed = run_headroom("train --resume " + dir.string() + " --lr 0.1");
  CHECK(changed.status == 2);
  CHECK(changed.output.find("--resume excludes --lr") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("non-finite steps never reach the weights, and too many in a row stop the run") {
  const fs::path dir = fresh_dir("diverge");
  // SGD at lr 1e30: step 1 is finite and throws the weights to ~1e28; from step 2 on
  // the forward pass overflows and every step is skipped.
  const std::string args = "train --d-model 16 --heads 2 --vocab 8 --seq-len 8 --optimizer sgd --lr 1e30 --clip 0 "
                           "--warmup 0 --schedule constant --max-bad-steps 3 --save-every 1 --out " + dir.string();
  SUBCASE("the message names the step and the last good checkpoint") {
    const CliResult r = run_headroom(args);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("training stopped at step 4: 3 consecutive steps with a non-finite loss") !=
          std::string::npos);
    CHECK(r.output.find("last good checkpoint: " + (dir / "checkpoints" / "step-00000001").string()) !=
          std::string::npos);
    CHECK(r.output.find("rerun with --detect-anomaly") != std::string::npos);
    // Bad steps save no periodic checkpoint: step 1's is the newest.
    CHECK(fs::exists(dir / "checkpoints" / "step-00000001"));
    CHECK_FALSE(fs::exists(dir / "checkpoints" / "step-00000002"));
  }
  SUBCASE("--detect-anomaly names the op that made the first NaN") {
    const CliResult r = run_headroom(args + " --detect-anomaly");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("first NaN/Inf: anomaly: forward of '") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("recall's and before's own defaults apply below --config and the flags") {
  const fs::path dir = fresh_dir("recall_defaults");
  const CliResult r = run_headroom("train --task recall --steps 2 --seq-len 8 -q --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("recall (vocab 32, seq_len 8)") != std::string::npos);  // the flag beats the preset
  const std::string written = read_file(dir / "config.json");
  for (const char* key : {"\"vocab\": 32", "\"batch\": 64", "\"lr\": 0.001", "\"schedule\": \"constant\"",
                          "\"weight_decay\": 0.1", "\"steps\": 2"}) {
    CHECK_MESSAGE(written.find(key) != std::string::npos, "config.json lacks " << key);
  }
  // Other tasks keep the global defaults.
  CHECK(hr::task_defaults("copy").optim.lr == hr::TrainConfig{}.optim.lr);
  CHECK(hr::task_defaults("recall").data.seq_len == 6);
  CHECK(hr::task_defaults("before").optim.steps == 3000);
  CHECK(hr::task_defaults("before").optim.lr == hr::TrainConfig{}.optim.lr);
  fs::remove_all(dir);
}
