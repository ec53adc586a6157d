// A classifier's scores on a split (data/labelled_dataset.hpp): every item once, in
// order, rather than sampled batches, so that the numbers are those of the split and
// the same on every run. The prediction is the label token with the largest logit at
// the separator (the model's other tokens are not answers); the loss is the
// cross-entropy of the label token over the whole vocabulary, as in training.
//
// Legend: L = labels.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "data/labelled_dataset.hpp"
#include "nn/transformer.hpp"

namespace headroom {

// Accuracy and macro-F1 of a confusion matrix.
struct ClassScores {
  double accuracy = 0;
  // The mean over labels of F1 = 2 precision recall / (precision + recall); a label
  // never predicted and never true scores 0, as one predicted and never right does.
  double macro_f1 = 0;
};
// confusion[true][predicted], L x L.
ClassScores class_scores(const std::vector<std::vector<std::size_t>>& confusion);

struct ClassifierEval {
  std::vector<std::string> labels;  // (L)
  std::size_t items = 0;
  std::size_t truncated = 0;        // items longer than the rows hold (their first T-1 characters)
  double loss = 0;                  // mean cross-entropy of the label token, nats
  ClassScores scores;
  std::vector<std::vector<std::size_t>> confusion;  // (L, L): [true][predicted]
  // The majority-class baseline: train's most frequent label predicted for every item.
  std::size_t majority = 0;
  ClassScores majority_scores;
};

// Every item of `split`, `batch` items a forward pass, in eval mode with no tape (the
// model's mode comes back). When max_items is not 0 and the split has more, items
// j * n / max_items for j < max_items: spread over the split, whose order is the
// corpus's (often a class at a time).
ClassifierEval evaluate_classifier(TransformerLM<float>& model, const LabelledDataset& data, Split split,
                                   std::size_t batch, std::size_t max_items = 0);

}  // namespace headroom
