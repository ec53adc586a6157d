// The small model of the tests that sample from or save an untrained model: one
// layer, two heads, d_model 16. Its distributions are nearly uniform, which is what
// the sampling tests want (different seeds must give different text).
#pragma once

#include <cstddef>

#include "nn/config.hpp"

inline headroom::ModelConfig tiny_model_config(std::size_t vocab, std::size_t max_len) {
  return headroom::ModelConfig{.vocab = vocab, .d_model = 16, .n_layers = 1, .n_heads = 2, .max_len = max_len}
      .resolved();
}
