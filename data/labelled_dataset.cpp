#include "data/labelled_dataset.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "data/task.hpp"
#include "data/utf8.hpp"

namespace headroom {
namespace {

CharVocab alphabet_of(const Corpus& corpus) {
  if (corpus.kind != CorpusKind::labelled) {
    throw DataError(fmt::format("LabelledDataset: corpus {} has no labels (it is text for a language model)", corpus.name));
  }
  if (corpus.items.empty()) throw DataError(fmt::format("LabelledDataset: corpus {} has no items", corpus.name));
  std::u32string all;
  for (const CorpusItem& item : corpus.items) all += item.text;
  return CharVocab::of_text(all, corpus.name);
}

}  // namespace

LabelledDataset::LabelledDataset(const Corpus& corpus, std::size_t seq_len)
    : name_(corpus.name),
      seq_len_(seq_len),
      vocab_(alphabet_of(corpus)),
      labels_(corpus.labels),
      duplicates_(corpus.duplicates),
      ambiguous_(corpus.ambiguous) {
  if (seq_len_ < 2) {
    throw DataError(fmt::format("LabelledDataset {}: seq_len {} is too short: needs at least 2 (a character and the "
                                "separator)",
                                name_, seq_len_));
  }
  for (const CorpusItem& item : corpus.items) {
    const auto label = std::lower_bound(labels_.begin(), labels_.end(), item.label);
    if (label == labels_.end() || *label != item.label) {
      throw DataError(fmt::format("LabelledDataset {}: label '{}' is not among the corpus's labels", name_, item.label));
    }
    Item encoded{.label = static_cast<std::size_t>(label - labels_.begin())};
    encoded.chars.reserve(item.text.size());
    for (const char32_t c : item.text) encoded.chars.push_back(*vocab_.find(c));
    (item_split(item.text) == Split::train ? train_ : val_).push_back(std::move(encoded));
  }
  for (const Split split : {Split::train, Split::val}) {
    if (items(split) == 0) {
      throw DataError(fmt::format("LabelledDataset {}: the {} split has no items ({} items in all)", name_,
                                  split_name(split), corpus.items.size()));
    }
  }
}

LabelledRow LabelledDataset::make_row(const std::vector<Index>& chars, std::size_t label) const {
  LabelledRow r;
  const std::size_t n = std::min(chars.size(), seq_len_ - 1);
  r.truncated = chars.size() > n;
  r.ids.assign(seq_len_ + 1, kPad);
  for (std::size_t i = 0; i < n; ++i) r.ids[i] = chars[i] + 2;
  r.ids[n] = kSep;
  r.ids[n + 1] = label_token(label);
  r.position = n;
  r.label = label;
  return r;
}

LabelledRow LabelledDataset::row(Split split, std::size_t i) const {
  const std::vector<Item>& items = split_items(split);
  if (i >= items.size()) {
    throw DataError(fmt::format("LabelledDataset {}: item {} is out of range for the {} split of {}", name_, i,
                                split_name(split), items.size()));
  }
  return make_row(items[i].chars, items[i].label);
}

LabelledRow LabelledDataset::encode(const std::u32string& text, std::size_t label, std::string_view what) const {
  if (label >= labels_.size()) {
    throw DataError(fmt::format("{}: label index {} is out of range for {} labels", what, label, labels_.size()));
  }
  const IndexArray ids = vocab_.encode(text, what);
  return make_row(std::vector<Index>(ids.begin(), ids.end()), label);
}

std::size_t LabelledDataset::truncated(Split split) const {
  const std::vector<Item>& items = split_items(split);
  return static_cast<std::size_t>(std::count_if(items.begin(), items.end(),
                                                [&](const Item& item) { return item.chars.size() > seq_len_ - 1; }));
}

std::vector<std::size_t> LabelledDataset::label_counts(Split split) const {
  std::vector<std::size_t> counts(labels_.size(), 0);
  for (const Item& item : split_items(split)) ++counts[item.label];
  return counts;
}

Batch LabelledDataset::sample(std::size_t batch, Split split, Rng& rng) const {
  if (batch == 0) throw DataError(fmt::format("LabelledDataset {}: batch size must be positive, got 0", name_));
  const std::size_t row_len = seq_len_ + 1;
  Batch out{IndexArray::from_shape({batch, row_len}), Mask::from_shape({batch, seq_len_})};
  std::fill(out.target_mask.begin(), out.target_mask.end(), false);
  const std::vector<Item>& items = split_items(split);
  for (std::size_t b = 0; b < batch; ++b) {
    const Item& item = items[rng.below(items.size())];
    const LabelledRow r = make_row(item.chars, item.label);
    std::copy(r.ids.begin(), r.ids.end(), out.tokens.data() + b * row_len);
    out.target_mask.data()[b * seq_len_ + r.position] = true;
  }
  return out;
}

std::optional<std::vector<Batch>> LabelledDataset::fixed_validation(std::size_t batches, std::size_t batch) const {
  if (batch == 0) throw DataError(fmt::format("LabelledDataset {}: batch size must be positive, got 0", name_));
  const std::size_t n = val_.size(), wanted = batches * batch, items = std::min(n, wanted);
  const std::size_t row_len = seq_len_ + 1;
  std::vector<Batch> out;
  for (std::size_t first = 0; first < items; first += batch) {
    const std::size_t B = std::min(batch, items - first);
    Batch b{IndexArray::from_shape({B, row_len}), Mask::from_shape({B, seq_len_})};
    std::fill(b.target_mask.begin(), b.target_mask.end(), false);
    for (std::size_t r = 0; r < B; ++r) {
      const std::size_t j = first + r;
      const Item& item = val_[items == n ? j : j * n / items];
      const LabelledRow row = make_row(item.chars, item.label);
      std::copy(row.ids.begin(), row.ids.end(), b.tokens.data() + r * row_len);
      b.target_mask.data()[r * seq_len_ + row.position] = true;
    }
    out.push_back(std::move(b));
  }
  return out;
}

PatchPair LabelledDataset::patch_pair(Rng& rng) const {
  const std::vector<std::size_t> counts = label_counts(Split::val);
  if (std::count_if(counts.begin(), counts.end(), [](std::size_t n) { return n > 0; }) < 2) {
    throw DataError(fmt::format("LabelledDataset {}: the val split has one label only: no pair of two classes", name_));
  }
  const Item& clean = val_[rng.below(val_.size())];
  // The other item by rejection: most items carry another label.
  const Item* other = &clean;
  while (other->label == clean.label) other = &val_[rng.below(val_.size())];
  const std::size_t n = std::min({clean.chars.size(), other->chars.size(), seq_len_ - 1});
  const auto cut = [n](const Item& item) { return std::vector<Index>(item.chars.begin(), item.chars.begin() + static_cast<std::ptrdiff_t>(n)); };
  const LabelledRow a = make_row(cut(clean), clean.label), b = make_row(cut(*other), other->label);
  return {.clean = a.ids,
          .corrupted = b.ids,
          .position = a.position,
          .clean_answer = label_token(clean.label),
          .corrupted_answer = label_token(other->label)};
}

std::string LabelledDataset::token_text(Index id) const {
  if (id == kPad) return "_";
  if (id == kSep) return "|";
  const auto i = static_cast<std::size_t>(id);
  if (id > 1 && i < 2 + vocab_.size()) {
    std::string out;
    append_utf8(out, vocab_.alphabet()[i - 2]);
    return out;
  }
  if (i >= 2 + vocab_.size() && i < vocab_size()) return "<" + labels_[i - 2 - vocab_.size()] + ">";
  throw DataError(fmt::format("LabelledDataset {}: id {} is out of range for vocab {}", name_, id, vocab_size()));
}

}  // namespace headroom
