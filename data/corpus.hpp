// Real text from Debian packages, and a user's labelled text, as items: a verse, a
// fortune, a dictionary gloss, a line of a TSV file. A corpus is read from the files
// its package installs (never fetched); the registry says which package that is, so
// that a missing one is one line naming the `apt-get install` that fixes it.
//
// Items split into train and val by a hash of their text (item_split), never by
// their position: a class whose files come last is not all val, the same text is in
// one split however often it occurs, and the split of an item does not move when
// another item is added.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace headroom {

enum class CorpusKind {
  text,      // unlabelled items for a character-level language model
  labelled,  // items with a class label, for a classifier
};

struct CorpusItem {
  std::string label;     // the class name; empty in a text corpus
  std::u32string text;   // code points, never empty
};

struct Corpus {
  std::string name;   // the registry's name, or the TSV file's path
  CorpusKind kind = CorpusKind::text;
  std::vector<std::string> labels{};  // sorted distinct class names (labelled only)
  std::vector<CorpusItem> items{};    // in reading order, deduplicated
  // Items left out while reading: the second and later copies of a text, and every
  // copy of a text that came with two different labels (it cannot be scored).
  std::size_t duplicates = 0;
  std::size_t ambiguous = 0;
};

// One entry of the registry.
struct CorpusInfo {
  std::string name;      // "kjv"
  CorpusKind kind = CorpusKind::text;
  std::string packages;  // what `apt-get install` needs, space-separated
  std::string about;     // one line for `headroom corpora` and --help
};

// The registered corpora, in the order `headroom corpora` lists them.
const std::vector<CorpusInfo>& corpus_registry();
std::vector<std::string> corpus_names();

// The registry entry called `name`, or a DataError listing the names.
const CorpusInfo& find_corpus(const std::string& name);

// Throws the DataError load_corpus would for a missing package, without reading
// anything: the files and the program the corpus reads are there.
void check_installed(const std::string& name, const std::filesystem::path& root = "/");

// Reads corpus `name` from the files its packages install under `root` (the file
// system's root; a test points it elsewhere). A missing file or program is a
// DataError "corpus kjv: /usr/bin/bible is missing: install it with `apt-get install
// bible-kjv bible-kjv-text` (or scripts/setup.sh --data)".
Corpus load_corpus(const std::string& name, const std::filesystem::path& root = "/");

// Limits on a user's TSV file (read_labelled_tsv): larger input is refused before it
// is read, and a longer line as soon as it is seen.
inline constexpr std::uintmax_t kMaxTsvBytes = 256 * 1024 * 1024;
inline constexpr std::size_t kMaxTsvLineBytes = 64 * 1024;
inline constexpr std::size_t kMaxLabels = 1000;

// A labelled corpus from a file of lines `label<TAB>text` (UTF-8, '\n' or "\r\n" line
// ends; the text is everything after the first tab). Empty lines are skipped. Errors
// are DataErrors naming the file and the line: no tab, an empty label or text, a
// line longer than kMaxTsvLineBytes, more than kMaxLabels labels, fewer than two,
// invalid UTF-8 or a NUL byte, a file larger than kMaxTsvBytes.
Corpus read_labelled_tsv(const std::filesystem::path& file);

// Split::val iff a stable hash of the item's text (data/stable_hash.hpp) is 0 mod 10.
Split item_split(const std::u32string& text);

// Items per split and label (label "" for a text corpus), and characters per split.
struct CorpusCounts {
  std::map<std::string, std::size_t> train, val;  // items by label
  std::size_t train_chars = 0, val_chars = 0;
};
CorpusCounts count_items(const Corpus& corpus);

}  // namespace headroom
