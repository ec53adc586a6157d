// Batched matrix product with broadcast batch axes, one BLAS GEMM per 2-D slice
// (docs/design.md #4). Transposes in backward are folded into the GEMM flags, not copied.
#include <algorithm>
#include <functional>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <xtensor/xbuilder.hpp>

#include "autograd/fast_math.hpp"
#include "autograd/gemm.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"

namespace headroom {
namespace {

// For every output batch index, the element offset of the matching 2-D slice in
// each operand (a broadcast axis contributes stride 0).
struct BatchPlan {
  Shape batch;                       // broadcast batch shape
  std::vector<std::size_t> a_offset;  // per output batch, into a
  std::vector<std::size_t> b_offset;  // per output batch, into b
};

std::vector<std::size_t> batch_offsets(const Shape& operand, const Shape& batch,
                                       std::size_t matrix_size) {
  const std::size_t nb = operand.size() - 2;  // operand's own batch axes
  const std::size_t lead = batch.size() - nb;
  // Strides (in matrices) of the operand's batch axes, aligned to `batch`.
  std::vector<std::size_t> stride(batch.size(), 0);
  std::size_t s = 1;
  for (std::size_t i = nb; i-- > 0;) {
    stride[lead + i] = operand[i] == 1 ? 0 : s;
    s *= operand[i];
  }
  const std::size_t count = shape_size(batch);
  std::vector<std::size_t> offsets(count);
  std::vector<std::size_t> idx(batch.size(), 0);
  for (std::size_t flat = 0; flat < count; ++flat) {
    std::size_t off = 0;
    for (std::size_t d = 0; d < batch.size(); ++d) off += idx[d] * stride[d];
    offsets[flat] = off * matrix_size;
    for (std::size_t d = batch.size(); d-- > 0;) {  // odometer increment
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  return offsets;
}

}  // namespace

template <typename T>
Tensor<T> matmul(const Tensor<T>& a, const Tensor<T>& b) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  if (as.size() < 2 || bs.size() < 2) {
    throw ShapeError(fmt::format("matmul: operands need at least 2 axes: lhs {} vs rhs {}",
                                 format_shape(as), format_shape(bs)));
  }
  const std::size_t m = as[as.size() - 2], k = as.back();
  const std::size_t k2 = bs[bs.size() - 2], n = bs.back();
  if (k != k2) {
    throw ShapeError(fmt::format("matmul: inner dimensions differ: lhs {} vs rhs {}",
                                 format_shape(as), format_shape(bs)));
  }
  const Shape a_batch(as.begin(), as.end() - 2);
  const Shape b_batch(bs.begin(), bs.end() - 2);
  BatchPlan plan;
  try {
    plan.batch = broadcast_shapes(a_batch, b_batch, "matmul");
  } catch (const ShapeError&) {
    throw ShapeError(fmt::format("matmul: batch axes cannot be broadcast: lhs {} vs rhs {}",
                                 format_shape(as), format_shape(bs)));
  }
  plan.a_offset = batch_offsets(as, plan.batch, m * k);
  plan.b_offset = batch_offsets(bs, plan.batch, k * n);

  Shape out_shape = plan.batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  xt::xarray<T> y = xt::empty<T>(out_shape);
  const T* pa = a.value().data();
  const T* pb = b.value().data();
  for (std::size_t i = 0; i < plan.a_offset.size(); ++i) {
    gemm<T>(false, false, m, n, k, T(1), pa + plan.a_offset[i], k, pb + plan.b_offset[i], n, T(0),
            y.data() + i * m * n, n);
  }
  return make_result<T>(
      "matmul", std::move(y), {a.node(), b.node()},
      [an = a.node(), bn = b.node(), plan, m, n, k](const xt::xarray<T>& g, const xt::xarray<T>&) {
        const T* pg = g.data();
        // dA_i += dC_i B_i^T and dB_i += A_i^T dC_i. Summing into the operand's own
        // shape (beta = 1) also folds the broadcast batch axes.
        if (an->requires_grad) {
          xt::xarray<T> ga = xt::zeros<T>(an->value.shape());
          for (std::size_t i = 0; i < plan.a_offset.size(); ++i) {
            gemm<T>(false, true, m, k, n, T(1), pg + i * m * n, n, bn->value.data() + plan.b_offset[i],
                    n, T(1), ga.data() + plan.a_offset[i], k);
          }
          accumulate_grad(*an, std::move(ga), "matmul");
        }
        if (bn->requires_grad) {
          xt::xarray<T> gb = xt::zeros<T>(bn->value.shape());
          for (std::size_t i = 0; i < plan.b_offset.size(); ++i) {
            gemm<T>(true, false, k, n, m, T(1), an->value.data() + plan.a_offset[i], k, pg + i * m * n,
                    n, T(1), gb.data() + plan.b_offset[i], n);
          }
          accumulate_grad(*bn, std::move(gb), "matmul");
        }
      });
}

namespace {

// y[r, :] += b for `rows` rows of `out` values.
template <typename T>
[[gnu::always_inline]] inline void add_bias_rows(T* y, const T* b, std::size_t rows, std::size_t out) {
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t o = 0; o < out; ++o) y[r * out + o] += b[o];
  }
}

// sum[o] += g[r * ld + o] over r in [0, rows), o in [0, n): the columns' sums, each
// in row order.
template <typename T>
[[gnu::always_inline]] inline void sum_rows(const T* g, std::size_t rows, std::size_t ld, std::size_t n, T* sum) {
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t o = 0; o < n; ++o) sum[o] += g[r * ld + o];
  }
}

HEADROOM_CLONES void add_bias_rows_f32(float* y, const float* b, std::size_t rows, std::size_t out) {
  add_bias_rows(y, b, rows, out);
}
HEADROOM_CLONES void sum_rows_f32(const float* g, std::size_t rows, std::size_t ld, std::size_t n, float* sum) {
  sum_rows(g, rows, ld, n, sum);
}

// Rows per block of bias_grad's sums.
constexpr std::size_t kBiasRowBlock = 128;

// db = the sum over rows of g (rows, out): each block of kBiasRowBlock rows summed
// in row order, then the blocks' sums in block order, so the same sums on any
// number of threads. The threads take contiguous blocks of rows, the rows each of
// them wrote in the op before (parallel.cpp's first_chunk), and linear's backward
// sums them before its products read all of g: each thread's rows are then still
// in its cache, where after the products, or split by columns, they are not.
template <typename T>
xt::xarray<T> bias_grad(const T* g, std::size_t rows, std::size_t out) {
  xt::xarray<T> gb = xt::zeros<T>({out});
  const std::size_t blocks = (rows + kBiasRowBlock - 1) / kBiasRowBlock;
  if (blocks <= 1) {
    fast::clone_if_float<T>(sum_rows_f32, [](auto... a) { sum_rows(a...); }, g, rows, out, out, gb.data());
    return gb;
  }
  std::vector<T> partial(blocks * out, T(0));
  const std::size_t min_blocks = min_chunk_rows(kBiasRowBlock * out);
  parallel_for(blocks, min_blocks, [&](std::size_t b_begin, std::size_t b_end) {
    for (std::size_t b = b_begin; b < b_end; ++b) {
      const std::size_t r0 = b * kBiasRowBlock, n = std::min(kBiasRowBlock, rows - r0);
      fast::clone_if_float<T>(sum_rows_f32, [](auto... a) { sum_rows(a...); }, g + r0 * out, n, out, out,
                              partial.data() + b * out);
    }
  });
  T* sum = gb.data();
  for (std::size_t b = 0; b < blocks; ++b) {
    for (std::size_t o = 0; o < out; ++o) sum[o] += partial[b * out + o];
  }
  return gb;
}

}  // namespace

// linear() copies W^T for its forward GEMM when the input width is below this
// (see there).
constexpr std::size_t kContiguousWeightBelow = 256;

// Whether linear's backward computes dW^T = x^T g, (in, out), and transposes it,
// instead of dW = g^T x, (out, in), directly: when the layer narrows (in > out)
// and the library, not small_gemm, would run either product. Both sum over the
// same rows; BLIS 0.9's skx kernels run the deep product (k = rows) faster with
// more rows of C than columns, enough to pay for the transpose on a narrowing
// layer such as medium's fc2, while the widening layers run slower as dW^T and
// the square ones alike (bench/README.md).
namespace {
bool dw_as_transpose(std::size_t rows, std::size_t in, std::size_t out, std::size_t element_bytes) {
  return in > out && !small_gemm_fits(in, rows, element_bytes) && !small_gemm_fits(out, rows, element_bytes);
}
}  // namespace

template <typename T>
Tensor<T> linear(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias) {
  const Shape& xs = x.shape();
  const Shape& ws = weight.shape();
  if (ws.size() != 2 || xs.empty() || xs.back() != ws[1]) {
    throw ShapeError(fmt::format("linear: input {} does not fit weight {} (weight is (out, in), "
                                 "input (..., in))",
                                 format_shape(xs), format_shape(ws)));
  }
  const std::size_t in = ws[1], out = ws[0];
  if (bias.defined() && bias.shape() != Shape{out}) {
    throw ShapeError(fmt::format("linear: bias {} does not fit weight {}: expected ({})",
                                 format_shape(bias.shape()), format_shape(ws), out));
  }
  const std::size_t rows = in == 0 ? shape_size(Shape(xs.begin(), xs.end() - 1)) : x.size() / in;
  Shape out_shape = xs;
  out_shape.back() = out;
  xt::xarray<T> y = xt::empty<T>(out_shape);  // (rows, out)
  if ((in < kContiguousWeightBelow || small_gemm_fits(out, in, sizeof(T)) ||
       packed_gemm_fits(false, rows, out, in, sizeof(T))) &&
      rows >= out) {
    // y = x W^T on a contiguous copy of W^T (in, out): BLIS 0.9 runs x W^T with
    // W as stored far slower than the same product on W^T when `in` is below
    // kContiguousWeightBelow, and equally fast from there (bench/README.md); and
    // on W^T, gemm() can hand the product to small_gemm (gemm.hpp:
    // small_gemm_fits, packed_gemm_fits). The copy is in * out elements against
    // the GEMM's rows * in * out multiply-adds.
    std::vector<T> wt(in * out);  // (in, out)
    transpose_into(wt.data(), weight.value().data(), out, in, in);
    gemm<T>(false, false, rows, out, in, T(1), x.value().data(), in, wt.data(), out, T(0), y.data(), out);
  } else {
    gemm<T>(false, true, rows, out, in, T(1), x.value().data(), in, weight.value().data(), in, T(0), y.data(),
            out);
  }
  if (bias.defined()) {
    const T* pb = bias.value().data();
    parallel_for(rows, min_chunk_rows(out), [&](std::size_t r_begin, std::size_t r_end) {
      fast::clone_if_float<T>(add_bias_rows_f32, [](auto... a) { add_bias_rows(a...); }, y.data() + r_begin * out,
                              pb, r_end - r_begin, out);
    });
  }
  std::vector<std::shared_ptr<Node<T>>> inputs{x.node(), weight.node()};
  if (bias.defined()) inputs.push_back(bias.node());
  return make_result<T>(
      "linear", std::move(y), inputs,
      [xn = x.node(), wn = weight.node(), bn = bias.defined() ? bias.node() : nullptr, rows, in,
       out](const xt::xarray<T>& g, const xt::xarray<T>&) {
        const T* pg = g.data();  // (rows, out)
        // dx = g W: (rows, out) (out, in), and dW = g^T x: (out, rows) (rows, in): the
        // same multiply-adds each, so on two threads each takes one (parallel_tasks).
        // dW first: the calling thread runs the first task at once while a worker may
        // still be waking, and dW, deep in rows and run by BLIS, is the slower of the
        // two on small models. With dX first the caller can finish it before the
        // worker has claimed dW, run dW too, and the pair takes one thread's time.
        // db = the sum over rows of g, first, while each thread's rows of g are in
        // its cache from the op that wrote them.
        if (bn && bn->requires_grad) accumulate_grad(*bn, bias_grad(pg, rows, out), "linear");
        xt::xarray<T> gx, gw;
        std::vector<std::function<void()>> products;
        if (wn->requires_grad) {
          gw = xt::empty<T>(wn->value.shape());
          products.emplace_back([&] {
            if (dw_as_transpose(rows, in, out, sizeof(T))) {  // dW^T = x^T g: (in, rows) (rows, out)
              std::vector<T> gwt(in * out);
              gemm<T>(true, false, in, out, rows, T(1), xn->value.data(), in, pg, out, T(0), gwt.data(), out);
              transpose_into(gw.data(), gwt.data(), in, out, out);
            } else {
              gemm<T>(true, false, out, in, rows, T(1), pg, out, xn->value.data(), in, T(0), gw.data(), in);
            }
          });
        }
        if (xn->requires_grad) {
          gx = xt::empty<T>(xn->value.shape());
          products.emplace_back([&] {
            gemm<T>(false, false, rows, in, out, T(1), pg, out, wn->value.data(), in, T(0), gx.data(), in);
          });
        }
        parallel_tasks(products);
        if (xn->requires_grad) accumulate_grad(*xn, std::move(gx), "linear");
        if (wn->requires_grad) accumulate_grad(*wn, std::move(gw), "linear");
      });
}

template Tensor<float> matmul(const Tensor<float>&, const Tensor<float>&);
template Tensor<double> matmul(const Tensor<double>&, const Tensor<double>&);
template Tensor<float> linear(const Tensor<float>&, const Tensor<float>&, const Tensor<float>&);
template Tensor<double> linear(const Tensor<double>&, const Tensor<double>&, const Tensor<double>&);

}  // namespace headroom
