#include "data/corpus.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <system_error>
#include <unordered_map>

#include <fmt/format.h>

#include "autograd/input_file.hpp"
#include "data/stable_hash.hpp"
#include "data/utf8.hpp"

namespace headroom {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFortunesDir = "usr/share/games/fortunes";

// The English topic files with at least 500 entries in Debian 12's `fortunes`: a
// fixed list rather than a rule applied at load time, so that a package update
// cannot change a trained classifier's classes.
const std::vector<std::string> kFortuneTopics = {
    "computers", "cookie",   "definitions", "knghtbrd", "men-women", "miscellaneous", "people",
    "platitudes", "politics", "science",     "songs-poems", "work",  "zippy"};

// fortunes-lang: a language's directory under kFortunesDir and its package. English
// is the top level, which also holds `brasil` (Brazilian Portuguese, fortunes-br) and
// symlinks into it/.
struct FortuneLanguage {
  std::string label;
  std::string dir;      // "" for the top level
  std::string package;
};
const std::vector<FortuneLanguage> kFortuneLanguages = {
    {"cs", "cs", "fortunes-cs"}, {"de", "de", "fortunes-de"}, {"en", "", "fortunes"},
    {"es", "es", "fortunes-es"}, {"it", "it", "fortunes-it"}, {"pl", "pl", "fortunes-pl"},
    {"pt", "", "fortunes-br"},   {"ru", "ru", "fortunes-ru"}};

// Pictures rather than text; they would teach a classifier layout, not language.
bool is_ascii_art(const std::string& file) { return file == "art" || file == "ascii-art" || file == "asciiart"; }

const std::string kDataHint = "(or scripts/setup.sh --data)";

[[noreturn]] void missing(const std::string& corpus, const fs::path& path, const std::string& packages) {
  throw DataError(fmt::format("corpus {}: {} is missing: install it with `apt-get install {}` {}", corpus,
                              path.string(), packages, kDataHint));
}

void require(const std::string& corpus, const fs::path& path, const std::string& packages) {
  std::error_code ec;
  if (!fs::exists(path, ec)) missing(corpus, path, packages);
}

std::string read_bytes(const fs::path& file, const std::string& what) {
  try {
    (void)check_input_file(file, what, kMaxTsvBytes);
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError(what + ": cannot be opened for reading");
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) throw DataError(what + ": read failed");
  return out.str();
}

// Trailing spaces, tabs and line ends of each line and blank lines at either end go:
// they are layout, and a text that differs only in them is the same text.
std::u32string tidy(std::u32string_view text) {
  std::u32string out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(U'\n', start);
    if (end == std::u32string_view::npos) end = text.size();
    std::u32string_view line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == U' ' || line.back() == U'\t' || line.back() == U'\r')) line.remove_suffix(1);
    if (!out.empty() || !line.empty()) {
      out += line;
      out += U'\n';
    }
    start = end + 1;
  }
  while (!out.empty() && out.back() == U'\n') out.pop_back();
  return out;
}

// The entries of a fortune file: text between lines that hold only '%'.
void read_fortunes(const fs::path& file, const std::string& label, std::vector<CorpusItem>& items) {
  const std::string what = fmt::format("fortune file '{}'", file.string());
  const std::u32string text = decode_utf8(read_bytes(file, what), what);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t sep = start;
    // The next line that is exactly "%".
    while (true) {
      sep = text.find(U'%', sep);
      if (sep == std::u32string::npos) break;
      const bool line_start = sep == 0 || text[sep - 1] == U'\n';
      const bool line_end = sep + 1 == text.size() || text[sep + 1] == U'\n' || text[sep + 1] == U'\r';
      if (line_start && line_end) break;
      ++sep;
    }
    const std::size_t end = sep == std::u32string::npos ? text.size() : sep;
    std::u32string entry = tidy(std::u32string_view(text).substr(start, end - start));
    if (!entry.empty()) items.push_back({label, std::move(entry)});
    if (sep == std::u32string::npos) break;
    start = text.find(U'\n', sep);
    start = start == std::u32string::npos ? text.size() : start + 1;
  }
}

// The regular files of a fortunes directory that hold entries, sorted by name: not
// the .dat indexes, not the .u8 links, not symlinks (the top level links into it/),
// not subdirectories (es/off holds the offensive ones), not ASCII art.
std::vector<fs::path> fortune_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_symlink(ec) || !entry.is_regular_file(ec)) continue;
    if (name.ends_with(".dat") || name.ends_with(".u8") || is_ascii_art(name)) continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<CorpusItem> fortunes_topic(const fs::path& root, const CorpusInfo&) {
  std::vector<CorpusItem> items;
  for (const std::string& topic : kFortuneTopics) {
    read_fortunes(root / kFortunesDir / topic, topic, items);
  }
  return items;
}

std::vector<CorpusItem> fortunes_lang(const fs::path& root, const CorpusInfo&) {
  std::vector<CorpusItem> items;
  const fs::path top = root / kFortunesDir;
  for (const FortuneLanguage& lang : kFortuneLanguages) {
    if (lang.label == "pt") {
      read_fortunes(top / "brasil", lang.label, items);
      continue;
    }
    const fs::path dir = lang.dir.empty() ? top : top / lang.dir;
    for (const fs::path& file : fortune_files(dir)) {
      if (lang.dir.empty() && file.filename() == "brasil") continue;
      read_fortunes(file, lang.label, items);
    }
  }
  return items;
}

// WordNet's data.<pos> files: a line per synset, "offset lexfile pos ... | gloss";
// the licence lines at the top start with two spaces.
std::vector<CorpusItem> wordnet_pos(const fs::path& root, const CorpusInfo&) {
  std::vector<CorpusItem> items;
  for (const char* pos : {"noun", "verb", "adj", "adv"}) {
    const fs::path file = root / "usr/share/wordnet" / fmt::format("data.{}", pos);
    const std::string what = fmt::format("WordNet file '{}'", file.string());
    std::istringstream lines(read_bytes(file, what));
    std::string line;
    std::size_t number = 0;
    while (std::getline(lines, line)) {
      ++number;
      if (line.starts_with("  ") || line.empty()) continue;
      const std::size_t bar = line.find(" | ");
      if (bar == std::string::npos) {
        throw DataError(fmt::format("{}: line {} has no ' | ' before its gloss", what, number));
      }
      std::u32string gloss = tidy(decode_utf8(std::string_view(line).substr(bar + 3), what));
      // Satellite adjectives ("s") are adjectives: the four parts of speech are the classes.
      if (!gloss.empty()) items.push_back({pos, std::move(gloss)});
    }
  }
  return items;
}

// The King James Bible as `bible -l0` prints it: a "Book N" heading per chapter, then
// "  V text" per verse. The package's data file is compressed in a format of its own,
// so we read it through its reader.
std::vector<CorpusItem> kjv(const fs::path& root, const CorpusInfo&) {
  const fs::path program = root / "usr/bin/bible";
  const std::string command = fmt::format("'{}' -l0 'Gen1:1-Rev22:21' 2>/dev/null", program.string());
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw DataError(fmt::format("corpus kjv: cannot run {}", program.string()));
  std::string out;
  char buffer[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0) out.append(buffer, n);
  const int status = pclose(pipe.release());
  if (status != 0) throw DataError(fmt::format("corpus kjv: {} failed (status {})", program.string(), status));
  const std::string what = fmt::format("corpus kjv: the output of {}", program.string());
  std::vector<CorpusItem> items;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    const std::size_t digits = line.find_first_not_of(' ');
    if (digits == 0 || digits == std::string::npos) continue;  // a heading or a blank line
    const std::size_t space = line.find(' ', digits);
    if (space == std::string::npos || line.find_first_not_of("0123456789", digits) != space) continue;
    std::u32string verse = tidy(decode_utf8(std::string_view(line).substr(space + 1), what));
    if (!verse.empty()) items.push_back({"", std::move(verse)});
  }
  if (items.empty()) throw DataError(fmt::format("corpus kjv: {} printed no verses", program.string()));
  return items;
}

// Drops the second and later copies of a text, and every copy of a text that came
// with two labels; the labels are what remains, sorted.
void deduplicate(Corpus& corpus) {
  std::unordered_map<std::u32string, std::string> label_of;
  std::set<std::u32string> conflicting;
  for (const CorpusItem& item : corpus.items) {
    const auto [it, inserted] = label_of.emplace(item.text, item.label);
    if (!inserted && it->second != item.label) conflicting.insert(item.text);
  }
  std::set<std::u32string> seen;
  std::vector<CorpusItem> kept;
  for (CorpusItem& item : corpus.items) {
    if (conflicting.count(item.text) != 0) {
      ++corpus.ambiguous;
    } else if (!seen.insert(item.text).second) {
      ++corpus.duplicates;
    } else {
      kept.push_back(std::move(item));
    }
  }
  corpus.items = std::move(kept);
  std::set<std::string> labels;
  for (const CorpusItem& item : corpus.items) {
    if (corpus.kind == CorpusKind::labelled) labels.insert(item.label);
  }
  corpus.labels.assign(labels.begin(), labels.end());
}

void check_line_length(std::string_view line, const std::string& what, std::size_t number) {
  if (line.size() > kMaxTsvLineBytes) {
    throw DataError(fmt::format("{}: line {} is {} bytes long, more than the limit of {}", what, number, line.size(),
                                kMaxTsvLineBytes));
  }
}

}  // namespace

const std::vector<CorpusInfo>& corpus_registry() {
  static const std::vector<CorpusInfo> registry = {
      {"kjv", CorpusKind::text, "bible-kjv bible-kjv-text",
       "the King James Bible, a verse per line (31,102 verses, 4 MB): a character-level language model"},
      {"fortunes-topic", CorpusKind::labelled, "fortunes",
       "English fortunes labelled by their topic file (13 topics with at least 500 each): a classifier"},
      {"fortunes-lang", CorpusKind::labelled,
       "fortunes fortunes-min fortunes-br fortunes-cs fortunes-de fortunes-es fortunes-it fortunes-pl fortunes-ru",
       "fortunes labelled by their language (cs de en es it pl pt ru): a classifier"},
      {"wordnet-pos", CorpusKind::labelled, "wordnet-base",
       "WordNet glosses labelled by the part of speech they define (adj adv noun verb): a classifier"},
  };
  return registry;
}

std::vector<std::string> corpus_names() {
  std::vector<std::string> names;
  for (const CorpusInfo& info : corpus_registry()) names.push_back(info.name);
  return names;
}

const CorpusInfo& find_corpus(const std::string& name) {
  for (const CorpusInfo& info : corpus_registry()) {
    if (info.name == name) return info;
  }
  throw DataError(fmt::format("unknown corpus '{}' (corpora: {})", name, fmt::join(corpus_names(), ", ")));
}

void check_installed(const std::string& name, const fs::path& root) {
  const CorpusInfo& info = find_corpus(name);
  if (name == "kjv") {
    require(name, root / "usr/bin/bible", info.packages);
    require(name, root / "usr/lib/bible.data", "bible-kjv-text");
  } else if (name == "fortunes-topic") {
    for (const std::string& topic : kFortuneTopics) require(name, root / kFortunesDir / topic, info.packages);
  } else if (name == "fortunes-lang") {
    for (const FortuneLanguage& lang : kFortuneLanguages) {
      // The top level is English in the files `fortunes` ships, and Portuguese in one.
      const fs::path where = lang.label == "pt"   ? root / kFortunesDir / "brasil"
                             : lang.dir.empty()   ? root / kFortunesDir / "people"
                                                  : root / kFortunesDir / lang.dir;
      require(name, where, lang.package);
    }
  } else {
    for (const char* pos : {"noun", "verb", "adj", "adv"}) {
      require(name, root / "usr/share/wordnet" / fmt::format("data.{}", pos), info.packages);
    }
  }
}

Corpus load_corpus(const std::string& name, const fs::path& root) {
  check_installed(name, root);
  const CorpusInfo& info = find_corpus(name);
  Corpus corpus{.name = info.name, .kind = info.kind};
  if (name == "kjv") corpus.items = kjv(root, info);
  else if (name == "fortunes-topic") corpus.items = fortunes_topic(root, info);
  else if (name == "fortunes-lang") corpus.items = fortunes_lang(root, info);
  else corpus.items = wordnet_pos(root, info);
  deduplicate(corpus);
  return corpus;
}

Corpus read_labelled_tsv(const fs::path& file) {
  const std::string what = fmt::format("labelled file '{}'", file.string());
  const std::string bytes = read_bytes(file, what);
  if (bytes.empty()) throw DataError(what + ": the file is empty");
  Utf8Decoder decoder(what, /*reject_nul=*/true);
  std::u32string all;
  decoder.feed(bytes, all);
  decoder.finish();
  Corpus corpus{.name = file.string(), .kind = CorpusKind::labelled};
  std::set<std::string> labels;
  std::size_t start = 0;
  for (std::size_t number = 1; start < bytes.size(); ++number) {
    std::size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    std::string_view line = std::string_view(bytes).substr(start, end - start);
    start = end + 1;
    check_line_length(line, what, number);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    const std::size_t tab = line.find('\t');
    if (tab == std::string_view::npos) {
      throw DataError(fmt::format("{}: line {} has no tab (each line is label<TAB>text)", what, number));
    }
    const std::string label(line.substr(0, tab));
    if (label.empty()) throw DataError(fmt::format("{}: line {} has an empty label", what, number));
    std::u32string text = tidy(decode_utf8(line.substr(tab + 1), what));
    if (text.empty()) throw DataError(fmt::format("{}: line {} (label '{}') has no text", what, number, label));
    if (labels.insert(label).second && labels.size() > kMaxLabels) {
      throw DataError(fmt::format("{}: line {} brings a label beyond the limit of {} labels", what, number, kMaxLabels));
    }
    corpus.items.push_back({label, std::move(text)});
  }
  deduplicate(corpus);
  if (corpus.labels.size() < 2) {
    throw DataError(fmt::format("{}: {} label{} ({}): a classifier needs at least two", what, corpus.labels.size(),
                                corpus.labels.size() == 1 ? "" : "s", fmt::join(corpus.labels, ", ")));
  }
  return corpus;
}

Split item_split(const std::u32string& text) {
  StableHash h;
  for (const char32_t c : text) h.add(static_cast<std::uint64_t>(c), 4);
  return h.finish() % 10 == 0 ? Split::val : Split::train;
}

CorpusCounts count_items(const Corpus& corpus) {
  CorpusCounts counts;
  for (const std::string& label : corpus.labels) counts.train[label] = counts.val[label] = 0;
  for (const CorpusItem& item : corpus.items) {
    const bool val = item_split(item.text) == Split::val;
    ++(val ? counts.val : counts.train)[item.label];
    (val ? counts.val_chars : counts.train_chars) += item.text.size();
  }
  return counts;
}

}  // namespace headroom
