// Corpora from Debian packages, a user's labelled TSV, the hash split of items, and
// the classifier's rows (data/corpus.hpp, data/labelled_dataset.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "data/char_dataset.hpp"
#include "data/corpus.hpp"
#include "data/labelled_dataset.hpp"
#include "data/task.hpp"
#include "data/utf8.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;
using hr::Split;

namespace {

fs::path write(const TempDir& dir, const std::string& name, const std::string& content) {
  std::ofstream(dir / name, std::ios::binary) << content;
  return dir / name;
}

// Whether the corpus's packages are installed (the first file each reads).
bool installed(const std::string& corpus) {
  const hr::CorpusInfo& info = hr::find_corpus(corpus);
  return prerequisite(error_of([&] { (void)hr::load_corpus(corpus); }).find("is missing") == std::string::npos,
                      "corpus " + corpus + " is not installed: scripts/setup.sh --data (apt-get install " +
                          info.packages + ")");
}

// Every label has items in both splits, and val is about a tenth of the items: the
// split is a hash, so its share is binomial(n, 0.1), within 5 standard deviations.
void check_splits(const hr::Corpus& corpus) {
  const hr::CorpusCounts counts = hr::count_items(corpus);
  std::size_t val = 0;
  for (const auto& [label, n] : counts.val) {
    CHECK_MESSAGE(n > 0, corpus.name, " label ", label, " has no val items");
    CHECK_MESSAGE(counts.train.at(label) > 0, corpus.name, " label ", label, " has no train items");
    val += n;
  }
  const double n = static_cast<double>(corpus.items.size());
  CHECK(std::abs(static_cast<double>(val) - 0.1 * n) < 5 * std::sqrt(n * 0.1 * 0.9));
}

}  // namespace

TEST_CASE("The registry names every corpus, its kind and its packages, and refuses an unknown name") {
  CHECK(hr::corpus_names() == std::vector<std::string>{"kjv", "fortunes-topic", "fortunes-lang", "wordnet-pos"});
  CHECK(hr::find_corpus("kjv").kind == hr::CorpusKind::text);
  CHECK(hr::find_corpus("wordnet-pos").packages == "wordnet-base");
  CHECK(error_of([] { (void)hr::find_corpus("kvj"); }) ==
        "unknown corpus 'kvj' (corpora: kjv, fortunes-topic, fortunes-lang, wordnet-pos)");
}

TEST_CASE("A corpus whose package is missing is one error naming the apt-get install that fixes it") {
  const TempDir root("corpus-root");
  CHECK(error_of([&] { (void)hr::load_corpus("kjv", root.path()); }) ==
        "corpus kjv: " + (root / "usr/bin/bible").string() +
            " is missing: install it with `apt-get install bible-kjv bible-kjv-text` (or scripts/setup.sh --data)");
  CHECK(error_of([&] { (void)hr::load_corpus("wordnet-pos", root.path()); }) ==
        "corpus wordnet-pos: " + (root / "usr/share/wordnet/data.noun").string() +
            " is missing: install it with `apt-get install wordnet-base` (or scripts/setup.sh --data)");
  fs::create_directories(root / "usr/share/games/fortunes");
  CHECK(error_of([&] { (void)hr::load_corpus("fortunes-lang", root.path()); }) ==
        "corpus fortunes-lang: " + (root / "usr/share/games/fortunes/cs").string() +
            " is missing: install it with `apt-get install fortunes-cs` (or scripts/setup.sh --data)");
}

TEST_CASE("Fortune files: entries between percent lines, tidied, without indexes, links, ASCII art or subfolders") {
  const TempDir root("corpus-fortunes");
  const fs::path dir = root / "usr/share/games/fortunes";
  fs::create_directories(dir / "cs" / "off");
  for (const char* lang : {"de", "es", "it", "pl", "ru"}) {
    fs::create_directories(dir / lang);
    std::ofstream(dir / lang / "q") << "eins " << lang << "\n%\nzwei " << lang << "\n";
  }
  std::ofstream(dir / "people") << "First,  \nsecond line.\n%\n\n%\n% not a separator\n  indented\n%\n";
  std::ofstream(dir / "people.dat") << "binary index";
  std::ofstream(dir / "art") << "  /\\_/\\\n%\n ( o.o )\n";
  std::ofstream(dir / "brasil") << "Ola mundo\n%\nTchau\n";
  std::ofstream(dir / "cs" / "citat") << "Dobry den\r\n%\r\nNashle\r\n";
  std::ofstream(dir / "cs" / "off" / "x") << "left out\n";
  fs::create_symlink("cs/citat", dir / "adams");
  const hr::Corpus corpus = hr::load_corpus("fortunes-lang", root.path());
  std::vector<std::pair<std::string, std::string>> items;
  for (const hr::CorpusItem& item : corpus.items) {
    std::string text;
    for (const char32_t c : item.text) hr::append_utf8(text, c);
    items.emplace_back(item.label, text);
  }
  CHECK(items == std::vector<std::pair<std::string, std::string>>{
                     {"cs", "Dobry den"}, {"cs", "Nashle"}, {"de", "eins de"}, {"de", "zwei de"},
                     {"en", "First,\nsecond line."}, {"en", "% not a separator\n  indented"},
                     {"es", "eins es"}, {"es", "zwei es"}, {"it", "eins it"}, {"it", "zwei it"},
                     {"pl", "eins pl"}, {"pl", "zwei pl"}, {"pt", "Ola mundo"}, {"pt", "Tchau"},
                     {"ru", "eins ru"}, {"ru", "zwei ru"}});
  CHECK(corpus.labels == std::vector<std::string>{"cs", "de", "en", "es", "it", "pl", "pt", "ru"});
}

TEST_CASE("kjv: every verse of the King James Bible, a character-level corpus split by verse") {
  if (!installed("kjv")) return;
  const hr::Corpus corpus = hr::load_corpus("kjv");
  CHECK(corpus.kind == hr::CorpusKind::text);
  // The KJV has 31,102 verses; a text printed twice counts once.
  CHECK(corpus.items.size() + corpus.duplicates + corpus.ambiguous == 31102);
  CHECK(corpus.duplicates > 0);
  CHECK(corpus.ambiguous == 0);
  check_splits(corpus);
  std::string first;
  for (const char32_t c : corpus.items.front().text) hr::append_utf8(first, c);
  CHECK(first == "In the beginning God created the heaven and the earth.");
  const hr::CharDataset chars = hr::CharDataset::of_corpus(corpus, 64);
  CHECK(chars.name() == "kjv");
  // The verses' characters and the line end between them.
  CHECK(chars.alphabet().front() == U'\n');
  CHECK(chars.vocab_size() >= 60);
  CHECK(chars.vocab_size() <= 80);
  const hr::CorpusCounts counts = hr::count_items(corpus);
  CHECK(chars.split_size(Split::val) == counts.val_chars + counts.val.at(""));
}

TEST_CASE("fortunes-topic, fortunes-lang and wordnet-pos: labels, splits and classifier rows") {
  struct Expected {
    const char* name;
    std::size_t labels;
  };
  for (const Expected& e : {Expected{"fortunes-topic", 13}, Expected{"fortunes-lang", 8}, Expected{"wordnet-pos", 4}}) {
    CAPTURE(e.name);
    if (!installed(e.name)) continue;
    const hr::Corpus corpus = hr::load_corpus(e.name);
    CHECK(corpus.kind == hr::CorpusKind::labelled);
    CHECK(corpus.labels.size() == e.labels);
    check_splits(corpus);
    const hr::LabelledDataset data(corpus, 96);
    CHECK(data.vocab_size() == 2 + data.vocab().size() + e.labels);
    CHECK(data.items(Split::train) + data.items(Split::val) == corpus.items.size());
  }
  if (!installed("wordnet-pos")) return;
  // WordNet 3.0 has 117,659 synsets, each with a gloss.
  const hr::Corpus wordnet = hr::load_corpus("wordnet-pos");
  CHECK(wordnet.items.size() + wordnet.duplicates + wordnet.ambiguous == 117659);
  CHECK(wordnet.labels == std::vector<std::string>{"adj", "adv", "noun", "verb"});
}

TEST_CASE("item_split is a fixed hash of the text: pinned, deterministic, about one item in ten") {
  // Pinned: changing the hash moves every corpus's split and every trained model's val.
  CHECK(hr::item_split(U"In the beginning God created the heaven and the earth.") == Split::train);
  std::size_t val = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string s = "item " + std::to_string(i);
    const std::u32string text(s.begin(), s.end());
    CHECK(hr::item_split(text) == hr::item_split(std::u32string(text)));
    val += hr::item_split(text) == Split::val ? 1 : 0;
  }
  CHECK(std::abs(static_cast<double>(val) - 2000.0) < 5 * std::sqrt(20000 * 0.1 * 0.9));
}

TEST_CASE("A labelled TSV: label TAB text per line, duplicates and conflicting labels counted and dropped") {
  const TempDir dir("tsv");
  const fs::path file = write(dir, "a.tsv",
                              "pos\tgood film\r\nneg\tbad film\n\npos\tgood film\nneg\tmixed\tbag\npos\tmixed\tbag\n"
                              "neg\tdull   \n");
  const hr::Corpus corpus = hr::read_labelled_tsv(file);
  CHECK(corpus.labels == std::vector<std::string>{"neg", "pos"});
  REQUIRE(corpus.items.size() == 3);
  CHECK(corpus.items[0].text == U"good film");
  CHECK(corpus.items[2].text == U"dull");
  CHECK(corpus.duplicates == 1);
  CHECK(corpus.ambiguous == 2);
}

TEST_CASE("A labelled TSV's errors name the file, the line and the value") {
  const TempDir dir("tsv-errors");
  const auto error = [&](const std::string& content) {
    const fs::path f = write(dir, "e.tsv", content);
    return error_of([&] { (void)hr::read_labelled_tsv(f); });
  };
  const std::string name = "labelled file '" + (dir / "e.tsv").string() + "'";
  CHECK(error("a\tx\nno tab here\n") == name + ": line 2 has no tab (each line is label<TAB>text)");
  CHECK(error("a\tx\n\tx\n") == name + ": line 2 has an empty label");
  CHECK(error("a\tx\nb\t  \n") == name + ": line 2 (label 'b') has no text");
  CHECK(error("a\tx\na\ty\n") == name + ": 1 label (a): a classifier needs at least two");
  CHECK(error("") == name + ": the file is empty");
  CHECK(error("a\t\xff\n").find(name + ": invalid UTF-8 at byte offset 2") == 0);
  CHECK(error("a\tx" + std::string(hr::kMaxTsvLineBytes, 'y') + "\n") ==
        name + ": line 1 is " + std::to_string(hr::kMaxTsvLineBytes + 3) + " bytes long, more than the limit of " +
            std::to_string(hr::kMaxTsvLineBytes));
  std::string many;
  for (std::size_t i = 0; i <= hr::kMaxLabels; ++i) many += "l" + std::to_string(i) + "\tt" + std::to_string(i) + "\n";
  CHECK(error(many) == name + ": line " + std::to_string(hr::kMaxLabels + 1) + " brings a label beyond the limit of " +
                           std::to_string(hr::kMaxLabels) + " labels");
}

TEST_CASE("LabelledDataset rows: the item, the separator, the label token, pad, and only the label counts") {
  hr::Corpus corpus{.name = "toy", .kind = hr::CorpusKind::labelled, .labels = {"a", "b"}};
  for (int i = 0; i < 200; ++i) {
    const std::string s = (i % 2 ? "xy" : "yxxyx") + std::to_string(i % 10) + std::string(static_cast<std::size_t>(i / 10), 'z');
    corpus.items.push_back({i % 2 ? "b" : "a", std::u32string(s.begin(), s.end())});
  }
  const std::size_t T = 8;
  const hr::LabelledDataset data(corpus, T);
  // Alphabet: 0-9 x y z; ids 2.. for them, then <a> <b>.
  CHECK(data.vocab().size() == 13);
  CHECK(data.vocab_size() == 2 + 13 + 2);
  CHECK(data.label_token(1) == 16);
  CHECK(data.token_text(16) == "<b>");
  CHECK(data.token_text(hr::kSep) == "|");
  const hr::LabelledRow r = data.encode(U"xy1", 1, "test");
  CHECK(r.ids == std::vector<hr::Index>{2 + 10, 2 + 11, 2 + 1, hr::kSep, 16, hr::kPad, hr::kPad, hr::kPad, hr::kPad});
  CHECK(r.position == 3);
  CHECK_FALSE(r.truncated);
  const hr::LabelledRow cut = data.encode(U"xyxyxyxyxy", 0, "test");
  CHECK(cut.truncated);
  CHECK(cut.position == T - 1);
  CHECK(cut.ids[T] == data.label_token(0));
  CHECK(error_of([&] { (void)data.encode(U"xq", 0, "the prompt"); }).find("the prompt: character U+0071 'q'") == 0);

  hr::Rng rng(3);
  const hr::Batch b = data.sample(64, Split::val, rng);
  for (std::size_t row = 0; row < 64; ++row) {
    std::size_t counted = 0, sep = 0;
    for (std::size_t t = 0; t < T; ++t) {
      if (b.target_mask(row, t)) {
        ++counted;
        sep = t;
      }
    }
    REQUIRE(counted == 1);
    CHECK(b.tokens(row, sep) == hr::kSep);
    const hr::Index label = b.tokens(row, sep + 1);
    CHECK((label == data.label_token(0) || label == data.label_token(1)));
    // Short items are whole in the row: their text decides their split.
    if (sep < T - 1) {
      std::u32string text;
      for (std::size_t t = 0; t < sep; ++t) text += data.vocab().alphabet()[static_cast<std::size_t>(b.tokens(row, t) - 2)];
      CHECK(hr::item_split(text) == Split::val);
    }
  }
  CHECK(data.truncated(Split::train) + data.truncated(Split::val) > 0);
  CHECK(error_of([&] { (void)hr::LabelledDataset(corpus, 1); }) ==
        "LabelledDataset toy: seq_len 1 is too short: needs at least 2 (a character and the separator)");
}

TEST_CASE("A classifier's patch pair: val items of two labels cut to one length, separators aligned") {
  hr::Corpus corpus{.name = "toy", .kind = hr::CorpusKind::labelled, .labels = {"a", "b", "c"}};
  for (int i = 0; i < 300; ++i) {
    const std::string s = std::string(static_cast<std::size_t>(1 + i % 9), "abc"[i % 3]) + std::to_string(i);
    corpus.items.push_back({std::string(1, "abc"[i % 3]), std::u32string(s.begin(), s.end())});
  }
  const hr::LabelledDataset data(corpus, 8);
  hr::Rng rng(5);
  for (int k = 0; k < 50; ++k) {
    const hr::PatchPair p = data.patch_pair(rng);
    REQUIRE(p.clean.size() == 9);
    REQUIRE(p.corrupted.size() == 9);
    CHECK(p.clean[p.position] == hr::kSep);
    CHECK(p.corrupted[p.position] == hr::kSep);
    CHECK(p.clean[p.position + 1] == p.clean_answer);
    CHECK(p.corrupted[p.position + 1] == p.corrupted_answer);
    CHECK(p.clean_answer != p.corrupted_answer);
    CHECK(p.position <= 7);
    for (std::size_t t = 0; t < p.position; ++t) {
      CHECK(p.clean[t] > hr::kSep);
      CHECK(p.corrupted[t] > hr::kSep);
    }
  }
  hr::Corpus one{.name = "one", .kind = hr::CorpusKind::labelled, .labels = {"a"}};
  for (int i = 0; i < 50; ++i) one.items.push_back({"a", U"x" + std::u32string(static_cast<std::size_t>(i + 1), U'y')});
  CHECK(error_of([&] { (void)hr::LabelledDataset(one, 8).patch_pair(rng); }) ==
        "LabelledDataset one: the val split has one label only: no pair of two classes");
}

TEST_CASE("A classifier validates on fixed items spread over its val split, the same for every seed") {
  hr::Corpus corpus{.name = "toy", .kind = hr::CorpusKind::labelled, .labels = {"a", "b"}};
  for (int i = 0; i < 400; ++i) {
    const std::string s = std::string(i < 200 ? "a" : "b") + std::to_string(i);
    corpus.items.push_back({i < 200 ? "a" : "b", std::u32string(s.begin(), s.end())});
  }
  const hr::LabelledDataset data(corpus, 8);
  const std::size_t n = data.items(Split::val);
  REQUIRE(n > 12);
  const std::vector<hr::Batch> batches = *data.fixed_validation(3, 4);
  REQUIRE(batches.size() == 3);
  // Item j * n / 12 of the split, in order: both labels, since the items come a label at a time.
  std::set<hr::Index> labels;
  for (std::size_t b = 0; b < 3; ++b) {
    for (std::size_t r = 0; r < 4; ++r) {
      const hr::LabelledRow want = data.row(Split::val, (4 * b + r) * n / 12);
      CHECK(std::equal(want.ids.begin(), want.ids.end(), batches[b].tokens.data() + r * 9));
      labels.insert(want.ids[want.position + 1]);
    }
  }
  CHECK(labels.size() == 2);
  // Asked for more than there are: every item once, the last batch short.
  const std::vector<hr::Batch> all = *data.fixed_validation(100, 32);
  CHECK(all.size() == (n + 31) / 32);
  CHECK(all.back().tokens.shape()[0] == n - 32 * (all.size() - 1));
  // A language model validates on drawn windows.
  const TempDir dir("fixed-validation");
  const hr::CharDataset chars(write(dir, "t.txt", "abcdefghij"), write(dir, "v.txt", "abcdefgh"), {.seq_len = 4});
  CHECK_FALSE(chars.fixed_validation(2, 2).has_value());
}

TEST_CASE("CharDataset from a text and a held-out file, and from a text corpus split by item") {
  const TempDir dir("val-text");
  const fs::path train = write(dir, "train.txt", "abcabcabcabc");
  const fs::path val = write(dir, "val.txt", "cab dab");
  const hr::CharDataset two(train, val, {.seq_len = 3});
  CHECK(two.split_size(Split::train) == 12);
  CHECK(two.split_size(Split::val) == 7);
  CHECK(two.alphabet() == U" abcd");
  CHECK(error_of([&] { (void)hr::CharDataset(train, write(dir, "short.txt", "ab"), {.seq_len = 3}); })
            .find("give the val split 2 characters, fewer than seq_len + 1 = 4") != std::string::npos);
  CHECK(error_of([&] { (void)hr::CharDataset(train, dir / "none.txt", {.seq_len = 3}); }) ==
        "CharDataset: '" + (dir / "none.txt").string() + "': no such file");

  hr::Corpus labelled{.name = "l", .kind = hr::CorpusKind::labelled};
  CHECK(error_of([&] { (void)hr::CharDataset::of_corpus(labelled, 4); }) ==
        "CharDataset: corpus l is labelled, for a classifier, not text for a language model");
  CHECK(error_of([&] { (void)hr::corpus_text_splits(labelled); }) ==
        "CharDataset: corpus l is labelled, for a classifier, not text for a language model");
}

TEST_CASE("corpus_text_splits: a text corpus's items by split, a line each, as of_corpus reads them") {
  hr::Corpus corpus{.name = "t", .kind = hr::CorpusKind::text};
  // Enough items that both splits hold some (about one in ten is val).
  for (int i = 0; i < 60; ++i) corpus.items.push_back({.label = "", .text = hr::decode_utf8("verse " + std::to_string(i), "t")});
  const auto [train, val] = hr::corpus_text_splits(corpus);
  std::u32string want_train, want_val;
  for (const hr::CorpusItem& item : corpus.items) {
    (hr::item_split(item.text) == Split::val ? want_val : want_train) += item.text + U"\n";
  }
  REQUIRE_FALSE(want_val.empty());
  CHECK(train == want_train);
  CHECK(val == want_val);
  // The same text through files: the dataset `train --text F --val-text G` builds.
  const TempDir dir("corpus-splits");
  std::string train_bytes, val_bytes;
  for (const char32_t c : train) hr::append_utf8(train_bytes, c);
  for (const char32_t c : val) hr::append_utf8(val_bytes, c);
  const hr::CharDataset files(write(dir, "train.txt", train_bytes), write(dir, "val.txt", val_bytes), {.seq_len = 4});
  const hr::CharDataset direct = hr::CharDataset::of_corpus(corpus, 4);
  CHECK(files.alphabet() == direct.alphabet());
  CHECK(files.split_size(Split::train) == direct.split_size(Split::train));
  CHECK(files.split_size(Split::val) == direct.split_size(Split::val));
  CHECK(files.decode(files.encode(train_bytes)) == direct.decode(direct.encode(train_bytes)));
}
