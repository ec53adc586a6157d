// The position-wise feed-forward network: fc2(activation(fc1(x))),
// fc1 (d_ff, d_model), fc2 (d_model, d_ff).
#pragma once

#include <string>

#include "nn/linear.hpp"

namespace headroom {

enum class Activation { gelu, gelu_tanh, relu };

// "gelu" (exact, erf), "gelu_tanh", "relu"; anything else is an error listing them.
Activation parse_activation(const std::string& name);
std::string to_string(Activation activation);

template <typename T>
Tensor<T> activate(const Tensor<T>& x, Activation activation);

struct FeedForwardOptions {
  std::size_t d_model = 0;
  std::size_t d_ff = 0;
  Activation activation = Activation::gelu;
  bool bias = true;
  double init_std = 0.02;
  double out_init_std = 0.02;  // fc2, which writes into the residual stream
};

template <typename T>
class FeedForward : public Module<T> {
 public:
  FeedForward(const FeedForwardOptions& options, Rng& rng);
  // x (..., d_model) -> (..., d_model)
  Tensor<T> forward(const Tensor<T>& x) const;

 private:
  FeedForwardOptions options_;
  Linear<T> fc1_;
  Linear<T> fc2_;
};

}  // namespace headroom
