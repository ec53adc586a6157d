#include "claims/init_scores.hpp"

#include <cmath>
#include <vector>

#include "nn/transformer.hpp"
#include "train/evaluate.hpp"
#include "train/trainer.hpp"

namespace headroom {

InitAttention init_attention(const TrainConfig& config, std::uint64_t seed, std::size_t rows) {
  const std::unique_ptr<Dataset> data = make_dataset(config);
  Rng init_rng(stream_seed(seed, kInitStream));
  TransformerLM<float> model(config.model, init_rng);
  model.eval();
  Rng val_rng(validation_seed(seed));
  const Batch batch = data->sample(rows, Split::val, val_rng);
  const auto [inputs, targets] = shift_tokens(batch.tokens);
  std::vector<Tensor<float>> weights;
  {
    const NoGrad no_grad;
    (void)model.forward(inputs, &weights);
  }

  // Each layer's weights are (B, H, T, T): [row, head, query, key].
  double sd_sum = 0, entropy_sum = 0, max_entropy_sum = 0;
  std::size_t sd_rows = 0, entropy_rows = 0;
  std::vector<double> logs;
  for (const Tensor<float>& layer : weights) {
    const xt::xarray<float>& w = layer.value();
    const std::size_t b_n = w.shape(0), h_n = w.shape(1), t_n = w.shape(2), k_n = w.shape(3);
    for (std::size_t b = 0; b < b_n; ++b) {
      for (std::size_t h = 0; h < h_n; ++h) {
        for (std::size_t t = 0; t < t_n; ++t) {
          logs.clear();
          double entropy = 0;
          for (std::size_t k = 0; k < k_n; ++k) {
            const double p = w(b, h, t, k);
            if (p <= 0) continue;  // a masked key (causal): not seen
            logs.push_back(std::log(p));
            entropy -= p * std::log(p);
          }
          if (logs.empty()) continue;
          entropy_sum += entropy;
          max_entropy_sum += std::log(static_cast<double>(logs.size()));
          ++entropy_rows;
          if (logs.size() < 2) continue;
          double mean = 0;
          for (double l : logs) mean += l;
          mean /= static_cast<double>(logs.size());
          double sq = 0;
          for (double l : logs) sq += (l - mean) * (l - mean);
          sd_sum += std::sqrt(sq / static_cast<double>(logs.size()));
          ++sd_rows;
        }
      }
    }
  }
  InitAttention out;
  out.score_sd = sd_rows == 0 ? NAN : sd_sum / static_cast<double>(sd_rows);
  out.entropy = entropy_rows == 0 ? NAN : entropy_sum / static_cast<double>(entropy_rows);
  out.max_entropy = entropy_rows == 0 ? NAN : max_entropy_sum / static_cast<double>(entropy_rows);
  return out;
}

}  // namespace headroom
