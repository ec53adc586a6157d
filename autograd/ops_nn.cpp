// The ops a transformer needs beyond arithmetic: softmax and log-softmax,
// cross-entropy, embedding, masked_fill, LayerNorm and dropout. Each is a fused
// plain loop over contiguous memory whose backward uses saved statistics (row max
// and log-sum-exp, LayerNorm mean and rstd) rather than re-running the forward.
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <type_traits>

#include <fmt/format.h>
#include <xtensor/xbroadcast.hpp>
#include <xtensor/xbuilder.hpp>

#include "autograd/fast_math.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"

namespace headroom {
namespace {

// Log-sum-exp of n elements spaced `stride` apart, max-subtracted so exp never
// overflows.
template <typename T>
T log_sum_exp(const T* x, std::size_t n, std::size_t stride) {
  T m = -std::numeric_limits<T>::infinity();
  for (std::size_t j = 0; j < n; ++j) m = std::max(m, x[j * stride]);
  if (!std::isfinite(m)) return m;  // all -inf (or a +inf/NaN, which propagates)
  T s = 0;
  for (std::size_t j = 0; j < n; ++j) s += fast::exp(x[j * stride] - m);  // fast_math.hpp: libm's in double
  return m + std::log(s);
}

template <typename T>
xt::xarray<T> scalar_array(T v) {
  xt::xarray<T> a = xt::zeros<T>(Shape{});
  a.data()[0] = v;
  return a;
}

// softmax (log == false) or log_softmax (log == true) along one axis.
template <typename T>
Tensor<T> softmax_impl(const char* op, const Tensor<T>& x, int axis, bool log) {
  const std::size_t ax = normalize_axis(axis, x.shape(), op);
  const AxisLayout L = axis_layout(x.shape(), ax);
  xt::xarray<T> y = xt::empty<T>(x.shape());
  const T* px = x.value().data();
  T* py = y.data();
  for (std::size_t o = 0; o < L.outer; ++o) {
    for (std::size_t i = 0; i < L.inner; ++i) {
      const std::size_t base = o * L.extent * L.inner + i;
      const T lse = log_sum_exp(px + base, L.extent, L.inner);
      // A fully masked row: no key to attend to, so no attention at all.
      const bool empty_row = !log && lse == -std::numeric_limits<T>::infinity();
      for (std::size_t j = 0; j < L.extent; ++j) {
        const std::size_t at = base + j * L.inner;
        py[at] = log ? px[at] - lse : empty_row ? T(0) : std::exp(px[at] - lse);
      }
    }
  }
  return make_result<T>(op, std::move(y), {x.node()},
                        [op, xn = x.node(), L, log](const xt::xarray<T>& g, const xt::xarray<T>& y) {
                          if (!xn->requires_grad) return;
                          // softmax:     dx = y * (g - sum_j g_j y_j)
                          // log_softmax: dx = g - softmax * sum_j g_j,  softmax = exp(y)
                          xt::xarray<T> gx = xt::empty<T>(g.shape());
                          const T* pg = g.data();
                          const T* py = y.data();
                          T* pgx = gx.data();
                          for (std::size_t o = 0; o < L.outer; ++o) {
                            for (std::size_t i = 0; i < L.inner; ++i) {
                              const std::size_t base = o * L.extent * L.inner + i;
                              T dot = 0;
                              for (std::size_t j = 0; j < L.extent; ++j) {
                                const std::size_t at = base + j * L.inner;
                                dot += log ? pg[at] : pg[at] * py[at];
                              }
                              for (std::size_t j = 0; j < L.extent; ++j) {
                                const std::size_t at = base + j * L.inner;
                                pgx[at] = log ? pg[at] - std::exp(py[at]) * dot
                                              : py[at] * (pg[at] - dot);
                              }
                            }
                          }
                          accumulate_grad(*xn, std::move(gx), op);
                        });
}

// Cross-entropy over the rows whose `counted` flag is set.
template <typename T>
Tensor<T> cross_entropy_impl(const Tensor<T>& logits, const IndexArray& targets,
                             const std::vector<unsigned char>& counted, const std::string& why_none) {
  const Shape& ls = logits.shape();
  const std::size_t rows = targets.size();
  const std::size_t V = ls.back();
  std::size_t count = 0;
  for (unsigned char c : counted) count += c;
  if (count == 0) {
    throw std::invalid_argument(fmt::format(
        "cross_entropy: no position counts ({}), so the mean loss is undefined; targets shape {}",
        why_none, format_shape(targets.shape())));
  }
  const T* px = logits.value().data();
  const Index* pt = targets.data();
  std::vector<T> lse(rows, T(0));  // saved for backward: softmax = exp(x - lse)
  T total = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    if (!counted[r]) continue;
    const Index t = pt[r];
    if (t < 0 || static_cast<std::size_t>(t) >= V) {
      throw std::invalid_argument(fmt::format(
          "cross_entropy: target {} at position {} is out of range for {} classes (logits {})", t,
          format_shape(unravel_index(r, targets.shape())), V, format_shape(ls)));
    }
    lse[r] = log_sum_exp(px + r * V, V, 1);
    total += lse[r] - px[r * V + static_cast<std::size_t>(t)];
  }
  const T inv_count = T(1) / static_cast<T>(count);
  return make_result<T>(
      "cross_entropy", scalar_array(total * inv_count), {logits.node()},
      [xn = logits.node(), targets, counted, lse = std::move(lse), V, inv_count](
          const xt::xarray<T>& g, const xt::xarray<T>&) {
        if (!xn->requires_grad) return;
        // d loss / d x[r, v] = (softmax[r, v] - [v == t_r]) / count on counted rows.
        const T scale = g.data()[0] * inv_count;
        xt::xarray<T> gx = xt::zeros<T>(xn->value.shape());
        const T* px = xn->value.data();
        T* pgx = gx.data();
        for (std::size_t r = 0; r < counted.size(); ++r) {
          if (!counted[r]) continue;
          for (std::size_t v = 0; v < V; ++v) pgx[r * V + v] = scale * fast::exp(px[r * V + v] - lse[r]);
          pgx[r * V + static_cast<std::size_t>(targets.data()[r])] -= scale;
        }
        accumulate_grad(*xn, std::move(gx), "cross_entropy");
      });
}

template <typename T>
void check_targets_shape(const Tensor<T>& logits, const IndexArray& targets) {
  const Shape& ls = logits.shape();
  const Shape expected = ls.empty() ? Shape{} : Shape(ls.begin(), ls.end() - 1);
  if (ls.empty() || Shape(targets.shape()) != expected) {
    throw ShapeError(fmt::format("cross_entropy: logits {} need targets of shape {}, got {}",
                                 format_shape(ls), format_shape(expected),
                                 format_shape(targets.shape())));
  }
}

}  // namespace

template <typename T>
Tensor<T> softmax(const Tensor<T>& x, int axis) {
  return softmax_impl<T>("softmax", x, axis, false);
}

template <typename T>
Tensor<T> log_softmax(const Tensor<T>& x, int axis) {
  return softmax_impl<T>("log_softmax", x, axis, true);
}

template <typename T>
Tensor<T> cross_entropy(const Tensor<T>& logits, const IndexArray& targets, Index ignore_index) {
  check_targets_shape(logits, targets);
  std::vector<unsigned char> counted(targets.size());
  for (std::size_t r = 0; r < counted.size(); ++r) counted[r] = targets.data()[r] != ignore_index;
  return cross_entropy_impl(logits, targets, counted,
                            fmt::format("every target is ignore_index={}", ignore_index));
}

template <typename T>
Tensor<T> cross_entropy(const Tensor<T>& logits, const IndexArray& targets, const Mask& mask) {
  check_targets_shape(logits, targets);
  if (Shape(mask.shape()) != Shape(targets.shape())) {
    throw ShapeError(fmt::format("cross_entropy: mask has shape {} but targets have {}",
                                 format_shape(mask.shape()), format_shape(targets.shape())));
  }
  std::vector<unsigned char> counted(targets.size());
  for (std::size_t r = 0; r < counted.size(); ++r) counted[r] = mask.data()[r];
  return cross_entropy_impl(logits, targets, counted, "the mask is false everywhere");
}

template <typename T>
Tensor<T> embedding(const Tensor<T>& weight, const IndexArray& indices) {
  const Shape& ws = weight.shape();
  if (ws.size() != 2) {
    throw ShapeError(fmt::format("embedding: weight must be (V, C), got {}", format_shape(ws)));
  }
  const std::size_t V = ws[0], C = ws[1];
  Shape out_shape = indices.shape();
  out_shape.push_back(C);
  xt::xarray<T> y = xt::empty<T>(out_shape);
  const T* pw = weight.value().data();
  for (std::size_t r = 0; r < indices.size(); ++r) {
    const Index t = indices.data()[r];
    if (t < 0 || static_cast<std::size_t>(t) >= V) {
      throw std::invalid_argument(fmt::format(
          "embedding: index {} at position {} is out of range for a weight of shape {}", t,
          format_shape(unravel_index(r, indices.shape())), format_shape(ws)));
    }
    std::copy_n(pw + static_cast<std::size_t>(t) * C, C, y.data() + r * C);
  }
  return make_result<T>("embedding", std::move(y), {weight.node()},
                        [wn = weight.node(), indices, C](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          if (!wn->requires_grad) return;
                          // Scatter-add: a row used at several positions gets their sum.
                          xt::xarray<T> gw = xt::zeros<T>(wn->value.shape());
                          for (std::size_t r = 0; r < indices.size(); ++r) {
                            T* dst = gw.data() + static_cast<std::size_t>(indices.data()[r]) * C;
                            const T* src = g.data() + r * C;
                            for (std::size_t c = 0; c < C; ++c) dst[c] += src[c];
                          }
                          accumulate_grad(*wn, std::move(gw), "embedding");
                        });
}

template <typename T>
Tensor<T> masked_fill(const Tensor<T>& x, const Mask& mask, T value) {
  if (!broadcasts_to(mask.shape(), x.shape())) {
    throw ShapeError(fmt::format("masked_fill: mask of shape {} does not broadcast to input {}",
                                 format_shape(mask.shape()), format_shape(x.shape())));
  }
  Mask full = xt::broadcast(mask, x.shape());
  xt::xarray<T> y = x.value();
  T* py = y.data();
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (full.data()[i]) py[i] = value;
  }
  return make_result<T>("masked_fill", std::move(y), {x.node()},
                        [xn = x.node(), full = std::move(full)](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          if (!xn->requires_grad) return;
                          xt::xarray<T> gx = g;  // filled positions do not depend on x
                          for (std::size_t i = 0; i < gx.size(); ++i) {
                            if (full.data()[i]) gx.data()[i] = T(0);
                          }
                          accumulate_grad(*xn, std::move(gx), "masked_fill");
                        });
}

namespace {

// LayerNorm's forward over `rows` rows of C channels: y = (x - mean) rstd w + b,
// saving mean and rstd = 1 / sqrt(var + eps) per row.
template <typename T>
[[gnu::always_inline]] inline void layer_norm_rows(const T* x, const T* w, const T* b, T eps, std::size_t C,
                                                   std::size_t rows, T* mean, T* rstd, T* y) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = x + r * C;
    const T m = fast::lane_sum<T>(C, [&](std::size_t c) { return xr[c]; }) / static_cast<T>(C);
    // Biased variance, as PyTorch's LayerNorm.
    const T v = fast::lane_sum<T>(C, [&](std::size_t c) { return (xr[c] - m) * (xr[c] - m); }) / static_cast<T>(C);
    const T s = T(1) / std::sqrt(v + eps);
    mean[r] = m;
    rstd[r] = s;
    T* yr = y + r * C;
    for (std::size_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * s * w[c] + b[c];
  }
}

// LayerNorm's backward over `rows` rows: the input gradient (term (1)) into gx
// when it is non-null, and each channel's sums of terms (2) and (3) over these
// rows, in row order, added into gw and gb when they are non-null. The buffers
// never overlap; __restrict says so, or GCC checks at run time and may take a path
// that rounds differently when two lie next to each other (tests/test_heap_placement.cpp).
template <typename T>
[[gnu::always_inline]] inline void layer_norm_backward_rows(const T* __restrict g, const T* __restrict x,
                                                            const T* __restrict w, const T* __restrict mean,
                                                            const T* __restrict rstd, std::size_t C, std::size_t rows,
                                                            T* __restrict gx, T* __restrict gw, T* __restrict gb) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* gr = g + r * C;
    const T* xr = x + r * C;
    const T m = mean[r], s = rstd[r];
    if (gw) {
      for (std::size_t c = 0; c < C; ++c) gw[c] += gr[c] * ((xr[c] - m) * s);
    }
    if (gb) {
      for (std::size_t c = 0; c < C; ++c) gb[c] += gr[c];
    }
    if (!gx) continue;
    const T mean_d = fast::lane_sum<T>(C, [&](std::size_t c) { return gr[c] * w[c]; }) / static_cast<T>(C);
    const T mean_dx =
        fast::lane_sum<T>(C, [&](std::size_t c) { return gr[c] * w[c] * ((xr[c] - m) * s); }) / static_cast<T>(C);
    T* gxr = gx + r * C;
    for (std::size_t c = 0; c < C; ++c) gxr[c] = s * (gr[c] * w[c] - mean_d - (xr[c] - m) * s * mean_dx);
  }
}

HEADROOM_CLONES void layer_norm_rows_f32(const float* x, const float* w, const float* b, float eps, std::size_t C,
                                         std::size_t rows, float* mean, float* rstd, float* y) {
  layer_norm_rows(x, w, b, eps, C, rows, mean, rstd, y);
}

HEADROOM_CLONES void layer_norm_backward_rows_f32(const float* __restrict g, const float* __restrict x,
                                                  const float* __restrict w, const float* __restrict mean,
                                                  const float* __restrict rstd, std::size_t C, std::size_t rows,
                                                  float* __restrict gx, float* __restrict gw, float* __restrict gb) {
  layer_norm_backward_rows(g, x, w, mean, rstd, C, rows, gx, gw, gb);
}

}  // namespace

template <typename T>
Tensor<T> layer_norm(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias, T eps) {
  const Shape& xs = x.shape();
  if (xs.empty()) throw ShapeError("layer_norm: input must have at least one axis, got ()");
  const std::size_t C = xs.back();
  if (weight.shape() != Shape{C} || bias.shape() != Shape{C}) {
    throw ShapeError(fmt::format("layer_norm: input {} needs weight and bias of shape ({}), got {} and {}",
                                 format_shape(xs), C, format_shape(weight.shape()),
                                 format_shape(bias.shape())));
  }
  if (!(eps >= T(0))) throw std::invalid_argument(fmt::format("layer_norm: eps must be >= 0, got {}", eps));
  const std::size_t rows = x.size() / std::max<std::size_t>(C, 1);
  std::vector<T> mean(rows), rstd(rows);  // (rows,) saved for backward
  xt::xarray<T> y = xt::empty<T>(xs);
  const T* px = x.value().data();
  const T* pw = weight.value().data();
  const T* pb = bias.value().data();
  T* py = y.data();
  // Rows are independent: parallel over rows.
  parallel_for(rows, min_chunk_rows(C), [&](std::size_t r_begin, std::size_t r_end) {
    fast::clone_if_float<T>(layer_norm_rows_f32, [](auto... a) { layer_norm_rows(a...); }, px + r_begin * C, pw,
                            pb, eps, C, r_end - r_begin, mean.data() + r_begin, rstd.data() + r_begin,
                            py + r_begin * C);
  });
  return make_result<T>(
      "layer_norm", std::move(y), {x.node(), weight.node(), bias.node()},
      [xn = x.node(), wn = weight.node(), bn = bias.node(), mean = std::move(mean),
       rstd = std::move(rstd), rows, C](const xt::xarray<T>& g, const xt::xarray<T>&) {
        // With xhat = (x - mean) * rstd and dxhat = g * w:
        //   (1) dx = rstd * (dxhat - mean_c(dxhat) - xhat * mean_c(dxhat * xhat))
        //   (2) dw = sum_rows(g * xhat)     (3) db = sum_rows(g)
        const T* pg = g.data();
        const T* px = xn->value.data();
        const T* pw = wn->value.data();
        xt::xarray<T> gx, gw, gb;
        if (xn->requires_grad) gx = xt::empty<T>(xn->value.shape());
        if (wn->requires_grad) gw = xt::zeros<T>({C});
        if (bn->requires_grad) gb = xt::zeros<T>({C});
        // One pass over the rows, in parallel chunks: each chunk writes its rows of
        // dx and sums (2) and (3) over its rows into its own partial sums, which are
        // then added in the order of the chunks (so a run is deterministic for a
        // given thread count; on one thread the rows are summed in order).
        struct Partial {
          std::size_t first_row;
          std::vector<T> gw, gb;
        };
        std::vector<Partial> partials;
        std::mutex partials_mutex;
        parallel_for(rows, min_chunk_rows(C), [&](std::size_t r_begin, std::size_t r_end) {
          Partial part{r_begin, std::vector<T>(wn->requires_grad ? C : 0), std::vector<T>(bn->requires_grad ? C : 0)};
          fast::clone_if_float<T>(
              layer_norm_backward_rows_f32, [](auto... a) { layer_norm_backward_rows(a...); }, pg + r_begin * C,
              px + r_begin * C, pw, mean.data() + r_begin, rstd.data() + r_begin, C, r_end - r_begin,
              xn->requires_grad ? gx.data() + r_begin * C : nullptr, wn->requires_grad ? part.gw.data() : nullptr,
              bn->requires_grad ? part.gb.data() : nullptr);
          std::lock_guard lock(partials_mutex);
          partials.push_back(std::move(part));
        });
        std::sort(partials.begin(), partials.end(),
                  [](const Partial& a, const Partial& b) { return a.first_row < b.first_row; });
        for (const Partial& part : partials) {
          for (std::size_t c = 0; c < part.gw.size(); ++c) gw.data()[c] += part.gw[c];
          for (std::size_t c = 0; c < part.gb.size(); ++c) gb.data()[c] += part.gb[c];
        }
        if (xn->requires_grad) accumulate_grad(*xn, std::move(gx), "layer_norm");
        if (wn->requires_grad) accumulate_grad(*wn, std::move(gw), "layer_norm");
        if (bn->requires_grad) accumulate_grad(*bn, std::move(gb), "layer_norm");
      });
}

template <typename T>
Tensor<T> dropout(const Tensor<T>& x, double p, Rng& rng, bool training) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument(fmt::format("dropout: p must be in [0, 1], got {}", p));
  }
  if (!training || p == 0.0) return x;
  // factor is 0 for dropped elements and 1/(1-p) for kept ones; backward reuses it.
  const T keep_scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  xt::xarray<T> factor = xt::empty<T>(x.shape());
  xt::xarray<T> y = xt::empty<T>(x.shape());
  const T* px = x.value().data();
  for (std::size_t i = 0; i < y.size(); ++i) {
    factor.data()[i] = rng.uniform() < p ? T(0) : keep_scale;
    y.data()[i] = px[i] * factor.data()[i];
  }
  return make_result<T>("dropout", std::move(y), {x.node()},
                        [xn = x.node(), factor = std::move(factor)](const xt::xarray<T>& g, const xt::xarray<T>&) {
                          if (!xn->requires_grad) return;
                          xt::xarray<T> gx = xt::empty<T>(g.shape());
                          for (std::size_t i = 0; i < g.size(); ++i) gx.data()[i] = g.data()[i] * factor.data()[i];
                          accumulate_grad(*xn, std::move(gx), "dropout");
                        });
}

#define HEADROOM_INSTANTIATE(T)                                                              \
  template Tensor<T> softmax(const Tensor<T>&, int);                                         \
  template Tensor<T> log_softmax(const Tensor<T>&, int);                                     \
  template Tensor<T> cross_entropy(const Tensor<T>&, const IndexArray&, Index);              \
  template Tensor<T> cross_entropy(const Tensor<T>&, const IndexArray&, const Mask&);        \
  template Tensor<T> embedding(const Tensor<T>&, const IndexArray&);                         \
  template Tensor<T> masked_fill(const Tensor<T>&, const Mask&, T);                          \
  template Tensor<T> layer_norm(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, T);    \
  template Tensor<T> dropout(const Tensor<T>&, double, Rng&, bool);
HEADROOM_INSTANTIATE(float)
HEADROOM_INSTANTIATE(double)
#undef HEADROOM_INSTANTIATE

}  // namespace headroom
