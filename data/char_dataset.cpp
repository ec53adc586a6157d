#include "data/char_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

#include "autograd/input_file.hpp"
#include "data/utf8.hpp"

namespace headroom {
namespace {

// The file's code points, read a chunk at a time after the type and size checks, so
// that a bad byte early in a large file stops the read there.
std::u32string read_utf8_file(const std::filesystem::path& file, const std::string& what,
                              std::uintmax_t max_bytes) {
  std::uintmax_t size = 0;
  try {
    size = check_input_file(file, what, max_bytes);
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError(what + ": cannot be opened for reading");
  std::u32string text;
  text.reserve(static_cast<std::size_t>(size));
  Utf8Decoder decoder(what, /*reject_nul=*/true);
  std::string chunk(1 << 20, '\0');
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    decoder.feed(std::string_view(chunk.data(), static_cast<std::size_t>(in.gcount())), text);
    if (decoder.offset() > max_bytes) {  // it grew while we read it
      throw DataError(fmt::format("{}: grew past the limit of {} bytes while being read", what, max_bytes));
    }
  }
  if (in.bad()) throw DataError(what + ": read failed");
  decoder.finish();
  return text;
}

void check_options(const CharDatasetOptions& options, bool reads_fraction) {
  if (reads_fraction && !(options.train_fraction > 0.0 && options.train_fraction < 1.0)) {
    throw DataError(fmt::format("CharDataset: train_fraction {} is not in (0, 1)", options.train_fraction));
  }
  if (options.seq_len == 0) throw DataError("CharDataset: seq_len must be positive, got 0");
}

// The file's code points, in the order the constructor documents its errors.
std::u32string read_text(const std::filesystem::path& file, const CharDatasetOptions& options) {
  const std::string what = fmt::format("CharDataset: '{}'", file.string());
  std::u32string text = read_utf8_file(file, what, options.max_bytes);
  if (text.empty()) throw DataError(what + ": the file is empty");
  return text;
}

using SplitText = std::pair<std::u32string, std::u32string>;  // (train, val)

SplitText split_file(const std::filesystem::path& file, const CharDatasetOptions& options) {
  check_options(options, true);
  const std::u32string text = read_text(file, options);
  const auto train_size = static_cast<std::size_t>(std::floor(options.train_fraction * static_cast<double>(text.size())));
  return {text.substr(0, train_size), text.substr(train_size)};
}

SplitText two_files(const std::filesystem::path& file, const std::filesystem::path& val_file,
                    const CharDatasetOptions& options) {
  check_options(options, false);
  return {read_text(file, options), read_text(val_file, options)};
}

}  // namespace

// A line per item, each ended by '\n', so that the model learns where a verse ends.
std::pair<std::u32string, std::u32string> corpus_text_splits(const Corpus& corpus) {
  if (corpus.kind != CorpusKind::text) {
    throw DataError(fmt::format("CharDataset: corpus {} is labelled, for a classifier, not text for a language model",
                                corpus.name));
  }
  std::pair<std::u32string, std::u32string> out;
  for (const CorpusItem& item : corpus.items) {
    std::u32string& split = item_split(item.text) == Split::train ? out.first : out.second;
    split += item.text;
    split += U'\n';
  }
  return out;
}

CharDataset::CharDataset(const std::filesystem::path& file, CharDatasetOptions options)
    : CharDataset(file.string(), fmt::format("CharDataset: '{}'", file.string()), options.seq_len,
                  split_file(file, options), fmt::format(" (train_fraction {})", options.train_fraction)) {}

CharDataset::CharDataset(const std::filesystem::path& file, const std::filesystem::path& val_file,
                         CharDatasetOptions options)
    : CharDataset(file.string(), fmt::format("CharDataset: '{}' with val '{}'", file.string(), val_file.string()),
                  options.seq_len, two_files(file, val_file, options), "") {}

CharDataset CharDataset::of_corpus(const Corpus& corpus, std::size_t seq_len) {
  if (seq_len == 0) throw DataError("CharDataset: seq_len must be positive, got 0");
  return CharDataset(corpus.name, fmt::format("CharDataset: corpus {}", corpus.name), seq_len,
                     corpus_text_splits(corpus), "");
}

CharDataset::CharDataset(std::string name, const std::string& what, std::size_t seq_len, const SplitText& texts,
                         const std::string& split_rule)
    : file_(std::move(name)),
      seq_len_(seq_len),
      vocab_(CharVocab::of_text(texts.first + texts.second, fmt::format("'{}'", file_))) {
  ids_.reserve(texts.first.size() + texts.second.size());
  for (const std::u32string* text : {&texts.first, &texts.second}) {
    for (const char32_t cp : *text) ids_.push_back(*vocab_.find(cp));  // every character is in its own vocabulary
  }
  train_size_ = texts.first.size();
  for (const Split split : {Split::train, Split::val}) {
    if (split_size(split) < seq_len_ + 1) {
      throw DataError(fmt::format("{}: {} characters give the {} split {} characters, fewer than seq_len + 1 = {}{}",
                                  what, ids_.size(), split_name(split), split_size(split), seq_len_ + 1, split_rule));
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
  return vocab_.encode(std::string_view(text), "CharDataset::encode");
}

std::string CharDataset::decode(const IndexArray& ids) const { return vocab_.decode(ids, "CharDataset::decode"); }

}  // namespace headroom
