// A character vocabulary: sorted distinct code points, a character's id is its rank.
// CharDataset builds one from its file; a trained text model carries its alphabet in
// the checkpoint, so `headroom sample` and `headroom eval` rebuild the same vocabulary
// without the training file.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "autograd/ops.hpp"  // Index, IndexArray

namespace headroom {

class CharVocab {
 public:
  // `alphabet` must be non-empty and strictly increasing (sorted, no repeats);
  // otherwise a DataError naming `name`. `name` says whose vocabulary this is in
  // error messages ("'data/tiny.txt'", "the model run/model.safetensors").
  CharVocab(std::u32string alphabet, std::string name);

  // The distinct code points of `text`, sorted. `text` must be non-empty.
  static CharVocab of_text(const std::u32string& text, std::string name);

  std::size_t size() const { return alphabet_.size(); }
  // alphabet()[id] is the code point with that id.
  const std::u32string& alphabet() const { return alphabet_; }
  const std::string& name() const { return name_; }

  // The id of a code point, or nothing when it is not in the vocabulary.
  std::optional<Index> find(char32_t code_point) const;

  // (N) ids of UTF-8 text. Invalid UTF-8 or a character outside the vocabulary is a
  // DataError: "<what>: character U+007A 'z' at position 2 is not in the vocabulary
  // of <name>" (position counts code points from 0).
  IndexArray encode(std::string_view utf8, std::string_view what) const;
  // (N) ids of code points, with the same error.
  IndexArray encode(const std::u32string& text, std::string_view what) const;

  // UTF-8 text of ids (read in row-major order); an id outside [0, size()) is a
  // DataError: "<what>: id 9 is out of range for vocab 9 of <name>".
  std::string decode(std::span<const Index> ids, std::string_view what) const;
  std::string decode(const IndexArray& ids, std::string_view what) const;

 private:
  std::u32string alphabet_;
  std::string name_;
};

// "U+00E9 'é'": the code point always, the character itself when it is printable
// (control characters would garble a one-line message).
std::string describe_code_point(char32_t code_point);

}  // namespace headroom
