#include "autograd/op_checks.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <xtensor/xbuilder.hpp>

#include "autograd/ops.hpp"

namespace headroom {
namespace {

using D = Tensor<double>;
using Inputs = std::vector<D>;
using Fn = std::function<D(const Inputs&)>;

struct Prepared {
  std::string shapes;
  Inputs inputs;
  Fn f;
};

struct CaseDef {
  const char* op;
  const char* what;
  std::function<Prepared(Rng&)> prepare;
};

std::size_t dim(Rng& rng, std::size_t lo = 1, std::size_t hi = 4) {
  return lo + rng.below(hi - lo + 1);
}

// A leaf of uniform values in [lo, hi).
D uniform_leaf(const Shape& shape, Rng& rng, double lo = -2.0, double hi = 2.0) {
  xt::xarray<double> v = xt::empty<double>(shape);
  for (auto& e : v) e = rng.uniform(lo, hi);
  return D(std::move(v), true);
}

// Values at least `gap` away from zero, for ops with a kink there (relu).
D away_from_zero_leaf(const Shape& shape, Rng& rng, double gap = 0.05) {
  xt::xarray<double> v = xt::empty<double>(shape);
  for (auto& e : v) {
    const double m = rng.uniform(gap, 2.0);
    e = rng.uniform() < 0.5 ? -m : m;
  }
  return D(std::move(v), true);
}

std::string shapes_of(const Inputs& xs, const char* sep = ", ") {
  std::string s;
  for (std::size_t i = 0; i < xs.size(); ++i) s += (i ? sep : "") + format_shape(xs[i].shape());
  return s;
}

IndexArray random_indices(const Shape& shape, std::size_t n, Rng& rng) {
  IndexArray idx = xt::empty<Index>(shape);
  for (auto& e : idx) e = static_cast<Index>(rng.below(n));
  return idx;
}

// ---- case builders shared by several ops ------------------------------------------

using Binary = D (*)(const D&, const D&);
using Unary = std::function<D(const D&)>;

// a and b of one random shape.
Prepared binary_same(Binary op, const char* sym, Rng& rng, double lo, double hi) {
  const Shape s{dim(rng), dim(rng), dim(rng)};
  Inputs in{uniform_leaf(s, rng), uniform_leaf(s, rng, lo, hi)};
  return {shapes_of(in, sym), in, [op](const Inputs& x) { return op(x[0], x[1]); }};
}

// (d0, 1, d2) with (d1, 1): each operand is broadcast along an axis of the other.
Prepared binary_broadcast(Binary op, const char* sym, Rng& rng, double lo, double hi) {
  const std::size_t d0 = dim(rng, 2), d1 = dim(rng, 2), d2 = dim(rng, 2);
  Inputs in{uniform_leaf({d0, 1, d2}, rng), uniform_leaf({d1, 1}, rng, lo, hi)};
  return {shapes_of(in, sym), in, [op](const Inputs& x) { return op(x[0], x[1]); }};
}

// A 0-d (scalar-shaped) operand against a tensor, and the tensor transposed.
Prepared binary_scalar_transposed(Binary op, const char* sym, Rng& rng, double lo, double hi) {
  Inputs in{uniform_leaf({dim(rng, 2), dim(rng, 2)}, rng), uniform_leaf({}, rng, lo, hi)};
  return {"transpose" + format_shape(in[0].shape()) + sym + format_shape(in[1].shape()), in,
          [op](const Inputs& x) { return op(transpose(x[0]), x[1]); }};
}

Prepared unary_case(Unary op, D x, const char* prefix = "") {
  Inputs in{std::move(x)};
  return {prefix + shapes_of(in), in, [op](const Inputs& v) { return op(v[0]); }};
}

// Transposed input (a permuted, PyTorch-non-contiguous tensor) of a unary op.
Prepared unary_transposed(Unary op, D x) {
  Inputs in{std::move(x)};
  return {"transpose" + shapes_of(in), in, [op](const Inputs& v) { return op(transpose(v[0], 0, -1)); }};
}

void add_binary_cases(std::vector<CaseDef>& cases, const char* name, Binary op, const char* sym,
                      double lo, double hi) {
  cases.push_back({name, "same shape", [=](Rng& r) { return binary_same(op, sym, r, lo, hi); }});
  cases.push_back({name, "broadcast both ways", [=](Rng& r) { return binary_broadcast(op, sym, r, lo, hi); }});
  cases.push_back({name, "scalar operand, transposed tensor",
                   [=](Rng& r) { return binary_scalar_transposed(op, sym, r, lo, hi); }});
}

// A unary op on a random 3-D shape, on a transposed input, and on a size-1 edge.
void add_unary_cases(std::vector<CaseDef>& cases, const char* name, Unary op,
                     std::function<D(const Shape&, Rng&)> leaf) {
  cases.push_back({name, "random shape", [=](Rng& r) {
                     return unary_case(op, leaf({dim(r), dim(r), dim(r)}, r));
                   }});
  cases.push_back({name, "transposed input", [=](Rng& r) {
                     return unary_transposed(op, leaf({dim(r, 2), dim(r, 2)}, r));
                   }});
  cases.push_back({name, "size-1 axes", [=](Rng& r) { return unary_case(op, leaf({1, dim(r), 1}, r)); }});
}

std::vector<CaseDef> build_cases() {
  std::vector<CaseDef> c;
  auto any = [](const Shape& s, Rng& r) { return uniform_leaf(s, r); };
  auto positive = [](const Shape& s, Rng& r) { return uniform_leaf(s, r, 0.5, 2.0); };
  auto kinked = [](const Shape& s, Rng& r) { return away_from_zero_leaf(s, r); };

  add_binary_cases(c, "add", &add<double>, " + ", -2, 2);
  add_binary_cases(c, "sub", &sub<double>, " - ", -2, 2);
  add_binary_cases(c, "mul", &mul<double>, " * ", -2, 2);
  add_binary_cases(c, "div", &div<double>, " / ", 0.5, 2);

  add_unary_cases(c, "neg", [](const D& x) { return neg(x); }, any);
  add_unary_cases(c, "add_scalar", [](const D& x) { return add_scalar(x, 0.75); }, any);
  add_unary_cases(c, "mul_scalar", [](const D& x) { return mul_scalar(x, -1.5); }, any);
  add_unary_cases(c, "exp", [](const D& x) { return exp(x); }, any);
  add_unary_cases(c, "log", [](const D& x) { return log(x); }, positive);
  add_unary_cases(c, "sqrt", [](const D& x) { return sqrt(x); }, positive);
  add_unary_cases(c, "rsqrt", [](const D& x) { return rsqrt(x); }, positive);
  add_unary_cases(c, "tanh", [](const D& x) { return tanh(x); }, any);
  add_unary_cases(c, "relu", [](const D& x) { return relu(x); }, kinked);
  add_unary_cases(c, "gelu", [](const D& x) { return gelu(x); }, any);
  add_unary_cases(c, "gelu_tanh", [](const D& x) { return gelu_tanh(x); }, any);
  add_unary_cases(c, "pow", [](const D& x) { return pow(x, 2.5); }, positive);
  c.push_back({"pow", "negative exponent", [=](Rng& r) {
                 return unary_case([](const D& x) { return pow(x, -1.5); }, positive({dim(r), dim(r)}, r));
               }});
  c.push_back({"pow", "integer exponent, signed base", [=](Rng& r) {
                 return unary_case([](const D& x) { return pow(x, 3.0); }, any({dim(r), dim(r)}, r));
               }});

  // Reductions: a random subset of axes, with and without keepdims, and all axes.
  for (const char* name : {"sum", "mean"}) {
    const bool is_sum = std::string(name) == "sum";
    auto reduce = [is_sum](const D& x, std::vector<int> axes, bool keep) {
      return is_sum ? sum(x, axes, keep) : mean(x, axes, keep);
    };
    c.push_back({name, "one axis, keepdims", [=](Rng& r) {
                   const int axis = static_cast<int>(r.below(3)) - 3;  // negative axes too
                   return unary_case([=](const D& x) { return reduce(x, {axis}, true); },
                                     any({dim(r, 2), dim(r, 2), dim(r, 2)}, r),
                                     fmt::format("axis {} of ", axis).c_str());
                 }});
    c.push_back({name, "two axes, dropped", [=](Rng& r) {
                   return unary_case([=](const D& x) { return reduce(x, {0, 2}, false); },
                                     any({dim(r, 2), dim(r, 2), dim(r, 2)}, r), "axes (0, 2) of ");
                 }});
    c.push_back({name, "all axes of a transposed input", [=](Rng& r) {
                   return unary_transposed([=](const D& x) { return reduce(x, {}, false); },
                                           any({dim(r, 2), 1, dim(r, 2)}, r));
                 }});
  }

  c.push_back({"reshape", "3-D to 2-D", [=](Rng& r) {
                 const std::size_t a = dim(r, 2), b = dim(r, 2), d = dim(r, 2);
                 return unary_case([=](const D& x) { return reshape(x, {a * b, d}); }, any({a, b, d}, r));
               }});
  c.push_back({"reshape", "transposed input to 1-D", [=](Rng& r) {
                 const std::size_t a = dim(r, 2), b = dim(r, 2);
                 return unary_transposed([=](const D& x) { return reshape(x, {a * b}); }, any({a, b}, r));
               }});
  c.push_back({"transpose", "middle axes of 4-D", [=](Rng& r) {
                 return unary_case([](const D& x) { return transpose(x, 1, 2); },
                                   any({dim(r), dim(r, 2), dim(r, 2), dim(r)}, r));
               }});
  c.push_back({"permute", "random permutation", [=](Rng& r) {
                 std::vector<int> perm{0, 1, 2, 3};
                 for (std::size_t i = perm.size(); i-- > 1;) std::swap(perm[i], perm[r.below(i + 1)]);
                 return unary_case([perm](const D& x) { return permute(x, perm); },
                                   any({dim(r, 2), dim(r, 2), dim(r, 2), dim(r, 2)}, r),
                                   fmt::format("({}) of ", fmt::join(perm, ", ")).c_str());
               }});
  c.push_back({"concat", "three tensors along a random axis", [=](Rng& r) {
                 const int axis = static_cast<int>(r.below(3));
                 Shape s{dim(r, 2), dim(r, 2), dim(r, 2)};
                 Inputs in;
                 for (int k = 0; k < 3; ++k) {
                   s[static_cast<std::size_t>(axis)] = dim(r);
                   in.push_back(any(s, r));
                 }
                 return Prepared{fmt::format("axis {}: {}", axis, shapes_of(in)), in,
                                 [axis](const Inputs& x) { return concat(x, axis); }};
               }});
  c.push_back({"slice", "random range of a random axis", [=](Rng& r) {
                 const int axis = static_cast<int>(r.below(3));
                 D x = any({dim(r, 3, 5), dim(r, 3, 5), dim(r, 3, 5)}, r);
                 const std::size_t n = x.shape()[static_cast<std::size_t>(axis)];
                 const std::size_t start = r.below(n - 1), stop = start + 1 + r.below(n - start);
                 return unary_case([=](const D& v) { return slice(v, axis, start, stop); }, x,
                                   fmt::format("[{}, {}) on axis {} of ", start, stop, axis).c_str());
               }});
  c.push_back({"split", "three pieces, weighted differently", [=](Rng& r) {
                 D x = any({dim(r, 2), 6, dim(r, 2)}, r);
                 // The pieces are combined with different weights so a mixed-up piece fails.
                 return unary_case([](const D& v) {
                                     auto p = split(v, 1, {1, 3, 2});
                                     return concat<double>({mul_scalar(p[2], 2.0), p[0], mul_scalar(p[1], -1.0)}, 1);
                                   },
                                   x, "sizes (1, 3, 2) on axis 1 of ");
               }});

  c.push_back({"matmul", "2-D", [=](Rng& r) {
                 const std::size_t k = dim(r, 2);
                 Inputs in{any({dim(r, 2), k}, r), any({k, dim(r, 2)}, r)};
                 return Prepared{shapes_of(in, " @ "), in, [](const Inputs& x) { return matmul(x[0], x[1]); }};
               }});
  c.push_back({"matmul", "equal batch axes", [=](Rng& r) {
                 const std::size_t b = dim(r, 2), h = dim(r, 2), k = dim(r, 2);
                 Inputs in{any({b, h, dim(r, 2), k}, r), any({b, h, k, dim(r, 2)}, r)};
                 return Prepared{shapes_of(in, " @ "), in, [](const Inputs& x) { return matmul(x[0], x[1]); }};
               }});
  c.push_back({"matmul", "broadcast batch axes both ways", [=](Rng& r) {
                 const std::size_t k = dim(r, 2);
                 Inputs in{any({dim(r, 2), 1, dim(r, 2), k}, r), any({dim(r, 2), k, dim(r, 2)}, r)};
                 return Prepared{shapes_of(in, " @ "), in, [](const Inputs& x) { return matmul(x[0], x[1]); }};
               }});
  c.push_back({"matmul", "2-D weight against batched input", [=](Rng& r) {
                 const std::size_t k = dim(r, 2);
                 Inputs in{any({dim(r, 2), dim(r, 2), k}, r), any({k, dim(r, 2)}, r)};
                 return Prepared{shapes_of(in, " @ "), in, [](const Inputs& x) { return matmul(x[0], x[1]); }};
               }});
  c.push_back({"matmul", "transposed operands (x W^T)", [=](Rng& r) {
                 const std::size_t k = dim(r, 2);
                 Inputs in{any({dim(r, 2), dim(r, 2), k}, r), any({dim(r, 2), k}, r)};
                 return Prepared{format_shape(in[0].shape()) + " @ transpose" + format_shape(in[1].shape()), in,
                                 [](const Inputs& x) { return matmul(x[0], transpose(x[1])); }};
               }});
  c.push_back({"matmul", "size-1 edges", [=](Rng& r) {
                 const std::size_t k = dim(r, 2);
                 Inputs in{any({1, 1, k}, r), any({k, 1}, r)};
                 return Prepared{shapes_of(in, " @ "), in, [](const Inputs& x) { return matmul(x[0], x[1]); }};
               }});

  c.push_back({"linear", "3-D input with bias", [=](Rng& r) {
                 const std::size_t in = dim(r, 2, 5), out = dim(r, 2, 5);
                 Inputs x{any({dim(r, 2), dim(r, 2), in}, r), any({out, in}, r), any({out}, r)};
                 return Prepared{shapes_of(x), x, [](const Inputs& v) { return linear(v[0], v[1], v[2]); }};
               }});
  c.push_back({"linear", "transposed input, no bias", [=](Rng& r) {
                 const std::size_t in = dim(r, 2, 5);
                 Inputs x{any({in, dim(r, 2)}, r), any({dim(r, 1, 4), in}, r)};
                 return Prepared{"transpose" + shapes_of(x), x,
                                 [](const Inputs& v) { return linear(transpose(v[0]), v[1]); }};
               }});
  c.push_back({"linear", "size-1 edges", [=](Rng& r) {
                 Inputs x{any({1, 1}, r), any({dim(r, 1, 3), 1}, r)};
                 x.push_back(any({x[1].shape()[0]}, r));
                 return Prepared{shapes_of(x), x, [](const Inputs& v) { return linear(v[0], v[1], v[2]); }};
               }});

  c.push_back({"softmax", "a fully masked (-inf) row gives zeros", [=](Rng& r) {
                 const std::size_t t = dim(r, 2, 4);
                 Mask m = xt::zeros<bool>(Shape{t, t});
                 for (std::size_t j = 0; j < t; ++j) m(0, j) = true;  // row 0: every key masked
                 return unary_case([m](const D& x) {
                   return softmax(masked_fill(x, m, -std::numeric_limits<double>::infinity()), -1);
                 }, any({dim(r, 2), t, t}, r), "row 0 masked in ");
               }});
  for (const char* name : {"softmax", "log_softmax"}) {
    const bool is_log = std::string(name) == "log_softmax";
    auto sm = [is_log](const D& x, int axis) { return is_log ? log_softmax(x, axis) : softmax(x, axis); };
    c.push_back({name, "last axis", [=](Rng& r) {
                   return unary_case([=](const D& x) { return sm(x, -1); },
                                     any({dim(r, 2), dim(r, 2), dim(r, 2, 6)}, r), "axis -1 of ");
                 }});
    c.push_back({name, "first axis", [=](Rng& r) {
                   return unary_case([=](const D& x) { return sm(x, 0); }, any({dim(r, 2, 5), dim(r, 2)}, r),
                                     "axis 0 of ");
                 }});
    c.push_back({name, "transposed input", [=](Rng& r) {
                   return unary_transposed([=](const D& x) { return sm(x, -1); }, any({dim(r, 2, 5), dim(r, 2), dim(r, 2)}, r));
                 }});
    c.push_back({name, "size-1 leading axes", [=](Rng& r) {
                   return unary_case([=](const D& x) { return sm(x, -1); }, any({1, 1, dim(r, 2, 5)}, r));
                 }});
  }

  c.push_back({"cross_entropy", "ignore_index", [=](Rng& r) {
                 const std::size_t b = dim(r, 2), t = dim(r, 2), v = dim(r, 3, 6);
                 IndexArray targets = random_indices({b, t}, v, r);
                 targets(0, 0) = -100;  // one ignored position
                 return unary_case([targets](const D& x) { return cross_entropy(x, targets); },
                                   uniform_leaf({b, t, v}, r, -3.0, 3.0));
               }});
  c.push_back({"cross_entropy", "mask", [=](Rng& r) {
                 const std::size_t b = dim(r, 2), t = dim(r, 2, 5), v = dim(r, 3, 6);
                 IndexArray targets = random_indices({b, t}, v, r);
                 Mask mask = xt::ones<bool>(Shape{b, t});
                 mask(b - 1, 0) = false;
                 return unary_case([targets, mask](const D& x) { return cross_entropy(x, targets, mask); },
                                   uniform_leaf({b, t, v}, r, -3.0, 3.0));
               }});
  c.push_back({"embedding", "repeated indices", [=](Rng& r) {
                 const std::size_t v = dim(r, 3, 5);
                 IndexArray idx = random_indices({dim(r, 2), dim(r, 3, 5)}, v, r);
                 idx(0, 0) = idx(0, 1);  // a row gathered twice must get both gradients
                 return unary_case([idx](const D& w) { return embedding(w, idx); }, any({v, dim(r, 2)}, r),
                                   ("indices " + format_shape(idx.shape()) + " into ").c_str());
               }});
  c.push_back({"masked_fill", "causal mask broadcast over the batch", [=](Rng& r) {
                 const std::size_t t = dim(r, 2, 4);
                 Mask causal = xt::zeros<bool>(Shape{t, t});
                 for (std::size_t i = 0; i < t; ++i)
                   for (std::size_t j = i + 1; j < t; ++j) causal(i, j) = true;
                 return unary_case([causal](const D& x) { return masked_fill(x, causal, -3.0); },
                                   any({dim(r, 2), t, t}, r), "causal mask over ");
               }});
  struct AttentionCase {
    const char* what;
    std::size_t heads, kv_heads, dk, dv;
    bool causal, padding;
    std::size_t min_t = 3, max_t = 4;
  };
  // The op runs causal attention in blocks of 32 query rows: T = 33..40 crosses one
  // block boundary and ends in a partial block.
  for (const AttentionCase a : {AttentionCase{"causal, 2 heads", 2, 2, 3, 3, true, false},
                                AttentionCase{"GQA 4 over 2, d_v != d_k", 4, 2, 2, 3, true, false},
                                AttentionCase{"MQA, not causal", 3, 1, 2, 2, false, false},
                                AttentionCase{"key padding, a query that sees no key", 2, 1, 2, 2, true, true},
                                AttentionCase{"causal, 2 row blocks, GQA, padding", 2, 1, 2, 2, true, true, 33, 40},
                                AttentionCase{"heads of width 1, 2 row blocks, padding", 3, 3, 1, 1, true, true, 33, 40},
                                AttentionCase{"d_k 1, d_v 3, GQA", 4, 2, 1, 3, true, false},
                                AttentionCase{"d_k 3, d_v 1, not causal", 2, 2, 3, 1, false, false}}) {
    c.push_back({"attention", a.what, [=](Rng& r) {
                   const std::size_t b = 2, t = dim(r, a.min_t, a.max_t);
                   Inputs in{any({b, t, a.heads * a.dk}, r), any({b, t, a.kv_heads * a.dk}, r),
                             any({b, t, a.kv_heads * a.dv}, r)};
                   Mask pad = xt::zeros<bool>(Shape{b, t});
                   pad(0, 0) = true;  // batch 0: query 0 sees only key 0 (causal), which is padding
                   pad(1, t - 1) = true;
                   const bool use_pad = a.padding;
                   return Prepared{shapes_of(in), in, [=](const Inputs& x) {
                                     return attention(x[0], x[1], x[2],
                                                      {.n_heads = a.heads,
                                                       .n_kv_heads = a.kv_heads,
                                                       .scale = 0.7,
                                                       .causal = a.causal,
                                                       .key_padding = use_pad ? &pad : nullptr});
                                   }};
                 }});
  }
  c.push_back({"layer_norm", "random rows", [=](Rng& r) {
                 const std::size_t ch = dim(r, 2, 6);
                 Inputs in{any({dim(r, 2), dim(r, 2), ch}, r), any({ch}, r), any({ch}, r)};
                 return Prepared{shapes_of(in), in,
                                 [](const Inputs& x) { return layer_norm(x[0], x[1], x[2], 1e-5); }};
               }});
  c.push_back({"layer_norm", "transposed input", [=](Rng& r) {
                 const std::size_t ch = dim(r, 2, 5);
                 Inputs in{any({ch, dim(r, 2)}, r), any({ch}, r), any({ch}, r)};
                 return Prepared{"transpose" + shapes_of(in), in,
                                 [](const Inputs& x) { return layer_norm(transpose(x[0]), x[1], x[2], 1e-5); }};
               }});
  c.push_back({"dropout", "p = 0.3, fixed seed", [=](Rng& r) {
                 // Re-seeding inside f draws the same mask on every evaluation.
                 return unary_case([](const D& x) {
                                     Rng mask_rng(7);
                                     return dropout(x, 0.3, mask_rng, true);
                                   },
                                   any({dim(r, 2), dim(r, 3, 6)}, r));
               }});

  // The ops of Llama-style blocks (ops_modern.cpp), after the others so that their
  // cases' streams (seeded by position) stay as they were.
  add_unary_cases(c, "sigmoid", [](const D& x) { return sigmoid(x); }, any);
  c.push_back({"sigmoid", "large |x| (saturated tails)", [=](Rng& r) {
                 return unary_case([](const D& x) { return sigmoid(x); },
                                   uniform_leaf({dim(r, 2), dim(r, 2)}, r, -30.0, 30.0));
               }});
  c.push_back({"rms_norm", "random rows", [=](Rng& r) {
                 const std::size_t ch = dim(r, 2, 6);
                 Inputs in{any({dim(r, 2), dim(r, 2), ch}, r), any({ch}, r)};
                 return Prepared{shapes_of(in), in, [](const Inputs& x) { return rms_norm(x[0], x[1], 1e-5); }};
               }});
  c.push_back({"rms_norm", "transposed input", [=](Rng& r) {
                 const std::size_t ch = dim(r, 2, 5);
                 Inputs in{any({ch, dim(r, 2)}, r), any({ch}, r)};
                 return Prepared{"transpose" + shapes_of(in), in,
                                 [](const Inputs& x) { return rms_norm(transpose(x[0]), x[1], 1e-5); }};
               }});
  c.push_back({"rms_norm", "small rows, mean square near eps", [=](Rng& r) {
                 const std::size_t ch = dim(r, 2, 5);
                 Inputs in{uniform_leaf({dim(r, 2), ch}, r, -4e-3, 4e-3), any({ch}, r)};
                 return Prepared{shapes_of(in), in, [](const Inputs& x) { return rms_norm(x[0], x[1], 1e-5); }};
               }});
  c.push_back({"rms_norm", "size-1 edges", [=](Rng& r) {
                 Inputs in{any({1, 1, dim(r, 1, 3)}, r)};
                 in.push_back(any({in[0].shape()[2]}, r));
                 return Prepared{shapes_of(in), in, [](const Inputs& x) { return rms_norm(x[0], x[1], 1e-5); }};
               }});
  c.push_back({"swiglu", "same shape", [=](Rng& r) {
                 const Shape s{dim(r), dim(r), dim(r)};
                 Inputs in{uniform_leaf(s, r, -4.0, 4.0), any(s, r)};
                 return Prepared{shapes_of(in), in, [](const Inputs& x) { return swiglu(x[0], x[1]); }};
               }});
  c.push_back({"swiglu", "transposed inputs", [=](Rng& r) {
                 const Shape s{dim(r, 2), dim(r, 2)};
                 Inputs in{uniform_leaf(s, r, -4.0, 4.0), any(s, r)};
                 return Prepared{"transpose" + shapes_of(in), in,
                                 [](const Inputs& x) { return swiglu(transpose(x[0]), transpose(x[1])); }};
               }});
  c.push_back({"swiglu", "size-1 axes", [=](Rng& r) {
                 const Shape s{1, dim(r), 1};
                 Inputs in{uniform_leaf(s, r, -4.0, 4.0), any(s, r)};
                 return Prepared{shapes_of(in), in, [](const Inputs& x) { return swiglu(x[0], x[1]); }};
               }});
  struct RopeCase {
    const char* what;
    std::size_t heads, d;
    double base;
    std::size_t offset;
  };
  // base 10 rather than 10000 in most cases, so that the higher pairs turn by
  // angles of order one at these short lengths too.
  for (const RopeCase a : {RopeCase{"1 head, offset 0", 1, 4, 10000.0, 0},
                           RopeCase{"3 heads, offset 5", 3, 4, 10.0, 5},
                           RopeCase{"2 heads, d 2, offset 1", 2, 2, 10.0, 1},
                           RopeCase{"2 heads, d 6, offset 1000", 2, 6, 100.0, 1000}}) {
    c.push_back({"rope", a.what, [=](Rng& r) {
                   Inputs in{any({dim(r, 1, 3), dim(r, 1, 4), a.heads * a.d}, r)};
                   return Prepared{fmt::format("{}, H {}, base {}", shapes_of(in), a.heads, a.base), in,
                                   [a](const Inputs& x) { return rope(x[0], a.heads, a.base, a.offset); }};
                 }});
  }
  c.push_back({"rope", "transposed input, base 10, offset 3", [=](Rng& r) {
                 // x (H d, T, B) transposed to (B, T, H d).
                 Inputs in{any({4, dim(r, 2, 4), dim(r, 1, 2)}, r)};
                 return Prepared{"transpose(0, 2) of " + shapes_of(in) + ", H 2", in,
                                 [](const Inputs& x) { return rope(transpose(x[0], 0, 2), 2, 10.0, 3); }};
               }});
  return c;
}

const std::vector<CaseDef>& cases() {
  static const std::vector<CaseDef> all = build_cases();
  return all;
}

}  // namespace

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names{
      "add",       "sub",           "mul",       "div",         "neg",     "add_scalar",
      "mul_scalar", "exp",          "log",       "sqrt",        "rsqrt",   "tanh",
      "relu",      "gelu",          "gelu_tanh", "pow",         "sum",     "mean",
      "reshape",   "transpose",     "permute",   "concat",      "slice",   "split",
      "matmul",    "linear",      "softmax",       "log_softmax", "cross_entropy", "embedding", "masked_fill",
      "layer_norm", "attention", "dropout", "sigmoid", "rms_norm", "swiglu", "rope"};
  return names;
}

std::vector<OpCheck> run_op_checks(const OpCheckOptions& options) {
  const auto& names = op_names();
  if (!options.op.empty() && std::find(names.begin(), names.end(), options.op) == names.end()) {
    throw std::invalid_argument(fmt::format("gradcheck: unknown op '{}'; ops are: {}", options.op,
                                            fmt::join(names, ", ")));
  }
  std::vector<OpCheck> results;
  const auto& all = cases();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!options.op.empty() && options.op != all[i].op) continue;
    // Each case draws from its own stream, so filtering does not change its shapes.
    Rng rng(options.seed * 1000003u + i);
    Prepared p = all[i].prepare(rng);
    GradcheckOptions gc = options.gradcheck;
    gc.seed = options.seed * 7919u + i;
    results.push_back({all[i].op, all[i].what, p.shapes, gradcheck(p.f, p.inputs, gc)});
  }
  return results;
}

}  // namespace headroom
