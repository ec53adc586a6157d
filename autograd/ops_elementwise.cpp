// Elementwise ops. Same-shape binary ops and every unary op are plain loops over
// contiguous memory (docs/design.md, "Performance model"); broadcasting binary ops let
// xtensor broadcast two evaluated containers. Gradients of broadcast inputs are
// summed back to their shapes by accumulate_grad, never here.
#include <cmath>
#include <numbers>
#include <type_traits>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>

#include "autograd/fast_math.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"

namespace headroom {
namespace {

template <typename T>
bool same_shape(const xt::xarray<T>& a, const xt::xarray<T>& b) {
  return a.shape() == b.shape();
}

// y[i] = f(x[i]); backward gx[i] = g[i] * dydx(x[i], y[i]).
template <typename T, typename F, typename D>
Tensor<T> unary(const char* op, const Tensor<T>& x, F f, D dydx) {
  const xt::xarray<T>& xv = x.value();
  xt::xarray<T> y = xt::empty<T>(xv.shape());
  const T* px = xv.data();
  T* py = y.data();
  for (std::size_t i = 0, n = xv.size(); i < n; ++i) py[i] = f(px[i]);
  return make_result<T>(op, std::move(y), {x.node()},
                        [op, xn = x.node(), dydx](const xt::xarray<T>& g, const xt::xarray<T>& y) {
                          if (!xn->requires_grad) return;
                          xt::xarray<T> gx = xt::empty<T>(g.shape());
                          const T* pg = g.data();
                          const T* px = xn->value.data();
                          const T* py = y.data();
                          T* pgx = gx.data();
                          for (std::size_t i = 0, n = g.size(); i < n; ++i) {
                            pgx[i] = pg[i] * dydx(px[i], py[i]);
                          }
                          accumulate_grad(*xn, std::move(gx), op);
                        });
}

// GELU's two loops over contiguous memory, y = x Phi(x) keeping Phi, and
// gx = g (Phi + x phi(x)). Plain functions so that the float versions can be built
// for several instruction sets (GCC target_clones picks one at load time: 16 floats
// per AVX-512 instruction instead of SSE2's 4, the baseline the build targets).
// always_inline: the loops must be compiled inside each clone, for its instruction set.
template <typename T>
[[gnu::always_inline]] inline void gelu_forward(const T* x, T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * fast::normal_cdf(x[i]);
}

template <typename T>
[[gnu::always_inline]] inline void gelu_backward(const T* g, const T* x, const T* y, T* gx, std::size_t n) {
  constexpr T inv_sqrt_2pi = std::numbers::inv_sqrtpi_v<T> / std::numbers::sqrt2_v<T>;
  for (std::size_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T cdf = v == T(0) ? T(0.5) : y[i] / v;  // Phi(x) = y / x
    gx[i] = g[i] * (cdf + v * inv_sqrt_2pi * fast::exp(T(-0.5) * v * v));
  }
}


HEADROOM_CLONES void gelu_forward_f32(const float* x, float* y, std::size_t n) { gelu_forward(x, y, n); }
HEADROOM_CLONES void gelu_backward_f32(const float* g, const float* x, const float* y, float* gx, std::size_t n) {
  gelu_backward(g, x, y, gx, n);
}

}  // namespace

// ---- binary --------------------------------------------------------------------

template <typename T>
Tensor<T> add(const Tensor<T>& a, const Tensor<T>& b) {
  broadcast_shapes(a.shape(), b.shape(), "add");
  xt::xarray<T> y;
  if (same_shape(a.value(), b.value())) {  // the residual stream: a plain loop, in parallel
    y = xt::empty<T>(a.shape());
    const T* pa = a.value().data();
    const T* pb = b.value().data();
    T* py = y.data();
    parallel_for(y.size(), kMinChunkElements, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) py[i] = pa[i] + pb[i];
    });
  } else {
    y = a.value() + b.value();
  }
  return make_result<T>("add", std::move(y), {a.node(), b.node()},
                        [an = a.node(), bn = b.node()](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          accumulate_grad(*an, g, "add");
                          accumulate_grad(*bn, g, "add");
                        });
}

template <typename T>
Tensor<T> sub(const Tensor<T>& a, const Tensor<T>& b) {
  broadcast_shapes(a.shape(), b.shape(), "sub");
  xt::xarray<T> y = a.value() - b.value();
  return make_result<T>("sub", std::move(y), {a.node(), b.node()},
                        [an = a.node(), bn = b.node()](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          accumulate_grad(*an, g, "sub");
                          if (bn->requires_grad) accumulate_grad(*bn, xt::xarray<T>(-g), "sub");
                        });
}

template <typename T>
Tensor<T> mul(const Tensor<T>& a, const Tensor<T>& b) {
  broadcast_shapes(a.shape(), b.shape(), "mul");
  xt::xarray<T> y;
  if (same_shape(a.value(), b.value())) {
    y = xt::empty<T>(a.shape());
    const T* pa = a.value().data();
    const T* pb = b.value().data();
    T* py = y.data();
    for (std::size_t i = 0, n = y.size(); i < n; ++i) py[i] = pa[i] * pb[i];
  } else {
    y = a.value() * b.value();
  }
  return make_result<T>("mul", std::move(y), {a.node(), b.node()},
                        [an = a.node(), bn = b.node()](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          // d(ab)/da = b, d(ab)/db = a.
                          if (an->requires_grad) accumulate_grad(*an, xt::xarray<T>(g * bn->value), "mul");
                          if (bn->requires_grad) accumulate_grad(*bn, xt::xarray<T>(g * an->value), "mul");
                        });
}

template <typename T>
Tensor<T> div(const Tensor<T>& a, const Tensor<T>& b) {
  broadcast_shapes(a.shape(), b.shape(), "div");
  xt::xarray<T> y = a.value() / b.value();
  return make_result<T>("div", std::move(y), {a.node(), b.node()},
                        [an = a.node(), bn = b.node()](const xt::xarray<T>& g, const xt::xarray<T>& y) {
                          // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 = -y/b.
                          if (an->requires_grad) accumulate_grad(*an, xt::xarray<T>(g / bn->value), "div");
                          if (bn->requires_grad) accumulate_grad(*bn, xt::xarray<T>(-g * y / bn->value), "div");
                        });
}

// ---- unary ---------------------------------------------------------------------

template <typename T>
Tensor<T> neg(const Tensor<T>& x) {
  return unary<T>("neg", x, [](T v) { return -v; }, [](T, T) { return T(-1); });
}

template <typename T>
Tensor<T> add_scalar(const Tensor<T>& x, T s) {
  return unary<T>("add_scalar", x, [s](T v) { return v + s; }, [](T, T) { return T(1); });
}

template <typename T>
Tensor<T> mul_scalar(const Tensor<T>& x, T s) {
  return unary<T>("mul_scalar", x, [s](T v) { return v * s; }, [s](T, T) { return s; });
}

template <typename T>
Tensor<T> exp(const Tensor<T>& x) {
  return unary<T>("exp", x, [](T v) { return std::exp(v); }, [](T, T y) { return y; });
}

template <typename T>
Tensor<T> log(const Tensor<T>& x) {
  return unary<T>("log", x, [](T v) { return std::log(v); }, [](T v, T) { return T(1) / v; });
}

template <typename T>
Tensor<T> sqrt(const Tensor<T>& x) {
  return unary<T>("sqrt", x, [](T v) { return std::sqrt(v); }, [](T, T y) { return T(0.5) / y; });
}

template <typename T>
Tensor<T> rsqrt(const Tensor<T>& x) {
  // y = x^(-1/2), dy/dx = -1/2 x^(-3/2) = -y^3 / 2.
  return unary<T>("rsqrt", x, [](T v) { return T(1) / std::sqrt(v); },
                  [](T, T y) { return T(-0.5) * y * y * y; });
}

template <typename T>
Tensor<T> tanh(const Tensor<T>& x) {
  return unary<T>("tanh", x, [](T v) { return std::tanh(v); }, [](T, T y) { return T(1) - y * y; });
}

template <typename T>
Tensor<T> relu(const Tensor<T>& x) {
  // The subgradient at 0 is 0, as in PyTorch.
  return unary<T>("relu", x, [](T v) { return v > T(0) ? v : T(0); },
                  [](T v, T) { return v > T(0) ? T(1) : T(0); });
}

template <typename T>
Tensor<T> gelu(const Tensor<T>& x) {
  // y = x Phi(x); dy/dx = Phi(x) + x phi(x), phi the standard normal density. The
  // backward reads Phi(x) back as y / x from the output it is handed (0.5 at x = 0)
  // rather than keep a buffer of it: one division and one exp per element instead of
  // an erf and an exp, and no third activation-sized array per feed-forward held
  // from forward to backward (bench/README.md). In float the erf and
  // exp come from autograd/fast_math.hpp, loops the compiler vectorises (libm's erff
  // and expf, a call per element, were a large part of a small step).
  const xt::xarray<T>& xv = x.value();
  xt::xarray<T> y = xt::empty<T>(xv.shape());
  parallel_for(xv.size(), kMinChunkElements, [&](std::size_t b, std::size_t e) {
    fast::clone_if_float<T>(gelu_forward_f32, [](auto... a) { gelu_forward(a...); }, xv.data() + b, y.data() + b,
                            e - b);
  });
  return make_result<T>("gelu", std::move(y), {x.node()},
                        [xn = x.node()](const xt::xarray<T>& g, const xt::xarray<T>& out) {
                          if (!xn->requires_grad) return;
                          xt::xarray<T> gx = xt::empty<T>(g.shape());
                          parallel_for(g.size(), kMinChunkElements, [&](std::size_t b, std::size_t e) {
                            fast::clone_if_float<T>(gelu_backward_f32, [](auto... a) { gelu_backward(a...); },
                                                    g.data() + b, xn->value.data() + b, out.data() + b,
                                                    gx.data() + b, e - b);
                          });
                          accumulate_grad(*xn, std::move(gx), "gelu");
                        });
}

template <typename T>
Tensor<T> gelu_tanh(const Tensor<T>& x) {
  // u = k (x + c x^3), y = x (1 + tanh u) / 2;
  // dy/dx = (1 + tanh u) / 2 + x (1 - tanh^2 u) k (1 + 3 c x^2) / 2.
  constexpr T k = std::numbers::sqrt2_v<T> * std::numbers::inv_sqrtpi_v<T>;  // sqrt(2/pi)
  constexpr T c = T(0.044715);
  return unary<T>(
      "gelu_tanh", x, [](T v) { return T(0.5) * v * (T(1) + std::tanh(k * (v + c * v * v * v))); },
      [](T v, T) {
        const T t = std::tanh(k * (v + c * v * v * v));
        return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * k * (T(1) + T(3) * c * v * v);
      });
}

template <typename T>
Tensor<T> pow(const Tensor<T>& x, T exponent) {
  return unary<T>("pow", x, [exponent](T v) { return std::pow(v, exponent); },
                  [exponent](T v, T) { return exponent * std::pow(v, exponent - T(1)); });
}

#define HEADROOM_INSTANTIATE(T)                                  \
  template Tensor<T> add(const Tensor<T>&, const Tensor<T>&);    \
  template Tensor<T> sub(const Tensor<T>&, const Tensor<T>&);    \
  template Tensor<T> mul(const Tensor<T>&, const Tensor<T>&);    \
  template Tensor<T> div(const Tensor<T>&, const Tensor<T>&);    \
  template Tensor<T> neg(const Tensor<T>&);                      \
  template Tensor<T> add_scalar(const Tensor<T>&, T);            \
  template Tensor<T> mul_scalar(const Tensor<T>&, T);            \
  template Tensor<T> exp(const Tensor<T>&);                      \
  template Tensor<T> log(const Tensor<T>&);                      \
  template Tensor<T> sqrt(const Tensor<T>&);                     \
  template Tensor<T> rsqrt(const Tensor<T>&);                    \
  template Tensor<T> tanh(const Tensor<T>&);                     \
  template Tensor<T> relu(const Tensor<T>&);                     \
  template Tensor<T> gelu(const Tensor<T>&);                     \
  template Tensor<T> gelu_tanh(const Tensor<T>&);                \
  template Tensor<T> pow(const Tensor<T>&, T);
HEADROOM_INSTANTIATE(float)
HEADROOM_INSTANTIATE(double)
#undef HEADROOM_INSTANTIATE

}  // namespace headroom
