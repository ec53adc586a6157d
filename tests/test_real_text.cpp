// Real text through the CLI: train on a corpus a Debian package installs, on a user's
// labelled TSV and on a text with a held-out file; eval a classifier (accuracy,
// macro-F1, the confusion matrix, the majority baseline); and the refusals.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "data/char_dataset.hpp"
#include "data/corpus.hpp"
#include "data/labelled_dataset.hpp"
#include "data/utf8.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
namespace hr = headroom;

namespace {

const std::string kTiny = "--d-model 16 --layers 1 --heads 2 --batch 32 --threads 1 --quiet ";

bool installed(const std::string& corpus) {
  return prerequisite(error_of([&] { (void)hr::load_corpus(corpus); }).empty(),
                      "corpus " + corpus + " is not installed: scripts/setup.sh --data");
}

// Three labels told apart by their letters, 60/25/15 in frequency: a model that reads
// its item beats the majority baseline's 60% by far.
fs::path write_tsv(const TempDir& dir) {
  const fs::path file = dir / "items.tsv";
  std::ofstream out(file);
  hr::Rng rng(1);
  for (int i = 0; i < 600; ++i) {
    const std::size_t u = rng.below(20);
    const std::string label = u < 12 ? "abc" : u < 17 ? "xyz" : "mno";
    std::string text;
    const std::size_t n = 3 + rng.below(8);
    for (std::size_t c = 0; c < n; ++c) text += label[rng.below(3)];
    out << label << '\t' << text << ' ' << i << '\n';
  }
  return file;
}

nlohmann::json eval_json(const fs::path& run) {
  const CliResult r = run_headroom("eval --json --model " + run.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.output);
}

}  // namespace

TEST_CASE("train --labelled: a classifier of a TSV file, its counts printed, beaten baselines in eval") {
  const TempDir dir("labelled");
  const fs::path tsv = write_tsv(dir);
  const CliResult r = run_headroom("train " + kTiny + "--labelled " + tsv.string() +
                                   " --seq-len 16 --steps 150 --eval-every 50 --out " + (dir / "run").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  // The items were read, deduplicated and split as the library says.
  const hr::Corpus corpus = hr::read_labelled_tsv(tsv);
  const hr::CorpusCounts counts = hr::count_items(corpus);
  CHECK(r.output.find("data: 3 labels, " + std::to_string(counts.train.at("abc") + counts.train.at("mno") +
                                                           counts.train.at("xyz")) +
                      " items train") != std::string::npos);
  CHECK(r.output.find("abc " + std::to_string(counts.train.at("abc")) + "/" + std::to_string(counts.val.at("abc"))) !=
        std::string::npos);
  const nlohmann::json config = nlohmann::json::parse(read_file(dir / "run/config.json"));
  CHECK(config["data"]["labelled"] == tsv.string());

  const nlohmann::json j = eval_json(dir / "run");
  CHECK(j["kind"] == "classifier");
  // The trainer validated on every val item (fewer than its 8 batches of 32): its last
  // val loss is eval's, the label token's cross-entropy over the same items.
  const std::vector<std::string> rows = lines_of(read_file(dir / "run/metrics.csv"));
  const double trained_val = parse_number(fields(rows.back())[2], "val_loss");
  CHECK(trained_val == doctest::Approx(j["loss"].get<double>()).epsilon(1e-4));
  CHECK(fields(rows.back())[10].empty());  // a label is not a character: no bits per character
  CHECK(r.output.find("bpc") == std::string::npos);
  CHECK(j["labels"] == nlohmann::json{"abc", "mno", "xyz"});
  CHECK(j["items"] == counts.val.at("abc") + counts.val.at("mno") + counts.val.at("xyz"));
  CHECK(j["majority_label"] == "abc");
  // The baseline is train's most frequent label predicted for every val item.
  CHECK(j["majority_accuracy"].get<double>() ==
        doctest::Approx(static_cast<double>(counts.val.at("abc")) / j["items"].get<double>()));
  CHECK(j["accuracy"].get<double>() > j["majority_accuracy"].get<double>() + 0.2);
  CHECK(j["macro_f1"].get<double>() > j["majority_macro_f1"].get<double>() + 0.2);
  std::size_t in_matrix = 0;
  for (const auto& row : j["confusion"]) {
    for (const auto& n : row) in_matrix += n.get<std::size_t>();
  }
  CHECK(in_matrix == j["items"].get<std::size_t>());

  const CliResult table = run_headroom("eval --model " + (dir / "run").string());
  CHECK(table.output.find("majority baseline (abc)") != std::string::npos);
  CHECK(table.output.find("true \\ predicted") != std::string::npos);
  check_refused("eval --model " + (dir / "run").string() + " --seed 3", "--seed 3: a classifier is evaluated on every");
  // The tools that look inside read a classifier's tokens: characters, | and <label>.
  const CliResult att = run_headroom("attention --model " + (dir / "run").string() + " --input abcab --out " +
                                     (dir / "att.svg").string());
  INFO(att.output);
  CHECK(att.status == 0);
  CHECK(att.output.find("classifier, 1 layer x 2 heads") != std::string::npos);
  CHECK(att.output.find("input \"abcab\" | (6 tokens)") != std::string::npos);
  const CliResult circuits = run_headroom("circuits --model " + (dir / "run").string());
  INFO(circuits.output);
  CHECK(circuits.status == 0);
  CHECK(circuits.output.find("(token |)") != std::string::npos);
  CHECK(circuits.output.find("'<") != std::string::npos);
  CHECK(run_headroom("heads --model " + (dir / "run").string()).status == 0);
  check_refused("heads --model " + (dir / "run").string() + " --repeat",
                "--repeat: a classifier's rows end in a separator and a label");
  check_refused("sample --model " + (dir / "run").string(), "is a classifier (labelled " + tsv.string() +
                                                                "): it predicts a label, it does not write text");
  const CliResult patch = run_headroom("patch --model " + (dir / "run").string() + " --what heads --pairs 8");
  INFO(patch.output);
  CHECK(patch.status == 0);
  CHECK(patch.output.find("8 pairs of val items of two classes of labelled " + tsv.string()) != std::string::npos);
  CHECK(patch.output.find("recovered fraction") != std::string::npos);
  check_refused("patch --model " + (dir / "run").string() + " --clean ab --corrupted xy --answer a --wrong x",
                "is a classifier, whose pairs are items of two classes from its own data");
  check_refused("eval --model " + (dir / "run").string() + " --text " + tsv.string(),
                "--text needs a character-level model; " + (dir / "run/model.safetensors").string() +
                    " is a classifier model (labelled " + tsv.string() + ")");
}

TEST_CASE("A classifier's checkpoint loads in PyTorch and gives its loss on a classifier's rows") {
  const TempDir dir("labelled-torch");
  const fs::path tsv = write_tsv(dir);
  REQUIRE(run_headroom("train " + kTiny + "--labelled " + tsv.string() + " --seq-len 16 --steps 40 --out " +
                       (dir / "run").string())
              .status == 0);
  // Two val items as the model reads them: characters, separator, label token, pad.
  const hr::LabelledDataset data(hr::read_labelled_tsv(tsv), 16);
  std::string rows;
  for (std::size_t i = 0; i < 2; ++i) {
    std::string row;
    for (const hr::Index id : data.row(hr::Split::val, i).ids) row += (row.empty() ? "" : ",") + std::to_string(id);
    rows += (rows.empty() ? "" : " ") + row;
  }
  const CliResult eval = run_headroom("eval --json --model " + (dir / "run").string() + " --tokens " + rows);
  INFO(eval.output);
  REQUIRE(eval.status == 0);
  const double loss = nlohmann::json::parse(eval.output)["loss"].get<double>();
  constexpr const char* kPython = "/usr/bin/python3";
  if (!prerequisite(fs::exists(kPython), std::string(kPython) + " is not installed")) return;
  const std::string script = std::string(HEADROOM_SOURCE_DIR) + "/examples/load_checkpoint.py";
  const CliResult ok = run_program(kPython, script + " " + (dir / "run/model.safetensors").string() + " --tokens " +
                                                rows + " --expect " + std::to_string(loss));
  if (!prerequisite(ok.output.find("No module named 'torch'") == std::string::npos,
                    std::string(kPython) + " cannot import torch (Debian: apt-get install python3-torch)"))
    return;
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK(ok.output.find(": match") != std::string::npos);
}

TEST_CASE("train --text with --val-text validates on the held-out file, and eval rebuilds both") {
  const TempDir dir("val-text-cli");
  std::ofstream(dir / "train.txt") << std::string(400, 'a') + "the cat sat on the mat. " + std::string(100, 'b');
  std::ofstream(dir / "val.txt") << "the mat sat on the cat. abba";
  const CliResult r = run_headroom("train " + kTiny + "--text " + (dir / "train.txt").string() + " --val-text " +
                                   (dir / "val.txt").string() + " --seq-len 8 --steps 20 --out " + (dir / "run").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("data: 524 characters train, 28 val") != std::string::npos);
  const nlohmann::json j = eval_json(dir / "run");
  CHECK(j["kind"] == "text");
  CHECK(j.contains("bits_per_char"));
  check_refused("train --task copy --val-text " + (dir / "val.txt").string(),
                "data.val_text " + (dir / "val.txt").string() + ": a held-out file goes with data.text (a task has no text)");
}

TEST_CASE("train refuses a bad corpus, two sources of text, and a task or vocab beside a corpus") {
  check_refused("train --corpus kvj", "unknown corpus 'kvj' (corpora: kjv, fortunes-topic, fortunes-lang, wordnet-pos)");
  check_refused("train --corpus kjv --text x.txt", "--text x.txt and --corpus kjv: give one source of text");
  check_refused("train --corpus kjv --task copy", "--task copy: a --corpus run has no task (--corpus kjv)");
  check_refused("train --labelled a.tsv --vocab 9", "--vocab 9: a --labelled run takes its vocabulary from the text");
  check_refused("train --corpus kjv --val-text v.txt",
                "data.val_text v.txt: a held-out file goes with data.text (corpus kjv splits its items by a hash");
  const TempDir dir("labelled-missing");
  check_refused("train --labelled " + (dir / "none.tsv").string() + " --out " + (dir / "run").string(),
                "labelled file '" + (dir / "none.tsv").string() + "': no such file");
  CHECK_FALSE(fs::exists(dir / "run"));
}

TEST_CASE("Each labelled corpus trains a classifier above its majority baseline in a test-sized run") {
  for (const char* corpus : {"fortunes-topic", "fortunes-lang", "wordnet-pos"}) {
    CAPTURE(corpus);
    if (!installed(corpus)) continue;
    const TempDir dir(std::string("corpus-") + corpus);
    const CliResult r = run_headroom(std::string("train --layers 1 --heads 2 --batch 32 --threads 1 --quiet --corpus ") +
                                     corpus + " --d-model 32 --seq-len 32 --steps 200 --eval-every 100 --out " +
                                     (dir / "run").string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    // 400 items of the val split: above the baseline by more than the binomial noise
    // of an accuracy near it (2 sd of 400 items is at most 5 points).
    const CliResult e = run_headroom("eval --json --batches 10 --batch 40 --model " + (dir / "run").string());
    REQUIRE(e.status == 0);
    const nlohmann::json j = nlohmann::json::parse(e.output);
    CHECK(j["items"] == 400);
    CHECK(j["accuracy"].get<double>() > j["majority_accuracy"].get<double>() + 0.05);
    CHECK(j["macro_f1"].get<double>() > j["majority_macro_f1"].get<double>());
  }
}

TEST_CASE("train --corpus kjv: a character-level model of the King James Bible, evaluated in bits per character") {
  if (!installed("kjv")) return;
  const TempDir dir("kjv");
  const CliResult r = run_headroom("train " + kTiny + "--corpus kjv --seq-len 32 --steps 100 --eval-every 50 --out " +
                                   (dir / "run").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("headroom train: kjv (vocab ") != std::string::npos);
  const nlohmann::json j = eval_json(dir / "run");
  CHECK(j["kind"] == "text");
  CHECK(j["data"] == "corpus kjv");
  // A corpus language model is per character: bits per character in metrics.csv.
  const std::vector<std::string> rows = lines_of(read_file(dir / "run/metrics.csv"));
  REQUIRE(fields(rows.front()).size() == 11);
  CHECK(fields(rows.front())[10] == "val_bpc");
  CHECK(parse_number(fields(rows.back())[10], "val_bpc") ==
        doctest::Approx(parse_number(fields(rows.back())[2], "val_loss") / std::log(2.0)).epsilon(1e-3));
  // Below the uniform guess over the vocabulary after 100 steps: the model learned
  // the letters' frequencies at least.
  CHECK(j["bits_per_char"].get<double>() < std::log2(j["vocab"].get<double>()) - 1.0);
  const CliResult s = run_headroom("sample --model " + (dir / "run").string() + " --prompt 'And God' --tokens 20");
  INFO(s.output);
  CHECK(s.status == 0);
  CHECK(s.output.find("And God") != std::string::npos);
  // heads on a text model: the word-start and verse-start columns, and --repeat's copies.
  const CliResult heads = run_headroom("heads --model " + (dir / "run").string() + " --repeat --batches 2");
  INFO(heads.output);
  REQUIRE(heads.status == 0);
  CHECK(heads.output.find("repeat-ind  word-start  line-start") != std::string::npos);
  CHECK(heads.output.find("copies    loss on the first copy ") != std::string::npos);
  const std::vector<std::string> csv = lines_of(read_file(dir / "run/heads.csv"));
  REQUIRE(csv.size() == 1 + 2);  // kTiny: 1 layer of 2 heads
  CHECK(csv.front().find(",repeat_induction,word_start,line_start") != std::string::npos);
  for (std::size_t i = 1; i < csv.size(); ++i) {
    const std::vector<std::string> f = fields(csv[i]);
    REQUIRE(f.size() == 17);
    // repeat_induction and word_start: every row has repeats and spaces; line_start
    // where a verse ends inside a row of 33 characters (most rows have none).
    for (std::size_t c = 14; c < 17; ++c) {
      if (c == 16 && f[c].empty()) continue;
      const double v = parse_number(f[c], "a heads.csv score");
      CHECK(v > 0);
      CHECK(v < 1);
    }
  }
  // A corpus's own defaults: rows of 128 characters, 2000 steps.
  const CliResult defaults = run_headroom("train --corpus kjv --steps 2 --no-save --quiet");
  INFO(defaults.output);
  CHECK(defaults.status == 0);
  CHECK(defaults.output.find("(vocab " + std::to_string(j["vocab"].get<int>()) + ", seq_len 128)") != std::string::npos);
  const CliResult config = run_headroom("train --corpus kjv --steps 2 --out " + (dir / "d").string() + " --quiet");
  CHECK(nlohmann::json::parse(read_file(dir / "d/config.json"))["train"]["eval_every"] == 250);
}

TEST_CASE("headroom corpora --write-splits writes the texts train --corpus reads, and refuses a classifier's") {
  const TempDir dir("write_splits");
  check_refused("corpora --write-splits " + (dir / "x").string(), "--write-splits needs --corpus NAME");
  CHECK_FALSE(fs::exists(dir / "x"));
  if (installed("fortunes-topic")) {
    check_refused("corpora --corpus fortunes-topic --write-splits " + (dir / "y").string(), "is labelled");
  }
  if (!installed("kjv")) return;
  const fs::path out = dir / "kjv" / "splits";  // missing parents are made
  const CliResult r = run_headroom("corpora --corpus kjv --write-splits " + out.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto [train, val] = hr::corpus_text_splits(hr::load_corpus("kjv"));
  CHECK(r.output.find(std::to_string(train.size()) + " characters, train") != std::string::npos);
  const std::string train_bytes = read_file(out / "train.txt");
  const std::string val_bytes = read_file(out / "val.txt");
  CHECK(hr::decode_utf8(train_bytes, "train.txt") == train);
  CHECK(hr::decode_utf8(val_bytes, "val.txt") == val);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(out)) ++files;
  CHECK(files == 2);  // no temporary left behind
  // Again over the same files: replaced, the same bytes.
  REQUIRE(run_headroom("corpora --corpus kjv --write-splits " + out.string()).status == 0);
  CHECK(read_file(out / "val.txt") == val_bytes);
  std::ofstream(dir / "file") << "x";
  check_refused("corpora --corpus kjv --write-splits " + (dir / "file").string(), "not a directory");
}

TEST_CASE("headroom corpora lists every corpus with its state, and describes one by split and label") {
  const CliResult list = run_headroom("corpora");
  INFO(list.output);
  CHECK(list.status == 0);
  for (const std::string& name : hr::corpus_names()) CHECK(list.output.find(name + " ") != std::string::npos);
  check_refused("corpora --corpus kvj", "unknown corpus 'kvj'");
  if (!installed("fortunes-topic")) return;
  const CliResult one = run_headroom("corpora --corpus fortunes-topic");
  INFO(one.output);
  CHECK(one.status == 0);
  const hr::CorpusCounts counts = hr::count_items(hr::load_corpus("fortunes-topic"));
  CHECK(one.output.find("labels    13") != std::string::npos);
  CHECK(one.output.find(std::to_string(counts.train.at("zippy")) + " train") != std::string::npos);
}
