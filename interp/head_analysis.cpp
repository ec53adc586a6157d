#include "interp/head_analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "data/char_dataset.hpp"

namespace headroom {
namespace {

// Gates every head of every layer at one except (layer, head) at zero; or clears
// every gate when `off` is empty.
void gate_out(TransformerLM<float>& model, const std::vector<std::pair<std::size_t, std::size_t>>& off) {
  for (std::size_t l = 0; l < model.n_layers(); ++l) {
    MultiHeadAttention<float>& attn = model.block(l).attention();
    if (off.empty()) {
      attn.clear_head_gate();
      continue;
    }
    xt::xarray<float> gate = xt::ones<float>({attn.options().n_heads});
    for (const auto& [layer, head] : off) {
      if (layer == l) gate(head) = 0.0f;
    }
    attn.set_head_gate(Tensor<float>(std::move(gate)));
  }
}

// Running sums of the per-query attention statistics of one head.
struct AttentionSums {
  double confidence = 0, entropy = 0, previous = 0, induction = 0, repeat = 0, word = 0, line = 0;
  std::size_t queries = 0, induction_queries = 0, repeat_queries = 0, word_queries = 0, line_queries = 0;
  std::map<long, std::size_t> offsets;  // query - argmax key -> count
};

// Adds one batch's weights (B, H, T, T) of one layer to `sums` (one per head).
// For each position q of row b, the latest position k < q holding one of `breaks`,
// or T when there is none (or no breaks).
std::vector<std::size_t> latest_breaks(const IndexArray& inputs, std::size_t b, const std::vector<Index>& breaks) {
  const std::size_t T = inputs.shape()[1];
  std::vector<std::size_t> latest(T, T);
  if (breaks.empty()) return latest;
  std::size_t last = T;
  for (std::size_t q = 0; q < T; ++q) {
    latest[q] = last;
    if (std::find(breaks.begin(), breaks.end(), inputs(b, q)) != breaks.end()) last = q;
  }
  return latest;
}

void add_attention(const xt::xarray<float>& w, const IndexArray& inputs, const AttentionProbes& probes,
                   std::vector<AttentionSums>& sums) {
  const std::size_t B = w.shape()[0], H = w.shape()[1], T = w.shape()[2];
  const std::size_t period = probes.repeat_period;
  for (std::size_t b = 0; b < B; ++b) {
    const std::vector<std::size_t> word = latest_breaks(inputs, b, probes.word_breaks);
    const std::vector<std::size_t> line = latest_breaks(inputs, b, probes.line_breaks);
    // latest[q]: the latest position p < q holding inputs(b, q), or T if none.
    std::vector<std::size_t> latest(T, T);
    std::map<Index, std::size_t> seen;
    for (std::size_t q = 0; q < T; ++q) {
      const Index id = inputs(b, q);
      if (const auto it = seen.find(id); it != seen.end()) latest[q] = it->second;
      seen[id] = q;
    }
    for (std::size_t h = 0; h < H; ++h) {
      AttentionSums& s = sums[h];
      for (std::size_t q = 1; q < T; ++q) {
        const float* row = &w(b, h, q, 0);
        std::size_t arg = 0;
        double entropy = 0;
        for (std::size_t k = 0; k <= q; ++k) {
          if (row[k] > row[arg]) arg = k;
          if (row[k] > 0) entropy -= static_cast<double>(row[k]) * std::log(static_cast<double>(row[k]));
        }
        s.confidence += row[arg];
        s.entropy += entropy;
        s.previous += row[q - 1];
        ++s.offsets[static_cast<long>(q) - static_cast<long>(arg)];
        ++s.queries;
        if (latest[q] < T) {
          s.induction += row[latest[q] + 1];  // latest[q] + 1 <= q: inside the causal window
          ++s.induction_queries;
        }
        if (period > 0 && q >= period) {
          s.repeat += row[q - period + 1];
          ++s.repeat_queries;
        }
        // A break just before the query is its previous token: left to prev-token.
        if (word[q] < T && word[q] + 1 < q) {
          s.word += row[word[q]];
          ++s.word_queries;
        }
        if (line[q] < T && line[q] + 1 < q) {
          s.line += row[line[q]];
          ++s.line_queries;
        }
      }
    }
  }
}

}  // namespace

std::vector<HeadStats> attention_statistics(TransformerLM<float>& model, const std::vector<Batch>& batches,
                                            const AttentionProbes& probes) {
  const std::size_t L = model.n_layers();
  const std::size_t H = model.config().n_heads;
  std::vector<std::vector<AttentionSums>> sums(L, std::vector<AttentionSums>(H));
  {
    const EvalScope eval(model);
    for (const Batch& b : batches) {
      const auto [inputs, targets] = shift_tokens(b.tokens);
      std::vector<Tensor<float>> weights;
      model.forward(inputs, &weights);
      for (std::size_t l = 0; l < L; ++l) add_attention(weights[l].value(), inputs, probes, sums[l]);
    }
  }
  std::vector<HeadStats> out(L * H);
  for (std::size_t l = 0; l < L; ++l) {
    for (std::size_t h = 0; h < H; ++h) {
      const AttentionSums& a = sums[l][h];
      HeadStats& s = out[l * H + h];
      s.layer = l;
      s.head = h;
      const double q = static_cast<double>(std::max<std::size_t>(a.queries, 1));
      s.confidence = a.confidence / q;
      s.entropy = a.entropy / q;
      s.previous_token = a.previous / q;
      s.induction = a.induction_queries > 0 ? a.induction / static_cast<double>(a.induction_queries)
                                            : std::numeric_limits<double>::quiet_NaN();
      if (a.repeat_queries > 0) s.repeat_induction = a.repeat / static_cast<double>(a.repeat_queries);
      if (a.word_queries > 0) s.word_start = a.word / static_cast<double>(a.word_queries);
      if (a.line_queries > 0) s.line_start = a.line / static_cast<double>(a.line_queries);
      // The most frequent offset; ties to the smaller offset (the map is ordered).
      std::size_t best = 0;
      for (const auto& [offset, count] : a.offsets) {
        if (count > best) {
          best = count;
          s.dominant_offset = offset;
        }
      }
      s.offset_share = static_cast<double>(best) / q;
    }
  }
  return out;
}

HeadReport analyze_heads(TransformerLM<float>& model, const std::vector<Batch>& batches, bool importance_pass,
                         const AttentionProbes& probes) {
  if (batches.empty()) throw std::invalid_argument("analyze_heads: no validation batches");
  const bool was_training = model.is_training();
  model.eval();
  const std::size_t L = model.n_layers();
  const std::size_t H = model.config().n_heads;
  HeadReport report;
  gate_out(model, {});
  report.full = evaluate_batches(model, batches);
  // The attention statistics first, every gate open: each head's entry, layer-major.
  report.heads = attention_statistics(model, batches, probes);
  for (std::size_t l = 0; l < L; ++l) {
    for (std::size_t h = 0; h < H; ++h) {
      HeadStats& s = report.heads[l * H + h];
      gate_out(model, {{l, h}});
      s.masked = evaluate_batches(model, batches);
      s.loss_increase = s.masked.loss - report.full.loss;
      s.accuracy_drop = report.full.accuracy - s.masked.accuracy;
    }
  }

  // Importance: one backward pass per row, through gates of one that require grad.
  std::vector<double> importance(L * H, 0.0);
  const std::vector<Batch> none;
  for (const Batch& b : importance_pass ? batches : none) {
    const std::size_t rows = b.tokens.shape()[0], len = b.tokens.shape()[1];
    for (std::size_t r = 0; r < rows; ++r) {
      IndexArray tokens = IndexArray::from_shape({1, len});
      Mask mask = Mask::from_shape({1, len - 1});
      std::copy_n(b.tokens.data() + r * len, len, tokens.data());
      std::copy_n(b.target_mask.data() + r * (len - 1), len - 1, mask.data());
      if (std::none_of(mask.begin(), mask.end(), [](bool c) { return c; })) continue;
      std::vector<Tensor<float>> gates;
      for (std::size_t l = 0; l < L; ++l) {
        gates.emplace_back(xt::xarray<float>(xt::ones<float>({H})), true);
        model.block(l).attention().set_head_gate(gates.back());
      }
      model.loss(tokens, &mask).backward();
      for (std::size_t l = 0; l < L; ++l) {
        for (std::size_t h = 0; h < H; ++h) importance[l * H + h] += std::abs(static_cast<double>(gates[l].grad()(h)));
      }
      model.zero_grad();
      ++report.rows;
    }
  }
  gate_out(model, {});
  for (std::size_t l = 0; l < L; ++l) {
    double norm = 0;
    for (std::size_t h = 0; h < H; ++h) {
      importance[l * H + h] /= static_cast<double>(std::max<std::size_t>(report.rows, 1));
      norm += importance[l * H + h] * importance[l * H + h];
    }
    norm = std::sqrt(norm);
    for (std::size_t h = 0; h < H; ++h) {
      report.heads[l * H + h].importance = importance[l * H + h];
      report.heads[l * H + h].importance_in_layer = norm > 0 ? importance[l * H + h] / norm : 0.0;
    }
  }

  model.train(was_training);
  return report;
}

AttentionProbes text_probes(const Dataset& data) {
  AttentionProbes probes;
  const auto* text = dynamic_cast<const CharDataset*>(&data);
  if (text == nullptr) return probes;
  const std::u32string& alphabet = text->alphabet();
  for (const char32_t c : {U' ', U'\n'}) {
    const std::size_t id = alphabet.find(c);
    if (id == std::u32string::npos) continue;
    probes.word_breaks.push_back(static_cast<Index>(id));
    if (c == U'\n') probes.line_breaks.push_back(static_cast<Index>(id));
  }
  return probes;
}

RepeatedRows repeated_rows(const std::vector<Batch>& batches) {
  RepeatedRows out;
  for (const Batch& b : batches) {
    const std::size_t B = b.tokens.shape()[0], R = b.tokens.shape()[1], T = R - 1;
    if (R < 4) throw std::invalid_argument(fmt::format("repeated_rows: rows of {} tokens are too short to repeat", R));
    const std::size_t P = R / 2;
    out.period = P;
    Batch all{IndexArray::from_shape({B, R}), Mask::from_shape({B, T})};
    for (std::size_t r = 0; r < B; ++r) {
      for (std::size_t t = 0; t < R; ++t) all.tokens(r, t) = b.tokens(r, t % P);
    }
    Batch first{all.tokens, all.target_mask}, second{all.tokens, all.target_mask};
    for (std::size_t r = 0; r < B; ++r) {
      for (std::size_t t = 0; t < T; ++t) {  // target t is token t + 1
        all.target_mask(r, t) = true;
        first.target_mask(r, t) = t + 1 < P;
        second.target_mask(r, t) = t >= P;
      }
    }
    out.batches.push_back(std::move(all));
    out.first_copy.push_back(std::move(first));
    out.second_copy.push_back(std::move(second));
  }
  return out;
}

std::vector<PrunePoint> prune_curve(TransformerLM<float>& model, const std::vector<Batch>& batches,
                                    const std::vector<std::pair<std::size_t, std::size_t>>& order) {
  const std::size_t total = model.n_layers() * model.config().n_heads;
  std::vector<PrunePoint> curve;
  std::vector<std::pair<std::size_t, std::size_t>> off;
  gate_out(model, {});
  curve.push_back({0, 0.0, evaluate_batches(model, batches), ""});
  for (const auto& [layer, head] : order) {
    if (layer >= model.n_layers() || head >= model.config().n_heads) {
      throw std::invalid_argument(fmt::format("prune_curve: no head {} in layer {} (the model has {} layers of {} heads)",
                                              head, layer, model.n_layers(), model.config().n_heads));
    }
    off.emplace_back(layer, head);
    gate_out(model, off);
    curve.push_back({off.size(), static_cast<double>(off.size()) / static_cast<double>(total),
                     evaluate_batches(model, batches), fmt::format("layer {} head {}", layer, head)});
  }
  gate_out(model, {});
  return curve;
}

std::vector<std::pair<std::size_t, std::size_t>> heads_by(const HeadReport& report, double HeadStats::*key) {
  std::vector<const HeadStats*> heads;
  for (const HeadStats& s : report.heads) heads.push_back(&s);
  std::stable_sort(heads.begin(), heads.end(),
                   [key](const HeadStats* a, const HeadStats* b) { return a->*key < b->*key; });
  std::vector<std::pair<std::size_t, std::size_t>> order;
  for (const HeadStats* s : heads) order.emplace_back(s->layer, s->head);
  return order;
}

}  // namespace headroom
