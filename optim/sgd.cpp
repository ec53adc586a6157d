// The SGD update (formulas in sgd.hpp): one plain loop per parameter over
// contiguous memory, in PyTorch's order of operations.
#include "optim/sgd.hpp"

#include <stdexcept>

#include <fmt/format.h>
#include <xtensor/xbuilder.hpp>

#include "optim/validate.hpp"

namespace headroom {

template <typename T>
SGD<T>::SGD(NamedParameters<T> params, const SGDOptions& options)
    : Optimizer<T>("SGD", std::move(params), options.lr, options.weight_decay,
                   options.exclude_from_decay),
      options_(options) {
  detail::require_unit_interval_open("SGD", "momentum", options.momentum);
  if (!(options.dampening >= 0 && options.dampening <= 1)) {
    throw std::invalid_argument(
        fmt::format("SGD: dampening must be in [0, 1], got {}", options.dampening));
  }
  if (options.nesterov && (options.momentum == 0 || options.dampening != 0)) {
    throw std::invalid_argument(
        fmt::format("SGD: nesterov needs momentum > 0 and dampening = 0, got momentum {} and "
                    "dampening {}",
                    options.momentum, options.dampening));
  }
  states_.reserve(this->params_.size());
  for (const auto& [pname, p] : this->params_) {
    states_.push_back({.has_momentum_buffer = false, .momentum_buffer = xt::zeros<T>(p.shape())});
  }
}

template <typename T>
void SGD<T>::set_state(const std::string& name, SGDState<T> state) {
  const std::size_t i = this->index_of(name);
  this->require_state_shape(i, "momentum_buffer", state.momentum_buffer.shape());
  states_[i] = std::move(state);
}

template <typename T>
void SGD<T>::step() {
  const T lr = static_cast<T>(this->lr_);
  const T momentum = static_cast<T>(options_.momentum);
  const T one_minus_dampening = static_cast<T>(1 - options_.dampening);
  const bool use_momentum = options_.momentum != 0;
  for (std::size_t i = 0; i < this->params_.size(); ++i) {
    SGDState<T>& s = states_[i];
    const xt::xarray<T>* grad = this->gradient_for_step(i, s.momentum_buffer.shape());
    if (grad == nullptr) continue;  // no gradient: no update, the buffer waits

    const T wd = static_cast<T>(this->decay_[i]);
    // The first update starts the buffer at d itself, undamped (PyTorch's clone).
    const bool first = !s.has_momentum_buffer;
    T* p = this->params_[i].second.mutable_value().data();
    const T* g = grad->data();
    T* b = s.momentum_buffer.data();
    for (std::size_t j = 0, n = s.momentum_buffer.size(); j < n; ++j) {
      T d = g[j] + wd * p[j];
      if (use_momentum) {
        b[j] = first ? d : b[j] * momentum + one_minus_dampening * d;
        d = options_.nesterov ? d + momentum * b[j] : b[j];
      }
      p[j] = p[j] + (-lr) * d;
    }
    s.has_momentum_buffer = s.has_momentum_buffer || use_momentum;
  }
  ++this->step_count_;
}

template class SGD<float>;
template class SGD<double>;

}  // namespace headroom
