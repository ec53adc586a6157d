// The ops of current (Llama-style) blocks: sigmoid, RMSNorm, SwiGLU's gating and
// rotary positions (docs/design.md #17, "Model conventions"). Each is a fused plain
// loop over contiguous memory (a Tensor's value is an evaluated row-major xarray, so
// a transposed input arrives already copied), with its backward right below; the
// float loops are built for AVX-512/AVX2 (HEADROOM_CLONES) with fast::exp. Their
// composed twins (autograd/composed.hpp) are the reference tests/test_modern_ops.cpp
// compares them with.
#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <xtensor/xbuilder.hpp>

#include "autograd/fast_math.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"

namespace headroom {
namespace {

// ---- sigmoid ---------------------------------------------------------------------

// 1 / (1 + exp(-x)) in the split form: with e = exp(-|x|) <= 1, 1 / (1 + e) for
// x >= 0 and e / (1 + e) for x < 0, so exp never overflows (exp(-x) for x = -100
// would be inf in float) and both tails keep their relative precision. Selects, not
// branches, so the loop vectorises.
template <typename T>
[[gnu::always_inline]] inline T sigmoid_of(T x) {
  const T e = fast::exp(-std::fabs(x));
  const T inv = T(1) / (T(1) + e);
  return x >= T(0) ? inv : e * inv;
}

template <typename T>
[[gnu::always_inline]] inline void sigmoid_forward(const T* x, T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = sigmoid_of(x[i]);
}

// dy/dx = y (1 - y), from the saved output.
template <typename T>
[[gnu::always_inline]] inline void sigmoid_backward(const T* g, const T* y, T* gx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) gx[i] = g[i] * y[i] * (T(1) - y[i]);
}

HEADROOM_CLONES void sigmoid_forward_f32(const float* x, float* y, std::size_t n) { sigmoid_forward(x, y, n); }
HEADROOM_CLONES void sigmoid_backward_f32(const float* g, const float* y, float* gx, std::size_t n) {
  sigmoid_backward(g, y, gx, n);
}

// ---- SwiGLU's gating ---------------------------------------------------------------

// y = gate * s * up, s = sigmoid(gate).
template <typename T>
[[gnu::always_inline]] inline void swiglu_forward(const T* gate, const T* up, T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = gate[i] * sigmoid_of(gate[i]) * up[i];
}

// (1) d gate = g * up * s * (1 + gate * (1 - s))    (silu' = s + gate s (1 - s))
// (2) d up   = g * gate * s
// into ggate / gup when non-null. s is recomputed (one exp) rather than saved: the
// gate is the widest activation of a block (d_ff), and keeping another tensor of it
// per layer costs more memory traffic than the exp costs arithmetic.
template <typename T>
[[gnu::always_inline]] inline void swiglu_backward(const T* g, const T* gate, const T* up, T* ggate, T* gup,
                                                   std::size_t n) {
  if (ggate && gup) {
    for (std::size_t i = 0; i < n; ++i) {
      const T s = sigmoid_of(gate[i]);
      ggate[i] = g[i] * up[i] * s * (T(1) + gate[i] * (T(1) - s));
      gup[i] = g[i] * gate[i] * s;
    }
  } else if (ggate) {
    for (std::size_t i = 0; i < n; ++i) {
      const T s = sigmoid_of(gate[i]);
      ggate[i] = g[i] * up[i] * s * (T(1) + gate[i] * (T(1) - s));
    }
  } else if (gup) {
    for (std::size_t i = 0; i < n; ++i) gup[i] = g[i] * gate[i] * sigmoid_of(gate[i]);
  }
}

HEADROOM_CLONES void swiglu_forward_f32(const float* gate, const float* up, float* y, std::size_t n) {
  swiglu_forward(gate, up, y, n);
}
HEADROOM_CLONES void swiglu_backward_f32(const float* g, const float* gate, const float* up, float* ggate,
                                         float* gup, std::size_t n) {
  swiglu_backward(g, gate, up, ggate, gup, n);
}

// ---- RMSNorm ------------------------------------------------------------------------

// RMSNorm's forward over `rows` rows of C channels: y = x rstd w, saving
// rstd = 1 / sqrt(mean(x^2) + eps) per row.
template <typename T>
[[gnu::always_inline]] inline void rms_norm_rows(const T* x, const T* w, T eps, std::size_t C, std::size_t rows,
                                                 T* rstd, T* y) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = x + r * C;
    const T ms = fast::lane_sum<T>(C, [&](std::size_t c) { return xr[c] * xr[c]; }) / static_cast<T>(C);
    const T s = T(1) / std::sqrt(ms + eps);
    rstd[r] = s;
    T* yr = y + r * C;
    for (std::size_t c = 0; c < C; ++c) yr[c] = xr[c] * s * w[c];
  }
}

// RMSNorm's backward over `rows` rows: the input gradient (term (1)) into gx when it
// is non-null, and each channel's sum of term (2) over these rows, in row order,
// added into gw when it is non-null. The buffers never overlap (__restrict, as
// LayerNorm's in ops_nn.cpp, tests/test_heap_placement.cpp).
template <typename T>
[[gnu::always_inline]] inline void rms_norm_backward_rows(const T* __restrict g, const T* __restrict x,
                                                          const T* __restrict w, const T* __restrict rstd,
                                                          std::size_t C, std::size_t rows, T* __restrict gx,
                                                          T* __restrict gw) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* gr = g + r * C;
    const T* xr = x + r * C;
    const T s = rstd[r];
    if (gw) {
      for (std::size_t c = 0; c < C; ++c) gw[c] += gr[c] * (xr[c] * s);
    }
    if (!gx) continue;
    const T mean_dx = fast::lane_sum<T>(C, [&](std::size_t c) { return gr[c] * w[c] * (xr[c] * s); }) /
                      static_cast<T>(C);
    T* gxr = gx + r * C;
    for (std::size_t c = 0; c < C; ++c) gxr[c] = s * (gr[c] * w[c] - xr[c] * s * mean_dx);
  }
}

HEADROOM_CLONES void rms_norm_rows_f32(const float* x, const float* w, float eps, std::size_t C, std::size_t rows,
                                       float* rstd, float* y) {
  rms_norm_rows(x, w, eps, C, rows, rstd, y);
}
HEADROOM_CLONES void rms_norm_backward_rows_f32(const float* __restrict g, const float* __restrict x,
                                                const float* __restrict w, const float* __restrict rstd, std::size_t C,
                                                std::size_t rows, float* __restrict gx, float* __restrict gw) {
  rms_norm_backward_rows(g, x, w, rstd, C, rows, gx, gw);
}

// ---- RoPE ------------------------------------------------------------------------------

// Rotates the rows [r_begin, r_end) of a (B T, H d) input, row r at time
// t = r mod T_, by the angles whose cos and sin are the tables' row t (T_, half):
//   y_a = a cos - b (sign sin),  y_b = b cos + a (sign sin)
// for each head's pair (a, b) = (x[h d + i], x[h d + i + half]). sign = 1 is the
// forward, sign = -1 the rotation back (the backward of a rotation is its transpose).
// x and y never overlap (__restrict), and the widths of common heads get the pair
// loop's length at compile time (rope_rows below). With neither, the compiler
// checks for overlap before each head's loop of `half` pairs, and at the llama
// config's head width of 16 (half = 8, half an AVX-512 vector) runs them through its
// remainder code, slower than the wider heads' whole vectors
// (bench/modern_ops_bench --op rope --heads 8; bench/README.md).
template <typename T, std::size_t kHalf = 0>
[[gnu::always_inline]] inline void rope_rows_of(const T* __restrict x, const T* __restrict cos_t,
                                                const T* __restrict sin_t, T sign, std::size_t T_, std::size_t H,
                                                std::size_t half_, std::size_t r_begin, std::size_t r_end,
                                                T* __restrict y) {
  const std::size_t half = kHalf ? kHalf : half_;
  const std::size_t d = 2 * half, C = H * d;
  for (std::size_t r = r_begin; r < r_end; ++r) {
    const T* __restrict cr = cos_t + (r % T_) * half;
    const T* __restrict sr = sin_t + (r % T_) * half;
    for (std::size_t h = 0; h < H; ++h) {
      const T* __restrict a = x + r * C + h * d;
      const T* __restrict b = a + half;
      T* __restrict ya = y + r * C + h * d;
      T* __restrict yb = ya + half;
      for (std::size_t i = 0; i < half; ++i) {
        const T c = cr[i], s = sign * sr[i];
        ya[i] = a[i] * c - b[i] * s;
        yb[i] = b[i] * c + a[i] * s;
      }
    }
  }
}

// The head widths of common models (16, 32, 64, 128) get their pair loop's length
// at compile time, which the compiler turns into whole vectors; any other even
// width runs the same loop with its length at run time.
template <typename T>
[[gnu::always_inline]] inline void rope_rows(const T* x, const T* cos_t, const T* sin_t, T sign, std::size_t T_,
                                             std::size_t H, std::size_t half, std::size_t r_begin,
                                             std::size_t r_end, T* y) {
  switch (half) {
    case 8: return rope_rows_of<T, 8>(x, cos_t, sin_t, sign, T_, H, half, r_begin, r_end, y);
    case 16: return rope_rows_of<T, 16>(x, cos_t, sin_t, sign, T_, H, half, r_begin, r_end, y);
    case 32: return rope_rows_of<T, 32>(x, cos_t, sin_t, sign, T_, H, half, r_begin, r_end, y);
    case 64: return rope_rows_of<T, 64>(x, cos_t, sin_t, sign, T_, H, half, r_begin, r_end, y);
    default: return rope_rows_of<T>(x, cos_t, sin_t, sign, T_, H, half, r_begin, r_end, y);
  }
}

HEADROOM_CLONES void rope_rows_f32(const float* x, const float* cos_t, const float* sin_t, float sign,
                                   std::size_t T_, std::size_t H, std::size_t half, std::size_t r_begin,
                                   std::size_t r_end, float* y) {
  rope_rows(x, cos_t, sin_t, sign, T_, H, half, r_begin, r_end, y);
}

// cos and sin of p theta_i for p = t + offset, t < T_, theta_i = base^(-2i/d), i < d/2,
// computed in double and then rounded to T, so float and double see the same angles.
template <typename T>
struct RopeTables {
  std::vector<T> cos, sin;  // (T_, half)
};

template <typename T>
std::shared_ptr<const RopeTables<T>> rope_tables(std::size_t T_, std::size_t d, double base, std::size_t offset) {
  const std::size_t half = d / 2;
  auto tables = std::make_shared<RopeTables<T>>();
  tables->cos.resize(T_ * half);
  tables->sin.resize(T_ * half);
  std::vector<double> theta(half);
  for (std::size_t i = 0; i < half; ++i) {
    theta[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  }
  for (std::size_t t = 0; t < T_; ++t) {
    const double p = static_cast<double>(t + offset);
    for (std::size_t i = 0; i < half; ++i) {
      const double angle = p * theta[i];
      tables->cos[t * half + i] = static_cast<T>(std::cos(angle));
      tables->sin[t * half + i] = static_cast<T>(std::sin(angle));
    }
  }
  return tables;
}

}  // namespace

template <typename T>
Tensor<T> sigmoid(const Tensor<T>& x) {
  const xt::xarray<T>& xv = x.value();
  xt::xarray<T> y = xt::empty<T>(xv.shape());
  parallel_for(xv.size(), kMinChunkElements, [&](std::size_t b, std::size_t e) {
    fast::clone_if_float<T>(sigmoid_forward_f32, [](auto... a) { sigmoid_forward(a...); }, xv.data() + b,
                            y.data() + b, e - b);
  });
  return make_result<T>("sigmoid", std::move(y), {x.node()},
                        [xn = x.node()](const xt::xarray<T>& g, const xt::xarray<T>& y) {
                          if (!xn->requires_grad) return;
                          xt::xarray<T> gx = xt::empty<T>(g.shape());
                          parallel_for(g.size(), kMinChunkElements, [&](std::size_t b, std::size_t e) {
                            fast::clone_if_float<T>(sigmoid_backward_f32, [](auto... a) { sigmoid_backward(a...); },
                                                    g.data() + b, y.data() + b, gx.data() + b, e - b);
                          });
                          accumulate_grad(*xn, std::move(gx), "sigmoid");
                        });
}

template <typename T>
Tensor<T> swiglu(const Tensor<T>& gate, const Tensor<T>& up) {
  if (gate.shape() != up.shape()) {
    throw ShapeError(fmt::format("swiglu: gate and up must have the same shape, got {} and {}",
                                 format_shape(gate.shape()), format_shape(up.shape())));
  }
  const T* pg = gate.value().data();
  const T* pu = up.value().data();
  xt::xarray<T> y = xt::empty<T>(gate.shape());  // (..., d_ff)
  T* py = y.data();
  parallel_for(y.size(), kMinChunkElements, [&](std::size_t b, std::size_t e) {
    fast::clone_if_float<T>(swiglu_forward_f32, [](auto... a) { swiglu_forward(a...); }, pg + b, pu + b, py + b,
                            e - b);
  });
  return make_result<T>(
      "swiglu", std::move(y), {gate.node(), up.node()},
      [gn = gate.node(), un = up.node()](const xt::xarray<T>& g, const xt::xarray<T>&) {
        xt::xarray<T> ggate, gup;
        if (gn->requires_grad) ggate = xt::empty<T>(g.shape());
        if (un->requires_grad) gup = xt::empty<T>(g.shape());
        T* pgg = gn->requires_grad ? ggate.data() : nullptr;
        T* pgu = un->requires_grad ? gup.data() : nullptr;
        parallel_for(g.size(), kMinChunkElements, [&](std::size_t b, std::size_t e) {
          fast::clone_if_float<T>(swiglu_backward_f32, [](auto... a) { swiglu_backward(a...); }, g.data() + b,
                                  gn->value.data() + b, un->value.data() + b, pgg ? pgg + b : nullptr,
                                  pgu ? pgu + b : nullptr, e - b);
        });
        if (gn->requires_grad) accumulate_grad(*gn, std::move(ggate), "swiglu");
        if (un->requires_grad) accumulate_grad(*un, std::move(gup), "swiglu");
      });
}

template <typename T>
Tensor<T> rms_norm(const Tensor<T>& x, const Tensor<T>& weight, T eps) {
  const Shape& xs = x.shape();
  if (xs.empty()) throw ShapeError("rms_norm: input must have at least one axis, got ()");
  const std::size_t C = xs.back();
  if (weight.shape() != Shape{C}) {
    throw ShapeError(fmt::format("rms_norm: input {} needs weight of shape ({}), got {}", format_shape(xs), C,
                                 format_shape(weight.shape())));
  }
  if (!(eps >= T(0))) throw std::invalid_argument(fmt::format("rms_norm: eps must be >= 0, got {}", eps));
  const std::size_t rows = x.size() / std::max<std::size_t>(C, 1);
  std::vector<T> rstd(rows);  // (rows,) saved for backward
  xt::xarray<T> y = xt::empty<T>(xs);
  const T* px = x.value().data();
  const T* pw = weight.value().data();
  T* py = y.data();
  parallel_for(rows, min_chunk_rows(C), [&](std::size_t r_begin, std::size_t r_end) {
    fast::clone_if_float<T>(rms_norm_rows_f32, [](auto... a) { rms_norm_rows(a...); }, px + r_begin * C, pw, eps, C,
                            r_end - r_begin, rstd.data() + r_begin, py + r_begin * C);
  });
  return make_result<T>(
      "rms_norm", std::move(y), {x.node(), weight.node()},
      [xn = x.node(), wn = weight.node(), rstd = std::move(rstd), rows, C](const xt::xarray<T>& g,
                                                                          const xt::xarray<T>&) {
        // With xhat = x * rstd and dxhat = g * w:
        //   (1) dx = rstd * (dxhat - xhat * mean_c(dxhat * xhat))
        //   (2) dw = sum_rows(g * xhat)
        const T* pg = g.data();
        const T* px = xn->value.data();
        const T* pw = wn->value.data();
        xt::xarray<T> gx, gw;
        if (xn->requires_grad) gx = xt::empty<T>(xn->value.shape());
        if (wn->requires_grad) gw = xt::zeros<T>({C});
        // As layer_norm: each chunk sums (2) over its rows into its own partial sum,
        // and the partials are added in the order of the chunks, so a run is
        // deterministic for a given thread count.
        struct Partial {
          std::size_t first_row;
          std::vector<T> gw;
        };
        std::vector<Partial> partials;
        std::mutex partials_mutex;
        parallel_for(rows, min_chunk_rows(C), [&](std::size_t r_begin, std::size_t r_end) {
          Partial part{r_begin, std::vector<T>(wn->requires_grad ? C : 0)};
          fast::clone_if_float<T>(
              rms_norm_backward_rows_f32, [](auto... a) { rms_norm_backward_rows(a...); }, pg + r_begin * C,
              px + r_begin * C, pw, rstd.data() + r_begin, C, r_end - r_begin,
              xn->requires_grad ? gx.data() + r_begin * C : nullptr, wn->requires_grad ? part.gw.data() : nullptr);
          std::lock_guard lock(partials_mutex);
          partials.push_back(std::move(part));
        });
        std::sort(partials.begin(), partials.end(),
                  [](const Partial& a, const Partial& b) { return a.first_row < b.first_row; });
        for (const Partial& part : partials) {
          for (std::size_t c = 0; c < part.gw.size(); ++c) gw.data()[c] += part.gw[c];
        }
        if (xn->requires_grad) accumulate_grad(*xn, std::move(gx), "rms_norm");
        if (wn->requires_grad) accumulate_grad(*wn, std::move(gw), "rms_norm");
      });
}

template <typename T>
Tensor<T> rope(const Tensor<T>& x, std::size_t n_heads, double base, std::size_t offset) {
  const Shape& s = x.shape();
  if (n_heads == 0) throw ShapeError(fmt::format("rope: n_heads must be > 0, got 0 (input {})", format_shape(s)));
  if (s.size() != 3) {
    throw ShapeError(fmt::format("rope: input must be (B, T, H d), got {}", format_shape(s)));
  }
  if (s[2] % n_heads != 0) {
    throw ShapeError(fmt::format("rope: input {} has {} channels, not a multiple of n_heads = {}", format_shape(s),
                                 s[2], n_heads));
  }
  if ((s[2] / n_heads) % 2 != 0) {
    throw ShapeError(fmt::format("rope: input {} with n_heads = {} has head width d = {}, which must be even",
                                 format_shape(s), n_heads, s[2] / n_heads));
  }
  if (!(base > 0.0) || !std::isfinite(base)) {
    throw std::invalid_argument(fmt::format("rope: base must be finite and > 0, got {}", base));
  }
  const std::size_t T_ = s[1], H = n_heads, half = s[2] / n_heads / 2, C = s[2];
  const std::size_t rows = s[0] * T_;
  // (T, d/2) angles once per call, shared with the backward.
  const std::shared_ptr<const RopeTables<T>> tables = rope_tables<T>(T_, 2 * half, base, offset);
  xt::xarray<T> y = xt::empty<T>(s);  // (B, T, H d)
  const T* px = x.value().data();
  T* py = y.data();
  parallel_for(rows, min_chunk_rows(C), [&](std::size_t r_begin, std::size_t r_end) {
    fast::clone_if_float<T>(rope_rows_f32, [](auto... a) { rope_rows(a...); }, px, tables->cos.data(),
                            tables->sin.data(), T(1), T_, H, half, r_begin, r_end, py);
  });
  return make_result<T>("rope", std::move(y), {x.node()},
                        [xn = x.node(), tables, T_, H, half, rows, C](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          if (!xn->requires_grad) return;
                          // The rotation by -p theta_i: the transpose of the forward's.
                          xt::xarray<T> gx = xt::empty<T>(g.shape());
                          const T* pg = g.data();
                          T* pgx = gx.data();
                          parallel_for(rows, min_chunk_rows(C), [&](std::size_t r_begin, std::size_t r_end) {
                            fast::clone_if_float<T>(rope_rows_f32, [](auto... a) { rope_rows(a...); }, pg,
                                                    tables->cos.data(), tables->sin.data(), T(-1), T_, H, half,
                                                    r_begin, r_end, pgx);
                          });
                          accumulate_grad(*xn, std::move(gx), "rope");
                        });
}

#define HEADROOM_INSTANTIATE(T)                                                  \
  template Tensor<T> sigmoid(const Tensor<T>&);                                  \
  template Tensor<T> rms_norm(const Tensor<T>&, const Tensor<T>&, T);            \
  template Tensor<T> swiglu(const Tensor<T>&, const Tensor<T>&);                 \
  template Tensor<T> rope(const Tensor<T>&, std::size_t, double, std::size_t);
HEADROOM_INSTANTIATE(float)
HEADROOM_INSTANTIATE(double)
#undef HEADROOM_INSTANTIATE

}  // namespace headroom
