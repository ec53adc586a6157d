// Scaled dot-product attention as one op (ops.hpp): per (batch, head), GEMMs that
// read the packed projections in place through their row strides, and a plain-loop
// masked softmax. It replaces split_heads, the two matmuls, the scale, masked_fill,
// softmax and merge_heads of the composed form: no permuted copies, no (B, H, T, T)
// mask, one pass over the scores instead of three, and the backward needs only the
// saved weights.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "autograd/fast_math.hpp"
#include "autograd/gemm.hpp"
#include "autograd/ops.hpp"

namespace headroom {
namespace {

struct Dims {
  std::size_t B, T, H, G, dk, dv;
  std::size_t group() const { return H / G; }  // query heads per kv head
};

Dims check_attention(const Shape& q, const Shape& k, const Shape& v, std::size_t H, std::size_t G,
                     const Mask* key_padding) {
  const auto fail = [&](const std::string& why) {
    throw ShapeError(fmt::format("attention: {} (q {}, k {}, v {}, n_heads {}, n_kv_heads {})", why, format_shape(q),
                                 format_shape(k), format_shape(v), H, G));
  };
  if (q.size() != 3 || k.size() != 3 || v.size() != 3) fail("q, k and v must be (B, T, heads * width)");
  if (H == 0 || G == 0 || H % G != 0) fail("n_heads must be a positive multiple of n_kv_heads");
  if (k[0] != q[0] || v[0] != q[0] || k[1] != q[1] || v[1] != q[1]) fail("q, k and v must agree on B and T");
  if (q[2] % H != 0 || k[2] % G != 0 || v[2] % G != 0 || q[2] / H != k[2] / G) {
    fail("q's last axis must be n_heads * d_k, k's n_kv_heads * d_k, v's n_kv_heads * d_v");
  }
  const Dims d{q[0], q[1], H, G, q[2] / H, v[2] / G};
  if (key_padding && Shape(key_padding->shape()) != Shape{d.B, d.T}) {
    fail(fmt::format("key_padding must be (B, T) = {}, got {}", format_shape({d.B, d.T}),
                     format_shape(key_padding->shape())));
  }
  return d;
}

// Row i of the scores s (T keys) in place: softmax over the visible keys, 0 for
// the hidden ones and for every key of a row with none visible.
template <typename T>
void masked_softmax_row(T* s, std::size_t i, std::size_t t, bool causal, const bool* padding) {
  const std::size_t end = causal ? i + 1 : t;  // keys [0, end) pass the causal mask
  T max = -std::numeric_limits<T>::infinity();
  for (std::size_t j = 0; j < end; ++j) {
    if (!(padding && padding[j])) max = std::max(max, s[j]);
  }
  if (max == -std::numeric_limits<T>::infinity()) {  // nothing visible
    std::fill(s, s + t, T(0));
    return;
  }
  T sum = 0;
  for (std::size_t j = 0; j < end; ++j) {
    const T e = (padding && padding[j]) ? T(0) : fast::exp(s[j] - max);
    s[j] = e;
    sum += e;
  }
  const T inv = T(1) / sum;
  for (std::size_t j = 0; j < end; ++j) s[j] *= inv;
  std::fill(s + end, s + t, T(0));
}

}  // namespace

template <typename T>
Tensor<T> attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, std::size_t n_heads,
                    std::size_t n_kv_heads, T scale, bool causal, const Mask* key_padding, xt::xarray<T>* weights) {
  const Dims d = check_attention(q.shape(), k.shape(), v.shape(), n_heads, n_kv_heads, key_padding);
  const std::size_t ldq = d.H * d.dk, ldk = d.G * d.dk, ldv = d.G * d.dv, ldo = d.H * d.dv;
  const T* pq = q.value().data();
  const T* pk = k.value().data();
  const T* pv = v.value().data();
  xt::xarray<T> p = xt::empty<T>(Shape{d.B, d.H, d.T, d.T});  // the attention weights, saved for backward
  xt::xarray<T> out = xt::empty<T>(Shape{d.B, d.T, ldo});
  const bool* padding = key_padding ? key_padding->data() : nullptr;
  for (std::size_t b = 0; b < d.B; ++b) {
    for (std::size_t h = 0; h < d.H; ++h) {
      const std::size_t g = h / d.group();
      T* ph = p.data() + (b * d.H + h) * d.T * d.T;
      // Scores (T, T) = scale * Q_h K_g^T, read in place from the packed projections.
      gemm<T>(false, true, d.T, d.T, d.dk, scale, pq + b * d.T * ldq + h * d.dk, ldq, pk + b * d.T * ldk + g * d.dk,
              ldk, T(0), ph, d.T);
      for (std::size_t i = 0; i < d.T; ++i) {
        masked_softmax_row(ph + i * d.T, i, d.T, causal, padding ? padding + b * d.T : nullptr);
      }
      // Out_h (T, dv) = P V_g, written into head h's columns of the packed output.
      gemm<T>(false, false, d.T, d.dv, d.T, T(1), ph, d.T, pv + b * d.T * ldv + g * d.dv, ldv, T(0),
              out.data() + b * d.T * ldo + h * d.dv, ldo);
    }
  }
  if (weights) *weights = p;
  auto backward = [qn = q.node(), kn = k.node(), vn = v.node(), p = std::move(p), d, scale](
                      const xt::xarray<T>& grad, const xt::xarray<T>&) {
    const std::size_t ldq = d.H * d.dk, ldk = d.G * d.dk, ldv = d.G * d.dv, ldo = d.H * d.dv;
    const T* pq = qn->value.data();
    const T* pk = kn->value.data();
    const T* pv = vn->value.data();
    const T* pg = grad.data();
    xt::xarray<T> gq = xt::empty<T>(qn->value.shape());
    xt::xarray<T> gk = xt::zeros<T>(kn->value.shape());  // the query heads of a group add into it
    xt::xarray<T> gv = xt::zeros<T>(vn->value.shape());
    std::vector<T> ds(d.T * d.T);
    for (std::size_t b = 0; b < d.B; ++b) {
      for (std::size_t h = 0; h < d.H; ++h) {
        const std::size_t g = h / d.group();
        const T* ph = p.data() + (b * d.H + h) * d.T * d.T;
        const T* go = pg + b * d.T * ldo + h * d.dv;  // dOut_h (T, dv), row stride ldo
        // dV_g += P^T dOut_h
        gemm<T>(true, false, d.T, d.dv, d.T, T(1), ph, d.T, go, ldo, T(1), gv.data() + b * d.T * ldv + g * d.dv, ldv);
        // dP = dOut_h V_g^T, then the softmax backward in place: dS = P (dP - rowsum(P dP)).
        gemm<T>(false, true, d.T, d.T, d.dv, T(1), go, ldo, pv + b * d.T * ldv + g * d.dv, ldv, T(0), ds.data(), d.T);
        for (std::size_t i = 0; i < d.T; ++i) {
          const T* pr = ph + i * d.T;
          T* dr = ds.data() + i * d.T;
          T dot = 0;
          for (std::size_t j = 0; j < d.T; ++j) dot += pr[j] * dr[j];
          for (std::size_t j = 0; j < d.T; ++j) dr[j] = pr[j] * (dr[j] - dot);  // 0 where P is 0 (masked)
        }
        // dQ_h = scale dS K_g; dK_g += scale dS^T Q_h
        gemm<T>(false, false, d.T, d.dk, d.T, scale, ds.data(), d.T, pk + b * d.T * ldk + g * d.dk, ldk, T(0),
                gq.data() + b * d.T * ldq + h * d.dk, ldq);
        gemm<T>(true, false, d.T, d.dk, d.T, scale, ds.data(), d.T, pq + b * d.T * ldq + h * d.dk, ldq, T(1),
                gk.data() + b * d.T * ldk + g * d.dk, ldk);
      }
    }
    accumulate_grad(*qn, std::move(gq), "attention");
    accumulate_grad(*kn, std::move(gk), "attention");
    accumulate_grad(*vn, std::move(gv), "attention");
  };
  return make_result<T>("attention", std::move(out), {q.node(), k.node(), v.node()}, std::move(backward));
}

template Tensor<float> attention(const Tensor<float>&, const Tensor<float>&, const Tensor<float>&, std::size_t,
                                 std::size_t, float, bool, const Mask*, xt::xarray<float>*);
template Tensor<double> attention(const Tensor<double>&, const Tensor<double>&, const Tensor<double>&, std::size_t,
                                  std::size_t, double, bool, const Mask*, xt::xarray<double>*);

}  // namespace headroom
