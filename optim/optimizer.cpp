#include "optim/optimizer.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

#include "optim/validate.hpp"

namespace headroom {

bool excluded_from_decay(const std::string& name, const Shape& shape, bool embeddings) {
  return shape.size() < 2 || (embeddings && name.ends_with("emb.weight"));
}

template <typename T>
Optimizer<T>::Optimizer(const char* name, NamedParameters<T> params, double lr,
                        double weight_decay, bool exclude_from_decay, bool decay_embeddings)
    : name_(name), params_(std::move(params)) {
  detail::require_finite_non_negative(name_, "lr", lr);
  require_in_range(lr);
  detail::require_finite_non_negative(name_, "weight_decay", weight_decay);
  lr_ = lr;
  if (params_.empty()) {
    throw std::invalid_argument(fmt::format("{}: got an empty parameter list", name_));
  }
  decay_.reserve(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& [pname, p] = params_[i];
    if (!p.defined()) {
      throw std::invalid_argument(
          fmt::format("{}: parameter '{}' is an undefined tensor", name_, pname));
    }
    // Only leaves keep their gradients (autograd/tensor.hpp), so an op's output
    // would never be updated.
    if (!p.is_leaf()) {
      throw std::invalid_argument(fmt::format(
          "{}: parameter '{}' is the output of '{}', not a leaf; optimizers update leaves only",
          name_, pname, p.op()));
    }
    if (!index_.emplace(pname, i).second) {
      throw std::invalid_argument(
          fmt::format("{}: parameter name '{}' appears twice", name_, pname));
    }
    const bool excluded = exclude_from_decay && excluded_from_decay(pname, p.shape(), !decay_embeddings);
    decay_.push_back(excluded ? 0.0 : weight_decay);
  }
}

// The update is computed in T: an lr that T cannot hold would be infinite there.
template <typename T>
void Optimizer<T>::require_in_range(double lr) const {
  if (!std::isfinite(static_cast<T>(lr))) {
    throw std::invalid_argument(fmt::format("{}: lr must be at most {:g} (the largest {}, in which the update is "
                                            "computed), got {}",
                                            name_, static_cast<double>(std::numeric_limits<T>::max()),
                                            std::is_same_v<T, float> ? "float" : "double", lr));
  }
}

template <typename T>
void Optimizer<T>::zero_grad() {
  for (auto& [pname, p] : params_) p.zero_grad();
}

template <typename T>
void Optimizer<T>::set_lr(double lr) {
  detail::require_finite_non_negative(name_, "lr", lr);
  require_in_range(lr);
  lr_ = lr;
}

template <typename T>
std::size_t Optimizer<T>::index_of(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    throw std::invalid_argument(fmt::format("{}: no parameter named '{}'", name_, name));
  }
  return it->second;
}

template <typename T>
const xt::xarray<T>* Optimizer<T>::gradient_for_step(std::size_t i, const Shape& state_shape) const {
  const auto& [pname, p] = params_[i];
  if (!p.has_grad()) return nullptr;
  const xt::xarray<T>& g = p.grad();
  if (p.shape() != state_shape || g.shape() != state_shape) {
    throw std::invalid_argument(fmt::format(
        "{}: parameter '{}' has shape {} and gradient shape {}, but its state was made for {}",
        name_, pname, format_shape(p.shape()), format_shape(g.shape()), format_shape(state_shape)));
  }
  return &g;
}

template <typename T>
void Optimizer<T>::require_state_shape(std::size_t i, const char* what, const Shape& state) const {
  const auto& [pname, p] = params_[i];
  if (state != p.shape()) {
    throw std::invalid_argument(fmt::format("{}: {} for parameter '{}' has shape {}, want {}",
                                            name_, what, pname, format_shape(state),
                                            format_shape(p.shape())));
  }
}

template class Optimizer<float>;
template class Optimizer<double>;

}  // namespace headroom
