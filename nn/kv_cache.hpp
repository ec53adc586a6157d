// The key/value cache of incremental decoding (docs/design.md #18): for each layer,
// the keys and values of every token already read, so that a new token costs one
// row of every projection and one row of attention over the cache instead of a
// forward pass over the whole context.
//
// Legend: B = rows (sequences) the cache holds, N = capacity (tokens per row, at
// most max_len), G = n_kv_heads, d_k, d_v per head, L_b = tokens row b holds.
//
// Layout: per layer, K transposed, (B, G, d_k, N'), and V (B, G, N, d_v), where N' is
// N padded (rows of K^T a multiple of 4 KiB apart fight over the same cache sets), so that one
// kv head's keys and values are contiguous and every query head of its group reads
// them in place (no copy per query head: grouped-query attention's saving is memory
// read, and this is where it shows); a query's scores are then d_k vector updates
// along the keys, and its output L_b updates along d_v. A key is stored as the scores read it: after qk_norm,
// key_smear and rope, at its absolute position. A cache holds
// n_layers * G (d_k + d_v) values per token (kv_cache_floats_per_token).
#pragma once

#include <cstddef>
#include <vector>

#include "autograd/tensor.hpp"

namespace headroom {

struct ModelConfig;  // nn/config.hpp, which includes this file's users

template <typename T>
struct LayerKVCache {
  xt::xarray<T> k;       // (B, G, d_k, N'): keys, transposed (row stride N' >= N), after qk_norm, key_smear and rope
  xt::xarray<T> v;       // (B, G, N, d_v)
  xt::xarray<T> k_last;  // (B, G d_k), key_smear only: each row's newest key before the smear
};

template <typename T>
class KVCache {
 public:
  // A cache for `batch` rows of up to `capacity` tokens each; 0 means the model's
  // max_len, and more than max_len is refused (the learned or sinusoidal table ends
  // there). Throws std::invalid_argument naming the value for batch 0 or a capacity
  // above max_len. Allocates every buffer now: bytes() is what it holds.
  KVCache(const ModelConfig& config, std::size_t batch, std::size_t capacity = 0);

  std::size_t batch() const { return lengths_.size(); }
  std::size_t capacity() const { return capacity_; }
  std::size_t n_layers() const { return layers_.size(); }
  // Tokens row `row` holds (its next token's position).
  std::size_t length(std::size_t row) const { return lengths_.at(row); }
  const std::vector<std::size_t>& lengths() const { return lengths_; }
  // Empties every row (the buffers stay allocated).
  void clear();
  void clear_row(std::size_t row);
  // The bytes the cache holds at full capacity: n_layers B N G (d_k + d_v) sizeof(T)
  // (the keys' few padding columns not counted; allocated_bytes() counts them).
  std::size_t bytes() const;
  std::size_t allocated_bytes() const;
  // The bytes one token of one row takes in every layer: n_layers G (d_k + d_v) sizeof(T).
  static std::size_t bytes_per_token(const ModelConfig& config);

  LayerKVCache<T>& layer(std::size_t i) { return layers_.at(i); }
  const LayerKVCache<T>& layer(std::size_t i) const { return layers_.at(i); }
  // Rows [row0, row0 + n) now hold `added` more tokens each; the model calls this
  // after every layer has written them.
  void advance(std::size_t row0, std::size_t n, std::size_t added);

 private:
  std::size_t capacity_ = 0;
  std::vector<std::size_t> lengths_;  // (B)
  std::vector<LayerKVCache<T>> layers_;
};

}  // namespace headroom
