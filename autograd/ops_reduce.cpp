// Reductions over chosen axes. Backward broadcasts the upstream gradient back over
// the reduced axes (scaled by 1/count for mean).
#include <xtensor/xbroadcast.hpp>

#include "autograd/ops.hpp"

namespace headroom {
namespace {

struct Reduction {
  std::vector<std::size_t> axes;  // sorted, unique
  Shape kept;                     // input shape with reduced axes set to 1
  Shape out;                      // kept, or kept without the reduced axes
  std::size_t count = 1;          // elements folded into each output
};

Reduction plan_reduction(const Shape& shape, const std::vector<int>& axes, bool keepdims,
                         const char* op) {
  Reduction r;
  if (axes.empty()) {
    for (std::size_t i = 0; i < shape.size(); ++i) r.axes.push_back(i);
  } else {
    r.axes = normalize_axes(axes, shape, op);
  }
  r.kept = shape;
  for (std::size_t a : r.axes) {
    r.count *= shape[a];
    r.kept[a] = 1;
  }
  for (std::size_t i = 0, k = 0; i < shape.size(); ++i) {
    const bool reduced = k < r.axes.size() && r.axes[k] == i;
    if (reduced) ++k;
    if (!reduced || keepdims) r.out.push_back(r.kept[i]);
  }
  return r;
}

template <typename T>
Tensor<T> reduce_sum(const char* op, const Tensor<T>& x, const std::vector<int>& axes,
                     bool keepdims, T scale) {
  Reduction r = plan_reduction(x.shape(), axes, keepdims, op);
  xt::xarray<T> y = sum_to_shape(x.value(), r.kept, op);
  if (scale != T(1)) y *= scale;
  y.reshape(r.out);
  return make_result<T>(op, std::move(y), {x.node()},
                        [op, xn = x.node(), kept = r.kept, scale](const xt::xarray<T>& g,
                                                                  const xt::xarray<T>&) {
                          if (!xn->requires_grad) return;
                          xt::xarray<T> gk = g;
                          gk.reshape(kept);
                          xt::xarray<T> gx = xt::broadcast(gk, xn->value.shape());
                          if (scale != T(1)) gx *= scale;
                          accumulate_grad(*xn, std::move(gx), op);
                        });
}

}  // namespace

template <typename T>
Tensor<T> sum(const Tensor<T>& x, const std::vector<int>& axes, bool keepdims) {
  return reduce_sum<T>("sum", x, axes, keepdims, T(1));
}

template <typename T>
Tensor<T> mean(const Tensor<T>& x, const std::vector<int>& axes, bool keepdims) {
  const std::size_t count = plan_reduction(x.shape(), axes, keepdims, "mean").count;
  if (count == 0) {
    throw ShapeError("mean: cannot average over zero elements of a tensor of shape " +
                     format_shape(x.shape()));
  }
  return reduce_sum<T>("mean", x, axes, keepdims, T(1) / static_cast<T>(count));
}

#define HEADROOM_INSTANTIATE(T)                                                   \
  template Tensor<T> sum(const Tensor<T>&, const std::vector<int>&, bool);        \
  template Tensor<T> mean(const Tensor<T>&, const std::vector<int>&, bool);
HEADROOM_INSTANTIATE(float)
HEADROOM_INSTANTIATE(double)
#undef HEADROOM_INSTANTIATE

}  // namespace headroom
