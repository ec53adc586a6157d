// Flags that compose (issue 13): top-p sampling in the library, generate's
// per-token callback and `sample` streaming its output, the --tokens cap, sampling
// knobs next to --greedy refused, --task and --vocab next to --text refused (flags
// and --config files), eval --seed with --text refused, and eval --tokens printing
// the number examples/load_checkpoint.py --expect checks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "data/char_dataset.hpp"
#include "data/task.hpp"
#include "data/task_tokens.hpp"
#include "nn/checkpoint.hpp"
#include "nn/generate.hpp"
#include "support.hpp"
#include "tiny_model.hpp"
#include "train/run_dir.hpp"
#include "train/evaluate.hpp"

namespace fs = std::filesystem;
namespace hr = headroom;

namespace {

// The ids sample_token may draw for these options.
std::vector<std::size_t> kept(const std::vector<float>& logits, const hr::SamplingOptions& options) {
  return hr::sampling_candidates(logits, options).ids;
}

// The nucleus computed here from scratch: softmax(z / T), most likely first (ties:
// the lower id), the shortest prefix whose probabilities sum to at least p.
std::set<std::size_t> nucleus(const std::vector<float>& logits, double temperature, double p) {
  std::vector<double> prob(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) total += prob[i] = std::exp(logits[i] / temperature);
  std::vector<std::size_t> order(logits.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return prob[a] > prob[b]; });
  std::set<std::size_t> out;
  double sum = 0;
  for (const std::size_t i : order) {
    out.insert(i);
    sum += prob[i] / total;
    if (sum >= p) break;
  }
  return out;
}

// DIR/model.safetensors for `model`, with the data metadata sample and eval read.
void save_model_dir(const fs::path& dir, const hr::TransformerLM<float>& model, const hr::DataConfig& data,
                    const hr::Dataset& dataset) {
  hr::save_checkpoint(dir / "model.safetensors", model, model.config(),
                      {{hr::kDataMetadataKey, hr::data_metadata(data, dataset)}});
}

const std::string kText =
    "the cat sat on the mat.\nthe dog sat on the cat's mat.\nthe cat ran to the dog and the dog sat.\n";

}  // namespace

TEST_CASE("top-p keeps the fewest most likely tokens whose probability reaches p, ties to the lower id") {
  // Four equal logits: each token has probability 1/4 exactly.
  const std::vector<float> flat{0.0f, 0.0f, 0.0f, 0.0f};
  CHECK(kept(flat, {.top_p = 0.25}) == std::vector<std::size_t>{0});
  CHECK(kept(flat, {.top_p = 0.5}) == std::vector<std::size_t>{0, 1});  // reaches 0.5 exactly: two
  CHECK(kept(flat, {.top_p = 0.5000001}) == std::vector<std::size_t>{0, 1, 2});
  CHECK(kept(flat, {.top_p = 0.75}) == std::vector<std::size_t>{0, 1, 2});
  CHECK(kept(flat, {.top_p = 1.0}) == std::vector<std::size_t>{0, 1, 2, 3});

  // Probabilities 0.032 0.644 0.087 0.237 (ids 0 to 3): kept in id order.
  const std::vector<float> z{0.0f, 3.0f, 1.0f, 2.0f};
  CHECK(kept(z, {.top_p = 0.6}) == std::vector<std::size_t>{1});
  CHECK(kept(z, {.top_p = 0.85}) == std::vector<std::size_t>{1, 3});
  CHECK(kept(z, {.top_p = 0.9}) == std::vector<std::size_t>{1, 2, 3});
  CHECK(kept(z, {.top_p = 0.99}) == std::vector<std::size_t>{0, 1, 2, 3});
  CHECK(kept(z, {.top_p = 1.0}) == std::vector<std::size_t>{0, 1, 2, 3});
  // After the temperature: at T = 10 the distribution is flatter, so p = 0.6 takes three.
  CHECK(kept(z, {.temperature = 10.0, .top_p = 0.6}) == std::vector<std::size_t>{1, 2, 3});
  // After top-k, renormalised: of ids 1 and 3, id 1 has 0.731.
  CHECK(kept(z, {.top_k = 2, .top_p = 0.7}) == std::vector<std::size_t>{1});
  CHECK(kept(z, {.top_k = 2, .top_p = 0.75}) == std::vector<std::size_t>{1, 3});

  // A tie at the cut: ids 1, 2, 3 tie (each 0.106 after id 0's 0.711); the lower id goes first.
  const std::vector<float> tie{2.0f, 0.0f, 0.0f, 0.0f};
  CHECK(kept(tie, {.top_p = 0.71}) == std::vector<std::size_t>{0});
  CHECK(kept(tie, {.top_p = 0.72}) == std::vector<std::size_t>{0, 1});
  CHECK(kept(tie, {.top_p = 0.9}) == std::vector<std::size_t>{0, 1, 2});

  // Against the nucleus computed from scratch, for many p on random logits.
  hr::Rng rng(5);
  std::vector<float> logits(30);
  for (float& v : logits) v = static_cast<float>(2 * rng.normal());
  for (const double p : {0.05, 0.2, 0.5, 0.8, 0.95, 0.999}) {
    const std::vector<std::size_t> ids = kept(logits, {.temperature = 0.8, .top_p = p});
    INFO("p = " << p);
    CHECK(std::set<std::size_t>(ids.begin(), ids.end()) == nucleus(logits, 0.8, p));
  }
}

TEST_CASE("a tiny top-p is greedy, and top-p 1 draws exactly as no top-p") {
  hr::Rng rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(12);
    for (float& v : logits) v = static_cast<float>(rng.normal());
    logits[static_cast<std::size_t>(trial) % 12] = logits[(static_cast<std::size_t>(trial) + 5) % 12];  // a tie
    hr::Rng unused(0);
    const hr::Index greedy = hr::sample_token(logits, {.greedy = true}, unused);
    for (int n = 0; n < 20; ++n) CHECK(hr::sample_token(logits, {.top_p = 1e-9}, rng) == greedy);
  }
  // Equal ties at the top: greedy's first argmax, which a tiny nucleus keeps too.
  const std::vector<float> ties{1.0f, 5.0f, 5.0f, 0.0f};
  CHECK(kept(ties, {.top_p = 1e-9}) == std::vector<std::size_t>{1});

  const std::vector<float> z{0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  hr::Rng a(11), b(11);
  for (int n = 0; n < 200; ++n) CHECK(hr::sample_token(z, {.top_p = 1.0}, a) == hr::sample_token(z, {}, b));
}

TEST_CASE("top-p sampling never draws a token outside the nucleus, and draws each inside it at its rate") {
  hr::Rng init(17);
  std::vector<float> logits(20);
  for (float& v : logits) v = static_cast<float>(1.5 * init.normal());
  const double p = 0.7, temperature = 1.2;
  const std::set<std::size_t> inside = nucleus(logits, temperature, p);
  REQUIRE(inside.size() >= 3);
  REQUIRE(inside.size() < logits.size() - 5);
  double total = 0;
  for (const std::size_t i : inside) total += std::exp(logits[i] / temperature);

  constexpr int kDraws = 40000;
  std::vector<int> seen(logits.size(), 0);
  hr::Rng rng(1);
  for (int n = 0; n < kDraws; ++n) {
    ++seen[static_cast<std::size_t>(hr::sample_token(logits, {.temperature = temperature, .top_p = p}, rng))];
  }
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double expected = inside.count(i) ? std::exp(logits[i] / temperature) / total : 0.0;
    INFO("id " << i << ": seen " << seen[i] << " of " << kDraws << ", expected " << expected);
    if (expected == 0) {
      CHECK(seen[i] == 0);
    } else {
      // 5 standard deviations of a binomial proportion: at most 0.0125.
      CHECK(std::abs(seen[i] / double(kDraws) - expected) < 0.0125);
    }
  }
}

TEST_CASE("check_sampling_options refuses a top_p outside 0 < p <= 1") {
  CHECK(error_of([] { hr::check_sampling_options({.top_p = 0.0}, 5); }) == "sample: top_p must be in (0, 1], got 0");
  CHECK(error_of([] { hr::check_sampling_options({.top_p = 1.5}, 5); }) == "sample: top_p must be in (0, 1], got 1.5");
  CHECK(error_of([] { hr::check_sampling_options({.top_p = -0.1}, 5); }) ==
        "sample: top_p must be in (0, 1], got -0.1");
  CHECK(error_of([] { hr::check_sampling_options({.top_p = -NAN}, 5); }) == "sample: top_p must be in (0, 1], got nan");
  CHECK(error_of([] { hr::check_sampling_options({.top_p = 1.0}, 5); }).empty());
  CHECK(error_of([] { hr::check_sampling_options({.top_p = 1e-12}, 5); }).empty());
}

TEST_CASE("generate calls its callback once per new token, in order, and draws as without one") {
  hr::Rng init(1);
  hr::TransformerLM<float> model(tiny_model_config(7, 6), init);
  const std::vector<hr::Index> prompt{3, 4, 5};
  std::vector<hr::Index> streamed;
  hr::Rng r1(5), r2(5);
  const std::vector<hr::Index> out =
      hr::generate(model, prompt, 15, {.temperature = 1.3, .top_p = 0.9}, r1, [&](hr::Index id) {
        streamed.push_back(id);
      });
  CHECK(out.size() == 15);
  CHECK(streamed == out);
  CHECK(hr::generate(model, prompt, 15, {.temperature = 1.3, .top_p = 0.9}, r2) == out);
  // The callback sees each token before the next one is made: a callback that
  // throws stops generation there.
  int calls = 0;
  hr::Rng r3(5);
  CHECK_THROWS_AS(hr::generate(model, prompt, 15, {}, r3,
                               [&](hr::Index) {
                                 if (++calls == 4) throw std::runtime_error("stop");
                               }),
                  std::runtime_error);
  CHECK(calls == 4);
}

TEST_CASE("sample streams: the output equals the in-process generation, and text arrives before the end") {
  const TempDir tmp("sample_flags_stream");
  const fs::path& dir = tmp.path();
  const fs::path text = tmp.write("t.txt", kText);
  const hr::CharDataset chars(text, {.seq_len = 8});
  hr::Rng init(2);
  hr::TransformerLM<float> model(tiny_model_config(chars.vocab_size(), 8), init);
  save_model_dir(dir, model, {.task = "", .text = text.string(), .seq_len = 8, .vocab = 0}, chars);

  // What generate makes for seed 4's draws (the draw stream of `sample`), decoded.
  const std::string prompt = "the cat";
  const hr::IndexArray ids = chars.encode(prompt);
  hr::Rng draws(hr::stream_seed(4, 0));
  const std::vector<hr::Index> out = hr::generate(model, std::vector<hr::Index>(ids.begin(), ids.end()), 40,
                                                  {.temperature = 0.9, .top_p = 0.8}, draws);
  const CliResult r = run_headroom(fmt::format("sample --model {} --prompt '{}' --tokens 40 --temperature 0.9 "
                                               "--top-p 0.8 --seed 4",
                                               dir.string(), prompt));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output == prompt + chars.vocab().decode(out, "t") + (chars.vocab().decode(out, "t").back() == '\n' ? "" : "\n"));

  // A toy-task model: the model line is the tokens as render_task_tokens writes them.
  const auto task = hr::make_task("copy", {.vocab = 8, .seq_len = 6});
  const TempDir task_dir("sample_flags_stream_task");
  hr::Rng init2(3);
  hr::TransformerLM<float> task_model(tiny_model_config(8, 6), init2);
  save_model_dir(task_dir.path(), task_model, {.task = "copy", .text = "", .seq_len = 6, .vocab = 8}, *task);
  hr::Rng task_draws(hr::stream_seed(2, 0));
  const std::vector<hr::Index> answer = hr::generate(task_model, std::vector<hr::Index>{3, 4, 5, 1}, 9, {}, task_draws);
  const CliResult t = run_headroom(fmt::format("sample --model {} --prompt '3 4 5 |' --tokens 9 --seed 2",
                                               task_dir.path().string()));
  INFO(t.output);
  CHECK(t.status == 0);
  CHECK(t.output.find("\nprompt    3 4 5 |\nmodel     " + hr::render_task_tokens(answer) + "\n") != std::string::npos);

  // Streaming: killed part-way through (SIGKILL, so nothing is flushed at exit), a
  // run has already printed the characters it made. 100000 characters take the tiny
  // model several seconds (more under the sanitizers), far more than the 2 s it gets;
  // printed at the end, nothing would come out at all.
  const CliResult killed = run_program(
      "timeout -s KILL 2 " + std::string(HEADROOM_BIN), fmt::format("sample --model {} --tokens 100000", dir.string()));
  INFO("after 2 s: " << killed.output.size() << " bytes");
  CHECK(killed.status != 0);  // killed, not finished
  CHECK(killed.output.size() > 10);
  CHECK(killed.output.size() < 100000);
}

TEST_CASE("sample refuses a sampling knob next to greedy decoding, a bad --top-p and too many tokens") {
  const TempDir tmp("sample_flags_refused");
  const auto task = hr::make_task("copy", {.vocab = 8, .seq_len = 6});
  hr::Rng init(0);
  hr::TransformerLM<float> model(tiny_model_config(8, 6), init);
  save_model_dir(tmp.path(), model, {.task = "copy", .text = "", .seq_len = 6, .vocab = 8}, *task);
  const std::string m = "sample --model " + tmp.path().string() + " ";
  const std::string ignored = "always takes the most likely token, so it would be ignored";
  check_refused(m + "--greedy --temperature 0.7", "--temperature 0.7: --greedy " + ignored);
  check_refused(m + "--greedy --temperature 1", "--temperature 1: --greedy " + ignored);
  check_refused(m + "--greedy --top-k 3", "--top-k 3: --greedy " + ignored);
  check_refused(m + "--greedy --top-p 0.9", "--top-p 0.9: --greedy " + ignored);
  check_refused(m + "--temperature 0 --top-k 3", "--top-k 3: --temperature 0 " + ignored);
  check_refused(m + "--temperature 0 --top-p 0.5", "--top-p 0.5: --temperature 0 " + ignored);
  check_refused(m + "--top-p 0", "--top-p: must be a number in (0, 1], got 0");
  check_refused(m + "--top-p 1.01", "--top-p: must be a number in (0, 1], got 1.01");
  check_refused(m + "--top-p nan", "--top-p: must be a number in (0, 1], got nan");
  check_refused(m + "--tokens 100001", "--tokens: at most 100000 (past max_len each token runs the whole model once), got 100001");
  check_refused(m + "--tokens 99999999999999", "--tokens: at most 100000");
  check_refused(m + "--count 10001", "--count: at most 10000, got 10001");
  // Greedy draws nothing: a seed is only for a task model's validation examples.
  check_refused(m + "--greedy --prompt '3 4 |' --seed 5",
                "--seed 5: --greedy draws nothing, and with --prompt there are no validation examples to pick");
  check_refused(m + "--temperature 0 --prompt '3 4 |' --seed 5", "--seed 5: --temperature 0 draws nothing");

  // What composes still runs: top-k with a temperature, top-p with top-k, greedy alone.
  for (const std::string args : {"--top-k 1 --temperature 5", "--top-k 3 --top-p 0.5 --temperature 0.5", "--greedy",
                                 "--temperature 0", "--top-p 1", "--greedy --seed 3"}) {
    const CliResult r = run_headroom(m + args + " --count 2");
    INFO(args << "\n" << r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("validation examples answered correctly") != std::string::npos);
  }
  const CliResult help = run_headroom("sample --help");
  CHECK(help.output.find("--top-p") != std::string::npos);
  CHECK(help.output.find("at most 100000") != std::string::npos);
}

TEST_CASE("train and ablate refuse --task or --vocab next to --text, from the flags, a config file or a sweep") {
  const TempDir tmp("sample_flags_text_task");
  const fs::path text = tmp.write("t.txt", kText);
  const std::string t = text.string();
  check_refused("train --text " + t + " --task sort", "--task sort: a --text run has no task (--text " + t + ")");
  check_refused("train --text " + t + " --vocab 50", "--vocab 50: a --text run takes its vocabulary from the text");
  check_refused("ablate --out " + (tmp / "sweep").string() + " --text " + t + " --task reverse",
                "--task reverse: a --text run has no task");
  check_refused("ablate --out " + (tmp / "sweep").string() + " --text " + t + " --vocab 9",
                "--vocab 9: a --text run takes its vocabulary from the text");
  // Sweeping what a text run ignores would train the same run under several names.
  check_refused("ablate --out " + (tmp / "sweep").string() + " --text " + t + " --sweep vocab=8,16",
                "--sweep vocab: the base config trains on the text " + t + ", which has no task");
  check_refused("ablate --out " + (tmp / "sweep").string() + " --text " + t + " --sweep task=copy,sort",
                "--sweep task: the base config trains on the text " + t);
  CHECK_FALSE(fs::exists(tmp / "sweep"));

  const fs::path both = tmp.write("both.json", R"({"data": {"text": ")" + t + R"(", "task": "sort"}})");
  check_refused("train --config " + both.string(),
                both.string() + ": 'data.task' sort next to 'data.text' " + t + ": a text run has no task");
  const fs::path vocab = tmp.write("vocab.json", R"({"data": {"text": ")" + t + R"(", "vocab": 40}})");
  check_refused("train --config " + vocab.string(),
                vocab.string() + ": 'data.vocab' 40 next to 'data.text' " + t +
                    ": a text run takes its vocabulary from the text");
  const fs::path text_only = tmp.write("text.json", R"({"data": {"text": ")" + t + R"("}})");
  check_refused("train --config " + text_only.string() + " --vocab 20",
                "--vocab 20: " + text_only.string() + " sets 'data.text' " + t +
                    ", and a text run takes its vocabulary from the text");

  // Flags that pick the data override the file's pick, and config.json says what was trained.
  const std::string tiny = " -q --d-model 8 --heads 1 --layers 1 --steps 2 --warmup 1 --batch 2 --seq-len 6 ";
  const fs::path sort = tmp.write("sort.json", R"({"data": {"task": "sort", "vocab": 12}})");
  const CliResult to_text = run_headroom("train --config " + sort.string() + " --text " + t + tiny + "--out " +
                                         (tmp / "to_text").string());
  INFO(to_text.output);
  REQUIRE(to_text.status == 0);
  const nlohmann::json a = nlohmann::json::parse(read_file(tmp / "to_text" / "config.json"));
  CHECK(a["data"]["text"] == t);
  CHECK(a["data"]["task"] == "copy");  // the defaults, which say nothing for a text run
  CHECK(a["data"]["vocab"] == 16);
  // ... and a text run's own config.json is read back as it is.
  const CliResult again = run_headroom("train --config " + (tmp / "to_text" / "config.json").string() + tiny +
                                       "--out " + (tmp / "again").string());
  INFO(again.output);
  CHECK(again.status == 0);
  const CliResult to_task = run_headroom("train --config " + (tmp / "to_text" / "config.json").string() +
                                         " --task reverse" + tiny + "--out " + (tmp / "to_task").string());
  INFO(to_task.output);
  REQUIRE(to_task.status == 0);
  const nlohmann::json b = nlohmann::json::parse(read_file(tmp / "to_task" / "config.json"));
  CHECK(b["data"]["text"] == "");
  CHECK(b["data"]["task"] == "reverse");
}

TEST_CASE("train and ablate refuse an optimizer or schedule flag that no run reads") {
  check_refused("train --momentum 0.5", "--momentum 0.5: only --optimizer sgd has momentum, so it would be ignored");
  check_refused("train --optimizer adam --momentum 0.5", "--momentum 0.5: only --optimizer sgd has momentum");
  check_refused("train --min-lr 0.001 --schedule constant", "--min-lr 0.001: only --schedule cosine decays to a floor");
  check_refused("train --min-lr 0.001 --schedule inverse_sqrt", "--min-lr 0.001: only --schedule cosine");
  check_refused("train --warmup 10 --schedule constant", "--warmup 10: --schedule constant has no warm-up");
  check_refused("train --optimizer sgd --beta1 0.8", "--beta1 0.8: --optimizer sgd has no Adam moments");
  check_refused("train --optimizer sgd --beta2 0.99", "--beta2 0.99: --optimizer sgd has no Adam moments");
  check_refused("train --optimizer adam --decay-embeddings",
                "--decay-embeddings: only --optimizer adamw leaves the embeddings out of its decay, so it would be "
                "ignored; leave it out");
  check_refused("train --beta2 1", "beta2 must be in [0, 1), got 1");
  check_refused("train --beta1 -0.1", "--beta1");
  const TempDir tmp("sample_flags_optim");
  check_refused("ablate --out " + (tmp / "sweep").string() + " --momentum 0.5", "--momentum 0.5: only --optimizer sgd");
  CHECK_FALSE(fs::exists(tmp / "sweep"));
  // Read by some run of the grid, or 0 (off): accepted.
  const std::string tiny = " -q --d-model 8 --heads 1 --layers 1 --steps 2 --batch 2 --seq-len 6 --eval-every 1 "
                           "--eval-batches 1 ";
  for (const std::string args :
       {"train --optimizer sgd --momentum 0.5 --warmup 1", "train --schedule constant --warmup 0 --min-lr 0",
        "train --schedule inverse_sqrt --warmup 1"}) {
    const CliResult r = run_headroom(args + tiny);
    INFO(args << "\n" << r.output);
    CHECK(r.status == 0);
  }
  const CliResult grid = run_headroom("ablate --out " + (tmp / "grid").string() +
                                      " --momentum 0.5 --sweep optimizer=adamw,sgd --seeds 1 --warmup 1" + tiny);
  INFO(grid.output);
  CHECK(grid.status == 0);
}

TEST_CASE("eval refuses flags its data would ignore") {
  const TempDir tmp("sample_flags_eval_refused");
  const fs::path text = tmp.write("t.txt", kText);
  const hr::CharDataset chars(text, {.seq_len = 8});
  hr::Rng init(2);
  hr::TransformerLM<float> model(tiny_model_config(chars.vocab_size(), 8), init);
  save_model_dir(tmp.path(), model, {.task = "", .text = text.string(), .seq_len = 8, .vocab = 0}, chars);
  const std::string m = "eval --model " + tmp.path().string() + " ";
  check_refused(m + "--text " + text.string() + " --seed 3",
                "--seed 3: --text reads the whole file in order, so it would be ignored");
  const std::string rows = "--tokens 1,2,3 3,2,1 ";
  check_refused(m + rows + "--seed 3", "--seed 3: --tokens gives the rows to evaluate, so it would be ignored");
  check_refused(m + rows + "--batches 2", "--batches 2: --tokens gives the rows to evaluate");
  check_refused(m + rows + "--batch 2", "--batch 2: --tokens gives the rows to evaluate");
  check_refused(m + rows + "--text " + text.string(), "--text " + text.string() + ": --tokens gives the rows");
  check_refused(m + "--tokens 1,2,3 1,2", "--tokens '1,2': every row needs the same length T+1");
  check_refused(m + "--tokens 1", "--tokens '1': every row needs the same length T+1, from 2 to the model's max_len "
                                  "+ 1 = 9");
  check_refused(m + "--tokens 1,2,3,4,5,6,7,8,9,10", "max_len + 1 = 9; it has 10 ids");
  check_refused(m + "--tokens 1,x", "--tokens '1,x': 'x' is not a token id in [0, ");
  check_refused(m + "--tokens 1,,2", "--tokens '1,,2': '' is not a token id");
  check_refused(m + fmt::format("--tokens 1,{}", chars.vocab_size()),
                fmt::format("'{}' is not a token id in [0, {})", chars.vocab_size(), chars.vocab_size()));
}

TEST_CASE("eval --tokens prints the rows' mean next-token loss, which load_checkpoint.py --expect accepts") {
  const TempDir tmp("sample_flags_expect");
  const fs::path dir = tmp / "run";
  const CliResult trained = run_headroom("train -q --task copy --vocab 8 --seq-len 6 --d-model 16 --heads 2 "
                                         "--layers 1 --steps 30 --warmup 5 --batch 8 --out " + dir.string());
  INFO(trained.output);
  REQUIRE(trained.status == 0);
  const std::string rows = "3,1,4,1,5,2,6 2,6,5,3,5,7,1";

  // The number, against the model's own loss on the same rows in-process.
  const CliResult eval = run_headroom("eval --model " + dir.string() + " --tokens " + rows);
  INFO(eval.output);
  REQUIRE(eval.status == 0);
  const std::size_t at = eval.output.find("\nloss        ");
  REQUIRE(at != std::string::npos);
  const std::string printed = eval.output.substr(at + 13, eval.output.find('\n', at + 1) - at - 13);
  CHECK(eval.output.find("targets     12\n") != std::string::npos);
  CHECK(printed.size() >= 9);  // 9 significant digits
  const hr::LoadedModel<float> loaded = hr::load_model<float>(dir / "model.safetensors");
  const hr::IndexArray tokens = {{3, 1, 4, 1, 5, 2, 6}, {2, 6, 5, 3, 5, 7, 1}};
  hr::NoGrad no_grad;
  const double own = loaded.model->loss(tokens).item();
  CHECK(std::stod(printed) == doctest::Approx(own).epsilon(1e-6));
  const nlohmann::json j = nlohmann::json::parse(
      run_headroom("eval --json --model " + dir.string() + " --tokens " + rows).output);
  CHECK(j["split"] == "tokens");
  CHECK(j["loss"].get<double>() == doctest::Approx(own).epsilon(1e-6));

  const CliResult help = run_headroom("eval --help");
  CHECK(help.output.find("--tokens") != std::string::npos);
  CHECK(help.output.find("examples/load_checkpoint.py --expect") != std::string::npos);

  // The pair as docs/library.md shows it.
  constexpr const char* kPython = "/usr/bin/python3";
  if (!prerequisite(fs::exists(kPython), fmt::format("{} is not installed", kPython))) return;
  const std::string script = std::string(HEADROOM_SOURCE_DIR) + "/examples/load_checkpoint.py";
  const std::string file = (dir / "model.safetensors").string();
  const std::string python_rows = "--tokens 3,1,4,1,5,2,6 2,6,5,3,5,7,1";
  const CliResult ok = run_program(kPython, fmt::format("{} {} {} --expect {}", script, file, python_rows, printed));
  if (!prerequisite(ok.output.find("No module named 'torch'") == std::string::npos,
                    fmt::format("{} cannot import torch (Debian: apt-get install python3-torch)", kPython)))
    return;
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK(ok.output.find(fmt::format("expected {}", printed)) != std::string::npos);
  CHECK(ok.output.find(": match") != std::string::npos);
  // And the check has teeth: the number a little off is a mismatch.
  const CliResult off =
      run_program(kPython, fmt::format("{} {} {} --expect {:.9g}", script, file, python_rows, std::stod(printed) * 1.001));
  CHECK(off.status == 1);
  CHECK(off.output.find("MISMATCH") != std::string::npos);
}
