// Resources checked before they are spent, and hostile input files (issue 13): the
// memory estimate against real models, the refusals of train, eval, heads and ablate
// under a small injected memory limit (HEADROOM_MEMORY_LIMIT: no test allocates more
// than a few MB), the thread cap, the grid-size limit, and --config and --text at
// directories, devices and junk.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <thread>

#include <fmt/format.h>

#include <doctest/doctest.h>

#include "ablate/sweep.hpp"
#include "autograd/input_file.hpp"
#include "autograd/parallel.hpp"
#include "autograd/random.hpp"
#include "cli_runner.hpp"
#include "data/char_dataset.hpp"
#include "data/utf8.hpp"
#include "nn/strict_json.hpp"
#include "nn/transformer.hpp"
#include "support.hpp"
#include "train/config.hpp"
#include "train/resources.hpp"
#include "train/step.hpp"

namespace fs = std::filesystem;
namespace hr = headroom;

namespace {

// The headroom binary with the machine's memory set to `limit` (8 GiB unless told).
CliResult run_limited(const std::string& args, const std::string& limit = "8G") {
  return run_program("HEADROOM_MEMORY_LIMIT=" + limit + " " + std::string(HEADROOM_BIN), args);
}

// Sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A tiny toy-task run's flags: it trains in well under a second.
const std::string kTiny = "--task copy --d-model 8 --heads 2 --layers 1 --steps 2 --warmup 0 --batch 4 "
                          "--eval-every 2 --eval-batches 1 -q";

std::string junk_with(std::size_t offset, const std::string& bad) {
  std::string text;
  for (std::size_t i = 0; text.size() < offset; ++i) text += i % 40 == 39 ? '\n' : static_cast<char>('a' + i % 26);
  text.resize(offset);
  return text + bad + std::string(3000, 'z');
}

std::size_t lines_before(const std::string& text, std::size_t offset) {
  std::size_t n = 1;
  for (std::size_t i = 0; i < offset; ++i) n += text[i] == '\n';
  return n;
}

}  // namespace

// ---- the estimate ----------------------------------------------------------------------

TEST_CASE("model_parameter_count is parameter_count() of the model built from the config") {
  const hr::ModelConfig base{.vocab = 11, .d_model = 16, .n_layers = 2, .n_heads = 4, .max_len = 9};
  auto with = [&](auto change) {
    hr::ModelConfig c = base;
    change(c);
    return c;
  };
  const std::vector<std::pair<std::string, hr::ModelConfig>> configs{
      {"default", base},
      {"GQA", with([](hr::ModelConfig& c) { c.n_kv_heads = 2; })},
      {"MQA, d_k and d_v set", with([](hr::ModelConfig& c) { c.n_kv_heads = 1, c.d_k = 5, c.d_v = 3; })},
      {"tied embeddings", with([](hr::ModelConfig& c) { c.tie_embeddings = true; })},
      {"no bias, d_ff 10", with([](hr::ModelConfig& c) { c.bias = false, c.d_ff = 10; })},
      {"sinusoidal positions, post-norm",
       with([](hr::ModelConfig& c) { c.pos = hr::PositionEncoding::sinusoidal, c.norm = hr::NormPlacement::post; })},
      {"heads summed", with([](hr::ModelConfig& c) { c.head_combine = hr::HeadCombine::sum; })},
      {"attention-only", with([](hr::ModelConfig& c) { c.attn_only = true; })},
      {"no norm", with([](hr::ModelConfig& c) { c.norm = hr::NormPlacement::none; })},
      {"attention-only, no norm, no bias",
       with([](hr::ModelConfig& c) { c.attn_only = true, c.norm = hr::NormPlacement::none, c.bias = false; })},
      {"rope, rmsnorm, swiglu, no bias, GQA",
       with([](hr::ModelConfig& c) {
         c.pos = hr::PositionEncoding::rope, c.norm_type = hr::NormType::rmsnorm;
         c.ffn = hr::FeedForwardType::swiglu, c.bias = false, c.n_kv_heads = 1;
       })},
      {"swiglu with biases, qk-norm, key smear, no positions",
       with([](hr::ModelConfig& c) {
         c.ffn = hr::FeedForwardType::swiglu, c.qk_norm = true, c.key_smear = true, c.pos = hr::PositionEncoding::none;
       })},
      {"positions in q/k only, rmsnorm, attention-only",
       with([](hr::ModelConfig& c) { c.pos_qk_only = true, c.norm_type = hr::NormType::rmsnorm, c.attn_only = true; })},
  };
  for (const auto& [name, config] : configs) {
    hr::Rng rng(1);
    const hr::TransformerLM<float> model(config, rng);
    CHECK_MESSAGE(hr::model_parameter_count(config) == static_cast<double>(model.parameter_count()), name);
    // The memory estimate's own closed form (in doubles) counts the same floats.
    CHECK_MESSAGE(hr::estimate_eval_memory(config, 1, 4).parameters == 4.0 * static_cast<double>(model.parameter_count()),
                  name);
  }
}

TEST_CASE("the estimate's closed form counts the parameters of docs/design.md #17 as count_parameters does") {
  const hr::ModelConfig base{.vocab = 11, .d_model = 16, .n_layers = 2, .n_heads = 4, .max_len = 9};
  using P = hr::PositionEncoding;
  for (P pos : {P::learned, P::rope, P::none})
    for (hr::NormType nt : {hr::NormType::layernorm, hr::NormType::rmsnorm})
      for (hr::FeedForwardType ffn : {hr::FeedForwardType::mlp, hr::FeedForwardType::swiglu})
        for (bool extras : {false, true})
          for (bool bias : {true, false}) {
            hr::ModelConfig c = base;
            c.pos = pos, c.norm_type = nt, c.ffn = ffn, c.bias = bias;
            c.qk_norm = extras, c.key_smear = extras, c.n_kv_heads = extras ? 2 : 0;
            c.pos_qk_only = extras && pos == P::learned;
            const std::string what = hr::model_config_to_json(c);
            CHECK_MESSAGE(hr::estimate_eval_memory(c, 1, 4).parameters == 4.0 * hr::model_parameter_count(c), what);
          }
}

TEST_CASE("the estimate's activations grow with RoPE, QK-norm and the key smear, and SwiGLU's default d_ff") {
  hr::TrainConfig c;
  c.model.d_model = 48;
  c.data.vocab = 10;
  const double plain = hr::estimate_training_memory(c).activations;
  hr::TrainConfig rope = c;
  rope.model.pos = hr::PositionEncoding::rope;
  CHECK(hr::estimate_training_memory(rope).activations > plain);
  hr::TrainConfig qk = c;
  qk.model.qk_norm = true, qk.model.key_smear = true;
  CHECK(hr::estimate_training_memory(qk).activations > plain);
  // SwiGLU's default d_ff, 8 ceil(48 / 3) = 128, is narrower than the MLP's 192, and each keeps 3 of them.
  hr::TrainConfig swiglu = c, narrow = c;
  swiglu.model.ffn = hr::FeedForwardType::swiglu;
  narrow.model.d_ff = 128;
  CHECK(hr::estimate_training_memory(swiglu).activations == hr::estimate_training_memory(narrow).activations);
  CHECK(hr::estimate_training_memory(swiglu).activations < plain);
}

TEST_CASE("dropout adds its sites and the composed attention to a step's estimate, and nothing to an evaluation's") {
  hr::TrainConfig c;
  c.model.d_model = 48;
  c.model.n_heads = 4;
  c.data.vocab = 10;
  const double B = static_cast<double>(c.optim.batch), T = static_cast<double>(c.data.seq_len);
  const double C = 48, H = 4, dk = 12, L = static_cast<double>(c.model.n_layers);
  for (const bool attn_only : {false, true}) {
    CAPTURE(attn_only);
    c.model.attn_only = attn_only;
    hr::TrainConfig d = c;
    d.model.dropout = 0.1;
    // train/resources.hpp: per layer the residual branches' outputs and masks, the
    // copies of the heads and six B H T T; then the input's and two B H T T once.
    const double branches = attn_only ? 1 : 2;
    const double layer = B * T * (2 * branches * C + 3 * H * dk + 4 * H * dk + 3 * H * dk + 3 * H * dk) +
                         6 * B * H * T * T;
    const double floats = L * layer + 2 * B * T * C + 2 * B * H * T * T;
    CHECK(hr::estimate_training_memory(d).activations - hr::estimate_training_memory(c).activations ==
          doctest::Approx(4 * floats));
    hr::ModelConfig m = d.model;
    m.vocab = 10;
    hr::ModelConfig plain = m;
    plain.dropout = 0;
    CHECK(hr::estimate_eval_memory(m, 8, 16).activations == hr::estimate_eval_memory(plain, 8, 16).activations);
  }
}

TEST_CASE("a training step's estimate: gradients, Adam state 2 and SGD momentum 1 per parameter") {
  hr::TrainConfig c;
  c.model.d_model = 32;
  c.data.vocab = 10;
  const hr::MemoryEstimate adam = hr::estimate_training_memory(c);
  CHECK(adam.gradients == adam.parameters);
  CHECK(adam.optimizer_state == 2 * adam.parameters);
  CHECK(adam.optimizer_name == "Adam state");
  c.optim.optimizer = hr::OptimizerKind::sgd;
  CHECK(hr::estimate_training_memory(c).optimizer_state == adam.parameters);
  c.optim.momentum = 0;
  CHECK(hr::estimate_training_memory(c).optimizer_state == 0);
  // Activations grow with the batch, the parameters do not.
  hr::TrainConfig big = c;
  big.optim.batch *= 2;
  CHECK(hr::estimate_training_memory(big).activations > 1.9 * hr::estimate_training_memory(c).activations);
  CHECK(hr::estimate_training_memory(big).parameters == hr::estimate_training_memory(c).parameters);
}

TEST_CASE("the estimate does not overflow: vocab 2e9 with d_model 1e5") {
  hr::TrainConfig c;
  c.data.vocab = 2'000'000'000;
  c.model.d_model = 100'000;
  const double total = hr::estimate_training_memory(c).total();
  CHECK(std::isfinite(total));
  CHECK(total > 4.0 * 2e9 * 1e5 * 4);  // tok_emb and head, their gradients and Adam state
}

TEST_CASE("HEADROOM_MEMORY_LIMIT sets the machine's memory, and a malformed one is named") {
  {
    const ScopedEnv env("HEADROOM_MEMORY_LIMIT", "512M");
    const auto m = hr::available_memory();
    REQUIRE(m.has_value());
    CHECK(m->bytes == 512.0 * 1024 * 1024);
    CHECK(m->source == "HEADROOM_MEMORY_LIMIT");
  }
  {
    const ScopedEnv env("HEADROOM_MEMORY_LIMIT", "lots");
    CHECK_THROWS_WITH_AS(hr::available_memory(),
                         doctest::Contains("HEADROOM_MEMORY_LIMIT must be a number of bytes"), std::invalid_argument);
  }
  const auto real = hr::available_memory();
  REQUIRE(real.has_value());
  CHECK(real->bytes > 0);
}

TEST_CASE("check_training_memory names the flag that dominates") {
  const ScopedEnv env("HEADROOM_MEMORY_LIMIT", "1G");
  struct Case {
    std::string flag;
    void (*set)(hr::TrainConfig&);
  };
  const std::vector<Case> cases{
      {"--d-model 100000", [](hr::TrainConfig& c) { c.model.d_model = 100000; }},
      {"--layers 100000", [](hr::TrainConfig& c) { c.model.n_layers = 100000; }},
      {"--batch 100000000", [](hr::TrainConfig& c) { c.optim.batch = 100000000; }},
      {"--vocab 2000000000", [](hr::TrainConfig& c) { c.data.vocab = 2000000000; }},
      {"--max-len 1000000000", [](hr::TrainConfig& c) { c.model.max_len = 1000000000; }},
  };
  for (const Case& k : cases) {
    hr::TrainConfig c;
    k.set(c);
    const std::string expected = k.flag + ": one training step needs about";
    CHECK_THROWS_WITH_AS(hr::check_training_memory(c), doctest::Contains(expected.c_str()), std::invalid_argument);
  }
  hr::TrainConfig fits;
  CHECK_NOTHROW(hr::check_training_memory(fits));
  // Sixteen side by side: the jobs are named.
  hr::TrainConfig medium;
  medium.model.d_model = 512;
  medium.data.vocab = 10;
  CHECK_NOTHROW(hr::check_training_memory(medium));
  CHECK_THROWS_WITH_AS(hr::check_training_memory(medium, 0, 64), doctest::Contains("--jobs 64: training 64 runs"),
                       std::invalid_argument);
}

// ---- the command line: refused before anything is allocated or written --------------

TEST_CASE("train refuses a config that does not fit in memory, with one line and exit 2") {
  const TempDir dir("limits_train");
  for (const std::string flag :
       {"--d-model 100000", "--batch 100000000", "--vocab 2000000000", "--max-len 1000000000", "--layers 100000"}) {
    const CliResult r = run_limited("train --steps 1 --warmup 0 " + flag + " --out " + (dir / "r").string());
    CHECK_MESSAGE(r.status == 2, flag << ": " << r.output);
    CHECK_MESSAGE(r.output.find("headroom: error: " + flag + ": one training step needs about") != std::string::npos,
                  r.output);
    CHECK_MESSAGE(r.output.find("but this machine has 8.0 GiB available (HEADROOM_MEMORY_LIMIT)") != std::string::npos,
                  r.output);
    CHECK(count_lines(r.output) == 1);
    CHECK(!fs::exists(dir / "r"));
  }  // CLI11 would read 1e9 for a whole-number flag; the validator takes digits only.
  const CliResult e = run_headroom("train --max-len 1e9");
  CHECK(e.status == 2);
  CHECK_MESSAGE(e.output.find("--max-len: must be a whole number >= 1 (leave the flag out for its default), got 1e9") !=
                    std::string::npos,
                e.output);
}

TEST_CASE("--threads is capped at 256, from the flag and from a config file") {
  const CliResult r = run_headroom("train --threads 1000000 --steps 1 --warmup 0");
  CHECK(r.status == 2);
  CHECK(r.output == "headroom: error: threads must be from 1 to 256, got 1000000\n");
  const TempDir dir("limits_threads");
  const fs::path config = dir.write("c.json", R"({"train": {"threads": 4294967297}})");
  const CliResult wrapped = run_headroom("train --steps 1 --warmup 0 --config " + config.string());
  CHECK(wrapped.status == 2);
  CHECK_MESSAGE(wrapped.output.find("'train.threads' is too large, got 4294967297") != std::string::npos,
                wrapped.output);
}

TEST_CASE("eval --batch and heads --batches are checked against memory before a batch is drawn") {
  const TempDir dir("limits_eval");
  const std::string run = (dir / "r").string();
  REQUIRE(run_headroom("train " + kTiny + " --out " + run).status == 0);
  const CliResult eval = run_limited("eval --model " + run + " --batch 100000000", "1G");
  CHECK(eval.status == 2);
  CHECK_MESSAGE(eval.output.find("headroom: error: --batch 100000000: evaluating needs about") != std::string::npos,
                eval.output);
  CHECK(count_lines(eval.output) == 1);
  const CliResult heads = run_limited("heads --model " + run + " --batches 100000000 --out " + (dir / "h").string(),
                                      "1G");
  CHECK(heads.status == 2);
  CHECK_MESSAGE(heads.output.find("--batches 100000000: evaluating needs about") != std::string::npos, heads.output);
  CHECK(!fs::exists(dir / "h"));
  // The same model at its own batch evaluates.
  CHECK(run_limited("eval --model " + run, "1G").status == 0);
}

TEST_CASE("ablate refuses a grid above --max-runs before anything is written") {
  const TempDir dir("limits_ablate");
  const std::string out = (dir / "s").string();
  const CliResult big = run_headroom("ablate --heads 1,2 --dk 2,4,8 --seeds 2000 --steps 1 --warmup 0 --out " + out);
  CHECK(big.status == 2);
  CHECK_MESSAGE(big.output ==
                    "headroom: error: the grid is 2 --heads x 3 --dk x 2000 seeds = 12000 runs, more than "
                    "--max-runs 1000; raise --max-runs to run it all\n",
                big.output);
  CHECK(!fs::exists(out));
  const CliResult limited = run_headroom("ablate --seeds 3 --max-runs 2 --steps 1 --warmup 0 --out " + out);
  CHECK(limited.status == 2);
  CHECK_MESSAGE(limited.output.find("3 seeds = 3 runs, more than --max-runs 2") != std::string::npos, limited.output);
  CHECK(!fs::exists(out));
  const CliResult jobs = run_headroom("ablate --seeds 1 --jobs 1000000 --steps 1 --warmup 0 --out " + out);
  CHECK(jobs.status == 2);
  CHECK(jobs.output == "headroom: error: --jobs 1000000: must be from 1 to 256\n");
  CHECK(!fs::exists(out));
  // Raised, it runs.
  const CliResult raised = run_headroom("ablate " + kTiny + " --seeds 2 --max-runs 2 --jobs 1 --out " + out);
  CHECK_MESSAGE(raised.status == 0, raised.output);
  CHECK(fs::exists(fs::path(out) / "sweep.json"));
}

TEST_CASE("ablate refuses a grid whose largest run does not fit, before sweep.json") {
  const TempDir dir("limits_ablate_memory");
  const std::string out = (dir / "s").string();
  const CliResult r = run_limited("ablate --heads 1,2 --seeds 1 --steps 1 --warmup 0 --d-model 100000 --out " + out);
  CHECK(r.status == 2);
  CHECK_MESSAGE(r.output.find("headroom: error: run h2-dk50000-s0: --d-model 100000: one training step needs") !=
                    std::string::npos,
                r.output);
  CHECK(!fs::exists(out));
}

TEST_CASE("ablate --sweep lr=1e400 is a usage error naming the value, not an abort") {
  const TempDir dir("limits_sweep_range");
  const CliResult r = run_headroom("ablate --sweep lr=1e400 --steps 1 --warmup 0 --out " + (dir / "s").string());
  CHECK(r.status == 2);
  CHECK_MESSAGE(r.output.find("'lr=1e400': 1e400 is a number out of range") != std::string::npos, r.output);
  CHECK(count_lines(r.output) == 1);
}

TEST_CASE("more --threads than cores runs, with a warning") {
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores == 0 || cores >= 256) return;  // nothing to warn about on this machine
  const int threads = static_cast<int>(cores) + 1;
  const CliResult r = run_headroom("train " + kTiny + " --threads " + std::to_string(threads));
  CHECK_MESSAGE(r.status == 0, r.output);
  CHECK_MESSAGE(r.output.find(fmt::format("warning: --threads {} is more than this machine's {} cores", threads,
                                          cores)) != std::string::npos,
                r.output);
}

// ---- hostile files ---------------------------------------------------------------------

TEST_CASE("check_input_file names what a path is, and enforces the size limit before reading") {
  const TempDir dir("limits_files");
  CHECK_THROWS_WITH_AS(hr::check_input_file(dir.path(), "f", 100), "f: is a directory, not a regular file",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::check_input_file(dir / "none", "f", 100), "f: no such file", std::invalid_argument);
  const fs::path fifo = dir / "fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(hr::check_input_file(fifo, "f", 100), "f: is a FIFO, not a regular file",
                       std::invalid_argument);
  if (prerequisite(fs::exists("/dev/zero"), "/dev/zero is not there")) {
    CHECK_THROWS_WITH_AS(hr::check_input_file("/dev/zero", "f", 100), "f: is a character device, not a regular file",
                         std::invalid_argument);
  }
  const fs::path file = dir.write("big", std::string(2000, 'x'));
  CHECK_THROWS_WITH_AS(hr::check_input_file(file, "f", 1024), "f: is 2.0 KiB (2000 bytes), larger than the limit of 1.0 KiB",
                       std::invalid_argument);
  CHECK(hr::read_input_file(file, "f", 2000) == std::string(2000, 'x'));
}

TEST_CASE("strict JSON: a duplicate key and a number out of range are named by their key path") {
  CHECK_THROWS_WITH_AS(hr::parse_strict_json(R"({"train": {"lr": 0.1, "lr": 0.2}})", "c.json"),
                       "c.json: duplicate key 'train.lr'", std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::parse_strict_json(R"({"train": {"steps": 5, "lr": 1e400}})", "c.json"),
                       "c.json: 'train.lr': number out of range: 1e400", std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::parse_strict_json("{", "c.json"), doctest::Contains("c.json: not valid JSON: "),
                       std::invalid_argument);
  // The empty key is a key: named as '' on the path (the fuzzer found a reader that
  // dropped it and indexed an empty path).
  CHECK_THROWS_WITH_AS(hr::parse_strict_json(R"({"": 1, "": 2})", "c.json"), "c.json: duplicate key ''",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::parse_strict_json(R"({"": {"a": 1, "a": 2}})", "c.json"), "c.json: duplicate key '.a'",
                       std::invalid_argument);
  // The same key in two objects is fine.
  CHECK(hr::parse_strict_json(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}, {"k": 4}]})", "c.json")["b"]["k"] == 2);
  const TempDir dir("limits_json");
  const fs::path big = dir.write("big.json", "{\"a\": \"" + std::string(200, 'x') + "\"}");
  CHECK_THROWS_WITH_AS(hr::read_strict_json_file(big, 100), doctest::Contains("larger than the limit of 100 bytes"),
                       std::invalid_argument);
}

TEST_CASE("--config at a directory, /dev/zero, a junk file, a duplicate key and 1e400: one line, exit 2") {
  const TempDir dir("limits_config");
  const std::string d = dir.path().string();
  const fs::path junk = dir.write("junk.json", junk_with(1500, std::string(1, '\0')));
  dir.write("dup.json", R"({"train": {"lr": 0.001, "steps": 3, "lr": 0.003}})");
  dir.write("huge.json", R"({"train": {"lr": 1e400}})");
  std::vector<std::pair<std::string, std::string>> cases{
      {d, d + ": is a directory, not a regular file"},
      {junk.string(), junk.string() + ": not valid JSON: "},
      {d + "/dup.json", d + "/dup.json: duplicate key 'train.lr'"},
      {d + "/huge.json", d + "/huge.json: 'train.lr': number out of range: 1e400"},
  };
  if (prerequisite(fs::exists("/dev/zero"), "/dev/zero is not there")) {
    cases.emplace_back("/dev/zero", "/dev/zero: is a character device, not a regular file");
  }
  for (const auto& [file, message] : cases) {
    const CliResult r = run_headroom("train --steps 1 --warmup 0 --config " + file);
    CHECK_MESSAGE(r.status == 2, file);
    CHECK_MESSAGE(r.output.rfind("headroom: error: " + message, 0) == 0, r.output);
    CHECK(count_lines(r.output) == 1);
  }
}

TEST_CASE("--text at a directory, /dev/zero, a NUL byte and bad UTF-8: named with the offset and line") {
  const TempDir dir("limits_text");
  const std::string d = dir.path().string();
  const std::string nul_text = junk_with(1234, std::string(1, '\0'));
  const std::string bad_text = junk_with(2345, "\xFF");
  const fs::path nul = dir.write("nul.txt", nul_text);
  const fs::path bad = dir.write("bad.txt", bad_text);
  std::vector<std::pair<std::string, std::string>> cases{
      {d, "is a directory, not a regular file"},
      {nul.string(), fmt::format("NUL byte at byte offset 1234, line {}: a binary file, not text",
                                 lines_before(nul_text, 1234))},
      {bad.string(), fmt::format("invalid UTF-8 at byte offset 2345, line {} (byte 0xFF: not a UTF-8 lead byte)",
                                 lines_before(bad_text, 2345))},
  };
  if (prerequisite(fs::exists("/dev/zero"), "/dev/zero is not there")) {
    cases.emplace_back("/dev/zero", "is a character device, not a regular file");
  }
  for (const auto& [file, message] : cases) {
    const CliResult r = run_headroom("train --steps 1 --warmup 0 --text " + file);
    CHECK_MESSAGE(r.status == 2, file);
    CHECK_MESSAGE(r.output == "headroom: error: CharDataset: '" + file + "': " + message + "\n", r.output);
  }
}

TEST_CASE("eval --text at a directory or /dev/zero is named, not read") {
  const TempDir dir("limits_eval_text");
  const std::string run = (dir / "r").string();
  REQUIRE(run_headroom("train --text " + dir.write("t.txt", std::string(200, 'a') + "bcd\n").string() +
                       " --seq-len 8 --d-model 8 --heads 2 --layers 1 --steps 2 --warmup 0 --batch 4 --eval-every 2 "
                       "--eval-batches 1 -q --out " + run)
              .status == 0);
  std::vector<std::pair<std::string, std::string>> cases{{dir.path().string(), "is a directory, not a regular file"}};
  if (prerequisite(fs::exists("/dev/zero"), "/dev/zero is not there")) {
    cases.emplace_back("/dev/zero", "is a character device, not a regular file");
  }
  for (const auto& [file, message] : cases) {
    const CliResult r = run_headroom("eval --model " + run + " --text " + file);
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.output == "headroom: error: --text '" + file + "': " + message + "\n", r.output);
  }
}

TEST_CASE("CharDataset reads in chunks: a bad byte past the first chunk, a character across a chunk boundary") {
  const TempDir dir("limits_chunks");
  // 1 MiB chunks: a three-byte character that starts two bytes before the boundary.
  std::string text(1024 * 1024 - 2, 'a');
  text += "\u20ac";
  text += std::string(100, 'b');
  const fs::path good = dir.write("good.txt", text);
  const hr::CharDataset data(good, {.seq_len = 4});
  CHECK(data.size() == 1024 * 1024 - 2 + 1 + 100);
  CHECK(data.vocab_size() == 3);
  const fs::path late = dir.write("late.txt", text + std::string(1, '\0'));
  const std::string nul_at = fmt::format("NUL byte at byte offset {}, line 1", text.size());
  CHECK_THROWS_WITH_AS(hr::CharDataset(late, {.seq_len = 4}), doctest::Contains(nul_at.c_str()), hr::DataError);
  // A cut sequence at the very end.
  const fs::path cut = dir.write("cut.txt", std::string(1024 * 1024 - 1, 'a') + "\xE2\x82");
  const std::string cut_at =
      fmt::format("invalid UTF-8 at byte offset {}, line 1 (byte 0xE2: sequence cut short)", 1024 * 1024 - 1);
  CHECK_THROWS_WITH_AS(hr::CharDataset(cut, {.seq_len = 4}), doctest::Contains(cut_at.c_str()), hr::DataError);
}

TEST_CASE("CharDataset refuses a text above its size limit before reading it") {
  const TempDir dir("limits_text_size");
  const fs::path file = dir.write("t.txt", std::string(5000, 'a'));
  CHECK_THROWS_WITH_AS(hr::CharDataset(file, {.seq_len = 4, .max_bytes = 4096}),
                       doctest::Contains("is 4.9 KiB (5000 bytes), larger than the limit of 4.0 KiB"), hr::DataError);
  CHECK(hr::CharDataset(file, {.seq_len = 4, .max_bytes = 5000}).size() == 5000);
}

TEST_CASE("Utf8Decoder fed a byte at a time gives decode_utf8's code points") {
  const std::string bytes = "a\u00e9\u20ac\U0001F600z\n";
  std::u32string out;
  hr::Utf8Decoder decoder("t", true);
  for (const char b : bytes) decoder.feed(std::string_view(&b, 1), out);
  decoder.finish();
  CHECK(out == hr::decode_utf8(bytes, "t"));
  CHECK(decoder.offset() == bytes.size());
}

TEST_CASE("the JSON the tool reads back is strict too: a run's config.json and sweep.json") {
  const TempDir dir("limits_strict_reads");
  const std::string run = (dir / "r").string();
  REQUIRE(run_headroom("train " + kTiny + " --out " + run).status == 0);
  const fs::path config = fs::path(run) / "config.json";
  std::string text = read_file(config);
  text.insert(text.find('{') + 1, "\"train\": {\"seed\": 3},");  // a second "train"
  dir.write("r/config.json", text);
  const CliResult r = run_headroom("eval --model " + run);
  CHECK(r.status == 2);
  CHECK_MESSAGE(r.output == "headroom: error: " + config.string() + ": duplicate key 'train'\n", r.output);

  const fs::path sweep = dir / "s";
  fs::create_directories(sweep);
  dir.write("s/sweep.json", R"({"columns": [], "columns": []})");
  CHECK_THROWS_WITH_AS(hr::read_sweep_plan(sweep), doctest::Contains("sweep.json: duplicate key 'columns'"),
                       std::invalid_argument);

  // A finished run's result.json, read back for the report.
  const std::string out = (dir / "a").string();
  const std::string ablate = "ablate " + kTiny + " --seeds 1 --jobs 1 --out " + out;
  REQUIRE(run_headroom(ablate).status == 0);
  const fs::path result = fs::path(out) / "runs" / "h2-dk4-s0" / "result.json";
  REQUIRE(fs::exists(result));
  std::string body = read_file(result);
  body.insert(body.find('{') + 1, "\"steps\": 1,");
  dir.write("a/runs/h2-dk4-s0/result.json", body);
  const CliResult again = run_headroom(ablate);
  CHECK(again.status == 2);
  CHECK_MESSAGE(again.output.find("headroom: error: " + result.string() + ": duplicate key 'steps'") !=
                    std::string::npos,
                again.output);
}

// Threads that cannot pay are not used (train/step.hpp, autograd/parallel.hpp,
// train/resources.hpp): each thread beyond the first needs about kFlopsPerExtraShard
// of matrix products a step (kFlopsPerExtraThread where ops share their loops); the
// CLI says when it uses fewer than asked.
TEST_CASE("a training step too small for a second thread runs on one, and headroom train says so") {
  CHECK(hr::threads_that_pay(1, 1e12) == 1);
  CHECK(hr::threads_that_pay(2, 3.4e8) == 1);
  CHECK(hr::threads_that_pay(2, 5e8) == 2);
  CHECK(hr::threads_that_pay(2, 1e10) == 2);
  CHECK(hr::threads_that_pay(4, 1.2e9) == 3);
  CHECK(hr::threads_that_pay(3, 0) == 1);

  // bench/compare.py's tiny config: B 16, T 32, C 64, 2 layers, 4 heads of 16, d_ff
  // 256, vocab 64. Per layer: projections 2*512*64*256, scores and weighted sums
  // 2*16*32*32*4*32, MLP 2*2*512*64*256; the head 2*512*64*64; times 3.
  hr::ModelConfig tiny{.vocab = 64, .d_model = 64, .n_layers = 2, .n_heads = 4};
  const double per_layer = 2.0 * 512 * 64 * 256 + 2.0 * 16 * 32 * 32 * 4 * 32 + 2.0 * 2 * 512 * 64 * 256;
  CHECK(hr::training_step_flops(tiny, 16, 32) == doctest::Approx(3 * (2 * per_layer + 2.0 * 512 * 64 * 64)));

  hr::TrainConfig config;
  config.model = tiny;
  config.data.seq_len = 32;
  config.optim.batch = 16;
  config.optim.threads = 2;
  // A step cut into one shard of the batch per thread pays from 1e8 FLOPs a thread,
  // and takes at most one thread per row; a batch of one row shares each op's loops.
  CHECK(hr::step_threads_that_pay(2, 3.4e8, 16) == 2);
  CHECK(hr::step_threads_that_pay(2, 9e7, 16) == 1);
  CHECK(hr::step_threads_that_pay(4, 3.4e8, 16) == 4);
  CHECK(hr::step_threads_that_pay(4, 1e10, 3) == 3);
  CHECK(hr::step_threads_that_pay(2, 3.4e8, 1) == 1);
  CHECK(hr::step_threads_that_pay(2, 5e8, 1) == 2);
  const hr::ThreadChoice tiny_step = hr::training_threads(config);
  CHECK(tiny_step.asked == 2);
  CHECK(tiny_step.used == 2);
  CHECK(tiny_step.why.empty());
  config.optim.batch = 4;  // a quarter of the work: one thread
  const hr::ThreadChoice small = hr::training_threads(config);
  CHECK(small.used == 1);
  CHECK(small.why.find("1 of the 2 threads asked: a step of 0.085 GFLOP") == 0);
  config.optim.batch = 2;  // one shard per row
  config.model.d_model = 512;
  config.optim.threads = 4;
  const hr::ThreadChoice rows = hr::training_threads(config);
  CHECK(rows.used == 2);
  CHECK(rows.why == "2 of the 4 threads asked: a step runs one shard of its batch per thread, and the batch has 2 rows");
  config.optim.batch = 1;  // one row: the ops share their loops, from 5e8 FLOPs a thread
  config.model.d_model = 64;
  const hr::ThreadChoice one_row = hr::training_threads(config);
  CHECK(one_row.used == 1);
  CHECK(one_row.why.find("1 of the 4 threads asked: a step of one row of 0.021 GFLOP") == 0);

  const CliResult r = run_headroom("train --batch 4 --steps 2 --threads 2 --no-save -q");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("threads: 1 of the 2 threads asked: a step of") != std::string::npos);
}

// eval and heads run the model forward only, with the training run's threads: a
// forward pass has a third of a step's products, and they too use fewer threads
// where it is too small for more, and say so.
TEST_CASE("eval and heads on a model trained with --threads 2 use one thread where a forward pass cannot pay") {
  hr::ModelConfig tiny{.vocab = 64, .d_model = 64, .n_layers = 2, .n_heads = 4};
  const hr::ThreadChoice fwd = hr::forward_threads(tiny, 16, 32, 2);
  CHECK(fwd.used == 1);
  CHECK(fwd.step_flops == doctest::Approx(hr::training_step_flops(tiny, 16, 32) / 3));
  CHECK(fwd.why.find("1 of the 2 threads asked: a forward pass of 0.11 GFLOP") == 0);
  // At 64 rows a training step (1.4 GFLOP) pays for a second thread and a forward
  // pass (0.45) does not; at 128 rows both do.
  CHECK(hr::step_threads_that_pay(2, hr::training_step_flops(tiny, 64, 32), 64) == 2);
  CHECK(hr::forward_threads(tiny, 64, 32, 2).used == 1);
  CHECK(hr::forward_threads(tiny, 128, 32, 2).used == 2);
  CHECK(hr::forward_threads(tiny, 128, 32, 2).why.empty());
  CHECK(hr::forward_threads(tiny, 16, 32, 1).why.empty());

  const TempDir tmp("limits_forward_threads");
  const CliResult train = run_headroom("train --task copy --seq-len 8 --vocab 8 --d-model 32 --heads 2 --steps 2 "
                                       "--threads 2 -q --out " + tmp.path().string());
  INFO(train.output);
  REQUIRE(train.status == 0);
  const CliResult eval = run_headroom("eval --model " + tmp.path().string());
  INFO(eval.output);
  CHECK(eval.status == 0);
  CHECK(eval.output.find("\nthreads     1 of the 2 threads asked: a forward pass of") != std::string::npos);
  const CliResult json = run_headroom("eval --json --model " + tmp.path().string());
  INFO(json.output);
  CHECK(json.status == 0);
  CHECK(json.output.find("headroom eval: threads: 1 of the 2 threads asked: a forward pass of") != std::string::npos);
  const CliResult heads = run_headroom("heads --model " + tmp.path().string() + " --out " +
                                       (tmp.path() / "heads").string());
  INFO(heads.output);
  CHECK(heads.status == 0);
  CHECK(heads.output.find("\nthreads   1 of the 2 threads asked: a forward pass of") != std::string::npos);
}

TEST_CASE("a cgroup v2 memory.max is seen: the tightest of the group and its ancestors, less what each uses") {
  const TempDir root("limits_cgroup");
  const auto put = [&](const std::string& dir, const std::string& file, const std::string& text) {
    fs::create_directories(root / dir);
    std::ofstream(root / dir / file) << text << "\n";
  };
  put("", "memory.current", "999");  // the hierarchy's root has no memory.max
  put("a", "memory.max", "max");
  put("a", "memory.current", "100");
  put("a/b", "memory.max", "1000000");
  put("a/b", "memory.current", "250000");
  put("a/b/c", "memory.max", "max");
  std::optional<hr::AvailableMemory> m = hr::cgroup_available_memory(root.path(), "/a/b/c");
  REQUIRE(m.has_value());
  CHECK(m->bytes == 750000);
  CHECK(m->source.find((root / "a/b/memory.max").string()) != std::string::npos);
  // A tighter group below wins; a group at its limit leaves 0.
  put("a/b/c", "memory.max", "300000");
  put("a/b/c", "memory.current", "290000");
  m = hr::cgroup_available_memory(root.path(), "/a/b/c");
  REQUIRE(m.has_value());
  CHECK(m->bytes == 10000);
  put("a/b/c", "memory.current", "400000");
  CHECK(hr::cgroup_available_memory(root.path(), "/a/b/c")->bytes == 0);
  // No limit anywhere: nothing to say.
  CHECK_FALSE(hr::cgroup_available_memory(root.path(), "/a").has_value());
  CHECK_FALSE(hr::cgroup_available_memory(root.path(), "/").has_value());
}

TEST_CASE("a --text that would not fit once read is refused before it is read, and counted in the step's estimate") {
  const TempDir dir("limits_text");
  std::string text;
  for (int i = 0; text.size() < 200000; ++i) text += "the quick brown fox " + std::to_string(i) + "\n";
  const fs::path file = dir.write("big.txt", text);
  const CliResult r = run_limited("train --text " + file.string() + " --seq-len 8 --d-model 8 --heads 2 --layers 1 "
                                  "--steps 1 --no-save -q",
                                  "1M");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(count_lines(r.output) == 1);
  CHECK(r.output.find("--text " + file.string() + ": reading it needs about 2.3 MiB") != std::string::npos);
  // The step's estimate counts the text's ids (8 bytes a character) as data.
  hr::TrainConfig c;
  c.data.text = file.string();
  c.data.seq_len = 8;
  const hr::MemoryEstimate with_text = hr::estimate_training_memory(c, 30);
  c.data.text = (dir / "missing.txt").string();
  const hr::MemoryEstimate without = hr::estimate_training_memory(c, 30);
  CHECK(with_text.data - without.data == doctest::Approx(8.0 * static_cast<double>(text.size())));
}

TEST_CASE("ablate refuses a grid whose plan alone would not fit, before planning") {
  const TempDir dir("limits_plan");
  const std::string out = (dir / "s").string();
  const CliResult r = run_limited("ablate --heads 1,2,4,8 --seeds 5000 --max-runs 1000000 --steps 1 --out " + out, "64M");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(count_lines(r.output) == 1);
  CHECK(r.output.find("= 20000 runs, whose plan alone needs about " + hr::format_bytes(20000 * hr::kPlanBytesPerRun)) !=
        std::string::npos);
  CHECK_FALSE(fs::exists(out));
}
