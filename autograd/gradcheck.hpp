// Gradient checking against central finite differences, in double precision.
//
// The function under test may return several tensors. We reduce them to one
// scalar L = sum_k sum(W_k * out_k) with fixed random weights W_k, so the upstream
// gradient reaching the function is non-uniform (a uniform one hides transposed or
// permuted gradients), then compare backward's dL/dx with
//   (L(x + eps e_i) - L(x - eps e_i)) / (2 eps)
// per element, or, for large inputs, along random directions u:
//   grad . u  vs  (L(x + eps u) - L(x - eps u)) / (2 eps)        (a v^T J u check).
// An element passes when |analytic - numeric| <= atol + rtol * |numeric|, with
// PyTorch's gradcheck defaults.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.hpp"

namespace headroom {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  // Inputs with more elements than this are checked on a random subset of this
  // many elements (0: always check every element).
  std::size_t max_elements = 0;
  // Extra random-direction checks per input (v^T J u); 0 for none.
  std::size_t directions = 0;
  // Seeds the output weights, the element subset and the directions.
  std::uint64_t seed = 1234;
};

struct InputReport {
  std::string name;
  Shape shape;
  std::size_t checked = 0;  // elements (or directions) compared
  bool passed = true;
  double max_abs_error = 0;
  double max_rel_error = 0;  // |a - n| / max(|n|, atol)
  // Where the check was tightest (the largest error relative to its tolerance):
  // an element index such as "(1, 2)", or "direction 3".
  std::string worst_where;
  double worst_analytic = 0;
  double worst_numeric = 0;
};

struct GradcheckReport {
  std::vector<InputReport> inputs;
  bool passed() const;
  // One line per input: name, shape, checked, max errors, worst place, both values.
  std::string str() const;
};

using NamedTensor = std::pair<std::string, Tensor<double>>;

// f reads the tensors in `inputs` (for example through captured handles or a
// module's parameters) and returns its outputs. Each input must be a leaf that
// requires grad; its value is perturbed in place and restored before returning.
GradcheckReport gradcheck(const std::function<std::vector<Tensor<double>>()>& f,
                          const std::vector<NamedTensor>& inputs,
                          const GradcheckOptions& options = {});

// The common case: f maps input tensors to one output. Inputs are named x0, x1, ...
GradcheckReport gradcheck(const std::function<Tensor<double>(const std::vector<Tensor<double>>&)>& f,
                          const std::vector<Tensor<double>>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace headroom
