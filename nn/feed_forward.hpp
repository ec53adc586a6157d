// The position-wise feed-forward network, one of:
//   mlp:    fc2(activation(fc1(x))),                fc1 (d_ff, d_model), fc2 (d_model, d_ff)
//   swiglu: down_proj(silu(gate_proj(x)) * up_proj(x)) (Shazeer, 2020),
//           gate_proj and up_proj (d_ff, d_model), down_proj (d_model, d_ff).
// The last projection (fc2 or down_proj) writes into the residual stream and is drawn
// with out_init_std.
#pragma once

#include <memory>
#include <string>

#include "nn/linear.hpp"

namespace headroom {

enum class Activation { gelu, gelu_tanh, relu };
// mlp: fc2(activation(fc1(x))); swiglu: down_proj(silu(gate_proj(x)) * up_proj(x)).
enum class FeedForwardType { mlp, swiglu };

// "gelu" (exact, erf), "gelu_tanh", "relu"; anything else is an error listing them.
Activation parse_activation(const std::string& name);
std::string to_string(Activation activation);

template <typename T>
Tensor<T> activate(const Tensor<T>& x, Activation activation);

struct FeedForwardOptions {
  std::size_t d_model = 0;
  std::size_t d_ff = 0;
  Activation activation = Activation::gelu;  // mlp only; SwiGLU's gate is always silu
  bool bias = true;
  double init_std = 0.02;
  double out_init_std = 0.02;  // fc2 or down_proj, which writes into the residual stream
  FeedForwardType type = FeedForwardType::mlp;
};

template <typename T>
class FeedForward : public Module<T> {
 public:
  // Draws fc1 then fc2, or gate_proj, up_proj then down_proj, from rng.
  FeedForward(const FeedForwardOptions& options, Rng& rng);
  // x (..., d_model) -> (..., d_model)
  Tensor<T> forward(const Tensor<T>& x) const;

 private:
  FeedForwardOptions options_;
  std::unique_ptr<Linear<T>> fc1_;        // mlp: (d_ff, d_model)
  std::unique_ptr<Linear<T>> fc2_;        // mlp: (d_model, d_ff)
  std::unique_ptr<Linear<T>> gate_proj_;  // swiglu: (d_ff, d_model)
  std::unique_ptr<Linear<T>> up_proj_;    // swiglu: (d_ff, d_model)
  std::unique_ptr<Linear<T>> down_proj_;  // swiglu: (d_model, d_ff)
};

}  // namespace headroom
