// `headroom corpora`: the real-text corpora headroom reads from Debian packages
// (data/corpus.hpp), whether each is installed, and with a name, what it holds: items
// and characters per split, items per label.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "data/corpus.hpp"

namespace headroom::cli {
namespace {

struct CorporaFlags {
  std::string name;
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

}  // namespace

Run add_corpora_command(CLI::App& app) {
  auto f = std::make_shared<CorporaFlags>();
  CLI::App* cmd = app.add_subcommand(
      "corpora",
      "List the real-text corpora headroom reads from Debian packages and whether each is installed; with --corpus NAME, "
      "its items and characters per split and its items per label.");
  cmd->add_option("--corpus", f->name, "Describe this corpus (kjv, fortunes-topic, fortunes-lang, wordnet-pos)")
      ->type_name("NAME");
  return [f] { return f->name.empty() ? list_corpora() : show_corpus(f->name); };
}

}  // namespace headroom::cli
