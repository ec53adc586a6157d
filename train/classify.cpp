#include "train/classify.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "train/evaluate.hpp"

namespace headroom {

ClassScores class_scores(const std::vector<std::vector<std::size_t>>& confusion) {
  const std::size_t L = confusion.size();
  std::size_t total = 0, right = 0;
  std::vector<double> predicted(L, 0.0), actual(L, 0.0);
  for (std::size_t t = 0; t < L; ++t) {
    for (std::size_t p = 0; p < L; ++p) {
      total += confusion[t][p];
      predicted[p] += static_cast<double>(confusion[t][p]);
      actual[t] += static_cast<double>(confusion[t][p]);
    }
    right += confusion[t][t];
  }
  ClassScores s;
  if (total == 0 || L == 0) return s;
  s.accuracy = static_cast<double>(right) / static_cast<double>(total);
  double f1_sum = 0;
  for (std::size_t c = 0; c < L; ++c) {
    // F1 = 2 tp / (2 tp + fp + fn) = 2 tp / (predicted + actual): 0 when tp is.
    const double tp = static_cast<double>(confusion[c][c]);
    if (tp > 0) f1_sum += 2 * tp / (predicted[c] + actual[c]);
  }
  s.macro_f1 = f1_sum / static_cast<double>(L);
  return s;
}

ClassifierEval evaluate_classifier(TransformerLM<float>& model, const LabelledDataset& data, Split split,
                                   std::size_t batch, std::size_t max_items) {
  if (batch == 0) throw std::invalid_argument("evaluate_classifier: batch must be positive, got 0");
  const std::size_t L = data.labels().size(), T = data.seq_len(), V = data.vocab_size();
  ClassifierEval r;
  r.labels = data.labels();
  const std::size_t n = data.items(split);
  r.items = max_items == 0 ? n : std::min(max_items, n);
  // A subset is spread evenly over the split: the corpus's order is by class (a file
  // per label), so its first items would be one class.
  const auto item = [&](std::size_t j) { return r.items == n ? j : j * n / r.items; };
  r.confusion.assign(L, std::vector<std::size_t>(L, 0));
  const EvalScope scope(model);
  double loss_sum = 0;
  for (std::size_t first = 0; first < r.items; first += batch) {
    const std::size_t B = std::min(batch, r.items - first);
    IndexArray inputs = IndexArray::from_shape({B, T});  // (B, T)
    std::vector<LabelledRow> rows;
    for (std::size_t b = 0; b < B; ++b) {
      rows.push_back(data.row(split, item(first + b)));
      std::copy_n(rows.back().ids.begin(), T, inputs.data() + b * T);
      r.truncated += rows.back().truncated ? 1 : 0;
    }
    const Tensor<float> logits = model.forward(inputs);  // (B, T, V)
    const float* pl = logits.value().data();
    for (std::size_t b = 0; b < B; ++b) {
      const float* z = pl + (b * T + rows[b].position) * V;  // (V) at the separator
      const float max_z = *std::max_element(z, z + V);
      double sum = 0;
      for (std::size_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v] - max_z));
      const auto truth = static_cast<std::size_t>(data.label_token(rows[b].label));
      loss_sum += std::log(sum) - static_cast<double>(z[truth] - max_z);
      std::size_t best = 0;
      for (std::size_t c = 1; c < L; ++c) {
        if (z[data.label_token(c)] > z[data.label_token(best)]) best = c;
      }
      ++r.confusion[rows[b].label][best];
    }
  }
  r.loss = r.items == 0 ? 0 : loss_sum / static_cast<double>(r.items);
  r.scores = class_scores(r.confusion);
  const std::vector<std::size_t> train = data.label_counts(Split::train);
  r.majority = static_cast<std::size_t>(std::max_element(train.begin(), train.end()) - train.begin());
  std::vector<std::vector<std::size_t>> constant(L, std::vector<std::size_t>(L, 0));
  for (std::size_t t = 0; t < L; ++t) {
    for (std::size_t p = 0; p < L; ++p) constant[t][r.majority] += r.confusion[t][p];
  }
  r.majority_scores = class_scores(constant);
  return r;
}

}  // namespace headroom
