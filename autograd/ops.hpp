// Every differentiable op headroom has. Each is one function in an ops_*.cpp file
// with its backward right below its forward, instantiated for float and double.
//
// Legend: B = batch, T = time, C = channels, V = vocabulary, "..." = any leading
// axes. Axes may be negative (counted from the end), as in NumPy and PyTorch.
// Binary elementwise ops broadcast both ways by NumPy's rules. Shape mistakes throw
// ShapeError (a std::invalid_argument) naming the op and the shapes involved.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"

namespace headroom {

using Index = std::int64_t;
using IndexArray = xt::xarray<Index>;
using Mask = xt::xarray<bool>;

// ---- elementwise, binary (broadcasting) ------------------------------------------
template <typename T> Tensor<T> add(const Tensor<T>& a, const Tensor<T>& b);
template <typename T> Tensor<T> sub(const Tensor<T>& a, const Tensor<T>& b);
template <typename T> Tensor<T> mul(const Tensor<T>& a, const Tensor<T>& b);
template <typename T> Tensor<T> div(const Tensor<T>& a, const Tensor<T>& b);

// ---- elementwise, unary ----------------------------------------------------------
template <typename T> Tensor<T> neg(const Tensor<T>& x);
template <typename T> Tensor<T> add_scalar(const Tensor<T>& x, T s);  // x + s
template <typename T> Tensor<T> mul_scalar(const Tensor<T>& x, T s);  // x * s
template <typename T> Tensor<T> exp(const Tensor<T>& x);
template <typename T> Tensor<T> log(const Tensor<T>& x);
template <typename T> Tensor<T> sqrt(const Tensor<T>& x);
template <typename T> Tensor<T> rsqrt(const Tensor<T>& x);  // 1 / sqrt(x)
template <typename T> Tensor<T> tanh(const Tensor<T>& x);
template <typename T> Tensor<T> relu(const Tensor<T>& x);
// GELU, exact: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (Hendrycks and Gimpel, 2016).
template <typename T> Tensor<T> gelu(const Tensor<T>& x);
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T> Tensor<T> gelu_tanh(const Tensor<T>& x);
template <typename T> Tensor<T> pow(const Tensor<T>& x, T exponent);  // x^p
// The logistic function 1 / (1 + exp(-x)), never overflowing for any x.
template <typename T> Tensor<T> sigmoid(const Tensor<T>& x);

// ---- reductions ------------------------------------------------------------------
// Over the listed axes; an empty list reduces over every axis. keepdims keeps the
// reduced axes with extent 1.
template <typename T> Tensor<T> sum(const Tensor<T>& x, const std::vector<int>& axes = {}, bool keepdims = false);
template <typename T> Tensor<T> mean(const Tensor<T>& x, const std::vector<int>& axes = {}, bool keepdims = false);

// ---- shape -----------------------------------------------------------------------
// Same elements in a new shape; sizes must agree.
template <typename T> Tensor<T> reshape(const Tensor<T>& x, const Shape& shape);
// Swaps two axes.
template <typename T> Tensor<T> transpose(const Tensor<T>& x, int axis0 = -2, int axis1 = -1);
// Output axis i is input axis perm[i].
template <typename T> Tensor<T> permute(const Tensor<T>& x, const std::vector<int>& perm);
// Joins tensors along an axis; every other extent must agree.
template <typename T> Tensor<T> concat(const std::vector<Tensor<T>>& xs, int axis);
// Elements [start, stop) along an axis.
template <typename T> Tensor<T> slice(const Tensor<T>& x, int axis, std::size_t start, std::size_t stop);
// Consecutive pieces of the given sizes along an axis; sizes must add up to its extent.
template <typename T> std::vector<Tensor<T>> split(const Tensor<T>& x, int axis, const std::vector<std::size_t>& sizes);

// ---- matrix product ----------------------------------------------------------------
// (..., M, K) @ (..., K, N) -> (..., M, N). Both operands have at least two axes;
// leading (batch) axes broadcast. One BLAS GEMM per 2-D slice (docs/design.md #4).
template <typename T> Tensor<T> matmul(const Tensor<T>& a, const Tensor<T>& b);
// The affine map of nn.Linear: y = x W^T + b. x (..., in), weight (out, in) as in
// PyTorch's state_dict, bias (out) or an undefined tensor for none -> (..., out).
// The leading axes are flattened into one GEMM (docs/design.md #4) with W^T folded
// into the GEMM's flags.
template <typename T> Tensor<T> linear(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias = {});

// ---- neural-network ops ----------------------------------------------------------
// exp(x - max) / sum(exp(x - max)) along an axis. A row that is -inf everywhere
// (a query whose every key is masked) gives zeros, not NaN, and a zero gradient.
template <typename T> Tensor<T> softmax(const Tensor<T>& x, int axis = -1);
// x - max - log(sum(exp(x - max))) along an axis.
template <typename T> Tensor<T> log_softmax(const Tensor<T>& x, int axis = -1);

// Mean over counted positions of -log_softmax(logits)[target].
// logits (..., V), targets (...) with values in [0, V). A position counts when its
// target is not ignore_index.
template <typename T> Tensor<T> cross_entropy(const Tensor<T>& logits, const IndexArray& targets, Index ignore_index = -100);
// The same, counting exactly the positions where mask (shaped like targets) is true;
// targets at other positions are not read.
template <typename T> Tensor<T> cross_entropy(const Tensor<T>& logits, const IndexArray& targets, const Mask& mask);

// weight (V, C), indices (...) -> (..., C): rows of weight. Backward scatter-adds.
template <typename T> Tensor<T> embedding(const Tensor<T>& weight, const IndexArray& indices);
// value where mask is true, x elsewhere. mask broadcasts to x's shape.
template <typename T> Tensor<T> masked_fill(const Tensor<T>& x, const Mask& mask, T value);

// LayerNorm over the last axis (Ba, Kiros and Hinton, 2016), biased variance, eps
// inside the square root: y = (x - mean) * rsqrt(var + eps) * weight + bias.
// x (..., C), weight (C), bias (C). One fused op that saves mean and rstd.
template <typename T> Tensor<T> layer_norm(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias, T eps = T(1e-5));

// RMSNorm over the last axis (Zhang and Sennrich, 2019), as torch.nn.RMSNorm with
// eps given: y = x * rsqrt(mean(x^2) + eps) * weight. x (..., C), weight (C). No
// mean is subtracted and there is no bias. One fused op that saves rstd.
template <typename T> Tensor<T> rms_norm(const Tensor<T>& x, const Tensor<T>& weight, T eps = T(1e-5));

// SwiGLU's gating (Shazeer, 2020): silu(gate) * up = gate * sigmoid(gate) * up,
// elementwise; gate and up of one shape. One fused op.
template <typename T> Tensor<T> swiglu(const Tensor<T>& gate, const Tensor<T>& up);

// Rotary position embedding (Su et al., 2021) on packed heads, in the rotate-half
// pairing of GPT-NeoX and Hugging Face's Llama (docs/design.md, "Model conventions"):
// x (B, T, H d) with d even; for head h, position p = t + offset and i in [0, d/2),
// with theta_i = base^(-2i/d) and (a, b) = (x[h d + i], x[h d + i + d/2]):
//   y[h d + i] = a cos(p theta_i) - b sin(p theta_i)
//   y[h d + i + d/2] = b cos(p theta_i) + a sin(p theta_i)
// A rotation, so the backward is the rotation by -p theta_i. One fused op.
template <typename T>
Tensor<T> rope(const Tensor<T>& x, std::size_t n_heads, double base = 10000.0, std::size_t offset = 0);

// The fused attention op's settings (the module's are nn/attention.hpp's
// AttentionOptions).
template <typename T>
struct AttentionSpec {
  std::size_t n_heads = 1;            // H, query heads
  std::size_t n_kv_heads = 1;         // G, key/value heads; H must be a multiple of G
  T scale = 1;                        // multiplies q . k before the softmax
  bool causal = false;                // hide key j from query i when j > i
  const Mask* key_padding = nullptr;  // (B, T) when given: true where a key is hidden
  xt::xarray<T>* weights = nullptr;   // when given: receives the weights (B, H, T, T)
};

// Scaled dot-product attention over packed heads, as one op:
//   q (B, T, H d_k), k (B, T, G d_k), v (B, T, G d_v) -> (B, T, H d_v), where head h's
//   columns [h d_v, (h+1) d_v) of the output are softmax(scale Q_h K_g^T + mask) V_g,
//   Q_h the columns [h d_k, (h+1) d_k) of q, g = h / (H / G) (grouped-query
//   attention; G = 1 is multi-query). A query that sees no key gets zeros, and zero
//   gradients. The weights come back as values: no gradient flows through them.
// Equal to split_heads, matmul, mul_scalar, masked_fill, softmax, matmul and
// merge_heads composed (tests/test_attention.cpp compares them).
template <typename T>
Tensor<T> attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const AttentionSpec<T>& spec);

// Inverted dropout: zero each element with probability p and scale the rest by
// 1/(1-p). The identity (the same tensor) when !training or p == 0.
template <typename T> Tensor<T> dropout(const Tensor<T>& x, double p, Rng& rng, bool training = true);

// ---- operators -------------------------------------------------------------------
template <typename T> Tensor<T> operator+(const Tensor<T>& a, const Tensor<T>& b) { return add(a, b); }
template <typename T> Tensor<T> operator-(const Tensor<T>& a, const Tensor<T>& b) { return sub(a, b); }
template <typename T> Tensor<T> operator*(const Tensor<T>& a, const Tensor<T>& b) { return mul(a, b); }
template <typename T> Tensor<T> operator/(const Tensor<T>& a, const Tensor<T>& b) { return div(a, b); }
template <typename T> Tensor<T> operator-(const Tensor<T>& x) { return neg(x); }
template <typename T> Tensor<T> operator+(const Tensor<T>& x, T s) { return add_scalar(x, s); }
template <typename T> Tensor<T> operator+(T s, const Tensor<T>& x) { return add_scalar(x, s); }
template <typename T> Tensor<T> operator-(const Tensor<T>& x, T s) { return add_scalar(x, -s); }
template <typename T> Tensor<T> operator-(T s, const Tensor<T>& x) { return add_scalar(neg(x), s); }
template <typename T> Tensor<T> operator*(const Tensor<T>& x, T s) { return mul_scalar(x, s); }
template <typename T> Tensor<T> operator*(T s, const Tensor<T>& x) { return mul_scalar(x, s); }
template <typename T> Tensor<T> operator/(const Tensor<T>& x, T s) { return mul_scalar(x, T(1) / s); }
template <typename T> Tensor<T> operator/(T s, const Tensor<T>& x) { return mul_scalar(pow(x, T(-1)), s); }

}  // namespace headroom
