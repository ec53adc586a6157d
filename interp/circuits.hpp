// QK and OV circuits of every head, their singular values, copying scores, and the
// composition scores between heads of different layers (`headroom circuits`,
// docs/design.md #21), after Elhage et al. (2021), "A Mathematical Framework for
// Transformer Circuits".
//
// Legend: C = d_model, V = vocab, M = max_len, H = n_heads, L = n_layers,
// d_k, d_v = per-head widths, g = n_heads / n_kv_heads.
//
// Conventions. headroom's Linear computes y = x W^T for a row x, so with column
// vectors x (C) head h of layer l reads
//   q = W_Q x,  k = W_K x,  v = W_V x,  writes  W_O z        (column convention)
// with W_Q = q_proj.weight's rows [h d_k, (h+1) d_k) (d_k, C), W_K and W_V the rows
// of kv head h / g of k_proj and v_proj (d_k, C), (d_v, C), and W_O = out_proj.weight's
// columns [h d_v, (h+1) d_v) (C, d_v) (under head_combine sum, the whole shared
// (C, d_v)). Then, as in the paper,
//   W_QK = W_Q^T W_K (C, C): the score is x_q^T W_QK x_k (times the attention scale);
//   W_OV = W_O W_V   (C, C): the head adds W_OV x_src (times its weight) to the stream.
// Biases are left out (the circuits are bilinear in the tokens).
//
// Norms, folded: a norm's weight is a diagonal map and is folded in; its centering
// (LayerNorm), its 1/sigma or 1/rms scale and its bias are ignored (they depend on
// the input). Which weights: pre-norm, the head's ln1 on its input side (into W_Q,
// W_K, W_V) and ln_f between a head and the unembedding; post-norm, every ln1 and
// ln2 between the writer and the reader (a head of layer l1 writes before layer
// l1's ln1), and ln_f before the unembedding; no norm, none. qk_norm folds q_norm's
// and k_norm's weights into W_Q and W_K (its rms scale ignored); key_smear is
// ignored (the circuit is that of a key at its own position); with rope the QK
// circuits are those of a query and a key at the same position (relative offset 0,
// where the rotation cancels).
//
// The circuits of one head (the direct path: embedding straight into the head,
// head straight to the unembedding), with E = tok_emb.weight (V, C) and W_U the
// unembedding (V, C), rows of each as the tokens:
//   qk(i, j)     = scale * e_i^T W_QK e_j   (V, V): the score query token i gives key
//                  token j; the paper's W_E^T W_QK W_E.
//   qk_pos(s, t) = scale * p_s^T W_QK p_t   (M, M): the same for the position table P
//                  (learned or sinusoidal; through ln1 where positions enter the
//                  stream, straight into q and k with pos_qk_only); empty for rope
//                  and none, whose heads see no position table.
//   ov(i, j)     = u_j^T W_OV e_i           (V, V): how much attending to token i
//                  raises the logit of token j; the paper's W_U W_OV W_E transposed
//                  (rows: the attended token, columns: the logit).
// copying score: sum(Re lambda) / sum(|lambda|) over the eigenvalues lambda of ov
// (Elhage et al.'s positive share of the eigenvalue mass; a complex pair counts by
// its real part over its modulus): 1 for a head that copies (ov positive definite
// like the identity), -1 for its negation, 0 for no net sign; 0 when ov is zero.
//
// Composition of head h1 of layer l1 into head h2 of layer l2 > l1, with W_OV^1
// carrying the norm weights between the two (post-norm) and W_QK^2, W_OV^2 their
// reader's:
//   Q: ||W_QK^2^T W_OV^1||_F / (||W_QK^2||_F ||W_OV^1||_F)   h1's output in h2's queries
//   K: ||W_QK^2   W_OV^1||_F / (||W_QK^2||_F ||W_OV^1||_F)   ... in its keys (induction)
//   V: ||W_OV^2   W_OV^1||_F / (||W_OV^2||_F ||W_OV^1||_F)   ... in its values
// Each is in [0, 1] (submultiplicativity): 1 when the reader's matrix is aligned with
// the writer's output (rank one, matching directions), 0 when h1 writes into a
// subspace h2 does not read.
#pragma once

#include <cstddef>
#include <vector>

#include <xtensor/xarray.hpp>

#include "nn/transformer.hpp"

namespace headroom {

// One head's matrices in the column convention above, norm weights folded.
struct HeadMatrices {
  std::size_t layer = 0, head = 0;
  xt::xarray<double> w_q;          // (d_k, C), q_norm folded
  xt::xarray<double> w_k;          // (d_k, C), k_norm folded
  xt::xarray<double> w_v;          // (d_v, C)
  xt::xarray<double> w_o;          // (C, d_v)
  xt::xarray<double> reader_gain;  // (C): the norm weight on the head's input (pre-norm ln1), else ones
  double scale = 1;                // the attention scale
};

// Every head, layer-major.
template <typename T>
std::vector<HeadMatrices> head_matrices(const TransformerLM<T>& model);

// W_QK = diag(g) W_Q^T W_K diag(g) and W_OV = W_O W_V diag(g), g the reader gain: (C, C).
xt::xarray<double> qk_matrix(const HeadMatrices& head);
xt::xarray<double> ov_matrix(const HeadMatrices& head);

struct HeadCircuits {
  std::size_t layer = 0, head = 0;
  xt::xarray<double> qk;      // (V, V)
  xt::xarray<double> qk_pos;  // (M, M), or (0, 0) (rope, none)
  xt::xarray<double> ov;      // (V, V)
  std::vector<double> qk_singular_values;      // descending, min(V, d_k) of them
  std::vector<double> qk_pos_singular_values;  // descending, min(M, d_k); empty with qk_pos
  std::vector<double> ov_singular_values;      // descending, min(V, d_v)
  double copying_score = 0;
};

// Every head's circuits, layer-major. Without keep_matrices the (V, V) and (M, M)
// matrices are dropped once their values are computed (left (0, 0)), so that a
// model of many heads and a long max_len holds one head's at a time.
template <typename T>
std::vector<HeadCircuits> head_circuits(const TransformerLM<T>& model, bool keep_matrices = true);

struct CompositionScores {
  std::size_t n_layers = 0, n_heads = 0;
  // (L H, L H): [l2 H + h2, l1 H + h1] is the score of (l1, h1) into (l2, h2) for
  // l1 < l2, NaN where l1 >= l2.
  xt::xarray<double> q, k, v;
};

template <typename T>
CompositionScores composition_scores(const TransformerLM<T>& model);

// ||A B||_F / (||A||_F ||B||_F) for A (n, m), B (m, r); 0 when A or B is zero.
// Throws std::invalid_argument naming the shapes when they do not chain.
double composition_score(const xt::xarray<double>& a, const xt::xarray<double>& b);

// The copying score of a square matrix (the rule above), through LAPACK's
// eigenvalues. Throws std::invalid_argument naming the shape unless square.
double copying_score(const xt::xarray<double>& square);

// All singular values of a 2-D matrix, descending, through LAPACK's SVD.
std::vector<double> singular_values(const xt::xarray<double>& matrix);

}  // namespace headroom
