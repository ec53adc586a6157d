// `headroom corpora`: the real-text corpora headroom reads from Debian packages
// (data/corpus.hpp), whether each is installed, and with a name, what it holds: items
// and characters per split, items per label; with --write-splits, a text corpus's two
// splits as files, so that another program (bench/torch_char_recipe.py) reads the
// very characters `train --corpus` does.
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "data/char_dataset.hpp"
#include "data/corpus.hpp"
#include "data/utf8.hpp"
#include "nn/safetensors.hpp"

namespace headroom::cli {
namespace {

struct CorporaFlags {
  std::string name;
  std::string splits_dir;  // --write-splits
};

// Installed when its files are there; what to install otherwise.
std::string status_of(const CorpusInfo& info) {
  try {
    check_installed(info.name);
    return "installed";
  } catch (const DataError&) {
    return "missing: apt-get install " + info.packages;
  }
}

int list_corpora() {
  for (const CorpusInfo& info : corpus_registry()) {
    fmt::print("{:<15} {:<10} {}\n{:<26} {}\n", info.name, info.kind == CorpusKind::text ? "text" : "labelled",
               info.about, "", status_of(info));
  }
  fmt::print("\nheadroom corpora --corpus NAME describes one, headroom train --corpus NAME trains on it; scripts/setup.sh "
             "--data installs them all.\n");
  return 0;
}

int show_corpus(const std::string& name) {
  const Corpus corpus = load_corpus(name);  // a missing package is the one-line error
  const CorpusCounts counts = count_items(corpus);
  const CorpusInfo& info = find_corpus(name);
  fmt::print("{}: {}\n", name, info.about);
  fmt::print("packages  {}\n", info.packages);
  std::size_t train = 0, val = 0;
  for (const auto& [label, n] : counts.train) train += n;
  for (const auto& [label, n] : counts.val) val += n;
  fmt::print("items     {} train, {} val (val: a hash of the text is 0 mod 10); {} duplicate and {} conflicting left out\n",
             train, val, corpus.duplicates, corpus.ambiguous);
  fmt::print("chars     {} train, {} val\n", counts.train_chars, counts.val_chars);
  if (corpus.kind == CorpusKind::labelled) {
    fmt::print("labels    {}\n", corpus.labels.size());
    for (const std::string& label : corpus.labels) {
      fmt::print("  {:<16} {:>7} train {:>6} val\n", label, counts.train.at(label), counts.val.at(label));
    }
  }
  return 0;
}

std::string utf8_of(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t cp : text) append_utf8(out, cp);
  return out;
}

// DIR/train.txt and DIR/val.txt, each written atomically (a reader never sees half a
// file); DIR and its parents are made when missing.
int write_splits(const std::string& name, const std::filesystem::path& dir) {
  const auto [train, val] = corpus_text_splits(load_corpus(name));  // a labelled corpus is refused here
  if (std::filesystem::exists(dir) && !std::filesystem::is_directory(dir)) {
    throw std::invalid_argument(fmt::format("--write-splits {}: not a directory", dir.string()));
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw std::invalid_argument(fmt::format("--write-splits {}: {}", dir.string(), error.message()));
  write_file_atomically(dir / "train.txt", utf8_of(train));
  write_file_atomically(dir / "val.txt", utf8_of(val));
  fmt::print("wrote {} ({} characters, train) and {} ({} characters, val); headroom train --text {} --val-text {} "
             "trains on them as --corpus {} does\n",
             (dir / "train.txt").string(), train.size(), (dir / "val.txt").string(), val.size(),
             (dir / "train.txt").string(), (dir / "val.txt").string(), name);
  return 0;
}

}  // namespace

Run add_corpora_command(CLI::App& app) {
  auto f = std::make_shared<CorporaFlags>();
  CLI::App* cmd = app.add_subcommand(
      "corpora",
      "List the real-text corpora headroom reads from Debian packages and whether each is installed; with --corpus NAME, "
      "its items and characters per split and its items per label.");
  cmd->add_option("--corpus", f->name, "Describe this corpus (kjv, fortunes-topic, fortunes-lang, wordnet-pos)")
      ->type_name("NAME");
  cmd->add_option("--write-splits", f->splits_dir,
                  "With --corpus NAME of a text corpus (kjv): write its train and val text, the characters train "
                  "--corpus NAME reads, to DIR/train.txt and DIR/val.txt (UTF-8, a line per item)")
      ->type_name("DIR");
  return [f] {
    if (!f->splits_dir.empty()) {
      if (f->name.empty()) throw std::invalid_argument("--write-splits needs --corpus NAME");
      return write_splits(f->name, f->splits_dir);
    }
    return f->name.empty() ? list_corpora() : show_corpus(f->name);
  };
}

}  // namespace headroom::cli
