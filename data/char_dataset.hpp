// A character-level language-modelling dataset from any UTF-8 text file.
//
// Vocabulary: the distinct code points of the file, sorted; a character's id is its
// rank. Train is the first train_fraction of the text (counted in characters,
// rounded down) and val the rest, so the two never share a position. A batch row is
// a window of T+1 consecutive ids starting uniformly at random inside its split,
// and every target counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "data/char_vocab.hpp"
#include "data/corpus.hpp"
#include "data/dataset.hpp"

namespace headroom {

// The largest text file a CharDataset reads (docs/cli/train.md): held as bytes, code
// points and ids, it takes about 13 times its size in memory.
inline constexpr std::uintmax_t kMaxTextBytes = 256 * 1024 * 1024;

struct CharDatasetOptions {
  std::size_t seq_len = 64;     // T: model inputs per row; windows are T+1 characters
  double train_fraction = 0.9;  // in (0, 1): the first part of the text is train
  std::uintmax_t max_bytes = kMaxTextBytes;  // a larger file is refused before it is read
};

// The (train, val) text of a text corpus: its items in reading order, each split by
// item_split and ended by a line end, exactly what CharDataset::of_corpus trains and
// validates on (`headroom corpora --write-splits` writes them as files for another
// program to read). Throws DataError for a labelled corpus.
std::pair<std::u32string, std::u32string> corpus_text_splits(const Corpus& corpus);

class CharDataset : public Dataset {
 public:
  // Reads and encodes the whole file. Throws DataError naming the file for a path that
  // is not a regular file (a directory, a device: named), a file larger than
  // max_bytes, one that cannot be read, an empty file, invalid UTF-8 or a NUL byte
  // (with the byte offset and line; the read stops there), a train_fraction outside
  // (0, 1), and a split shorter than T+1 characters.
  CharDataset(const std::filesystem::path& file, CharDatasetOptions options = {});
  // Train from `file` and val from all of `val_file` (train_fraction is not read);
  // the vocabulary is both files' characters. Errors as above, naming either file.
  CharDataset(const std::filesystem::path& file, const std::filesystem::path& val_file, CharDatasetOptions options = {});
  // A text corpus (data/corpus.hpp): its items, a line each, split by item_split;
  // named after the corpus. Throws DataError for a labelled corpus.
  static CharDataset of_corpus(const Corpus& corpus, std::size_t seq_len);

  std::string name() const override { return file_; }
  std::size_t vocab_size() const override { return vocab_.size(); }
  std::size_t seq_len() const override { return seq_len_; }
  Batch sample(std::size_t batch, Split split, Rng& rng) const override;

  // (N) ids of a UTF-8 string; a character outside the vocabulary is an error.
  IndexArray encode(const std::string& text) const;
  // UTF-8 text of ids (any shape, read in row-major order) in [0, vocab_size()).
  std::string decode(const IndexArray& ids) const;

  // The vocabulary: alphabet()[id] is the code point with that id.
  const std::u32string& alphabet() const { return vocab_.alphabet(); }
  const CharVocab& vocab() const { return vocab_; }
  // Characters in the whole text and in each split.
  std::size_t size() const { return ids_.size(); }
  std::size_t split_size(Split split) const;

 private:
  // The checked, decoded texts come from the public constructors; `what` names the
  // data in errors.
  // texts: (train, val); split_rule ends the message of a split that is too short.
  CharDataset(std::string name, const std::string& what, std::size_t seq_len,
              const std::pair<std::u32string, std::u32string>& texts, const std::string& split_rule);

  std::string file_;
  std::size_t seq_len_;
  CharVocab vocab_;           // sorted distinct code points
  std::vector<Index> ids_;    // (N) the whole text
  std::size_t train_size_;    // ids_[0, train_size_) is train, the rest val
};

}  // namespace headroom
