#include "nn/feed_forward.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "autograd/ops.hpp"

namespace headroom {

Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_tanh") return Activation::gelu_tanh;
  if (name == "relu") return Activation::relu;
  throw std::invalid_argument(
      fmt::format("activation must be one of gelu, gelu_tanh, relu; got '{}'", name));
}

std::string to_string(Activation activation) {
  switch (activation) {
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::relu: return "relu";
  }
  return "?";
}

template <typename T>
Tensor<T> activate(const Tensor<T>& x, Activation activation) {
  switch (activation) {
    case Activation::gelu: return gelu(x);
    case Activation::gelu_tanh: return gelu_tanh(x);
    case Activation::relu: return relu(x);
  }
  throw std::invalid_argument("activate: unknown activation");
}

template <typename T>
FeedForward<T>::FeedForward(const FeedForwardOptions& options, Rng& rng) : options_(options) {
  const LinearOptions in{.in_features = options.d_model, .out_features = options.d_ff, .bias = options.bias,
                         .init_std = options.init_std};
  const LinearOptions out{.in_features = options.d_ff, .out_features = options.d_model, .bias = options.bias,
                          .init_std = options.out_init_std};
  if (options.type == FeedForwardType::mlp) {
    fc1_ = std::make_unique<Linear<T>>(in, rng);
    fc2_ = std::make_unique<Linear<T>>(out, rng);
    this->register_module("fc1", *fc1_);
    this->register_module("fc2", *fc2_);
  } else {
    gate_proj_ = std::make_unique<Linear<T>>(in, rng);
    up_proj_ = std::make_unique<Linear<T>>(in, rng);
    down_proj_ = std::make_unique<Linear<T>>(out, rng);
    this->register_module("gate_proj", *gate_proj_);
    this->register_module("up_proj", *up_proj_);
    this->register_module("down_proj", *down_proj_);
  }
}

template <typename T>
Tensor<T> FeedForward<T>::forward(const Tensor<T>& x) const {
  if (fc1_) return fc2_->forward(activate(fc1_->forward(x), options_.activation));
  return down_proj_->forward(swiglu(gate_proj_->forward(x), up_proj_->forward(x)));
}

template Tensor<float> activate(const Tensor<float>&, Activation);
template Tensor<double> activate(const Tensor<double>&, Activation);
template class FeedForward<float>;
template class FeedForward<double>;

}  // namespace headroom
