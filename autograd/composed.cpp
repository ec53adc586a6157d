#include "autograd/composed.hpp"

#include <cmath>

#include <fmt/format.h>

namespace headroom::composed {

template <typename T>
Tensor<T> sigmoid(const Tensor<T>& x) {
  return mul_scalar(add_scalar(tanh(mul_scalar(x, T(0.5))), T(1)), T(0.5));
}

template <typename T>
Tensor<T> rms_norm(const Tensor<T>& x, const Tensor<T>& weight, T eps) {
  const Tensor<T> ms = mean(mul(x, x), {-1}, true);  // (..., 1)
  return mul(mul(x, rsqrt(add_scalar(ms, eps))), weight);
}

template <typename T>
Tensor<T> swiglu(const Tensor<T>& gate, const Tensor<T>& up) {
  return mul(mul(gate, composed::sigmoid(gate)), up);
}

template <typename T>
Tensor<T> rope(const Tensor<T>& x, std::size_t n_heads, double base, std::size_t offset) {
  const Shape& s = x.shape();
  if (s.size() != 3 || n_heads == 0 || s[2] % n_heads != 0 || (s[2] / n_heads) % 2 != 0) {
    throw ShapeError(fmt::format("rope: input must be (B, T, H d) with d even for H = {}, got {}", n_heads,
                                 format_shape(s)));
  }
  const std::size_t B = s[0], T_ = s[1], d = s[2] / n_heads, half = d / 2;
  xt::xarray<T> c = xt::empty<T>(Shape{T_, 1, half});
  xt::xarray<T> sn = xt::empty<T>(Shape{T_, 1, half});
  for (std::size_t t = 0; t < T_; ++t) {
    for (std::size_t i = 0; i < half; ++i) {
      const double theta = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const double angle = static_cast<double>(t + offset) * theta;
      c(t, 0, i) = static_cast<T>(std::cos(angle));
      sn(t, 0, i) = static_cast<T>(std::sin(angle));
    }
  }
  const Tensor<T> cos_t(std::move(c)), sin_t(std::move(sn));
  const Tensor<T> heads = reshape(x, {B, T_, n_heads, d});
  const Tensor<T> a = slice(heads, 3, 0, half), b = slice(heads, 3, half, d);
  const Tensor<T> y = concat<T>({sub(mul(a, cos_t), mul(b, sin_t)), add(mul(b, cos_t), mul(a, sin_t))}, 3);
  return reshape(y, {B, T_, n_heads * d});
}

#define HEADROOM_INSTANTIATE(T)                                                  \
  template Tensor<T> sigmoid(const Tensor<T>&);                                  \
  template Tensor<T> rms_norm(const Tensor<T>&, const Tensor<T>&, T);            \
  template Tensor<T> swiglu(const Tensor<T>&, const Tensor<T>&);                 \
  template Tensor<T> rope(const Tensor<T>&, std::size_t, double, std::size_t);
HEADROOM_INSTANTIATE(float)
HEADROOM_INSTANTIATE(double)
#undef HEADROOM_INSTANTIATE

}  // namespace headroom::composed
