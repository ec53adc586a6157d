#include "train/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "autograd/ops.hpp"

namespace headroom {
namespace {

// Sums of one evaluation: the losses weighted back to sums, so that batches of
// different sizes combine exactly, and the argmax hits.
struct Tally {
  double loss_sum = 0;
  std::size_t correct = 0;
  std::size_t counted = 0;
  double bayes_sum = 0;
  bool knows_truth = true;  // every batch so far carried target_nll
  double early_sum = 0, late_sum = 0;  // icl_score's windows (EvalResult)
  std::size_t early = 0, late = 0;

  // Adds the per-target losses of the first and last quarter of the context.
  void add_icl(const Tensor<float>& logits, const IndexArray& targets, bool skip_pad) {
    const std::size_t B = targets.shape()[0], T = targets.shape()[1], V = logits.shape()[2];
    const std::size_t q = std::max<std::size_t>(1, T / 4);
    const float* pl = logits.value().data();
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t t = 0; t < T; ++t) {
        const bool in_early = t < q, in_late = t >= T - q;
        if (!in_early && !in_late) continue;
        const Index target = targets(b, t);
        if (skip_pad && target == 0) continue;
        const float* row = pl + (b * T + t) * V;
        const double top = *std::max_element(row, row + V);
        double z = 0;
        for (std::size_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - top);
        const double nll = top + std::log(z) - static_cast<double>(row[target]);
        if (in_early) {
          early_sum += nll;
          ++early;
        }
        if (in_late) {
          late_sum += nll;
          ++late;
        }
      }
    }
  }

  // The Bayes loss of a batch's counted targets, or none when it does not know it.
  void add_truth(const Batch& b) {
    if (!b.knows_truth()) {
      knows_truth = false;
      return;
    }
    for (std::size_t i = 0; i < b.target_nll.size(); ++i) {
      if (b.target_mask.data()[i]) bayes_sum += b.target_nll[i];
    }
  }

  // logits (B, T, V); targets (B, T); counts (B, T) or nullptr for all targets.
  void add(const Tensor<float>& logits, const IndexArray& targets, const Mask* counts) {
    std::size_t n = targets.size();
    if (counts != nullptr) n = static_cast<std::size_t>(std::count(counts->begin(), counts->end(), true));
    const Tensor<float> loss = counts != nullptr ? cross_entropy(logits, targets, *counts) : cross_entropy(logits, targets);
    loss_sum += static_cast<double>(loss.item()) * static_cast<double>(n);
    counted += n;
    const std::size_t V = logits.shape()[2];
    const float* pl = logits.value().data();
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (counts != nullptr && !counts->data()[i]) continue;
      const float* row = pl + i * V;
      const auto arg = static_cast<Index>(std::max_element(row, row + V) - row);
      correct += arg == targets.data()[i] ? 1 : 0;
    }
  }

  EvalResult result() const {
    EvalResult r;
    r.counted = counted;
    if (counted > 0) {
      r.loss = loss_sum / static_cast<double>(counted);
      r.accuracy = static_cast<double>(correct) / static_cast<double>(counted);
      if (knows_truth) r.bayes_loss = bayes_sum / static_cast<double>(counted);
    }
    if (early > 0 && late > 0) {
      r.icl_score = late_sum / static_cast<double>(late) - early_sum / static_cast<double>(early);
    }
    return r;
  }
};

}  // namespace

EvalScope::EvalScope(TransformerLM<float>& model) : model_(model), was_training_(model.is_training()) { model_.eval(); }

EvalScope::~EvalScope() { model_.train(was_training_); }

std::vector<Batch> validation_batches(const Dataset& data, std::size_t batches, std::size_t batch,
                                      std::uint64_t seed) {
  if (std::optional<std::vector<Batch>> fixed = data.fixed_validation(batches, batch)) return *std::move(fixed);
  Rng rng(seed);
  std::vector<Batch> out;
  out.reserve(batches);
  for (std::size_t i = 0; i < batches; ++i) out.push_back(data.sample(batch, Split::val, rng));
  return out;
}

double bits_per_char(double nats_per_char) { return nats_per_char / std::numbers::ln2; }

std::optional<double> bayes_loss(const std::vector<Batch>& batches) {
  Tally tally;  // the same sum in the same order as evaluate_batches
  for (const Batch& b : batches) {
    tally.add_truth(b);
    tally.counted += static_cast<std::size_t>(std::count(b.target_mask.begin(), b.target_mask.end(), true));
  }
  return tally.result().bayes_loss;
}

EvalResult evaluate_batches(TransformerLM<float>& model, const std::vector<Batch>& batches) {
  const EvalScope scope(model);
  Tally tally;
  for (const Batch& b : batches) {
    const auto [inputs, targets] = shift_tokens(b.tokens);
    const Tensor<float> logits = model.forward(inputs);  // (B, T, V)
    tally.add(logits, targets, &b.target_mask);
    tally.add_icl(logits, targets, b.knows_truth());
    tally.add_truth(b);
  }
  return tally.result();
}

EvalResult evaluate(TransformerLM<float>& model, const Dataset& data, std::size_t batches, std::size_t batch,
                    std::uint64_t seed) {
  return evaluate_batches(model, validation_batches(data, batches, batch, seed));
}

EvalResult evaluate_windows(TransformerLM<float>& model, std::span<const Index> ids, std::size_t T, std::size_t batch,
                            std::size_t max_batches, std::size_t& batches_done) {
  const EvalScope scope(model);
  const std::size_t targets = ids.size() - 1;
  const std::size_t full = targets / T;  // windows of T targets
  const std::size_t rest = targets % T;  // targets of the last, shorter window
  Tally tally;
  tally.knows_truth = false;  // a text's distribution is unknown
  batches_done = 0;
  auto run = [&](std::size_t first_window, std::size_t windows, std::size_t len) {  // len targets per window
    IndexArray tokens = IndexArray::from_shape({windows, len + 1});  // (B, len+1)
    for (std::size_t w = 0; w < windows; ++w) {
      const std::size_t start = (first_window + w) * T;
      std::copy_n(ids.begin() + static_cast<std::ptrdiff_t>(start), len + 1, tokens.data() + w * (len + 1));
    }
    const auto [inputs, next] = shift_tokens(tokens);
    tally.add(model.forward(inputs), next, nullptr);  // logits (B, len, V)
    ++batches_done;
  };
  const auto more = [&] { return max_batches == 0 || batches_done < max_batches; };
  for (std::size_t w = 0; w < full && more(); w += batch) run(w, std::min(batch, full - w), T);
  if (rest > 0 && more()) run(full, 1, rest);
  return tally.result();
}

}  // namespace headroom
