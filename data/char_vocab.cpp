#include "data/char_vocab.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "data/dataset.hpp"
#include "data/utf8.hpp"

namespace headroom {

std::string describe_code_point(char32_t code_point) {
  std::string out = fmt::format("U+{:04X}", static_cast<std::uint32_t>(code_point));
  if (code_point >= 0x20 && code_point != 0x7F) {
    out += " '";
    append_utf8(out, code_point);
    out += "'";
  }
  return out;
}

CharVocab::CharVocab(std::u32string alphabet, std::string name)
    : alphabet_(std::move(alphabet)), name_(std::move(name)) {
  if (alphabet_.empty()) throw DataError(fmt::format("CharVocab of {}: the alphabet is empty", name_));
  for (std::size_t i = 1; i < alphabet_.size(); ++i) {
    if (!(alphabet_[i - 1] < alphabet_[i])) {
      throw DataError(fmt::format("CharVocab of {}: the alphabet is not sorted without repeats: {} at position {} "
                                  "follows {}",
                                  name_, describe_code_point(alphabet_[i]), i, describe_code_point(alphabet_[i - 1])));
    }
  }
}

CharVocab CharVocab::of_text(const std::u32string& text, std::string name) {
  // A mark per code point (Unicode has 0x110000; 136 KiB of bits) rather than a
  // sorted copy of the text, which took as much memory again as the text.
  std::vector<bool> seen(0x110000, false);
  std::u32string beyond;  // anything past U+10FFFF, which the UTF-8 decoder never gives
  for (const char32_t cp : text) {
    if (cp < seen.size()) {
      seen[cp] = true;
    } else {
      beyond.push_back(cp);
    }
  }
  std::u32string alphabet;
  for (char32_t cp = 0; cp < seen.size(); ++cp) {
    if (seen[cp]) alphabet.push_back(cp);
  }
  std::sort(beyond.begin(), beyond.end());
  beyond.erase(std::unique(beyond.begin(), beyond.end()), beyond.end());
  alphabet += beyond;
  return CharVocab(std::move(alphabet), std::move(name));
}

std::optional<Index> CharVocab::find(char32_t code_point) const {
  const auto it = std::lower_bound(alphabet_.begin(), alphabet_.end(), code_point);
  if (it == alphabet_.end() || *it != code_point) return std::nullopt;
  return static_cast<Index>(it - alphabet_.begin());
}

IndexArray CharVocab::encode(std::string_view utf8, std::string_view what) const {
  return encode(decode_utf8(utf8, what), what);
}

IndexArray CharVocab::encode(const std::u32string& text, std::string_view what) const {
  IndexArray ids = IndexArray::from_shape({text.size()});  // (N)
  for (std::size_t i = 0; i < text.size(); ++i) {
    const std::optional<Index> id = find(text[i]);
    if (!id) {
      throw DataError(fmt::format("{}: character {} at position {} is not in the vocabulary of {}", what,
                                  describe_code_point(text[i]), i, name_));
    }
    ids(i) = *id;
  }
  return ids;
}

std::string CharVocab::decode(std::span<const Index> ids, std::string_view what) const {
  std::string out;
  for (const Index id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= alphabet_.size()) {
      throw DataError(fmt::format("{}: id {} is out of range for vocab {} of {}", what, id, alphabet_.size(), name_));
    }
    append_utf8(out, alphabet_[static_cast<std::size_t>(id)]);
  }
  return out;
}

std::string CharVocab::decode(const IndexArray& ids, std::string_view what) const {
  return decode(std::span<const Index>(ids.data(), ids.size()), what);
}

}  // namespace headroom
