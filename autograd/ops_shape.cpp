// Ops that move elements without changing them: reshape, transpose/permute,
// concat, slice, split. Along-axis ops view a contiguous array as
// (outer, extent, inner) and copy whole inner runs.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>

#include "autograd/ops.hpp"

namespace headroom {
namespace {

// Copies `count` rows of the axis from src (starting at src_row) into dst (at
// dst_row), for every outer index. Rows are `inner` elements long.
template <typename T>
void copy_rows(const T* src, std::size_t src_extent, std::size_t src_row, T* dst,
               std::size_t dst_extent, std::size_t dst_row, std::size_t count, std::size_t outer,
               std::size_t inner) {
  const std::size_t run = count * inner;
  for (std::size_t o = 0; o < outer; ++o) {
    const T* s = src + (o * src_extent + src_row) * inner;
    T* d = dst + (o * dst_extent + dst_row) * inner;
    if (run > 0) std::memcpy(d, s, run * sizeof(T));
  }
}

std::vector<std::size_t> normalize_permutation(const std::vector<int>& perm, const Shape& shape) {
  if (perm.size() != shape.size()) {
    throw ShapeError(fmt::format("permute: permutation has {} axes but the tensor has shape {}",
                                 perm.size(), format_shape(shape)));
  }
  std::vector<std::size_t> out;
  std::vector<bool> seen(shape.size());
  for (int p : perm) {
    const std::size_t a = normalize_axis(p, shape, "permute");
    if (seen[a]) {
      throw ShapeError(fmt::format("permute: axis {} appears twice in the permutation for shape {}",
                                   p, format_shape(shape)));
    }
    seen[a] = true;
    out.push_back(a);
  }
  return out;
}

template <typename T>
Tensor<T> permute_axes(const char* op, const Tensor<T>& x, const std::vector<std::size_t>& perm) {
  xt::xarray<T> y = xt::transpose(x.value(), perm);
  std::vector<std::size_t> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = i;
  return make_result<T>(op, std::move(y), {x.node()},
                        [op, xn = x.node(), inverse](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          if (!xn->requires_grad) return;
                          accumulate_grad(*xn, xt::xarray<T>(xt::transpose(g, inverse)), op);
                        });
}

}  // namespace

template <typename T>
Tensor<T> reshape(const Tensor<T>& x, const Shape& shape) {
  if (shape_size(shape) != x.size()) {
    throw ShapeError(fmt::format("reshape: cannot reshape {} ({} elements) to {} ({} elements)",
                                 format_shape(x.shape()), x.size(), format_shape(shape),
                                 shape_size(shape)));
  }
  xt::xarray<T> y = x.value();
  y.reshape(shape);
  return make_result<T>("reshape", std::move(y), {x.node()},
                        [xn = x.node()](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          if (!xn->requires_grad) return;
                          xt::xarray<T> gx = g;
                          gx.reshape(xn->value.shape());
                          accumulate_grad(*xn, std::move(gx), "reshape");
                        });
}

template <typename T>
Tensor<T> transpose(const Tensor<T>& x, int axis0, int axis1) {
  const std::size_t a = normalize_axis(axis0, x.shape(), "transpose");
  const std::size_t b = normalize_axis(axis1, x.shape(), "transpose");
  std::vector<std::size_t> perm(x.ndim());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::swap(perm[a], perm[b]);
  return permute_axes<T>("transpose", x, perm);
}

template <typename T>
Tensor<T> permute(const Tensor<T>& x, const std::vector<int>& perm) {
  return permute_axes<T>("permute", x, normalize_permutation(perm, x.shape()));
}

template <typename T>
Tensor<T> concat(const std::vector<Tensor<T>>& xs, int axis) {
  if (xs.empty()) throw ShapeError("concat: needs at least one tensor, got none");
  const Shape& first = xs[0].shape();
  const std::size_t ax = normalize_axis(axis, first, "concat");
  Shape out_shape = first;
  out_shape[ax] = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const Shape& s = xs[k].shape();
    bool ok = s.size() == first.size();
    for (std::size_t i = 0; ok && i < s.size(); ++i) ok = i == ax || s[i] == first[i];
    if (!ok) {
      throw ShapeError(fmt::format("concat: along axis {}, tensor {} has shape {} but tensor 0 has {}",
                                   axis, k, format_shape(s), format_shape(first)));
    }
    out_shape[ax] += s[ax];
  }
  xt::xarray<T> y = xt::empty<T>(out_shape);
  const AxisLayout o = axis_layout(out_shape, ax);
  std::vector<std::shared_ptr<Node<T>>> nodes;
  std::size_t row = 0;
  for (const auto& x : xs) {
    const std::size_t n = x.shape()[ax];
    copy_rows(x.value().data(), n, 0, y.data(), o.extent, row, n, o.outer, o.inner);
    row += n;
    nodes.push_back(x.node());
  }
  return make_result<T>("concat", std::move(y), nodes,
                        [nodes, ax, o](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          std::size_t row = 0;
                          for (const auto& xn : nodes) {
                            const std::size_t n = xn->value.shape()[ax];
                            if (xn->requires_grad) {
                              xt::xarray<T> gx = xt::empty<T>(xn->value.shape());
                              copy_rows(g.data(), o.extent, row, gx.data(), n, 0, n, o.outer, o.inner);
                              accumulate_grad(*xn, std::move(gx), "concat");
                            }
                            row += n;
                          }
                        });
}

template <typename T>
Tensor<T> slice(const Tensor<T>& x, int axis, std::size_t start, std::size_t stop) {
  const std::size_t ax = normalize_axis(axis, x.shape(), "slice");
  const AxisLayout s = axis_layout(x.shape(), ax);
  if (start > stop || stop > s.extent) {
    throw ShapeError(fmt::format("slice: range [{}, {}) is not within axis {} of extent {} (shape {})",
                                 start, stop, axis, s.extent, format_shape(x.shape())));
  }
  Shape out_shape = x.shape();
  out_shape[ax] = stop - start;
  xt::xarray<T> y = xt::empty<T>(out_shape);
  copy_rows(x.value().data(), s.extent, start, y.data(), stop - start, 0, stop - start, s.outer,
            s.inner);
  return make_result<T>("slice", std::move(y), {x.node()},
                        [xn = x.node(), s, start, stop](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          if (!xn->requires_grad) return;
                          xt::xarray<T> gx = xt::zeros<T>(xn->value.shape());
                          copy_rows(g.data(), stop - start, 0, gx.data(), s.extent, start,
                                    stop - start, s.outer, s.inner);
                          accumulate_grad(*xn, std::move(gx), "slice");
                        });
}

template <typename T>
std::vector<Tensor<T>> split(const Tensor<T>& x, int axis, const std::vector<std::size_t>& sizes) {
  const std::size_t ax = normalize_axis(axis, x.shape(), "split");
  std::size_t total = 0;
  for (std::size_t n : sizes) total += n;
  if (total != x.shape()[ax]) {
    throw ShapeError(fmt::format("split: sizes add up to {} but axis {} of shape {} has extent {}",
                                 total, axis, format_shape(x.shape()), x.shape()[ax]));
  }
  std::vector<Tensor<T>> parts;
  std::size_t start = 0;
  for (std::size_t n : sizes) {
    parts.push_back(slice(x, axis, start, start + n));
    start += n;
  }
  return parts;
}

#define HEADROOM_INSTANTIATE(T)                                                           \
  template Tensor<T> reshape(const Tensor<T>&, const Shape&);                             \
  template Tensor<T> transpose(const Tensor<T>&, int, int);                               \
  template Tensor<T> permute(const Tensor<T>&, const std::vector<int>&);                  \
  template Tensor<T> concat(const std::vector<Tensor<T>>&, int);                          \
  template Tensor<T> slice(const Tensor<T>&, int, std::size_t, std::size_t);              \
  template std::vector<Tensor<T>> split(const Tensor<T>&, int, const std::vector<std::size_t>&);
HEADROOM_INSTANTIATE(float)
HEADROOM_INSTANTIATE(double)
#undef HEADROOM_INSTANTIATE

}  // namespace headroom
