// Scaled dot-product attention as one op (ops.hpp): per (batch, head), GEMMs that
// read the packed projections in place through their row strides, and a plain-loop
// masked softmax. It replaces split_heads, the two matmuls, the scale, masked_fill,
// softmax and merge_heads of the composed form: no permuted copies, no (B, H, T, T)
// mask, one pass over the scores instead of three, and the backward needs only the
// saved weights.
//
// How: one pass per (batch, kv head) pair, whose GEMMs read q and v in place through
// their row strides and K^T from a contiguous copy; causal products go in blocks of
// 32 query rows that skip the hidden keys; the pairs run in parallel (parallel.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "autograd/fast_math.hpp"
#include "autograd/gemm.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"
#include "autograd/small_gemm.hpp"
#include "autograd/softmax_row.hpp"

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

HEADROOM_CLONES void softmax_row_f32(float* s, std::size_t n) { softmax_row(s, n); }

// The softmax backward of one row in place: dP -> dS = P (dP - sum_j P_j dP_j),
// 0 where P is 0 (masked keys).
template <typename T>
[[gnu::always_inline]] inline void softmax_backward_row(const T* p, T* d, std::size_t n) {
  const T dot = fast::lane_sum<T>(n, [&](std::size_t j) { return p[j] * d[j]; });
  for (std::size_t j = 0; j < n; ++j) d[j] = p[j] * (d[j] - dot);
}

HEADROOM_CLONES void softmax_backward_row_f32(const float* p, float* d, std::size_t n) {
  softmax_backward_row(p, d, n);
}

// Row i of the scores s (T keys) in place: softmax over the visible keys, 0 for
// the hidden ones and for every key of a row with none visible.
template <typename T>
void masked_softmax_row(T* s, std::size_t i, std::size_t t, bool causal, const bool* padding) {
  const std::size_t end = causal ? i + 1 : t;  // keys [0, end) pass the causal mask
  if (!padding) {
    // Run the vector loops over whole vectors: the hidden keys up to the next
    // multiple of 16 become -inf, whose exp is exactly 0, so that no row ends in a
    // scalar tail, which at small T is a large part of a row's time.
    const std::size_t n = std::min(t, (end + 15) / 16 * 16);
    std::fill(s + end, s + n, -std::numeric_limits<T>::infinity());
    fast::clone_if_float<T>(softmax_row_f32, [](auto... a) { softmax_row(a...); }, s, n);
    std::fill(s + n, s + t, T(0));
    return;
  }
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

// Attention's per-head products go to small_gemm while B (k, n) stays within
// 128 x 128 elements, where it runs faster than BLIS, whose setup dominates such
// small calls (bench/small_gemm_bench.cpp), and to the BLAS library beyond. Both
// take B as stored rows, so K_g and V_g enter Q K^T and dO V^T as contiguous copies
// of their transposes (transpose_into, T d_k elements per kv head): BLIS also runs
// those products far slower with a transposed B (bench/README.md).
constexpr std::size_t kSmallGemmMaxPanel = 128 * 128;

// small_gemm runs its vectors along C's columns, down to 16-byte ones (4 floats);
// columns past the last such vector go through a partial block that copies its
// operands in and out at every step of k. Narrow heads (many heads at a small
// d_model: d_k or d_v of 1, 2, 3, 6) make those columns most or all of a product.
// Up to kNarrowMaxColumns columns, head_gemm hands them to a narrow product instead,
// which runs along k a column at a time: dot products (C = A B) or scaled rows of A
// added up (C = A^T B). Each sum has a fixed order (lane_sum's 16 lanes, or
// p = 0, 1, ...), the same on every ISA and in every block of rows.
constexpr std::size_t kNarrowMaxColumns = 16;

// C (m, n) = alpha A B + beta C, A (m, k): row i of C, column j, is a dot product
// of A's row i with B's column j, gathered once into `column` (k values).
template <typename T>
[[gnu::always_inline]] inline void narrow_product(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                                                  std::size_t lda, const T* b, std::size_t ldb, T beta, T* c,
                                                  std::size_t ldc, T* column) {
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t p = 0; p < k; ++p) column[p] = b[p * ldb + j];
    for (std::size_t i = 0; i < m; ++i) {
      const T* row = a + i * lda;
      const T dot = fast::lane_sum<T>(k, [&](std::size_t p) { return row[p] * column[p]; });
      T& out = c[i * ldc + j];
      out = beta == T(0) ? alpha * dot : alpha * dot + beta * out;  // beta 0 never reads C
    }
  }
}

// C (m, n) = alpha A^T B + beta C, A stored (k, m): column j of C is the sum over p
// of A's row p times B(p, j), added row by row into `column` (m values).
template <typename T>
[[gnu::always_inline]] inline void narrow_product_transposed(std::size_t m, std::size_t n, std::size_t k, T alpha,
                                                             const T* a, std::size_t lda, const T* b,
                                                             std::size_t ldb, T beta, T* c, std::size_t ldc,
                                                             T* column) {
  for (std::size_t j = 0; j < n; ++j) {
    std::fill_n(column, m, T(0));
    for (std::size_t p = 0; p < k; ++p) {
      const T* row = a + p * lda;
      const T bp = b[p * ldb + j];
      for (std::size_t i = 0; i < m; ++i) column[i] += row[i] * bp;
    }
    for (std::size_t i = 0; i < m; ++i) {
      T& out = c[i * ldc + j];
      out = beta == T(0) ? alpha * column[i] : alpha * column[i] + beta * out;
    }
  }
}

HEADROOM_CLONES void narrow_product_f32(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                                        std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                                        std::size_t ldc, float* column) {
  narrow_product(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, column);
}

HEADROOM_CLONES void narrow_product_transposed_f32(std::size_t m, std::size_t n, std::size_t k, float alpha,
                                                   const float* a, std::size_t lda, const float* b, std::size_t ldb,
                                                   float beta, float* c, std::size_t ldc, float* column) {
  narrow_product_transposed(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, column);
}

template <typename T>
void head_gemm(bool trans_a, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
               const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  constexpr std::size_t vector = 16 / sizeof(T);  // values in small_gemm's narrowest vector
  const std::size_t whole = n <= kNarrowMaxColumns ? n - n % vector : n;
  if (whole < n) {  // columns [whole, n)
    thread_local std::vector<T> column;
    if (column.size() < std::max(m, k)) column.resize(std::max(m, k));
    if (trans_a) {
      fast::clone_if_float<T>(narrow_product_transposed_f32, [](auto... x) { narrow_product_transposed(x...); }, m,
                              n - whole, k, alpha, a, lda, b + whole, ldb, beta, c + whole, ldc, column.data());
    } else {
      fast::clone_if_float<T>(narrow_product_f32, [](auto... x) { narrow_product(x...); }, m, n - whole, k, alpha,
                              a, lda, b + whole, ldb, beta, c + whole, ldc, column.data());
    }
    if (whole == 0) return;
    n = whole;
  }
  if (n * k <= kSmallGemmMaxPanel) {
    small_gemm<T>(trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    gemm<T>(trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

// Causal attention's rows [r0, r1) see keys [0, r1) only, so we run every product
// block of rows by block of rows and skip the hidden upper-right part of the scores:
// with blocks of 32 rows, 62.5% of the (128, 128) products remain at T = 128 and 75%
// at T = 64. Without the causal mask there is one block of all rows and all keys.
constexpr std::size_t kCausalBlockRows = 32;

// The weights saved for backward keep only what the blocks compute: block by block,
// its rows of `keys` values each (row stride keys), the block at `offset` in its
// (batch, head)'s weights. Causal at T = 256, that is 56% of the (T, T) matrix.
struct RowBlock {
  std::size_t r0, r1;  // rows [r0, r1)
  std::size_t keys;    // keys [0, keys) are visible to some row of the block
  std::size_t offset;  // where the block's (r1 - r0, keys) weights start
};

std::vector<RowBlock> row_blocks(std::size_t t, bool causal) {
  std::vector<RowBlock> blocks;
  const std::size_t step = causal ? kCausalBlockRows : t;
  std::size_t offset = 0;
  for (std::size_t r0 = 0; r0 < t; r0 += step) {
    const std::size_t r1 = std::min(t, r0 + step);
    const std::size_t keys = causal ? r1 : t;
    blocks.push_back({r0, r1, keys, offset});
    offset += (r1 - r0) * keys;
  }
  return blocks;
}

// The weights of one (batch, head) that the blocks hold.
std::size_t block_elements(const std::vector<RowBlock>& blocks) {
  return blocks.empty() ? 0 : blocks.back().offset + (blocks.back().r1 - blocks.back().r0) * blocks.back().keys;
}

}  // namespace

template <typename T>
Tensor<T> attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const AttentionSpec<T>& spec) {
  const Mask* key_padding = spec.key_padding;
  const T scale = spec.scale;
  const bool causal = spec.causal;
  const Dims d = check_attention(q.shape(), k.shape(), v.shape(), spec.n_heads, spec.n_kv_heads, key_padding);
  const std::size_t ldq = d.H * d.dk, ldk = d.G * d.dk, ldv = d.G * d.dv, ldo = d.H * d.dv;
  const T* pq = q.value().data();
  const T* pk = k.value().data();
  const T* pv = v.value().data();
  xt::xarray<T> out = xt::empty<T>(Shape{d.B, d.T, ldo});
  const bool* padding = key_padding ? key_padding->data() : nullptr;
  const std::vector<RowBlock> blocks = row_blocks(d.T, causal);
  const std::size_t per_head = block_elements(blocks);
  xt::xarray<T> p = xt::empty<T>(Shape{d.B * d.H * per_head});  // the attention weights by blocks, saved for backward
  // Each (batch, kv head) pair is independent: its query heads write their own
  // weights and output columns, so the pairs run in parallel (parallel.hpp).
  parallel_for(
      d.B * d.G, 1,
      [&](std::size_t begin, std::size_t end) {
        std::vector<T> kt(d.dk * d.T);  // (d_k, T): K_g^T
        for (std::size_t bg = begin; bg < end; ++bg) {
          const std::size_t b = bg / d.G, g = bg % d.G;
          transpose_into(kt.data(), pk + b * d.T * ldk + g * d.dk, d.T, d.dk, ldk);
          const T* vg = pv + b * d.T * ldv + g * d.dv;  // (T, d_v), row stride ldv
          for (std::size_t h = g * d.group(); h < (g + 1) * d.group(); ++h) {
            T* ph = p.data() + (b * d.H + h) * per_head;   // its blocks
            const T* qh = pq + b * d.T * ldq + h * d.dk;     // (T, d_k), row stride ldq
            T* oh = out.data() + b * d.T * ldo + h * d.dv;   // (T, d_v), row stride ldo
            for (const RowBlock& r : blocks) {
              T* pb = ph + r.offset;  // (r1 - r0, keys)
              // Scores = scale * Q_h K_g^T over the visible keys.
              head_gemm<T>(false, r.r1 - r.r0, r.keys, d.dk, scale, qh + r.r0 * ldq, ldq, kt.data(), d.T, T(0), pb,
                           r.keys);
              for (std::size_t i = r.r0; i < r.r1; ++i) {
                masked_softmax_row(pb + (i - r.r0) * r.keys, i, r.keys, causal,
                                   padding ? padding + b * d.T : nullptr);
              }
              // Out_h = P V_g, into head h's columns of the packed output.
              head_gemm<T>(false, r.r1 - r.r0, d.dv, r.keys, T(1), pb, r.keys, vg, ldv, T(0), oh + r.r0 * ldo, ldo);
            }
          }
        }
      },
      /*calls_gemm=*/true);
  if (spec.weights) {  // the whole (B, H, T, T), 0 for the keys no block computes
    xt::xarray<T>& w = *spec.weights;
    w = xt::zeros<T>(Shape{d.B, d.H, d.T, d.T});
    for (std::size_t bh = 0; bh < d.B * d.H; ++bh) {
      for (const RowBlock& r : blocks) {
        for (std::size_t i = r.r0; i < r.r1; ++i) {
          std::copy_n(p.data() + bh * per_head + r.offset + (i - r.r0) * r.keys, r.keys,
                      w.data() + (bh * d.T + i) * d.T);
        }
      }
    }
  }
  auto backward = [qn = q.node(), kn = k.node(), vn = v.node(), p = std::move(p), d, scale, blocks, per_head](
                      const xt::xarray<T>& grad, const xt::xarray<T>&) {
    const std::size_t ldq = d.H * d.dk, ldk = d.G * d.dk, ldv = d.G * d.dv, ldo = d.H * d.dv;
    xt::xarray<T> gq = xt::empty<T>(qn->value.shape());
    // The query heads of a group add into its dK_g and dV_g: each pair zeroes its own
    // (T, d_k) and (T, d_v) columns first, on its thread and into its cache, instead
    // of the caller zeroing both tensors whole before the loop (4 MiB a layer on
    // medium, on one thread while the other waited).
    xt::xarray<T> gk = xt::empty<T>(kn->value.shape());
    xt::xarray<T> gv = xt::empty<T>(vn->value.shape());
    // Parallel over (batch, kv head) pairs, as the forward: a pair's query heads
    // add into its own dK_g and dV_g only.
    parallel_for(
        d.B * d.G, 1,
        [&](std::size_t begin, std::size_t end) {
          std::vector<T> ds(d.T * d.T);    // (T, T): dP, then dS in place
          std::vector<T> vt(d.dv * d.T);  // (d_v, T): V_g^T
          for (std::size_t bg = begin; bg < end; ++bg) {
            const std::size_t b = bg / d.G, g = bg % d.G;
            const T* vg = vn->value.data() + b * d.T * ldv + g * d.dv;  // (T, d_v), row stride ldv
            transpose_into(vt.data(), vg, d.T, d.dv, ldv);
            const T* kg = kn->value.data() + b * d.T * ldk + g * d.dk;  // (T, d_k), row stride ldk
            T* gkg = gk.data() + b * d.T * ldk + g * d.dk;
            T* gvg = gv.data() + b * d.T * ldv + g * d.dv;
            for (std::size_t t = 0; t < d.T; ++t) {
              std::fill_n(gkg + t * ldk, d.dk, T(0));
              std::fill_n(gvg + t * ldv, d.dv, T(0));
            }
            for (std::size_t h = g * d.group(); h < (g + 1) * d.group(); ++h) {
              const T* ph = p.data() + (b * d.H + h) * per_head;          // its blocks
              const T* qh = qn->value.data() + b * d.T * ldq + h * d.dk;  // (T, d_k), row stride ldq
              const T* go = grad.data() + b * d.T * ldo + h * d.dv;       // dOut_h (T, d_v), row stride ldo
              T* gqh = gq.data() + b * d.T * ldq + h * d.dk;
              for (const RowBlock& r : blocks) {
                const std::size_t m = r.r1 - r.r0;
                const T* pb = ph + r.offset;  // (m, keys)
                T* db = ds.data() + r.r0 * d.T;
                // dV_g += P^T dOut_h
                head_gemm<T>(true, r.keys, d.dv, m, T(1), pb, r.keys, go + r.r0 * ldo, ldo, T(1), gvg, ldv);
                // dP = dOut_h V_g^T, then the softmax backward in place: dS = P (dP - rowsum(P dP)).
                head_gemm<T>(false, m, r.keys, d.dv, T(1), go + r.r0 * ldo, ldo, vt.data(), d.T, T(0), db, d.T);
                for (std::size_t i = 0; i < m; ++i) {
                  fast::clone_if_float<T>(softmax_backward_row_f32, [](auto... a) { softmax_backward_row(a...); },
                                          pb + i * r.keys, db + i * d.T, r.keys);
                }
                // dQ_h = scale dS K_g; dK_g += scale dS^T Q_h
                head_gemm<T>(false, m, d.dk, r.keys, scale, db, d.T, kg, ldk, T(0), gqh + r.r0 * ldq, ldq);
                head_gemm<T>(true, r.keys, d.dk, m, scale, db, d.T, qh + r.r0 * ldq, ldq, T(1), gkg, ldk);
              }
            }
          }
        },
        /*calls_gemm=*/true);
    accumulate_grad(*qn, std::move(gq), "attention");
    accumulate_grad(*kn, std::move(gk), "attention");
    accumulate_grad(*vn, std::move(gv), "attention");
  };
  return make_result<T>("attention", std::move(out), {q.node(), k.node(), v.node()}, std::move(backward));
}

template Tensor<float> attention(const Tensor<float>&, const Tensor<float>&, const Tensor<float>&,
                                 const AttentionSpec<float>&);
template Tensor<double> attention(const Tensor<double>&, const Tensor<double>&, const Tensor<double>&,
                                  const AttentionSpec<double>&);

}  // namespace headroom
