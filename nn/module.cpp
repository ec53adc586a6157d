#include "nn/module.hpp"

#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace headroom {

template <typename T>
Tensor<T> Module<T>::register_parameter(const std::string& name, xt::xarray<T> value) {
  for (const auto& [existing, t] : params_) {
    if (existing == name) throw std::invalid_argument(fmt::format("Module: parameter '{}' registered twice", name));
  }
  Tensor<T> p(std::move(value), true);
  params_.emplace_back(name, p);
  return p;
}

template <typename T>
void Module<T>::register_module(const std::string& name, Module<T>& child) {
  for (const auto& [existing, m] : children_) {
    if (existing == name) throw std::invalid_argument(fmt::format("Module: submodule '{}' registered twice", name));
  }
  children_.emplace_back(name, &child);
}

template <typename T>
void Module<T>::collect(const std::string& prefix, NamedTensors<T>& out) const {
  for (const auto& [name, p] : params_) out.emplace_back(prefix + name, p);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

template <typename T>
NamedTensors<T> Module<T>::named_parameters() const {
  NamedTensors<T> out;
  collect("", out);
  return out;
}

template <typename T>
std::size_t Module<T>::parameter_count() const {
  std::size_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.size();
  return n;
}

template <typename T>
void Module<T>::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

template <typename T>
void Module<T>::zero_grad() {
  for (auto& [name, p] : named_parameters()) p.zero_grad();
}

template <typename T>
StateDict<T> Module<T>::state_dict() const {
  StateDict<T> out;
  for (const auto& [name, p] : named_parameters()) out.emplace_back(name, p.value());
  return out;
}

template <typename T>
void Module<T>::load_state_dict(const StateDict<T>& dict) {
  std::map<std::string, const xt::xarray<T>*> given;
  for (const auto& [name, value] : dict) {
    if (!given.emplace(name, &value).second) {
      throw std::invalid_argument(fmt::format("load_state_dict: '{}' appears twice", name));
    }
  }
  NamedTensors<T> params = named_parameters();
  // Check everything before changing anything.
  for (const auto& [name, p] : params) {
    auto it = given.find(name);
    if (it == given.end()) {
      throw std::invalid_argument(fmt::format("load_state_dict: missing parameter '{}' of shape {}",
                                              name, format_shape(p.shape())));
    }
    if (Shape(it->second->shape()) != p.shape()) {
      throw std::invalid_argument(fmt::format("load_state_dict: parameter '{}' has shape {} but the model expects {}",
                                              name, format_shape(it->second->shape()),
                                              format_shape(p.shape())));
    }
  }
  if (given.size() != params.size()) {
    for (const auto& [name, value] : dict) {
      bool known = false;
      for (const auto& [pname, p] : params) known = known || pname == name;
      if (!known) {
        throw std::invalid_argument(fmt::format("load_state_dict: unexpected parameter '{}' of shape {}",
                                                name, format_shape(value.shape())));
      }
    }
  }
  for (auto& [name, p] : params) p.mutable_value() = *given.at(name);
}

template <typename T>
NonFiniteValues non_finite_values(const Module<T>& module) {
  NonFiniteValues r;
  for (const auto& [name, p] : module.named_parameters()) {
    const xt::xarray<T>& v = p.value();
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (std::isfinite(v.data()[i])) continue;
      if (r.count++ == 0) {
        r.first_name = name;
        r.first_index = i;
        r.first_value = static_cast<double>(v.data()[i]);
      }
    }
  }
  return r;
}

template <typename T>
xt::xarray<T> normal_init(const Shape& shape, double std, Rng& rng) {
  xt::xarray<T> a = xt::xarray<T>::from_shape(shape);
  for (auto& e : a) e = static_cast<T>(std * rng.normal());
  return a;
}

template <typename T>
xt::xarray<T> constant_init(const Shape& shape, double value) {
  xt::xarray<T> a = xt::xarray<T>::from_shape(shape);
  a.fill(static_cast<T>(value));
  return a;
}

template class Module<float>;
template class Module<double>;
template NonFiniteValues non_finite_values<float>(const Module<float>&);
template NonFiniteValues non_finite_values<double>(const Module<double>&);
template xt::xarray<float> normal_init<float>(const Shape&, double, Rng&);
template xt::xarray<double> normal_init<double>(const Shape&, double, Rng&);
template xt::xarray<float> constant_init<float>(const Shape&, double);
template xt::xarray<double> constant_init<double>(const Shape&, double);

}  // namespace headroom
