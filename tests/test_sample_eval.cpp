// `headroom sample` and `headroom eval` on trained models: the model directory and
// its data metadata, the sampler, generation, eval reproducing the trainer's
// validation numbers, text models read with their own vocabulary, and one-line
// errors. Models are tiny: built and saved in-process, or trained by `headroom
// train` for 150 steps in one test.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/parallel.hpp"
#include "nn/generate.hpp"
#include "train/run_dir.hpp"
#include "train/trainer.hpp"
#include "cli_runner.hpp"
#include "support.hpp"
#include "tiny_model.hpp"
#include "data/char_dataset.hpp"
#include "data/task.hpp"
#include "data/utf8.hpp"
#include "nn/checkpoint.hpp"

namespace fs = std::filesystem;
namespace hr = headroom;

namespace {

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

// DIR/model.safetensors for `model`, trained (or not) on `dataset` made from `data`.
void save_model_dir(const fs::path& dir, const hr::TransformerLM<float>& model, const hr::DataConfig& data,
                    const hr::Dataset& dataset) {
  hr::save_checkpoint(dir / "model.safetensors", model, model.config(),
                      {{hr::kDataMetadataKey, hr::data_metadata(data, dataset)}});
}

// A text a char model can read: the alphabet has a newline, a quote, é and €.
const std::string kText =
    "the cat sat on the mat.\n\"a caf\u00e9 costs 3\u20ac,\" said the cat.\nthe dog sat on the cat's mat.\n"
    "the cat ran to the caf\u00e9 and the dog sat.\n";

nlohmann::json json_of(const CliResult& r) {
  INFO(r.output);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.output);
}

std::string quoted(const fs::path& p) { return fmt::format("'{}'", p.string()); }

}  // namespace

TEST_CASE("CharVocab encodes and decodes with a given alphabet and names the vocabulary in errors") {
  const hr::CharVocab vocab(U"\n ab\u00e9", "the model m.safetensors");
  CHECK(vocab.size() == 5);
  CHECK(vocab.encode(std::string_view("ab \u00e9\n"), "t") == hr::IndexArray{2, 3, 1, 4, 0});
  CHECK(vocab.decode(hr::IndexArray{4, 1, 2}, "t") == "\u00e9 a");
  CHECK(vocab.find(U'b') == hr::Index{3});
  CHECK_FALSE(vocab.find(U'c').has_value());
  CHECK(error_of([&] { (void)vocab.encode(std::string_view("abc"), "--prompt"); }) ==
        "--prompt: character U+0063 'c' at position 2 is not in the vocabulary of the model m.safetensors");
  CHECK(error_of([&] { (void)vocab.decode(hr::IndexArray{5}, "sample"); }) ==
        "sample: id 5 is out of range for vocab 5 of the model m.safetensors");
  CHECK(error_of([] { hr::CharVocab(U"ba", "x"); }) ==
        "CharVocab of x: the alphabet is not sorted without repeats: U+0061 'a' at position 1 follows U+0062 'b'");
  CHECK(error_of([] { hr::CharVocab(U"aa", "x"); }).find("not sorted without repeats") != std::string::npos);
  CHECK(error_of([] { hr::CharVocab(U"", "x"); }) == "CharVocab of x: the alphabet is empty");
}

TEST_CASE("data metadata round-trips for a task and for a text with non-ASCII characters") {
  const TempDir tmp("sample_eval_metadata");
  const fs::path& dir = tmp.path();
  const auto task = hr::make_task("copy", {.vocab = 9, .seq_len = 6});
  const hr::DataDescription t =
      hr::parse_data_metadata(hr::data_metadata({.task = "copy", .text = "", .seq_len = 6, .vocab = 9}, *task), "m");
  CHECK(t.task == "copy");
  CHECK(t.text.empty());
  CHECK(t.seq_len == 6);
  CHECK(t.vocab == 9);
  CHECK(t.alphabet.empty());
  CHECK_FALSE(t.is_text());
  CHECK(t.task_options() == hr::TaskOptions{.vocab = 9, .seq_len = 6});

  // lags's options travel with the model, so eval rebuilds the same hidden tables.
  const hr::DataConfig lags_config{.task = "lags", .text = "", .seq_len = 9, .vocab = 8, .lags = {3, 1}, .context = 4,
                                   .lag_beta = 0.5, .task_seed = 11};
  const auto lags = hr::make_task("lags", hr::task_options(lags_config));
  const hr::DataDescription l = hr::parse_data_metadata(hr::data_metadata(lags_config, *lags), "m");
  CHECK(l.task_options() == hr::task_options(lags_config));

  write_file(dir / "t.txt", kText);
  const hr::CharDataset chars(dir / "t.txt", {.seq_len = 8});
  // The task field of the config is ignored for a text model (it has a default).
  const std::string json =
      hr::data_metadata({.task = "copy", .text = (dir / "t.txt").string(), .seq_len = 8, .vocab = 16}, chars);
  const hr::DataDescription d = hr::parse_data_metadata(json, "m");
  CHECK(d.is_text());
  CHECK(d.task.empty());
  CHECK(d.text == (dir / "t.txt").string());
  CHECK(d.seq_len == 8);
  CHECK(d.vocab == chars.vocab_size());
  CHECK(d.alphabet == chars.alphabet());
  CHECK(hr::char_vocab(d, "m").decode(chars.encode(kText), "t") == kText);
}

TEST_CASE("parse_data_metadata rejects a malformed description, naming the source and the key") {
  struct Bad {
    const char* json;
    const char* says;
  };
  const Bad cases[] = {
      {"{", "m.safetensors: metadata 'data' is not valid JSON"},
      {"[1]", "m.safetensors: metadata 'data' must be a JSON object, got [1]"},
      {R"({"task":"copy","text":"","seq_len":8,"vocab":8,"extra":1})",
       "m.safetensors: metadata 'data': unknown key 'extra' (keys: task, text, val_text, corpus, labelled, seq_len, "
       "vocab, alphabet, labels, lags, context, lag_beta, task_seed)"},
      {R"({"task":"copy","text":"","seq_len":8,"vocab":8,"lags":[1]})",
       "m.safetensors: metadata 'data': key 'lags' is for tasks lags and lags_argmax only (task 'copy')"},
      {R"({"task":"lags","text":"","seq_len":9,"vocab":8,"lags":[1],"context":8,"lag_beta":1})",
       "m.safetensors: metadata 'data': key 'task_seed' is missing (task 'lags' reads it)"},
      {R"({"task":"lags","text":"","seq_len":9,"vocab":8,"lags":1,"context":8,"lag_beta":1,"task_seed":0})",
       "m.safetensors: metadata 'data': key 'lags' must be an array of whole numbers, got 1"},
      {R"({"task":"copy","text":"","seq_len":8})", "m.safetensors: metadata 'data': key 'vocab' is missing"},
      {R"({"task":"copy","text":"","seq_len":0,"vocab":8})",
       "m.safetensors: metadata 'data': key 'seq_len' must be a positive integer, got 0"},
      {R"({"task":"copy","text":"","seq_len":8,"vocab":-2})",
       "m.safetensors: metadata 'data': key 'vocab' must be a positive integer, got -2"},
      {R"({"task":3,"text":"","seq_len":8,"vocab":8})",
       "m.safetensors: metadata 'data': key 'task' must be a string, got 3"},
      {R"({"task":"copy","text":"a.txt","seq_len":8,"vocab":2,"alphabet":"ab"})",
       "m.safetensors: metadata 'data': exactly one of keys 'task', 'text', 'corpus' and 'labelled' must be set, got "
       "task 'copy', text 'a.txt', corpus '' and labelled ''"},
      {R"({"task":"","text":"","corpus":"kjv","labelled":"a.tsv","seq_len":8,"vocab":2,"alphabet":"ab"})",
       "exactly one of keys 'task', 'text', 'corpus' and 'labelled' must be set"},
      {R"({"task":"","text":"","corpus":"","seq_len":8,"vocab":2,"alphabet":"ab"})",
       "m.safetensors: metadata 'data': key 'corpus' is empty (leave it out)"},
      {R"({"task":"","text":"","corpus":"kjv","val_text":"v.txt","seq_len":8,"vocab":2,"alphabet":"ab"})",
       "m.safetensors: metadata 'data': key 'val_text' goes with key 'text'"},
      {R"({"task":"","text":"","labelled":"a.tsv","seq_len":8,"vocab":2,"alphabet":"ab"})",
       "m.safetensors: metadata 'data': key 'labels' is missing (a classifier needs it)"},
      {R"({"task":"","text":"","labelled":"a.tsv","seq_len":8,"vocab":6,"alphabet":"ab","labels":["y","x"]})",
       "m.safetensors: metadata 'data': key 'labels' must be sorted without repeats, got [\"y\",\"x\"]"},
      {R"({"task":"","text":"","labelled":"a.tsv","seq_len":8,"vocab":6,"alphabet":"ab","labels":["x"]})",
       "m.safetensors: metadata 'data': key 'labels' must be an array of two or more names, got [\"x\"]"},
      {R"({"task":"","text":"","labelled":"a.tsv","seq_len":8,"vocab":5,"alphabet":"ab","labels":["x","y"]})",
       "m.safetensors: metadata 'data': key 'alphabet' has 2 characters and 'labels' 2 names, for vocab 6, but key "
       "'vocab' is 5"},
      {R"({"task":"","text":"a.txt","seq_len":8,"vocab":6,"alphabet":"ab","labels":["x","y"]})",
       "m.safetensors: metadata 'data': key 'labels' is for classifiers only (text 'a.txt')"},
      {R"({"task":"copy","text":"","seq_len":8,"vocab":8,"labels":["x","y"]})",
       "m.safetensors: metadata 'data': key 'labels' is for text models only (task 'copy')"},
      {R"({"task":"copy","text":"","seq_len":8,"vocab":2,"alphabet":"ab"})",
       "m.safetensors: metadata 'data': key 'alphabet' is for text models only (task 'copy')"},
      {R"({"task":"","text":"a.txt","seq_len":8,"vocab":2})",
       "m.safetensors: metadata 'data': key 'alphabet' is missing (a text model needs it)"},
      {R"({"task":"","text":"a.txt","seq_len":8,"vocab":3,"alphabet":"ab"})",
       "m.safetensors: metadata 'data': key 'alphabet' has 2 characters but key 'vocab' is 3"},
      {R"({"task":"","text":"a.txt","seq_len":8,"vocab":2,"alphabet":"ba"})", "the alphabet is not sorted"},
  };
  for (const Bad& bad : cases) {
    INFO(bad.json);
    const std::string message = error_of([&] { (void)hr::parse_data_metadata(bad.json, "m.safetensors"); });
    CHECK_MESSAGE(message.find(bad.says) != std::string::npos, message);
  }
  const std::string missing = error_of([] { (void)hr::data_description({{"config", "{}"}}, "m.safetensors"); });
  CHECK(missing.find("m.safetensors: no 'data' metadata") != std::string::npos);
}

TEST_CASE("resolve_model_file: the final model, else the newest checkpoint, a file as itself, else an error") {
  const TempDir tmp("sample_eval_resolve");
  const fs::path& dir = tmp.path();
  for (const char* step : {"step-00000100", "step-00000900", "step-00000050", "step-00001000.tmp", "step-abc"}) {
    fs::create_directories(dir / "checkpoints" / step);
    write_file(dir / "checkpoints" / step / "model.safetensors", "");
  }
  fs::create_directories(dir / "checkpoints" / "step-00002000");  // incomplete: no model file
  CHECK(hr::resolve_model_file(dir) == dir / "checkpoints" / "step-00000900" / "model.safetensors");
  write_file(dir / "model.safetensors", "");
  CHECK(hr::resolve_model_file(dir) == dir / "model.safetensors");
  CHECK(hr::resolve_model_file(dir / "checkpoints/step-00000100/model.safetensors") ==
        dir / "checkpoints/step-00000100/model.safetensors");

  CHECK(error_of([&] { (void)hr::resolve_model_file(dir / "nope"); }) ==
        "model " + quoted(dir / "nope") +
            ": no such file or directory (expected a run directory written by headroom train --out, or a "
            ".safetensors file)");
  CHECK(error_of([&] { (void)hr::resolve_model_file(dir / "checkpoints/step-00002000"); }) ==
        "model directory " + quoted(dir / "checkpoints/step-00002000") +
            " has neither model.safetensors nor checkpoints/step-*/model.safetensors");
  write_file(dir / "notes.txt", "hello");
  CHECK(error_of([&] { (void)hr::resolve_model_file(dir / "notes.txt"); }) ==
        "model " + quoted(dir / "notes.txt") + " is neither a run directory nor a .safetensors file");
}

TEST_CASE("run_config_of finds config.json beside a model or above its checkpoint") {
  const TempDir tmp("sample_eval_run_config");
  const fs::path& dir = tmp.path();
  hr::TrainConfig c;
  c.model.vocab = 8;  // as finalize leaves it
  c.model.max_len = 16;
  c.optim.seed = 42;
  c.optim.eval_batches = 3;
  write_file(dir / "config.json", hr::to_json(c).dump());
  fs::create_directories(dir / "checkpoints/step-00000010");
  const auto beside = hr::run_config_of(dir / "model.safetensors");
  REQUIRE(beside.has_value());
  CHECK(beside->optim.seed == 42);
  const auto above = hr::run_config_of(dir / "checkpoints/step-00000010/model.safetensors");
  REQUIRE(above.has_value());
  CHECK(above->optim.eval_batches == 3);
  CHECK_FALSE(hr::run_config_of(dir / "checkpoints/model.safetensors").has_value());
  write_file(dir / "config.json", "{\"train\": {\"seed\": \"x\"}}");
  CHECK(error_of([&] { (void)hr::run_config_of(dir / "model.safetensors"); }).find("'train.seed' must be") !=
        std::string::npos);
}

TEST_CASE("sample_token: greedy is the first argmax, top-k 1 is greedy, and draws follow softmax(z / T)") {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f, 1.0f};  // ids 1 and 3 tie for the max
  hr::Rng rng(7);
  CHECK(hr::sample_token(logits, {.greedy = true}, rng) == 1);
  CHECK(hr::sample_token(logits, {.temperature = 0.0}, rng) == 1);
  for (int i = 0; i < 50; ++i) CHECK(hr::sample_token(logits, {.temperature = 3.0, .top_k = 1}, rng) == 1);

  // Frequencies over many draws against the softmax, for all ids and for the top 3.
  for (const std::size_t k : {std::size_t{0}, std::size_t{3}}) {
    const double temperature = 1.5;
    std::vector<double> expected(logits.size(), 0.0);
    double total = 0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      // The top 3 are ids 1, 3 (tied at 2.0) and 4 (1.0).
      if (k == 3 && (i == 0 || i == 2)) continue;
      expected[i] = std::exp(logits[i] / temperature);
      total += expected[i];
    }
    constexpr int kDraws = 40000;
    std::vector<int> seen(logits.size(), 0);
    for (int n = 0; n < kDraws; ++n) {
      const hr::Index id = hr::sample_token(logits, {.temperature = temperature, .top_k = k}, rng);
      ++seen[static_cast<std::size_t>(id)];
    }
    for (std::size_t i = 0; i < logits.size(); ++i) {
      INFO("top_k " << k << ", id " << i << ": seen " << seen[i] << " of " << kDraws << ", expected p "
                    << expected[i] / total);
      // 5 standard deviations of a binomial proportion at most 0.0025 wide.
      CHECK(std::abs(seen[i] / double(kDraws) - expected[i] / total) < 0.0125);
      if (expected[i] == 0) CHECK(seen[i] == 0);
    }
  }

  // The same generator state gives the same draws.
  hr::Rng a(3), b(3);
  for (int i = 0; i < 20; ++i) CHECK(hr::sample_token(logits, {}, a) == hr::sample_token(logits, {}, b));

  const std::vector<float> nan{0.0f, NAN};
  CHECK(error_of([&] { (void)hr::sample_token(nan, {}, rng); }) == "sample: the model's logit for token 1 is nan");
  CHECK(error_of([] { hr::check_sampling_options({.temperature = -1}, 5); }) ==
        "sample: temperature must be a finite number >= 0, got -1");
  CHECK(error_of([] { hr::check_sampling_options({.top_k = 6}, 5); }) ==
        "sample: top_k 6 is larger than the vocabulary (5)");
}

TEST_CASE("generate crops its context to max_len, is deterministic, and leaves the model's mode alone") {
  hr::Rng init(1);
  hr::TransformerLM<float> model(tiny_model_config(7, 6), init);
  model.train();
  const std::vector<hr::Index> prompt{3, 4, 5, 6, 3, 4, 5, 6, 3};  // longer than max_len 6
  hr::Rng r1(5), r2(5);
  const std::vector<hr::Index> a = hr::generate(model, prompt, 12, {}, r1);
  const std::vector<hr::Index> b = hr::generate(model, prompt, 12, {}, r2);
  CHECK(a.size() == 12);
  CHECK(a == b);
  for (const hr::Index id : a) CHECK((id >= 0 && id < 7));
  CHECK(model.is_training());

  // Greedy continuation of a cropped prompt is the continuation of its last max_len tokens.
  hr::Rng unused(0);
  const std::vector<hr::Index> tail(prompt.end() - 6, prompt.end());
  CHECK(hr::generate(model, prompt, 1, {.greedy = true}, unused) ==
        hr::generate(model, tail, 1, {.greedy = true}, unused));

  CHECK(error_of([&] { (void)hr::generate(model, std::vector<hr::Index>{}, 1, {}, unused); }) ==
        "generate: the prompt is empty (it needs at least one token)");
  CHECK(error_of([&] { (void)hr::generate(model, std::vector<hr::Index>{7}, 1, {}, unused); }) ==
        "generate: prompt token 7 is outside the vocabulary [0, 7)");
}

TEST_CASE("headroom train then eval and sample: eval reproduces the final and a checkpoint's val numbers") {
  const TempDir tmp("sample_eval_trained_copy");
  const fs::path& dir = tmp.path();
  const CliResult train = run_headroom(
      "train --task copy --seq-len 8 --vocab 8 --d-model 32 --heads 2 --steps 150 --warmup 20 --eval-every 50 "
      "--eval-batches 4 --save-every 100 -q --out " + dir.string());
  INFO(train.output);
  REQUIRE(train.status == 0);
  REQUIRE(fs::exists(dir / "model.safetensors"));

  // metrics.csv rows: step,train_loss,val_loss,val_accuracy,...
  std::map<std::size_t, std::pair<double, double>> val;  // step -> (loss, accuracy)
  std::istringstream rows(read_file(dir / "metrics.csv"));
  std::string row;
  std::getline(rows, row);
  while (std::getline(rows, row)) {
    std::size_t step = 0;
    double train_loss = 0, loss = 0, accuracy = 0;
    char comma = 0;
    std::istringstream(row) >> step >> comma >> train_loss >> comma >> loss >> comma >> accuracy;
    val[step] = {loss, accuracy};
  }
  REQUIRE(val.count(150) == 1);
  REQUIRE(val.count(100) == 1);

  const nlohmann::json final_eval = json_of(run_headroom("eval --json --model " + dir.string()));
  CHECK(final_eval["model"] == (dir / "model.safetensors").string());
  CHECK(final_eval["batches"] == 4);  // the run's eval_batches, from its config.json
  CHECK(final_eval["targets"] == 4 * 32 * 4);  // 4 batches of 32 rows, 4 counted targets each
  CHECK(std::abs(final_eval["loss"].get<double>() - val[150].first) < 1e-6);  // metrics.csv has 6 decimals
  CHECK(std::abs(final_eval["accuracy"].get<double>() - val[150].second) < 1e-6);
  // The summary line prints the same numbers to 4 decimals.
  CHECK(train.output.find(fmt::format("val loss {:.4f}, val accuracy {:.2f}%", final_eval["loss"].get<double>(),
                                      100 * final_eval["accuracy"].get<double>())) != std::string::npos);

  const fs::path step100 = dir / "checkpoints/step-00000100/model.safetensors";
  REQUIRE(fs::exists(step100));
  const nlohmann::json at100 = json_of(run_headroom("eval --json --model " + step100.string()));
  CHECK(std::abs(at100["loss"].get<double>() - val[100].first) < 1e-6);
  CHECK(std::abs(at100["accuracy"].get<double>() - val[100].second) < 1e-6);

  // The table form says the same.
  const CliResult table = run_headroom("eval --model " + dir.string());
  INFO(table.output);
  CHECK(table.status == 0);
  CHECK(table.output.find(fmt::format("loss        {:.4f}\n", final_eval["loss"].get<double>())) != std::string::npos);
  CHECK(table.output.find("data        copy validation split: 4 batches of 32 rows") != std::string::npos);

  // A model at 100% answers validation examples it has not seen, greedily.
  REQUIRE(final_eval["accuracy"] == 1.0);
  const CliResult greedy = run_headroom("sample --greedy --count 20 --seed 3 --model " + dir.string());
  INFO(greedy.output);
  CHECK(greedy.status == 0);
  CHECK(greedy.output.find("20 of 20 validation examples answered correctly") != std::string::npos);
  CHECK(greedy.output.find("(MISMATCH)") == std::string::npos);
  const CliResult copy = run_headroom("sample --greedy --prompt '7 3 6 5 |' --model " + dir.string());
  INFO(copy.output);
  CHECK(copy.status == 0);
  CHECK(copy.output.find("prompt    7 3 6 5 |\nmodel     7 3 6 5\n") != std::string::npos);
}

TEST_CASE("eval on a saved task model equals evaluate() in-process, with the defaults and with flags") {
  hr::set_threads(1);
  const TempDir tmp("sample_eval_task_eval");
  const fs::path& dir = tmp.path();
  const hr::DataConfig data{.task = "reverse", .text = "", .seq_len = 6, .vocab = 9};
  const auto task = hr::make_task(data.task, {.vocab = data.vocab, .seq_len = data.seq_len});
  hr::Rng init(11);
  hr::TransformerLM<float> model(tiny_model_config(9, 6), init);
  save_model_dir(dir, model, data, *task);

  // No config.json: 8 batches of 32 rows, seed 0.
  const hr::EvalResult expected = hr::evaluate(model, *task, 8, 32, hr::validation_seed(0));
  const nlohmann::json j = json_of(run_headroom("eval --json --model " + (dir / "model.safetensors").string()));
  CHECK(j["kind"] == "task");
  CHECK(j["data"] == "reverse");
  CHECK(j["split"] == "val");
  CHECK(j["targets"] == expected.counted);
  CHECK(j["loss"].get<double>() == doctest::Approx(expected.loss).epsilon(1e-9));
  CHECK(j["accuracy"].get<double>() == doctest::Approx(expected.accuracy).epsilon(1e-9));
  CHECK_FALSE(j.contains("perplexity"));
  // reverse's answers are determined: Bayes loss 0, excess loss = loss.
  REQUIRE(expected.bayes_loss.has_value());
  CHECK(j["bayes_loss"].get<double>() == *expected.bayes_loss);
  CHECK(j["bayes_loss"].get<double>() == 0.0);
  CHECK(j["excess_loss"].get<double>() == j["loss"].get<double>());
  const CliResult table = run_headroom("eval --model " + dir.string());
  INFO(table.output);
  CHECK(table.output.find(fmt::format("loss        {0:.4f}\nbayes loss  0.0000\nexcess loss {0:.4f}\naccuracy",
                                      expected.loss)) != std::string::npos);
  // Rows given with --tokens are not drawn from the task: no Bayes loss.
  const nlohmann::json rows = json_of(run_headroom("eval --json --tokens 3,4,5,1,5,4,3 --model " + dir.string()));
  CHECK_FALSE(rows.contains("bayes_loss"));
  CHECK_FALSE(rows.contains("excess_loss"));

  const hr::EvalResult flagged = hr::evaluate(model, *task, 3, 5, hr::validation_seed(7));
  const nlohmann::json k = json_of(run_headroom("eval --json --batches 3 --batch 5 --seed 7 --model " + dir.string()));
  CHECK(k["targets"] == flagged.counted);
  CHECK(k["loss"].get<double>() == doctest::Approx(flagged.loss).epsilon(1e-9));
  CHECK(k["loss"].get<double>() != doctest::Approx(j["loss"].get<double>()).epsilon(1e-9));
}

TEST_CASE("sample is reproducible for a seed, differs across seeds, and greedy = temperature 0 = top-k 1") {
  const TempDir tmp("sample_eval_text_sample");
  const fs::path& dir = tmp.path();
  write_file(dir / "t.txt", kText);
  const hr::CharDataset chars(dir / "t.txt", {.seq_len = 8});
  hr::Rng init(2);
  hr::TransformerLM<float> model(tiny_model_config(chars.vocab_size(), 8), init);
  save_model_dir(dir, model, {.task = "", .text = (dir / "t.txt").string(), .seq_len = 8, .vocab = 0}, chars);
  const std::string m = "sample --model " + dir.string() + " --prompt 'the caf\u00e9' --tokens 30 ";

  const CliResult a = run_headroom(m + "--seed 1");
  const CliResult b = run_headroom(m + "--seed 1");
  const CliResult c = run_headroom(m + "--seed 2");
  INFO(a.output);
  INFO(c.output);
  REQUIRE(a.status == 0);
  CHECK(a.output == b.output);
  CHECK(a.output != c.output);
  // The prompt, then 30 characters of the model's alphabet, then a newline.
  REQUIRE(a.output.rfind("the caf\u00e9", 0) == 0);
  const std::u32string continuation =
      hr::decode_utf8(a.output.substr(std::string("the caf\u00e9").size()), "output");
  REQUIRE(continuation.size() == 31);
  CHECK(continuation.back() == U'\n');
  for (std::size_t i = 0; i < 30; ++i) CHECK(chars.alphabet().find(continuation[i]) != std::u32string::npos);

  const CliResult greedy = run_headroom(m + "--greedy");
  CHECK(greedy.status == 0);
  CHECK(run_headroom(m + "--temperature 0").output == greedy.output);
  CHECK(run_headroom(m + "--top-k 1 --seed 3").output == greedy.output);
  CHECK(run_headroom(m + "--top-k 1 --temperature 5 --seed 4").output == greedy.output);

  // The CLI output is the in-process generation decoded.
  hr::Rng unused(0);
  const hr::IndexArray prompt = chars.encode("the caf\u00e9");
  const std::vector<hr::Index> ids = hr::generate(model, std::vector<hr::Index>(prompt.begin(), prompt.end()), 30,
                                                  {.greedy = true}, unused);
  CHECK(greedy.output == "the caf\u00e9" + chars.vocab().decode(ids, "t") + "\n");

  // --no-cache re-runs the whole context per token: the same characters, sampled
  // and greedy, past max_len 8 too (30 tokens).
  CHECK(run_headroom(m + "--seed 1 --no-cache").output == a.output);
  CHECK(run_headroom(m + "--greedy --no-cache").output == greedy.output);

  // --count prints each sample under a header.
  const CliResult three = run_headroom(m + "--count 3");
  CHECK(three.status == 0);
  CHECK(three.output.find("--- sample 1 of 3 ---\nthe caf\u00e9") == 0);
  CHECK(three.output.find("\n\n--- sample 3 of 3 ---\n") != std::string::npos);
}

TEST_CASE("eval of a text model: its own validation split, any file with --text, and perplexity") {
  hr::set_threads(1);
  const TempDir tmp("sample_eval_text_eval");
  const fs::path& dir = tmp.path();
  write_file(dir / "t.txt", kText);
  const hr::CharDataset chars(dir / "t.txt", {.seq_len = 8});
  hr::Rng init(4);
  hr::TransformerLM<float> model(tiny_model_config(chars.vocab_size(), 8), init);
  save_model_dir(dir, model, {.task = "", .text = (dir / "t.txt").string(), .seq_len = 8, .vocab = 0}, chars);

  const hr::EvalResult own = hr::evaluate(model, chars, 2, 4, hr::validation_seed(0));
  const nlohmann::json j = json_of(run_headroom("eval --json --batches 2 --batch 4 --model " + dir.string()));
  CHECK(j["kind"] == "text");
  CHECK(j["split"] == "val");
  CHECK(j["targets"] == own.counted);
  CHECK(j["loss"].get<double>() == doctest::Approx(own.loss).epsilon(1e-9));
  CHECK(j["perplexity"].get<double>() == doctest::Approx(std::exp(own.loss)).epsilon(1e-9));
  CHECK(j["bits_per_char"].get<double>() == doctest::Approx(own.loss / std::log(2.0)).epsilon(1e-9));
  CHECK_FALSE(j.contains("bayes_loss"));  // a text's distribution is unknown
  CHECK_FALSE(j.contains("excess_loss"));
  const CliResult own_table = run_headroom("eval --batches 2 --batch 4 --model " + dir.string());
  INFO(own_table.output);
  CHECK(own_table.status == 0);
  CHECK(own_table.output.find("bayes") == std::string::npos);
  CHECK(own_table.output.find("excess") == std::string::npos);

  // --text: 21 characters in windows of 9 with stride 8: targets 1-8, 9-16, 17-20.
  const std::string other = "a cat sat on the mat.";
  write_file(dir / "other.txt", other);
  const hr::IndexArray ids = chars.encode(other);
  double loss_sum = 0;
  for (const auto& [start, len] : {std::pair<std::size_t, std::size_t>{0, 8}, {8, 8}, {16, 4}}) {
    hr::IndexArray window = hr::IndexArray::from_shape({1, len + 1});
    std::copy_n(ids.begin() + static_cast<std::ptrdiff_t>(start), len + 1, window.begin());
    hr::NoGrad no_grad;
    model.eval();
    loss_sum += static_cast<double>(model.loss(window).item()) * static_cast<double>(len);
  }
  const nlohmann::json f =
      json_of(run_headroom("eval --json --model " + dir.string() + " --text " + (dir / "other.txt").string()));
  CHECK(f["split"] == "file");
  CHECK(f["targets"] == 20);
  CHECK(f["loss"].get<double>() == doctest::Approx(loss_sum / 20).epsilon(1e-6));
  const CliResult table = run_headroom("eval --model " + dir.string() + " --text " + (dir / "other.txt").string());
  INFO(table.output);
  CHECK(table.output.find("20 of its 21 characters predicted, in windows of 9 characters, 2 batches of up to 32") !=
        std::string::npos);
  CHECK(table.output.find("perplexity  ") != std::string::npos);
  CHECK(table.output.find("bits/char   ") != std::string::npos);
  // --batches caps the windows read: the first batch of one window.
  const nlohmann::json capped = json_of(run_headroom("eval --json --batch 1 --batches 1 --model " + dir.string() +
                                                     " --text " + (dir / "other.txt").string()));
  CHECK(capped["targets"] == 8);

  // A character the model does not know, in --text or in the prompt.
  write_file(dir / "zebra.txt", "the zebra");
  const CliResult zebra = run_headroom("eval --model " + dir.string() + " --text " + (dir / "zebra.txt").string());
  CHECK(zebra.status == 2);
  CHECK(zebra.output == "headroom: error: --text '" + (dir / "zebra.txt").string() +
                            "': character U+007A 'z' at position 4 is not in the vocabulary of the model " +
                            (dir / "model.safetensors").string() + "\n");
  const CliResult prompt = run_headroom("sample --prompt 'the zebra' --model " + dir.string());
  CHECK(prompt.status == 2);
  CHECK(prompt.output == "headroom: error: --prompt: character U+007A 'z' at position 4 is not in the vocabulary "
                         "of the model " + (dir / "model.safetensors").string() + "\n");

  // The training file changed or gone: own-data eval says so; --text still works.
  write_file(dir / "t.txt", kText + "xyz");
  const CliResult changed = run_headroom("eval --model " + dir.string());
  CHECK(changed.status == 2);
  CHECK(changed.output.find("has changed since") != std::string::npos);
  CHECK(count_lines(changed.output) == 1);
  fs::remove(dir / "t.txt");
  const CliResult gone = run_headroom("eval --model " + dir.string());
  CHECK(gone.status == 2);
  CHECK(gone.output.find("which is not there (from this directory); evaluate it on a text file with --text FILE") !=
        std::string::npos);
  CHECK(run_headroom("eval --model " + dir.string() + " --text " + (dir / "other.txt").string()).status == 0);
}

TEST_CASE("sample and eval: user mistakes get one line naming the problem and exit status 2") {
  const TempDir tmp("sample_eval_errors");
  const fs::path& dir = tmp.path();
  const auto task = hr::make_task("copy", {.vocab = 8, .seq_len = 6});
  hr::Rng init(0);
  hr::TransformerLM<float> model(tiny_model_config(8, 6), init);
  save_model_dir(dir, model, {.task = "copy", .text = "", .seq_len = 6, .vocab = 8}, *task);
  fs::create_directories(dir / "empty");
  write_file(dir / "corrupt.safetensors", "not a checkpoint at all");
  hr::save_checkpoint(dir / "bare.safetensors", model, model.config());  // no data metadata
  write_file(dir / "t.txt", kText);
  const std::string m = " --model " + dir.string();

  struct Bad {
    std::string args;
    std::string says;
  };
  const Bad cases[] = {
      {"sample --model " + (dir / "nope").string(), "model " + quoted(dir / "nope") + ": no such file or directory"},
      {"eval --model " + (dir / "empty").string(),
       "model directory " + quoted(dir / "empty") + " has neither model.safetensors nor checkpoints/step-*/"},
      {"eval --model " + (dir / "corrupt.safetensors").string(), (dir / "corrupt.safetensors").string() + ": "},
      {"sample --model " + (dir / "bare.safetensors").string(), "no 'data' metadata"},
      {"sample", "--model is required"},
      {"sample --temperature -1" + m, "--temperature: must be a finite number >= 0, got -1"},
      {"sample --temperature nan" + m, "--temperature: must be a finite number >= 0, got nan"},
      {"sample --top-k 0" + m, "--top-k: must be a whole number from 1 to 10^19 - 1, got 0"},
      {"sample --top-k 9" + m, "--top-k: must be from 1 to the model's vocab 8, got 9"},
      {"sample --tokens 0" + m, "--tokens: must be a whole number from 1 to 10^19 - 1, got 0"},
      {"sample --count -2" + m, "--count: must be a whole number from 1 to 10^19 - 1, got -2"},
      {"sample --prompt '3 8 |'" + m, "--prompt: token 8 is out of range for the model's vocab 8 (ids 0 to 7)"},
      {"sample --prompt '3 x'" + m, "--prompt: 'x' is not a token id"},
      {"eval --batches 0" + m, "--batches: must be a whole number from 1 to 10^19 - 1, got 0"},
      {"eval --batch x" + m, "--batch: must be a whole number from 1 to 10^19 - 1, got x"},
      {"eval --text " + (dir / "t.txt").string() + m, "--text needs a character-level model; " +
                                                          (dir / "model.safetensors").string() +
                                                          " is a toy-task model (copy)"},
  };
  for (const Bad& bad : cases) {
    const CliResult r = run_headroom(bad.args);
    INFO("headroom " << bad.args << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK(count_lines(r.output) == 1);
    CHECK(r.output.find("error: ") != std::string::npos);
    CHECK(r.output.find(bad.says) != std::string::npos);
  }
}

TEST_CASE("a model with a NaN or Inf weight is refused by every command that reads one, naming the first") {
  const TempDir tmp("non_finite_model");
  const auto task = hr::make_task("copy", {.vocab = 8, .seq_len = 6});
  hr::Rng init(0);
  hr::TransformerLM<float> model(tiny_model_config(8, 6), init);
  CHECK(hr::non_finite_values(model).count == 0);
  // Two bad values in the second parameter, one in a later one.
  hr::NamedTensors<float> params = model.named_parameters();
  REQUIRE(params.size() > 3);
  params[1].second.mutable_value().data()[2] = NAN;
  params[1].second.mutable_value().data()[4] = INFINITY;
  params[3].second.mutable_value().data()[0] = -INFINITY;
  const hr::NonFiniteValues bad = hr::non_finite_values(model);
  CHECK(bad.count == 3);
  CHECK(bad.first_name == params[1].first);
  CHECK(bad.first_index == 2);
  CHECK(std::isnan(bad.first_value));

  save_model_dir(tmp.path(), model, {.task = "copy", .text = "", .seq_len = 6, .vocab = 8}, *task);
  const std::string says = fmt::format("3 of {} weights are not finite (the first: {}[2] = nan)",
                                       model.parameter_count(), params[1].first);
  for (const char* command : {"sample", "eval", "heads", "attention"}) {
    const CliResult r = run_headroom(fmt::format("{} --model {}", command, tmp.path().string()));
    INFO("headroom " << command << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK(count_lines(r.output) == 1);
    CHECK(r.output.find(says) != std::string::npos);
  }
}

TEST_CASE("sample and eval --help list their flags") {
  for (const auto& [command, flags] :
       {std::pair<std::string, std::vector<std::string>>{
            "sample",
            {"--model", "--prompt", "--tokens", "--temperature", "--top-k", "--greedy", "--seed", "--count", "--no-cache"}},
        {"eval", {"--model", "--text", "--batches", "--batch", "--seed", "--json"}}}) {
    const CliResult r = run_headroom(command + " --help");
    CHECK(r.status == 0);
    for (const std::string& flag : flags) {
      CHECK_MESSAGE(r.output.find(flag) != std::string::npos, command << " --help does not mention " << flag);
    }
  }
  const CliResult top = run_headroom("--help");
  CHECK(top.output.find("sample") != std::string::npos);
  CHECK(top.output.find("eval") != std::string::npos);
}
