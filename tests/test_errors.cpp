// Error text: every shape mistake is a std::invalid_argument naming the op and the
// shapes (or the offending value), never a crash and never xtensor's own message.
#include <doctest/doctest.h>

#include "autograd/ops.hpp"

using headroom::IndexArray;
using headroom::Mask;
using F = headroom::Tensor<float>;

namespace {

F zeros(const headroom::Shape& s) { return F(xt::zeros<float>(s), true); }

}  // namespace

TEST_CASE("binary ops name themselves and both shapes") {
  const F a = zeros({2, 3}), b = zeros({4, 3});
  CHECK_THROWS_WITH_AS(add(a, b), "add: shapes cannot be broadcast: lhs (2, 3) vs rhs (4, 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sub(a, b), "sub: shapes cannot be broadcast: lhs (2, 3) vs rhs (4, 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(mul(a, zeros({2})), "mul: shapes cannot be broadcast: lhs (2, 3) vs rhs (2)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(div(zeros({5, 1, 3}), zeros({2, 4})),
                       "div: shapes cannot be broadcast: lhs (5, 1, 3) vs rhs (2, 4)",
                       std::invalid_argument);
}

TEST_CASE("matmul: inner, batch and rank mismatches") {
  CHECK_THROWS_WITH_AS(matmul(zeros({4, 8}), zeros({6, 3})),
                       "matmul: inner dimensions differ: lhs (4, 8) vs rhs (6, 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 4, 8}), zeros({3, 8, 5})),
                       "matmul: batch axes cannot be broadcast: lhs (2, 4, 8) vs rhs (3, 8, 5)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(matmul(zeros({8}), zeros({8, 2})),
                       "matmul: operands need at least 2 axes: lhs (8) vs rhs (8, 2)",
                       std::invalid_argument);
}

TEST_CASE("linear names the input, weight and bias shapes") {
  CHECK_THROWS_WITH_AS(linear(zeros({2, 3, 4}), zeros({5, 3})),
                       "linear: input (2, 3, 4) does not fit weight (5, 3) (weight is (out, in), "
                       "input (..., in))",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(linear(zeros({2, 4}), zeros({5, 4}), zeros({4})),
                       "linear: bias (4) does not fit weight (5, 4): expected (5)",
                       std::invalid_argument);
}

TEST_CASE("shape ops report sizes, axes and ranges") {
  CHECK_THROWS_WITH_AS(reshape(zeros({2, 3}), {4, 2}),
                       "reshape: cannot reshape (2, 3) (6 elements) to (4, 2) (8 elements)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(transpose(zeros({2, 3}), 0, 2),
                       "transpose: axis 2 is out of range for a tensor of shape (2, 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(permute(zeros({2, 3, 4}), {0, 1}),
                       "permute: permutation has 2 axes but the tensor has shape (2, 3, 4)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(permute(zeros({2, 3}), {1, -1}),
                       "permute: axis -1 appears twice in the permutation for shape (2, 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(headroom::concat<float>({zeros({2, 3}), zeros({2, 4})}, 0),
                       "concat: along axis 0, tensor 1 has shape (2, 4) but tensor 0 has (2, 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(headroom::concat<float>({}, 0), "concat: needs at least one tensor, got none",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(slice(zeros({2, 3}), 1, 2, 5),
                       "slice: range [2, 5) is not within axis 1 of extent 3 (shape (2, 3))",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(split(zeros({2, 6}), 1, {2, 3}),
                       "split: sizes add up to 5 but axis 1 of shape (2, 6) has extent 6",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sum(zeros({2, 3}), {1, -1}),
                       "sum: an axis is repeated in the list for a tensor of shape (2, 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(mean(zeros({2, 3}), {-3}),
                       "mean: axis -3 is out of range for a tensor of shape (2, 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(softmax(zeros({2, 3}), 2),
                       "softmax: axis 2 is out of range for a tensor of shape (2, 3)",
                       std::invalid_argument);
}

TEST_CASE("cross_entropy: shapes, target range and zero counted positions") {
  const F logits = zeros({2, 3, 5});
  CHECK_THROWS_WITH_AS(cross_entropy(logits, IndexArray(xt::zeros<headroom::Index>({2, 4}))),
                       "cross_entropy: logits (2, 3, 5) need targets of shape (2, 3), got (2, 4)",
                       std::invalid_argument);
  IndexArray targets = xt::zeros<headroom::Index>({2, 3});
  targets(1, 2) = 5;
  CHECK_THROWS_WITH_AS(cross_entropy(logits, targets),
                       "cross_entropy: target 5 at position (1, 2) is out of range for 5 classes "
                       "(logits (2, 3, 5))",
                       std::invalid_argument);
  IndexArray ignored = xt::xarray<headroom::Index>::from_shape({2, 3});
  ignored.fill(-100);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, ignored),
                       "cross_entropy: no position counts (every target is ignore_index=-100), so "
                       "the mean loss is undefined; targets shape (2, 3)",
                       std::invalid_argument);
  const Mask none = xt::zeros<bool>({2, 3});
  CHECK_THROWS_WITH_AS(cross_entropy(logits, IndexArray(xt::zeros<headroom::Index>({2, 3})), none),
                       doctest::Contains("no position counts (the mask is false everywhere)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, IndexArray(xt::zeros<headroom::Index>({2, 3})),
                                     Mask(xt::ones<bool>({3, 2}))),
                       "cross_entropy: mask has shape (3, 2) but targets have (2, 3)",
                       std::invalid_argument);
}

TEST_CASE("embedding, masked_fill, layer_norm and dropout validate their inputs") {
  IndexArray idx = {{0, 1}, {7, 2}};
  CHECK_THROWS_WITH_AS(embedding(zeros({5, 4}), idx),
                       "embedding: index 7 at position (1, 0) is out of range for a weight of shape "
                       "(5, 4)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(embedding(zeros({5}), idx), "embedding: weight must be (V, C), got (5)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(masked_fill(zeros({2, 3}), Mask(xt::zeros<bool>({3, 3})), 0.0f),
                       "masked_fill: mask of shape (3, 3) does not broadcast to input (2, 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 4}), zeros({4}), zeros({3})),
                       "layer_norm: input (2, 4) needs weight and bias of shape (4), got (4) and (3)",
                       std::invalid_argument);
  headroom::Rng rng(0);
  CHECK_THROWS_WITH_AS(dropout(zeros({2}), 1.5, rng), "dropout: p must be in [0, 1], got 1.5",
                       std::invalid_argument);
}

TEST_CASE("rms_norm, swiglu and rope validate their inputs") {
  CHECK_THROWS_WITH_AS(rms_norm(zeros({2, 4}), zeros({3})),
                       "rms_norm: input (2, 4) needs weight of shape (4), got (3)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(rms_norm(zeros({2, 4}), zeros({1, 4})),
                       "rms_norm: input (2, 4) needs weight of shape (4), got (1, 4)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(rms_norm(zeros({}), zeros({1})), "rms_norm: input must have at least one axis, got ()",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(rms_norm(zeros({2, 4}), zeros({4}), -1.0f), "rms_norm: eps must be >= 0, got -1",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(swiglu(zeros({2, 3}), zeros({3, 2})),
                       "swiglu: gate and up must have the same shape, got (2, 3) and (3, 2)", std::invalid_argument);
  // Equal shapes only: no broadcasting, even where NumPy would.
  CHECK_THROWS_WITH_AS(swiglu(zeros({2, 3}), zeros({3})),
                       "swiglu: gate and up must have the same shape, got (2, 3) and (3)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(rope(zeros({2, 3, 8}), 0), "rope: n_heads must be > 0, got 0 (input (2, 3, 8))",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(rope(zeros({3, 8}), 2), "rope: input must be (B, T, H d), got (3, 8)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(rope(zeros({2, 3, 8}), 3),
                       "rope: input (2, 3, 8) has 8 channels, not a multiple of n_heads = 3", std::invalid_argument);
  CHECK_THROWS_WITH_AS(rope(zeros({2, 3, 6}), 2),
                       "rope: input (2, 3, 6) with n_heads = 2 has head width d = 3, which must be even",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(rope(zeros({2, 3, 8}), 2, 0.0), "rope: base must be finite and > 0, got 0",
                       std::invalid_argument);
}

TEST_CASE("accumulate_grad rejects a gradient that does not fit, naming the op") {
  headroom::Node<float> node;
  node.value = xt::zeros<float>({2, 3});
  node.requires_grad = true;
  CHECK_THROWS_WITH_AS(headroom::accumulate_grad(node, xt::xarray<float>(xt::zeros<float>({3, 3})), "myop"),
                       "myop: gradient of shape (3, 3) cannot be accumulated into a tensor of shape "
                       "(2, 3)",
                       std::invalid_argument);
}

TEST_CASE("item and grad explain what is wrong") {
  F x = zeros({2});
  CHECK_THROWS_WITH_AS(x.item(), "Tensor::item: expected one element, got shape (2)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(x.grad(), doctest::Contains("Tensor::grad: no gradient for this tensor (op 'leaf', shape (2)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(x.mutable_grad(), doctest::Contains("Tensor::grad: no gradient for this tensor"),
                       std::invalid_argument);
  F undefined;
  CHECK_THROWS_WITH_AS(undefined.item(), "Tensor::item: the tensor is undefined", std::invalid_argument);
}
