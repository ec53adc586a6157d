// QK and OV circuits, copying and composition scores (interp/circuits.hpp,
// docs/design.md #21): the circuits against the model run on one- and two-token
// inputs, the scores of hand-built matrices and of a hand-built two-layer model,
// the singular values against a direct SVD, and (with BLIS) that no OpenBLAS
// entered the process with LAPACK.
#include <cmath>
#include <fstream>
#include <random>
#include <string>

#include <doctest/doctest.h>
#include <xtensor/xview.hpp>

#include "autograd/random.hpp"
#include "interp/circuits.hpp"
#include "nn/hooks.hpp"
#include "support.hpp"

namespace hr = headroom;

namespace {

void scramble_uniform(hr::TransformerLM<double>& model, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-0.7, 0.7);
  for (auto& [name, p] : model.named_parameters()) {
    for (double& v : p.mutable_value()) v = u(gen);
  }
}

// One layer, no norm, no bias, no positions: the scores and the outputs are then
// the circuits exactly.
hr::ModelConfig bare(std::size_t heads, std::size_t kv_heads, hr::HeadCombine combine) {
  return hr::ModelConfig{.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = heads, .n_kv_heads = kv_heads,
                         .head_combine = combine, .max_len = 4, .norm = hr::NormPlacement::none,
                         .pos = hr::PositionEncoding::none, .bias = false, .attn_only = true};
}

std::size_t index_of(hr::TransformerLM<double>& model, std::size_t layer, std::size_t head) {
  return layer * model.config().n_heads + head;
}

}  // namespace

TEST_CASE("circuits: qk(i, j) - qk(i, i) is the log weight ratio the model gives key j over key i") {
  for (const auto& [heads, kv] : {std::pair<std::size_t, std::size_t>{2, 2}, {4, 2}, {2, 1}}) {
    CAPTURE(heads);
    CAPTURE(kv);
    hr::Rng rng(3);
    hr::TransformerLM<double> model(bare(heads, kv, hr::HeadCombine::concat), rng);
    scramble_uniform(model, 5);
    const auto circuits = hr::head_circuits(model);
    REQUIRE(circuits.size() == heads);
    for (std::size_t i = 0; i < 7; ++i) {
      for (std::size_t j = 0; j < 7; ++j) {
        hr::IndexArray row = hr::IndexArray::from_shape({1, 2});
        row(0, 0) = static_cast<hr::Index>(j);
        row(0, 1) = static_cast<hr::Index>(i);
        xt::xarray<double> pattern;
        hr::ForwardHooks<double> hooks;
        hooks.pattern = true;
        hooks.fn = [&](hr::HookPoint point, std::size_t, const hr::Tensor<double>& value) {
          if (point == hr::HookPoint::pattern) pattern = value.value();
          return value;
        };
        hr::NoGrad no_grad;
        model.forward(row, nullptr, &hooks);
        for (std::size_t h = 0; h < heads; ++h) {
          const double ratio = std::log(pattern(0, h, 1, 0) / pattern(0, h, 1, 1));
          CHECK(circuits[h].qk(i, j) - circuits[h].qk(i, i) == doctest::Approx(ratio).epsilon(1e-9));
        }
      }
    }
    // Not degenerate: the scores differ by more than rounding.
    CHECK(std::abs(circuits[0].qk(1, 2) - circuits[0].qk(1, 1)) > 1e-3);
  }
}

TEST_CASE("circuits: the heads' ov(i, j) sum to the logit a one-token input i gains at j") {
  for (const auto combine : {hr::HeadCombine::concat, hr::HeadCombine::sum}) {
    CAPTURE(hr::to_string(combine));
    hr::Rng rng(3);
    hr::TransformerLM<double> model(bare(4, 2, combine), rng);
    scramble_uniform(model, 8);
    const auto circuits = hr::head_circuits(model);
    const auto named = model.named_parameters();
    xt::xarray<double> E, U;
    for (const auto& [name, p] : named) {
      if (name == "tok_emb.weight") E = p.value();
      if (name == "head.weight") U = p.value();
    }
    for (std::size_t i = 0; i < 7; ++i) {
      hr::IndexArray row = hr::IndexArray::from_shape({1, 1});
      row(0, 0) = static_cast<hr::Index>(i);
      hr::NoGrad no_grad;
      const xt::xarray<double> logits = model.forward(row).value();
      for (std::size_t j = 0; j < 7; ++j) {
        double direct = 0;  // the embedding's own path, e_i . u_j
        for (std::size_t c = 0; c < 8; ++c) direct += E(i, c) * U(j, c);
        double heads = 0;
        for (const auto& circuit : circuits) heads += circuit.ov(i, j);
        CHECK(direct + heads == doctest::Approx(logits(0, 0, j)).epsilon(1e-10));
      }
    }
  }
}

TEST_CASE("circuits: singular values through the QR factors equal those of the full matrices") {
  hr::ModelConfig c{.vocab = 9, .d_model = 8, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1, .max_len = 6,
                    .norm = hr::NormPlacement::post};
  hr::Rng rng(2);
  hr::TransformerLM<double> model(c, rng);
  scramble_uniform(model, 2);
  for (const auto& circuit : hr::head_circuits(model)) {
    CAPTURE(circuit.layer);
    CAPTURE(circuit.head);
    const auto pairs = {std::pair{&circuit.qk, &circuit.qk_singular_values},
                        std::pair{&circuit.qk_pos, &circuit.qk_pos_singular_values},
                        std::pair{&circuit.ov, &circuit.ov_singular_values}};
    for (const auto& [matrix, values] : pairs) {
      const std::vector<double> full = hr::singular_values(*matrix);
      REQUIRE(values->size() == 4);  // d_k = d_v = 4
      CHECK((*values)[0] > 1e-3);
      for (std::size_t i = 0; i < values->size(); ++i) {
        CHECK((*values)[i] == doctest::Approx(full[i]).epsilon(1e-9).scale(full[0]));
      }
      for (std::size_t i = values->size(); i < full.size(); ++i) CHECK(full[i] < 1e-9 * full[0]);
    }
    // The copying score is the eigenvalue rule on the full ov.
    CHECK(circuit.copying_score >= -1.0);
    CHECK(circuit.copying_score <= 1.0);
  }
  CHECK(hr::singular_values(xt::xarray<double>{{3.0, 0.0}, {0.0, -4.0}}) == std::vector<double>{4.0, 3.0});
}

TEST_CASE("circuits: copying score 1 for an identity-like ov, -1 for its negation, 0 for a rotation") {
  xt::xarray<double> identity_like = xt::zeros<double>({5, 5});
  for (std::size_t i = 0; i < 5; ++i) identity_like(i, i) = 1.0 + 0.3 * static_cast<double>(i);
  identity_like(0, 3) = 0.2;  // upper triangular: the eigenvalues stay the diagonal
  CHECK(hr::copying_score(identity_like) == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(hr::copying_score(-identity_like) == doctest::Approx(-1.0).epsilon(1e-12));
  // Eigenvalues +-i: real parts 0.
  CHECK(std::abs(hr::copying_score(xt::xarray<double>{{0.0, -1.0}, {1.0, 0.0}})) < 1e-12);
  // Eigenvalues 2, -1: (2 - 1) / (2 + 1).
  CHECK(hr::copying_score(xt::xarray<double>{{2.0, 0.0}, {0.0, -1.0}}) == doctest::Approx(1.0 / 3.0));
  // A complex pair 1 +- i and 2: (1 + 1 + 2) / (sqrt 2 + sqrt 2 + 2).
  CHECK(hr::copying_score(xt::xarray<double>{{1.0, -1.0, 0.0}, {1.0, 1.0, 0.0}, {0.0, 0.0, 2.0}}) ==
        doctest::Approx(4.0 / (2 * std::sqrt(2.0) + 2)));
  CHECK(hr::copying_score(xt::zeros<double>({3, 3})) == 0.0);
  CHECK(error_of([] { hr::copying_score(xt::zeros<double>({2, 3})); }) ==
        "copying_score: expected a square matrix, got shape (2, 3)");
}

TEST_CASE("circuits: composition score 1 for aligned rank-one matrices, 0 for orthogonal subspaces") {
  xt::xarray<double> a = {{1.0, 2.0}, {2.0, 4.0}};  // (1, 2)^T (1, 2): reads along (1, 2)
  xt::xarray<double> b = {{3.0, 0.0}, {6.0, 0.0}};  // writes along (1, 2)
  CHECK(hr::composition_score(a, b) == doctest::Approx(1.0));
  xt::xarray<double> c = {{-6.0, 0.0}, {3.0, 0.0}};  // writes along (-2, 1)
  CHECK(hr::composition_score(a, c) == doctest::Approx(0.0));
  // Identities of dimension n: ||I|| / (||I|| ||I||) = 1 / sqrt(n).
  CHECK(hr::composition_score(xt::eye<double>(4), xt::eye<double>(4)) == doctest::Approx(0.5));
  CHECK(error_of([] { hr::composition_score(xt::zeros<double>({2, 3}), xt::zeros<double>({2, 3})); }) ==
        "composition_score: (2, 3) and (2, 3) do not chain");
}

TEST_CASE("circuits: K-, Q- and V-composition of a hand-built two-layer model") {
  // Layer 0 head 0 reads e0 and writes e1 (W_OV = e1 e0^T). Layer 1 head 0's keys
  // read e1 and its queries e2 (W_QK = e2 e1^T): K-composition 1, Q 0. Layer 1 head
  // 1's keys read e3: K 0; its values read e1 and write e4: V 1.
  hr::ModelConfig c{.vocab = 5, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 4,
                    .norm = hr::NormPlacement::none, .pos = hr::PositionEncoding::none, .bias = false,
                    .attn_only = true};
  hr::Rng rng(1);
  hr::TransformerLM<double> model(c, rng);
  for (auto& [name, p] : model.named_parameters()) {
    if (name.find("blocks.") == 0) p.mutable_value().fill(0.0);
  }
  const auto set = [&](const std::string& name, std::size_t r, std::size_t col, double v) {
    for (auto& [n, p] : model.named_parameters()) {
      if (n == name) p.mutable_value()(r, col) = v;
    }
  };
  // d_k = d_v = 4; head 0 owns rows (and out_proj columns) 0..3, head 1 4..7.
  set("blocks.0.attn.v_proj.weight", 0, 0, 1.0);
  set("blocks.0.attn.out_proj.weight", 1, 0, 1.0);
  set("blocks.0.attn.q_proj.weight", 0, 5, 1.0);  // layer 0 heads need some QK to have a norm
  set("blocks.0.attn.k_proj.weight", 0, 5, 1.0);
  set("blocks.1.attn.q_proj.weight", 0, 2, 1.0);
  set("blocks.1.attn.k_proj.weight", 0, 1, 1.0);
  set("blocks.1.attn.q_proj.weight", 4, 2, 1.0);
  set("blocks.1.attn.k_proj.weight", 4, 3, 1.0);
  set("blocks.1.attn.v_proj.weight", 4, 1, 1.0);
  set("blocks.1.attn.out_proj.weight", 4, 4, 1.0);
  const hr::CompositionScores s = hr::composition_scores(model);
  REQUIRE(s.k.shape() == std::vector<std::size_t>{4, 4});
  const std::size_t l0h0 = index_of(model, 0, 0), l1h0 = index_of(model, 1, 0), l1h1 = index_of(model, 1, 1);
  CHECK(s.k(l1h0, l0h0) == doctest::Approx(1.0));
  CHECK(s.q(l1h0, l0h0) == doctest::Approx(0.0));
  CHECK(s.k(l1h1, l0h0) == doctest::Approx(0.0));
  CHECK(s.v(l1h1, l0h0) == doctest::Approx(1.0));
  CHECK(s.v(l1h0, l0h0) == 0.0);  // its W_OV is zero
  // Layer 0 head 1 writes nothing (W_OV = 0): every score from it is 0.
  CHECK(s.k(l1h0, index_of(model, 0, 1)) == 0.0);
  // Only l1 < l2 is defined.
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t col = 0; col < 4; ++col) CHECK(std::isnan(s.k(r, col)));
  }
  CHECK(std::isnan(s.q(l1h0, l1h1)));
}

TEST_CASE("circuits: the composition scores of a scrambled pre-norm model equal the formula on its folded matrices") {
  hr::ModelConfig c{.vocab = 6, .d_model = 8, .n_layers = 3, .n_heads = 2, .max_len = 4};
  hr::Rng rng(4);
  hr::TransformerLM<double> model(c, rng);
  scramble_uniform(model, 4);
  const auto heads = hr::head_matrices(model);
  const auto s = hr::composition_scores(model);
  // ln1's weight of the reader's layer, folded by hand: W_QK = diag(g) Wq^T Wk diag(g).
  xt::xarray<double> g, wq, wk, wv0, wo0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (name == "blocks.2.ln1.weight") g = p.value();
    if (name == "blocks.2.attn.q_proj.weight") wq = xt::view(p.value(), xt::range(4, 8), xt::all());
    if (name == "blocks.2.attn.k_proj.weight") wk = xt::view(p.value(), xt::range(4, 8), xt::all());
  }
  xt::xarray<double> g0, v0, o0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (name == "blocks.0.ln1.weight") g0 = p.value();
    if (name == "blocks.0.attn.v_proj.weight") v0 = xt::view(p.value(), xt::range(0, 4), xt::all());
    if (name == "blocks.0.attn.out_proj.weight") o0 = xt::view(p.value(), xt::all(), xt::range(0, 4));
  }
  xt::xarray<double> qk = xt::zeros<double>({8, 8}), ov = xt::zeros<double>({8, 8});
  for (std::size_t a = 0; a < 8; ++a) {
    for (std::size_t b = 0; b < 8; ++b) {
      for (std::size_t d = 0; d < 4; ++d) {
        qk(a, b) += g(a) * wq(d, a) * wk(d, b) * g(b);
        ov(a, b) += o0(a, d) * v0(d, b) * g0(b);
      }
    }
  }
  CHECK(s.k(5, 0) == doctest::Approx(hr::composition_score(qk, ov)).epsilon(1e-12));
  CHECK(s.q(5, 0) == doctest::Approx(hr::composition_score(xt::transpose(qk), ov)).epsilon(1e-12));
  CHECK(s.k(5, 0) > 0.01);
  CHECK(s.k(5, 0) < 1.0);
}

#ifdef HEADROOM_TEST_BLIS
TEST_CASE("circuits: LAPACK came without OpenBLAS, so the GEMMs still bind to BLIS") {
  CHECK(hr::singular_values(xt::xarray<double>{{1.0, 2.0}, {3.0, 4.0}}).size() == 2);
  std::ifstream maps("/proc/self/maps");
  REQUIRE(maps.good());
  std::string line;
  bool blis = false, openblas = false;
  while (std::getline(maps, line)) {
    blis = blis || line.find("libblis") != std::string::npos;
    openblas = openblas || line.find("openblas") != std::string::npos;
  }
  CHECK(blis);
  CHECK_FALSE(openblas);
}
#endif

TEST_CASE("circuits: rope has no positional circuit, and keep_matrices=false keeps every value") {
  hr::ModelConfig c{.vocab = 6, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 5,
                    .pos = hr::PositionEncoding::rope, .qk_norm = true};
  hr::Rng rng(6);
  hr::TransformerLM<double> model(c, rng);
  scramble_uniform(model, 6);
  const auto full = hr::head_circuits(model);
  const auto lean = hr::head_circuits(model, false);
  REQUIRE(full.size() == 4);
  REQUIRE(lean.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(full[i].qk_pos.shape() == std::vector<std::size_t>{0, 0});
    CHECK(full[i].qk_pos_singular_values.empty());
    CHECK(full[i].qk.shape() == std::vector<std::size_t>{6, 6});
    CHECK(lean[i].qk.size() == 0);
    CHECK(lean[i].ov.size() == 0);
    CHECK(lean[i].qk_singular_values == full[i].qk_singular_values);
    CHECK(lean[i].ov_singular_values == full[i].ov_singular_values);
    CHECK(lean[i].copying_score == full[i].copying_score);
    CHECK(full[i].qk_singular_values[0] > 1e-3);
  }
}

TEST_CASE("circuits: qk_pos(t, s) - qk_pos(t, t) is the model's log weight ratio when tokens carry nothing") {
  // With a zero token embedding the scores are the positional circuit's alone.
  for (const bool qk_only : {false, true}) {
    CAPTURE(qk_only);
    hr::ModelConfig c = bare(2, 1, hr::HeadCombine::concat);
    c.pos = hr::PositionEncoding::learned;
    c.pos_qk_only = qk_only;
    c.max_len = 5;
    hr::Rng rng(7);
    hr::TransformerLM<double> model(c, rng);
    scramble_uniform(model, 7);
    for (auto& [name, p] : model.named_parameters()) {
      if (name == "tok_emb.weight") p.mutable_value().fill(0.0);
    }
    const auto circuits = hr::head_circuits(model);
    hr::IndexArray row = xt::zeros<hr::Index>({std::size_t{1}, std::size_t{5}});
    xt::xarray<double> pattern;
    hr::ForwardHooks<double> hooks;
    hooks.pattern = true;
    hooks.fn = [&](hr::HookPoint point, std::size_t, const hr::Tensor<double>& value) {
      if (point == hr::HookPoint::pattern) pattern = value.value();
      return value;
    };
    {
      hr::NoGrad no_grad;
      model.forward(row, nullptr, &hooks);
    }
    for (std::size_t h = 0; h < 2; ++h) {
      REQUIRE(circuits[h].qk_pos.shape() == std::vector<std::size_t>{5, 5});
      for (std::size_t t = 1; t < 5; ++t) {
        for (std::size_t s = 0; s < t; ++s) {
          const double ratio = std::log(pattern(0, h, t, s) / pattern(0, h, t, t));
          CHECK(circuits[h].qk_pos(t, s) - circuits[h].qk_pos(t, t) == doctest::Approx(ratio).epsilon(1e-9));
        }
      }
    }
    CHECK(std::abs(circuits[0].qk_pos(3, 1) - circuits[0].qk_pos(3, 3)) > 1e-3);
  }
}

TEST_CASE("circuits: post-norm composition carries the norm weights between the layers into the writer") {
  hr::ModelConfig c{.vocab = 6, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 4,
                    .norm = hr::NormPlacement::post};
  hr::Rng rng(5);
  hr::TransformerLM<double> model(c, rng);
  scramble_uniform(model, 5);
  const auto heads = hr::head_matrices(model);
  xt::xarray<double> ln1, ln2;
  for (const auto& [name, p] : model.named_parameters()) {
    if (name == "blocks.0.ln1.weight") ln1 = p.value();
    if (name == "blocks.0.ln2.weight") ln2 = p.value();
  }
  xt::xarray<double> writer = hr::ov_matrix(heads[1]);  // L0H1, read through ln1 and ln2 of layer 0
  for (std::size_t a = 0; a < 8; ++a) {
    for (std::size_t b = 0; b < 8; ++b) writer(a, b) *= ln1(a) * ln2(a);
  }
  const xt::xarray<double> qk = hr::qk_matrix(heads[2]), ov = hr::ov_matrix(heads[2]);  // L1H0
  const auto s = hr::composition_scores(model);
  CHECK(s.k(2, 1) == doctest::Approx(hr::composition_score(qk, writer)).epsilon(1e-12));
  const xt::xarray<double> qk_t = xt::transpose(qk);
  CHECK(s.q(2, 1) == doctest::Approx(hr::composition_score(qk_t, writer)).epsilon(1e-12));
  CHECK(s.v(2, 1) == doctest::Approx(hr::composition_score(ov, writer)).epsilon(1e-12));
  // Not the unfolded score: the gains matter here.
  CHECK(std::abs(s.k(2, 1) - hr::composition_score(qk, hr::ov_matrix(heads[1]))) > 1e-4);
}
