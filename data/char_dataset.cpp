#include "data/char_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "data/utf8.hpp"

namespace headroom {
namespace {

std::string read_file(const std::filesystem::path& file, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) throw DataError(what + ": no such file");
  if (std::filesystem::is_directory(file, ec)) throw DataError(what + ": is a directory");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError(what + ": cannot be opened for reading");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw DataError(what + ": read failed");
  return std::move(bytes).str();
}

// "U+00E9 'é'": the code point always, the character itself when printable ASCII or
// beyond ASCII (control characters would garble a one-line message).
std::string describe(char32_t cp) {
  std::string out = fmt::format("U+{:04X}", static_cast<std::uint32_t>(cp));
  if (cp >= 0x20 && cp != 0x7F) {
    out += " '";
    append_utf8(out, cp);
    out += "'";
  }
  return out;
}

}  // namespace

CharDataset::CharDataset(const std::filesystem::path& file, CharDatasetOptions options)
    : file_(file.string()), seq_len_(options.seq_len) {
  const std::string what = fmt::format("CharDataset: '{}'", file_);
  if (!(options.train_fraction > 0.0 && options.train_fraction < 1.0)) {
    throw DataError(fmt::format("CharDataset: train_fraction {} is not in (0, 1)",
                                options.train_fraction));
  }
  if (seq_len_ == 0) throw DataError("CharDataset: seq_len must be positive, got 0");
  const std::u32string text = decode_utf8(read_file(file, what), what);
  if (text.empty()) throw DataError(what + ": the file is empty");

  alphabet_ = text;
  std::sort(alphabet_.begin(), alphabet_.end());
  alphabet_.erase(std::unique(alphabet_.begin(), alphabet_.end()), alphabet_.end());
  ids_.reserve(text.size());
  for (const char32_t cp : text) {
    ids_.push_back(std::lower_bound(alphabet_.begin(), alphabet_.end(), cp) - alphabet_.begin());
  }

  train_size_ = static_cast<std::size_t>(
      std::floor(options.train_fraction * static_cast<double>(ids_.size())));
  for (const Split split : {Split::train, Split::val}) {
    if (split_size(split) < seq_len_ + 1) {
      throw DataError(fmt::format(
          "{}: {} characters give the {} split {} characters, fewer than seq_len + 1 = {} "
          "(train_fraction {})",
          what, ids_.size(), split_name(split), split_size(split), seq_len_ + 1,
          options.train_fraction));
    }
  }
}

std::size_t CharDataset::split_size(Split split) const {
  return split == Split::train ? train_size_ : ids_.size() - train_size_;
}

Batch CharDataset::sample(std::size_t batch, Split split, Rng& rng) const {
  if (batch == 0) {
    throw DataError(fmt::format("CharDataset '{}': batch size must be positive, got 0", file_));
  }
  const std::size_t row_len = seq_len_ + 1;
  const std::size_t begin = split == Split::train ? 0 : train_size_;
  // Window starts s with s + T+1 <= split size: split_size - T choices.
  const std::size_t starts = split_size(split) - seq_len_;
  Batch out{IndexArray::from_shape({batch, row_len}),  // (B, T+1)
            Mask::from_shape({batch, seq_len_})};      // (B, T), all counted
  for (std::size_t b = 0; b < batch; ++b) {
    const auto first = ids_.begin() + static_cast<std::ptrdiff_t>(begin + rng.below(starts));
    std::copy_n(first, row_len, out.tokens.data() + b * row_len);
  }
  std::fill(out.target_mask.begin(), out.target_mask.end(), true);
  return out;
}

IndexArray CharDataset::encode(const std::string& text) const {
  const std::u32string cps = decode_utf8(text, "CharDataset::encode");
  IndexArray ids = IndexArray::from_shape({cps.size()});  // (N)
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const auto it = std::lower_bound(alphabet_.begin(), alphabet_.end(), cps[i]);
    if (it == alphabet_.end() || *it != cps[i]) {
      throw DataError(fmt::format("CharDataset::encode: character {} at position {} is not in "
                                  "the vocabulary of '{}'",
                                  describe(cps[i]), i, file_));
    }
    ids(i) = it - alphabet_.begin();
  }
  return ids;
}

std::string CharDataset::decode(const IndexArray& ids) const {
  std::string out;
  for (const Index id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= alphabet_.size()) {
      throw DataError(fmt::format("CharDataset::decode: id {} is out of range for vocab {} of '{}'",
                                  id, alphabet_.size(), file_));
    }
    append_utf8(out, alphabet_[static_cast<std::size_t>(id)]);
  }
  return out;
}

}  // namespace headroom
