#include "nn/convert.hpp"

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "autograd/random.hpp"

namespace headroom {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Rows per kv head of a pooled tensor (d_k for k_proj, d_v for v_proj, 1 for
// key_smear), or 0 for a tensor that is copied.
std::size_t rows_per_head(const std::string& name, const ModelConfig& c) {
  if (name.find(".attn.") == std::string::npos) return 0;
  if (ends_with(name, ".attn.k_proj.weight") || ends_with(name, ".attn.k_proj.bias")) return c.d_k;
  if (ends_with(name, ".attn.v_proj.weight") || ends_with(name, ".attn.v_proj.bias")) return c.d_v;
  if (ends_with(name, ".attn.key_smear")) return 1;
  return 0;
}

// x: (G0 rows, ...) -> (G rows, ...): new head g' is the mean of old heads [g' r, (g'+1) r).
template <typename T>
xt::xarray<T> pool_rows(const xt::xarray<T>& x, std::size_t rows, std::size_t g0, std::size_t g,
                        const std::string& name) {
  if (x.dimension() == 0 || x.shape()[0] != g0 * rows) {
    throw std::invalid_argument(fmt::format("pool_kv_heads: {} has {} rows but {} kv heads of {} rows make {}", name,
                                            x.dimension() == 0 ? 0 : x.shape()[0], g0, rows, g0 * rows));
  }
  const std::size_t r = g0 / g;
  const std::size_t width = x.size() / x.shape()[0];  // elements per row
  auto shape = x.shape();
  shape[0] = g * rows;
  xt::xarray<T> out = xt::zeros<T>(shape);
  const T* in = x.data();
  T* o = out.data();
  // Summed in the old heads' order, then divided once; r = 1 copies exactly (x / 1 is x).
  for (std::size_t h = 0; h < g; ++h) {
    for (std::size_t i = 0; i < rows * width; ++i) {
      T sum = in[(h * r * rows) * width + i];
      for (std::size_t m = 1; m < r; ++m) sum += in[((h * r + m) * rows) * width + i];
      o[(h * rows) * width + i] = sum / static_cast<T>(r);
    }
  }
  return out;
}

}  // namespace

ResolvedModelConfig pooled_kv_config(const ModelConfig& config, std::size_t n_kv_heads) {
  const ResolvedModelConfig from = config.resolved();
  const std::size_t g0 = from->n_kv_heads;
  if (n_kv_heads == 0 || n_kv_heads > g0 || g0 % n_kv_heads != 0) {
    throw std::invalid_argument(fmt::format(
        "kv heads {}: mean-pooling needs a divisor of the model's n_kv_heads {} (n_heads {})", n_kv_heads, g0,
        from->n_heads));
  }
  ModelConfig out = from.get();
  out.n_kv_heads = n_kv_heads;
  return out.resolved();
}

template <typename T>
StateDict<T> pool_kv_heads(const StateDict<T>& state, const ModelConfig& config, std::size_t n_kv_heads) {
  const ResolvedModelConfig from = config.resolved();
  (void)pooled_kv_config(from, n_kv_heads);
  StateDict<T> out;
  out.reserve(state.size());
  for (const auto& [name, value] : state) {
    const std::size_t rows = rows_per_head(name, from);
    out.emplace_back(name, rows == 0 ? value : pool_rows(value, rows, from->n_kv_heads, n_kv_heads, name));
  }
  return out;
}

template <typename T>
std::unique_ptr<TransformerLM<T>> pool_kv_heads(const TransformerLM<T>& model, std::size_t n_kv_heads) {
  const ResolvedModelConfig to = pooled_kv_config(model.config(), n_kv_heads);
  const StateDict<T> state = pool_kv_heads(model.state_dict(), model.config(), n_kv_heads);
  Rng rng(0);  // every value is overwritten by the load
  auto out = std::make_unique<TransformerLM<T>>(to, rng);
  out->load_state_dict(state);
  return out;
}

template StateDict<float> pool_kv_heads(const StateDict<float>&, const ModelConfig&, std::size_t);
template StateDict<double> pool_kv_heads(const StateDict<double>&, const ModelConfig&, std::size_t);
template std::unique_ptr<TransformerLM<float>> pool_kv_heads(const TransformerLM<float>&, std::size_t);
template std::unique_ptr<TransformerLM<double>> pool_kv_heads(const TransformerLM<double>&, std::size_t);

}  // namespace headroom
