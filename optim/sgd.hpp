// Stochastic gradient descent with momentum, exactly as torch.optim.SGD (PyTorch
// 1.13); tests/test_optim.cpp checks five steps against PyTorch.
//
// For each parameter p with gradient g:
//   d = g + wd * p                          weight decay as L2 in the gradient
//   b = d                                   at the parameter's first update
//   b = momentum * b + (1 - dampening) * d  at later ones (momentum_buffer)
//   d = d + momentum * b                    nesterov (Sutskever et al., 2013, as PyTorch writes it)
//   d = b                                   otherwise
//   p = p - lr * d
// With momentum = 0 there is no buffer and the update is p - lr * d. This is
// PyTorch's formulation (lr multiplies the buffer on the way out), not Sutskever's
// v = mu v - lr g, which differs when lr changes between steps.
#pragma once

#include <string>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

#include "optim/optimizer.hpp"

namespace headroom {

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0;       // in [0, 1); PyTorch's default 0 is plain SGD
  double dampening = 0;      // in [0, 1]
  double weight_decay = 0;   // L2: added to the gradient as wd * p
  bool nesterov = false;     // needs momentum > 0 and dampening = 0
  bool exclude_from_decay = false;  // see excluded_from_decay()
};

// One parameter's state, shaped like the parameter.
template <typename T>
struct SGDState {
  // PyTorch's buffer is None until the parameter's first update, which copies d
  // into it undamped; we keep a zero buffer and this flag instead.
  bool has_momentum_buffer = false;
  xt::xarray<T> momentum_buffer;
};

template <typename T>
class SGD final : public Optimizer<T> {
 public:
  explicit SGD(NamedParameters<T> params, const SGDOptions& options = {});
  void step() override;

  // As constructed; lr() is the current rate.
  const SGDOptions& options() const { return options_; }
  const SGDState<T>& state(const std::string& name) const { return states_[this->index_of(name)]; }
  const xt::xarray<T>& momentum_buffer(const std::string& name) const {
    return state(name).momentum_buffer;
  }
  // For exact resume: the buffer must have the parameter's shape.
  void set_state(const std::string& name, SGDState<T> state);

 private:
  SGDOptions options_;
  std::vector<SGDState<T>> states_;  // parallel to parameters()
};

}  // namespace headroom
