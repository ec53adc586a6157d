#include "interp/circuits.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <xtensor-blas/xlinalg.hpp>

#include "autograd/shape.hpp"
#include "interp/weights.hpp"

namespace headroom {
namespace {

using Matrix = xt::xarray<double>;

// a (n, m) times b (m, r), or a times b^T with b (r, m), in plain loops: these
// matrices are small, and double GEMMs need no BLAS here.
Matrix matmul(const Matrix& a, const Matrix& b, bool transpose_b = false) {
  const std::size_t n = a.shape()[0], m = a.shape()[1];
  const std::size_t r = transpose_b ? b.shape()[0] : b.shape()[1];
  if ((transpose_b ? b.shape()[1] : b.shape()[0]) != m) {
    throw std::invalid_argument(fmt::format("circuits: cannot multiply {} by {}{}", format_shape(Shape(a.shape())),
                                            format_shape(Shape(b.shape())), transpose_b ? "^T" : ""));
  }
  Matrix c = xt::zeros<double>({n, r});
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < m; ++k) {
      const double aik = a(i, k);
      if (aik == 0) continue;
      if (transpose_b) {
        for (std::size_t j = 0; j < r; ++j) c(i, j) += aik * b(j, k);
      } else {
        for (std::size_t j = 0; j < r; ++j) c(i, j) += aik * b(k, j);
      }
    }
  }
  return c;
}

Matrix transposed(const Matrix& a) {
  Matrix t = xt::xarray<double>::from_shape({a.shape()[1], a.shape()[0]});
  for (std::size_t i = 0; i < a.shape()[0]; ++i) {
    for (std::size_t j = 0; j < a.shape()[1]; ++j) t(j, i) = a(i, j);
  }
  return t;
}

// Scales column c of a by g[c] (a diag(g)).
Matrix scale_columns(Matrix a, const Matrix& g) {
  for (std::size_t i = 0; i < a.shape()[0]; ++i) {
    for (std::size_t c = 0; c < a.shape()[1]; ++c) a(i, c) *= g(c);
  }
  return a;
}
// Scales row r of a by g[r] (diag(g) a).
Matrix scale_rows(Matrix a, const Matrix& g) {
  for (std::size_t r = 0; r < a.shape()[0]; ++r) {
    for (std::size_t c = 0; c < a.shape()[1]; ++c) a(r, c) *= g(r);
  }
  return a;
}

double frobenius(const Matrix& a) {
  double s = 0;
  for (double v : a) s += v * v;
  return std::sqrt(s);
}

template <typename T>
Matrix to_double(const xt::xarray<T>& a) {
  Matrix out = xt::xarray<double>::from_shape(a.shape());
  std::copy(a.begin(), a.end(), out.begin());
  return out;
}

// Rows [r0, r0 + n) of a 2-D array.
template <typename T>
Matrix rows(const xt::xarray<T>& a, std::size_t r0, std::size_t n) {
  const std::size_t cols = a.shape()[1];
  Matrix out = xt::xarray<double>::from_shape({n, cols});
  std::copy(a.data() + r0 * cols, a.data() + (r0 + n) * cols, out.data());
  return out;
}

// Columns [c0, c0 + n) of a 2-D array.
template <typename T>
Matrix columns(const xt::xarray<T>& a, std::size_t c0, std::size_t n) {
  Matrix out = xt::xarray<double>::from_shape({a.shape()[0], n});
  for (std::size_t r = 0; r < a.shape()[0]; ++r) {
    for (std::size_t c = 0; c < n; ++c) out(r, c) = a(r, c0 + c);
  }
  return out;
}

// The norm weights folded between a writer that enters the stream before layer
// `from`'s ln1 and a reader at layer `to` (to = n_layers: the unembedding), the
// header's rule: (C).
template <typename T>
Matrix path_gain(const ModelConfig& config, const ModelWeights<T>& weights, std::size_t from, std::size_t to) {
  Matrix g = xt::ones<double>({config.d_model});
  const auto fold = [&](const std::string& name) {
    const xt::xarray<T>& w = weights.at(name);
    for (std::size_t c = 0; c < config.d_model; ++c) g(c) *= static_cast<double>(w(c));
  };
  if (config.norm == NormPlacement::none) return g;
  if (config.norm == NormPlacement::post) {
    for (std::size_t l = from; l < to; ++l) {
      fold(fmt::format("blocks.{}.ln1.weight", l));
      if (!config.attn_only) fold(fmt::format("blocks.{}.ln2.weight", l));
    }
  }
  if (to == config.n_layers) fold("ln_f.weight");
  return g;
}

// The singular values of a b^T for a (n, r) and b (m, r), through the QR factors:
// a b^T = Q_a (R_a R_b^T) Q_b^T with orthonormal Q's, so they are R_a R_b^T's
// (min(n, r) x min(m, r)), without forming the (n, m) product's SVD.
std::vector<double> product_singular_values(const Matrix& a, const Matrix& b) {
  const auto r_of = [](const Matrix& m) {
    xt::xarray<double, xt::layout_type::column_major> col = m;
    auto qr = xt::linalg::qr(col, xt::linalg::qrmode::r);
    Matrix r = std::get<1>(qr);
    return r;
  };
  return singular_values(matmul(r_of(a), r_of(b), true));
}

}  // namespace

std::vector<double> singular_values(const xt::xarray<double>& matrix) {
  if (matrix.dimension() != 2) {
    throw std::invalid_argument(fmt::format("singular_values: expected a matrix, got shape {}",
                                            format_shape(Shape(matrix.shape()))));
  }
  if (matrix.size() == 0) return {};
  const auto svd = xt::linalg::svd(matrix, false, false);
  const auto& s = std::get<1>(svd);
  std::vector<double> out(s.begin(), s.end());
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

double copying_score(const xt::xarray<double>& square) {
  if (square.dimension() != 2 || square.shape()[0] != square.shape()[1]) {
    throw std::invalid_argument(fmt::format("copying_score: expected a square matrix, got shape {}",
                                            format_shape(Shape(square.shape()))));
  }
  if (square.size() == 0) return 0;
  const auto eig = xt::linalg::eigvals(square);
  double real = 0, modulus = 0;
  for (const std::complex<double>& l : eig) {
    real += l.real();
    modulus += std::abs(l);
  }
  return modulus > 0 ? real / modulus : 0.0;
}

double composition_score(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[1] != b.shape()[0]) {
    throw std::invalid_argument(fmt::format("composition_score: {} and {} do not chain",
                                            format_shape(Shape(a.shape())), format_shape(Shape(b.shape()))));
  }
  const double na = frobenius(a), nb = frobenius(b);
  if (na == 0 || nb == 0) return 0;
  return frobenius(matmul(a, b)) / (na * nb);
}

template <typename T>
std::vector<HeadMatrices> head_matrices(const TransformerLM<T>& model) {
  const ModelConfig& config = model.config();
  const ModelWeights<T> weights(model);
  const std::size_t C = config.d_model, H = config.n_heads, d_k = config.d_k, d_v = config.d_v;
  const std::size_t g = H / config.n_kv_heads;
  const double scale = config.attn_scale.value_or(1.0 / std::sqrt(static_cast<double>(d_k)));
  std::vector<HeadMatrices> out;
  for (std::size_t l = 0; l < config.n_layers; ++l) {
    const std::string attn = fmt::format("blocks.{}.attn", l);
    Matrix reader = xt::ones<double>({C});
    if (config.norm == NormPlacement::pre) reader = to_double(weights.at(fmt::format("blocks.{}.ln1.weight", l)));
    for (std::size_t h = 0; h < H; ++h) {
      HeadMatrices m;
      m.layer = l;
      m.head = h;
      m.scale = scale;
      m.reader_gain = reader;
      m.w_q = rows(weights.at(attn + ".q_proj.weight"), h * d_k, d_k);
      m.w_k = rows(weights.at(attn + ".k_proj.weight"), (h / g) * d_k, d_k);
      m.w_v = rows(weights.at(attn + ".v_proj.weight"), (h / g) * d_v, d_v);
      if (config.qk_norm) {
        m.w_q = scale_rows(m.w_q, to_double(weights.at(attn + ".q_norm.weight")));
        m.w_k = scale_rows(m.w_k, to_double(weights.at(attn + ".k_norm.weight")));
      }
      const xt::xarray<T>& w_o = weights.at(attn + ".out_proj.weight");
      m.w_o = columns(w_o, config.head_combine == HeadCombine::sum ? 0 : h * d_v, d_v);
      out.push_back(std::move(m));
    }
  }
  return out;
}

xt::xarray<double> qk_matrix(const HeadMatrices& head) {
  return matmul(transposed(scale_columns(head.w_q, head.reader_gain)), scale_columns(head.w_k, head.reader_gain));
}

xt::xarray<double> ov_matrix(const HeadMatrices& head) {
  return matmul(head.w_o, scale_columns(head.w_v, head.reader_gain));
}

template <typename T>
std::vector<HeadCircuits> head_circuits(const TransformerLM<T>& model, bool keep_matrices) {
  const ModelConfig& config = model.config();
  const ModelWeights<T> weights(model);
  const std::size_t L = config.n_layers;
  const Matrix E = to_double(weights.at("tok_emb.weight"));  // (V, C)
  const Matrix W_U = to_double(unembedding(config, weights));  // (V, C)
  const Matrix P = to_double(position_table(config, weights));  // (M, C) or empty
  const Matrix empty = xt::xarray<double>::from_shape({std::size_t{0}, std::size_t{0}});  // (0, 0)
  std::vector<HeadCircuits> out;
  for (const HeadMatrices& m : head_matrices(model)) {
    HeadCircuits c;
    c.qk_pos = empty;
    c.layer = m.layer;
    c.head = m.head;
    // Rows of E as the head's input sees them: the norm weights on the way in.
    const Matrix in_gain = path_gain(config, weights, 0, m.layer) * m.reader_gain;  // (C)
    const Matrix E_in = scale_columns(E, in_gain);                                  // (V, C)
    const Matrix q = matmul(E_in, m.w_q, true) * m.scale;                           // (V, d_k)
    const Matrix k = matmul(E_in, m.w_k, true);                                     // (V, d_k)
    c.qk = matmul(q, k, true);                                                      // (V, V)
    c.qk_singular_values = product_singular_values(q, k);
    if (P.shape()[0] != 0) {
      const Matrix P_in = config.pos_qk_only ? P : scale_columns(P, in_gain);  // (M, C)
      const Matrix pq = matmul(P_in, m.w_q, true) * m.scale;
      const Matrix pk = matmul(P_in, m.w_k, true);
      c.qk_pos = matmul(pq, pk, true);  // (M, M)
      c.qk_pos_singular_values = product_singular_values(pq, pk);
    }
    const Matrix src = matmul(E_in, m.w_v, true);                                         // (V, d_v)
    const Matrix dst = matmul(scale_columns(W_U, path_gain(config, weights, m.layer, L)), m.w_o);  // (V, d_v)
    c.ov = matmul(src, dst, true);                                                        // (V, V)
    c.ov_singular_values = product_singular_values(src, dst);
    c.copying_score = copying_score(c.ov);
    if (!keep_matrices) {
      c.qk = empty;
      c.qk_pos = empty;
      c.ov = empty;
    }
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

// tr(a b) for square a, b of one size.
double trace_of_product(const Matrix& a, const Matrix& b) {
  double t = 0;
  for (std::size_t i = 0; i < a.shape()[0]; ++i) {
    for (std::size_t j = 0; j < a.shape()[1]; ++j) t += a(i, j) * b(j, i);
  }
  return t;
}

// A head's low-rank factors, the reader gain folded in: W_QK = A_q^T A_k and
// W_OV = W_O A_v, with the Gram matrices the Frobenius norms need.
struct HeadFactors {
  Matrix a_q, a_k, a_v;  // (d_k, C), (d_k, C), (d_v, C)
  Matrix w_o;            // (C, d_v)
  Matrix g_q, g_k, g_v;  // A A^T: (d_k, d_k), (d_k, d_k), (d_v, d_v)
  Matrix g_o;            // W_O^T W_O (d_v, d_v)
};

HeadFactors factors_of(const HeadMatrices& m) {
  HeadFactors f;
  f.a_q = scale_columns(m.w_q, m.reader_gain);
  f.a_k = scale_columns(m.w_k, m.reader_gain);
  f.a_v = scale_columns(m.w_v, m.reader_gain);
  f.w_o = m.w_o;
  f.g_q = matmul(f.a_q, f.a_q, true);
  f.g_k = matmul(f.a_k, f.a_k, true);
  f.g_v = matmul(f.a_v, f.a_v, true);
  f.g_o = matmul(transposed(m.w_o), m.w_o);
  return f;
}

// ||X^T M A_v||_F for X (r, C) with G = X X^T, M (r, d_v) and the writer's A_v,
// G_v = A_v A_v^T: sqrt(tr(M^T G M G_v)).
double norm_of_chain(const Matrix& g, const Matrix& m, const Matrix& g_v) {
  return std::sqrt(std::max(0.0, trace_of_product(matmul(transposed(m), matmul(g, m)), g_v)));
}

}  // namespace

template <typename T>
CompositionScores composition_scores(const TransformerLM<T>& model) {
  // The scores from the heads' factors rather than the (C, C) products: with W_QK =
  // A_q^T A_k and W_OV^1 = W_O^1' A_v^1 (W_O^1' carrying the gain between the
  // layers), W_QK W_OV^1 = A_q^T (A_k W_O^1') A_v^1, whose Frobenius norm needs only
  // (d_k, d_v) products: sqrt(tr(M^T A_q A_q^T M A_v A_v^T)) with M = A_k W_O^1'.
  // Likewise Q (A_q and A_k swapped), V (W_O^2 A_v^2 in place of A_q^T A_k), and the
  // norms ||W_QK||^2 = tr(A_q A_q^T A_k A_k^T), ||W_OV||^2 = tr(W_O^T W_O A_v A_v^T).
  const ModelConfig& config = model.config();
  const ModelWeights<T> weights(model);
  const std::size_t L = config.n_layers, H = config.n_heads, N = L * H;
  std::vector<HeadFactors> f;
  for (const HeadMatrices& m : head_matrices(model)) f.push_back(factors_of(m));
  std::vector<double> qk_norm(N), ov_norm(N);
  for (std::size_t i = 0; i < N; ++i) {
    qk_norm[i] = std::sqrt(std::max(0.0, trace_of_product(f[i].g_q, f[i].g_k)));
    ov_norm[i] = std::sqrt(std::max(0.0, trace_of_product(f[i].g_o, f[i].g_v)));
  }
  CompositionScores s;
  s.n_layers = L;
  s.n_heads = H;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.q = xt::xarray<double>::from_shape({N, N});
  s.q.fill(nan);
  s.k = s.q;
  s.v = s.q;
  const auto ratio = [](double product, double a, double b) { return a == 0 || b == 0 ? 0.0 : product / (a * b); };
  for (std::size_t l1 = 0; l1 < L; ++l1) {
    for (std::size_t l2 = l1 + 1; l2 < L; ++l2) {
      const Matrix between = path_gain(config, weights, l1, l2);
      for (std::size_t h1 = 0; h1 < H; ++h1) {
        const std::size_t c = l1 * H + h1;
        const Matrix w_o = scale_rows(f[c].w_o, between);  // diag(gain) W_O^1 (C, d_v)
        const double writer_norm = std::sqrt(std::max(0.0, trace_of_product(matmul(transposed(w_o), w_o), f[c].g_v)));
        for (std::size_t h2 = 0; h2 < H; ++h2) {
          const std::size_t r = l2 * H + h2;
          const HeadFactors& g = f[r];
          s.k(r, c) = ratio(norm_of_chain(g.g_q, matmul(g.a_k, w_o), f[c].g_v), qk_norm[r], writer_norm);
          s.q(r, c) = ratio(norm_of_chain(g.g_k, matmul(g.a_q, w_o), f[c].g_v), qk_norm[r], writer_norm);
          s.v(r, c) = ratio(norm_of_chain(g.g_o, matmul(g.a_v, w_o), f[c].g_v), ov_norm[r], writer_norm);
        }
      }
    }
  }
  return s;
}

template std::vector<HeadMatrices> head_matrices(const TransformerLM<float>&);
template std::vector<HeadMatrices> head_matrices(const TransformerLM<double>&);
template std::vector<HeadCircuits> head_circuits(const TransformerLM<float>&, bool);
template std::vector<HeadCircuits> head_circuits(const TransformerLM<double>&, bool);
template CompositionScores composition_scores(const TransformerLM<float>&);
template CompositionScores composition_scores(const TransformerLM<double>&);

}  // namespace headroom
