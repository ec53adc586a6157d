// What every optimizer shares: named parameters, the learning rate, the step count,
// zero_grad, and which parameters weight decay applies to.
//
// Parameters are named leaves, as nn's Module::named_parameters() yields them
// (`blocks.0.attn.q_proj.weight`); an optimizer keeps its per-parameter state in
// the same order and reaches it by name, so a checkpoint can save and restore it.
// step() updates every parameter that has a gradient and skips the others, as
// PyTorch does (a parameter whose grad is None there): no update, no weight decay,
// and its own step count (Adam's bias-correction t) does not advance.
//
// A training step with a schedule (optim/schedule.hpp):
//
//     opt.zero_grad();
//     loss.backward();
//     clip_grad_norm(params, 1.0);                  // optional, optim/clip.hpp
//     opt.set_lr(schedule.lr_at(opt.step_count() + 1));
//     opt.step();
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autograd/shape.hpp"
#include "autograd/tensor.hpp"

namespace headroom {

template <typename T>
using NamedParameters = std::vector<std::pair<std::string, Tensor<T>>>;

// The decay-exclusion rule: a parameter is left out of weight decay when it has
// fewer than 2 axes (biases, LayerNorm weight and bias) or its name ends with
// "emb.weight" (token and position embeddings). Decaying a LayerNorm gain pulls it
// towards 0 rather than its neutral 1, and decaying embedding rows shrinks the rows
// of rare tokens that get almost no gradient; minGPT's configure_optimizers makes
// the same split. With embeddings = false only the rule on axes holds, and the
// embeddings are decayed like every other tensor of 2 or more axes: nanoGPT's
// configure_optimizers, whose token embedding is also its tied output head.
bool excluded_from_decay(const std::string& name, const Shape& shape, bool embeddings = true);

template <typename T>
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient; then step_count() + 1.
  virtual void step() = 0;
  // Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  double lr() const { return lr_; }
  // Finite and >= 0, or std::invalid_argument naming the optimizer and the value.
  void set_lr(double lr);

  // Calls of step() so far (also those that found no gradient).
  std::size_t step_count() const { return step_count_; }
  // For exact resume from a checkpoint.
  void set_step_count(std::size_t n) { step_count_ = n; }

  std::string_view name() const { return name_; }  // "Adam", "AdamW", "SGD"
  const NamedParameters<T>& parameters() const { return params_; }
  // The weight decay this parameter receives: the option's value, or 0 when the
  // decay exclusion is on and excluded_from_decay() holds for it (with its
  // embeddings = !decay_embeddings).
  double weight_decay_for(const std::string& name) const { return decay_[index_of(name)]; }

 protected:
  // Checks the parameters (at least one; defined leaves; unique names), lr and
  // weight_decay, and applies the decay exclusion when asked.
  Optimizer(const char* name, NamedParameters<T> params, double lr, double weight_decay,
            bool exclude_from_decay, bool decay_embeddings = false);

  // Position of a parameter, or std::invalid_argument naming the optimizer and name.
  std::size_t index_of(const std::string& name) const;
  // Parameter i's gradient for this step, or nullptr when it has none. Throws when
  // the value or the gradient no longer has `state_shape` (the shape the state was
  // made for): a resized parameter would otherwise be read out of bounds.
  const xt::xarray<T>* gradient_for_step(std::size_t i, const Shape& state_shape) const;
  // Throws unless `state` has parameter i's shape (for set_state).
  void require_state_shape(std::size_t i, const char* what, const Shape& state) const;
  void require_in_range(double lr) const;

  const char* name_;
  NamedParameters<T> params_;
  std::vector<double> decay_;  // per parameter, see weight_decay_for
  double lr_ = 0;
  std::size_t step_count_ = 0;

 private:
  std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace headroom
