// The composed twins of the fused ops of current (Llama-style) blocks: each built
// from the primitive ops of ops.hpp alone, slower, and the reference the fused op is
// tested against (tests/test_modern_ops.cpp). They are differentiable like any
// composition, so gradcheck covers them too.
#pragma once

#include "autograd/ops.hpp"

namespace headroom::composed {

// 0.5 (1 + tanh(x / 2)), which is 1 / (1 + exp(-x)).
template <typename T> Tensor<T> sigmoid(const Tensor<T>& x);
// x * rsqrt(mean(x * x, last axis) + eps) * weight.
template <typename T> Tensor<T> rms_norm(const Tensor<T>& x, const Tensor<T>& weight, T eps);
// gate * sigmoid(gate) * up.
template <typename T> Tensor<T> swiglu(const Tensor<T>& gate, const Tensor<T>& up);
// Halves sliced, multiplied by cos/sin tables (constants) and concatenated.
template <typename T> Tensor<T> rope(const Tensor<T>& x, std::size_t n_heads, double base, std::size_t offset);

}  // namespace headroom::composed
