// Linear: y = x W^T + b, with W (out, in) as in PyTorch's state_dict.
#pragma once

#include "nn/module.hpp"

namespace headroom {

struct LinearOptions {
  std::size_t in_features = 0;
  std::size_t out_features = 0;
  bool bias = true;
  // Weights are drawn from N(0, init_std^2) and biases start at zero, as GPT-2 and
  // nanoGPT initialise transformers (PyTorch's own default is a uniform
  // +-1/sqrt(in_features)).
  double init_std = 0.02;
};

template <typename T>
class Linear : public Module<T> {
 public:
  Linear(const LinearOptions& options, Rng& rng);
  // x (..., in) -> (..., out)
  Tensor<T> forward(const Tensor<T>& x) const;

  const Tensor<T>& weight() const { return weight_; }  // (out, in)
  const Tensor<T>& bias() const { return bias_; }      // (out), undefined without bias
  const LinearOptions& options() const { return options_; }

 private:
  LinearOptions options_;
  Tensor<T> weight_;
  Tensor<T> bias_;
};

}  // namespace headroom
