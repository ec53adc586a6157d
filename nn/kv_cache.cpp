#include "nn/kv_cache.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "nn/config.hpp"

namespace headroom {
namespace {

// K^T's row stride: the capacity rounded up to 16 values, plus 16. The d_k rows a
// query's scores read are then never a multiple of 4 KiB apart, which at a capacity of
// 1024 floats would put them all in the same L1 cache set, evicting each other on
// every query and slowing decoding several times over.
std::size_t key_stride(std::size_t capacity) { return (capacity + 15) / 16 * 16 + 16; }

}  // namespace

template <typename T>
KVCache<T>::KVCache(const ModelConfig& config, std::size_t batch, std::size_t capacity) {
  const ResolvedModelConfig resolved = config.resolved();
  const ModelConfig& c = resolved.get();
  if (!c.causal) {
    throw std::invalid_argument(
        "KV cache: the model is not causal (causal = false), so a new token changes every earlier one's output "
        "and nothing can be cached");
  }
  if (batch == 0) throw std::invalid_argument("KV cache: batch must be at least 1, got 0");
  if (capacity > c.max_len) {
    throw std::invalid_argument(fmt::format(
        "KV cache: capacity {} is above the model's max_len {} (positions end there)", capacity, c.max_len));
  }
  capacity_ = capacity == 0 ? c.max_len : capacity;
  lengths_.assign(batch, 0);
  const AttentionOptions a = attention_options(c).resolved();
  layers_.resize(c.n_layers);
  for (LayerKVCache<T>& layer : layers_) {
    layer.k = xt::zeros<T>(Shape{batch, a.n_kv_heads, a.d_k, key_stride(capacity_)});
    layer.v = xt::zeros<T>(Shape{batch, a.n_kv_heads, capacity_, a.d_v});
    if (a.key_smear) layer.k_last = xt::zeros<T>(Shape{batch, a.n_kv_heads * a.d_k});
  }
}

template <typename T>
void KVCache<T>::clear() {
  std::fill(lengths_.begin(), lengths_.end(), 0);
}

template <typename T>
void KVCache<T>::clear_row(std::size_t row) {
  lengths_.at(row) = 0;
}

template <typename T>
std::size_t KVCache<T>::bytes() const {
  std::size_t n = 0;
  for (const LayerKVCache<T>& layer : layers_) {
    const Shape& k = layer.k.shape();
    n += k[0] * k[1] * k[2] * capacity_ * sizeof(T) + layer.v.size() * sizeof(T);
  }
  return n;
}

template <typename T>
std::size_t KVCache<T>::allocated_bytes() const {
  std::size_t n = 0;
  for (const LayerKVCache<T>& layer : layers_) n += (layer.k.size() + layer.v.size()) * sizeof(T);
  return n;
}

template <typename T>
std::size_t KVCache<T>::bytes_per_token(const ModelConfig& config) {
  const ResolvedModelConfig resolved = config.resolved();
  return resolved.get().n_layers * kv_cache_floats_per_token(attention_options(resolved.get())) * sizeof(T);
}

template <typename T>
void KVCache<T>::advance(std::size_t row0, std::size_t n, std::size_t added) {
  if (row0 + n > lengths_.size()) {
    throw std::out_of_range(fmt::format("KV cache: rows [{}, {}) of {}", row0, row0 + n, lengths_.size()));
  }
  for (std::size_t b = row0; b < row0 + n; ++b) {
    if (lengths_[b] + added > capacity_) {
      throw std::invalid_argument(fmt::format("KV cache: row {} holds {} tokens of {}; {} more do not fit", b,
                                              lengths_[b], capacity_, added));
    }
    lengths_[b] += added;
  }
}

template class KVCache<float>;
template class KVCache<double>;

}  // namespace headroom
