// A text classifier's data as rows for the same decoder-only model every task trains
// (docs/design.md #27): an item's characters, the separator, its label as one token,
//
//     row  = c_1 ... c_n | L _ _ ...        (T+1 ids, pad after)
//     mask =  0  ...  0  1 0 0 ...          (only the label counts)
//
// so the model reads the whole item causally and predicts the label at the separator.
// An item longer than T-1 characters keeps its first T-1. Ids: 0 pad, 1 separator
// (as in every task, data/task.hpp), then the alphabet (the corpus's distinct code
// points, sorted), then a token per label (sorted names).
//
// Legend: T = seq_len, C = alphabet size, L = labels, V = 2 + C + L.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "data/char_vocab.hpp"
#include "data/corpus.hpp"
#include "data/dataset.hpp"
#include "data/task.hpp"

namespace headroom {

// One item as a row: what the model reads, where it answers, and the answer.
struct LabelledRow {
  std::vector<Index> ids;     // (T+1)
  std::size_t position = 0;   // t: the separator's index, where the label is predicted
  std::size_t label = 0;      // index into labels()
  bool truncated = false;     // the item had more than T-1 characters
};

class LabelledDataset : public Dataset {
 public:
  // Splits `corpus` (a labelled one) by item_split. Throws DataError for a text
  // corpus, seq_len below 2, and a split without items.
  LabelledDataset(const Corpus& corpus, std::size_t seq_len);

  std::string name() const override { return name_; }
  std::size_t vocab_size() const override { return 2 + vocab_.size() + labels_.size(); }
  std::size_t seq_len() const override { return seq_len_; }
  // Items drawn uniformly from the split, with replacement.
  Batch sample(std::size_t batch, Split split, Rng& rng) const override;
  // batches * batch val items spread evenly over the split (item j * n / (batches *
  // batch); every item once when the split has no more), so that every run of a
  // sweep is scored on the same items whatever its seed: differences between runs
  // are then the models', not the draws'. The last batch is shorter when the split
  // has fewer items than asked for.
  std::optional<std::vector<Batch>> fixed_validation(std::size_t batches, std::size_t batch) const override;

  const CharVocab& vocab() const { return vocab_; }
  const std::vector<std::string>& labels() const { return labels_; }
  // The token of label index `label`.
  Index label_token(std::size_t label) const { return static_cast<Index>(2 + vocab_.size() + label); }

  std::size_t items(Split split) const { return split_items(split).size(); }
  // Item i of a split, in the corpus's order, as a row.
  LabelledRow row(Split split, std::size_t i) const;
  // Any text as a row with label index `label` (for attention maps and patching); a
  // character outside the alphabet is a DataError naming `what`.
  LabelledRow encode(const std::u32string& text, std::size_t label, std::string_view what) const;
  // Items of a split with more than T-1 characters.
  std::size_t truncated(Split split) const;
  // Items of a split by label index.
  std::vector<std::size_t> label_counts(Split split) const;
  // What the corpus left out while reading (Corpus::duplicates, Corpus::ambiguous).
  std::size_t duplicates() const { return duplicates_; }
  std::size_t ambiguous() const { return ambiguous_; }

  // A pair for activation patching (docs/design.md #22): a val item (clean) and a val
  // item of another label (corrupted), both cut to the shorter one's length (at most
  // T-1 characters) so that their separators, where the label is predicted, line up.
  // The answers are the two labels' tokens. Throws DataError when the val split has
  // one label only.
  PatchPair patch_pair(Rng& rng) const;

  // A token as text: a character, "|" for the separator, "_" for pad, "<label>".
  std::string token_text(Index id) const;

 private:
  struct Item {
    std::vector<Index> chars{};  // alphabet ids, not yet offset
    std::size_t label = 0;
  };
  const std::vector<Item>& split_items(Split split) const { return split == Split::train ? train_ : val_; }
  LabelledRow make_row(const std::vector<Index>& chars, std::size_t label) const;

  std::string name_;
  std::size_t seq_len_;
  CharVocab vocab_;
  std::vector<std::string> labels_;
  std::vector<Item> train_, val_;
  std::size_t duplicates_ = 0, ambiguous_ = 0;
};

}  // namespace headroom
