// Adam and AdamW, exactly as torch.optim.Adam and torch.optim.AdamW (PyTorch 1.13,
// amsgrad off); tests/test_optim.cpp checks five steps of each against PyTorch.
//
// Adam (Kingma and Ba, 2015, Algorithm 1, with eps added after the square root).
// For each parameter p with gradient g, at its t-th update (t counts from 1):
//   g     = g + wd * p                       Adam only: weight decay as L2 in the gradient
//   p     = p * (1 - lr * wd)                AdamW only: decoupled weight decay
//                                            (Loshchilov and Hutter, 2019), before the update
//   m     = beta1 * m + (1 - beta1) * g      first moment, exp_avg
//   v     = beta2 * v + (1 - beta2) * g^2    second moment, exp_avg_sq
//   m_hat = m / (1 - beta1^t)                bias corrections
//   v_hat = v / (1 - beta2^t)
//   p     = p - lr * m_hat / (sqrt(v_hat) + eps)
// We evaluate the last line in PyTorch's order, p - (lr / (1 - beta1^t)) * m /
// (sqrt(v) / sqrt(1 - beta2^t) + eps), so double precision agrees with it to
// rounding. Scalars are computed in double and the elementwise loop runs in T.
//
// Under L2 decay (Adam) the decay term is divided by sqrt(v_hat) like the rest of
// the gradient, so parameters with large gradients are decayed less; AdamW's
// decoupled decay shrinks every decayed parameter by the same factor.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

#include "optim/optimizer.hpp"

namespace headroom {

struct AdamOptions {
  double lr = 3e-4;
  double beta1 = 0.9;         // in [0, 1)
  double beta2 = 0.999;       // in [0, 1)
  double eps = 1e-8;          // > 0, added after the square root
  double weight_decay = 0;    // L2: added to the gradient as wd * p
  bool exclude_from_decay = false;  // see excluded_from_decay()
  bool decay_embeddings = false;    // with exclude_from_decay: *emb.weight is decayed too
};

struct AdamWOptions {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // decoupled: p *= 1 - lr * wd; PyTorch's AdamW default
  // On by default: decoupled decay is meant for the weight matrices, and pulling
  // LayerNorm gains, biases and embeddings towards 0 is the usual mistake it invites.
  bool exclude_from_decay = true;
  // With exclude_from_decay: the embeddings are decayed too, only tensors of fewer
  // than 2 axes are not (nanoGPT's rule; excluded_from_decay()).
  bool decay_embeddings = false;
};

// One parameter's state, shaped like the parameter.
template <typename T>
struct AdamState {
  std::size_t step = 0;      // updates this parameter has had: its bias-correction t
  xt::xarray<T> exp_avg;     // m
  xt::xarray<T> exp_avg_sq;  // v
};

// Adam and AdamW keep the same state and differ only in where weight decay enters.
template <typename T>
class AdamFamily : public Optimizer<T> {
 public:
  void step() override;

  const AdamState<T>& state(const std::string& name) const { return states_[this->index_of(name)]; }
  const xt::xarray<T>& exp_avg(const std::string& name) const { return state(name).exp_avg; }
  const xt::xarray<T>& exp_avg_sq(const std::string& name) const { return state(name).exp_avg_sq; }
  // For exact resume: both moments must have the parameter's shape.
  void set_state(const std::string& name, AdamState<T> state);

 protected:
  // AdamW passes its options as AdamOptions; decoupled_decay says where wd enters.
  AdamFamily(const char* name, NamedParameters<T> params, const AdamOptions& options,
             bool decoupled_decay);

 private:
  double beta1_, beta2_, eps_;
  bool decoupled_decay_;
  std::vector<AdamState<T>> states_;  // parallel to parameters()
};

// torch.optim.Adam: weight decay, when on, is L2 added to the gradient.
template <typename T>
class Adam final : public AdamFamily<T> {
 public:
  explicit Adam(NamedParameters<T> params, const AdamOptions& options = {});
  // As constructed; lr() is the current rate.
  const AdamOptions& options() const { return options_; }

 private:
  AdamOptions options_;
};

// torch.optim.AdamW: decoupled weight decay, p *= 1 - lr * wd before the Adam update.
template <typename T>
class AdamW final : public AdamFamily<T> {
 public:
  explicit AdamW(NamedParameters<T> params, const AdamWOptions& options = {});
  // As constructed; lr() is the current rate.
  const AdamWOptions& options() const { return options_; }

 private:
  AdamWOptions options_;
};

}  // namespace headroom
