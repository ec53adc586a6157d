// Module: named parameters and submodules, as in libtorch's nn::Module.
//
// A module registers its parameters and children *by name*, so named_parameters()
// yields dotted names exactly as PyTorch's state_dict spells them
// ("blocks.0.attn.q_proj.weight"), which is what checkpoints and optimizers key on.
// Children are members of the parent (or owned by it through unique_ptr) and are
// registered by reference, so a module is neither copyable nor movable.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"

namespace headroom {

template <typename T>
using NamedTensors = std::vector<std::pair<std::string, Tensor<T>>>;

// Parameter name to value, in registration order.
template <typename T>
using StateDict = std::vector<std::pair<std::string, xt::xarray<T>>>;

template <typename T>
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Every parameter of this module and its children, depth first in registration
  // order, with dotted names.
  NamedTensors<T> named_parameters() const;
  std::size_t parameter_count() const;

  // Training mode (dropout active) for this module and every child.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad();

  StateDict<T> state_dict() const;
  // Copies values into the parameters. Strict: a missing name, an unexpected name or
  // a shape mismatch is a std::invalid_argument naming the parameter and the shapes,
  // and then no parameter has been changed.
  void load_state_dict(const StateDict<T>& dict);

 protected:
  // A leaf that requires grad, owned by this module under `name`.
  Tensor<T> register_parameter(const std::string& name, xt::xarray<T> value);
  void register_module(const std::string& name, Module<T>& child);

 private:
  void collect(const std::string& prefix, NamedTensors<T>& out) const;

  NamedTensors<T> params_;
  std::vector<std::pair<std::string, Module<T>*>> children_;
  bool training_ = true;
};

// The NaN and infinite values among a module's parameters: a model that diverged.
struct NonFiniteValues {
  std::size_t count = 0;    // values that are NaN or +-Inf, over every parameter
  std::string first_name;   // the first parameter (in named_parameters order) holding one
  std::size_t first_index = 0;  // its flat index there
  double first_value = 0;       // NaN or +-Inf
};
template <typename T>
NonFiniteValues non_finite_values(const Module<T>& module);

// Initialisers drawing from our seeded Rng (docs/design.md #6).
template <typename T>
xt::xarray<T> normal_init(const Shape& shape, double std, Rng& rng);
template <typename T>
xt::xarray<T> constant_init(const Shape& shape, double value);

}  // namespace headroom
