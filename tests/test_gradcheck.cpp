// The gradient checker itself: it must fail on a wrong backward and say where,
// and its subset and random-direction modes must agree with the full check.
#include <cmath>

#include <doctest/doctest.h>

#include "autograd/ops.hpp"
#include "gradcheck_doctest.hpp"

using headroom::GradcheckOptions;
using headroom::Tensor;
using D = Tensor<double>;

namespace {

// y = x^2 with a backward that is wrong at flat index 3 only (it returns 2x + 1
// there): an op written through the same make_result path every real op uses.
D square_with_planted_bug(const D& x) {
  xt::xarray<double> y = x.value() * x.value();
  return headroom::make_result<double>(
      "square_with_bug", std::move(y), {x.node()},
      [xn = x.node()](const xt::xarray<double>& g, const xt::xarray<double>&) {
        xt::xarray<double> gx = 2.0 * g * xn->value;
        gx.data()[3] += g.data()[3];
        headroom::accumulate_grad(*xn, std::move(gx), "square_with_bug");
      });
}

D leaf(xt::xarray<double> v) { return D(std::move(v), true); }

xt::xarray<double> normals(const headroom::Shape& shape, headroom::Rng& rng, double scale = 1.0) {
  xt::xarray<double> a = xt::xarray<double>::from_shape(shape);
  for (auto& e : a) e = scale * rng.normal();
  return a;
}

}  // namespace

TEST_CASE("gradcheck passes a correct op and reports tiny errors") {
  D x = leaf({{0.5, -1.0, 2.0}, {1.5, 0.25, -0.75}});
  const auto report = headroom::gradcheck([](const std::vector<D>& in) { return mul(in[0], in[0]); }, {x});
  CHECK_GRADCHECK(report);
  REQUIRE(report.inputs.size() == 1);
  CHECK(report.inputs[0].checked == 6);
  CHECK(report.inputs[0].max_abs_error < 1e-8);
}

TEST_CASE("gradcheck catches a wrong backward and names the input, index and both values") {
  D x = leaf({{0.5, -1.0, 2.0}, {1.5, 0.25, -0.75}});
  const auto report =
      headroom::gradcheck([](const std::vector<D>& in) { return square_with_planted_bug(in[0]); }, {x});
  CHECK_FALSE(report.passed());
  const auto& r = report.inputs.at(0);
  CHECK(r.name == "x0");
  CHECK(r.worst_where == "(1, 0)");  // flat index 3 of a (2, 3) tensor
  // analytic = (2x + 1) w, numeric = 2x w, for the output weight w at that place.
  CHECK(std::abs(r.worst_analytic - r.worst_numeric) == doctest::Approx(std::abs(r.worst_numeric / 3.0)).epsilon(1e-5));
  const std::string text = report.str();
  CHECK(text.find("gradcheck FAILED") != std::string::npos);
  CHECK(text.find("x0 (2, 3)") != std::string::npos);
  CHECK(text.find("worst at (1, 0)") != std::string::npos);
  CHECK(text.find("<-- FAIL") != std::string::npos);
}

TEST_CASE("the upstream gradient is non-uniform: a permuted backward is caught") {
  // With a uniform upstream gradient a transpose whose backward forgot to transpose
  // back would pass on a square input. Our random output weights catch it.
  D x = leaf({{1.0, 2.0}, {3.0, 4.0}});
  auto wrong_transpose = [](const D& in) {
    xt::xarray<double> y = xt::transpose(in.value());
    return headroom::make_result<double>(
        "transpose_bug", std::move(y), {in.node()},
        [xn = in.node()](const xt::xarray<double>& g, const xt::xarray<double>&) {
          headroom::accumulate_grad(*xn, g, "transpose_bug");  // missing the transpose back
        });
  };
  const auto report = headroom::gradcheck([&](const std::vector<D>& in) { return wrong_transpose(in[0]); }, {x});
  CHECK_FALSE(report.passed());
}

TEST_CASE("gradcheck of several outputs and named inputs") {
  D a = leaf({1.0, 2.0, 3.0});
  D b = leaf({0.5, -0.5, 1.5});
  const auto report = headroom::gradcheck(
      [&] { return std::vector<D>{mul(a, b), exp(b), sum(a)}; }, {{"a", a}, {"b", b}});
  CHECK_GRADCHECK(report);
  REQUIRE(report.inputs.size() == 2);
  CHECK(report.inputs[0].name == "a");
  CHECK(report.inputs[1].name == "b");
  // The inputs are restored after perturbation.
  CHECK(a.value()(1) == 2.0);
  CHECK(b.value()(2) == 1.5);
}

TEST_CASE("subset and random-direction checks on a larger input") {
  headroom::Rng rng(3);
  D w = leaf(normals({24, 32}, rng)), x = leaf(normals({6, 24}, rng));
  auto f = [&] { return std::vector<D>{tanh(matmul(x, w))}; };

  GradcheckOptions subset;
  subset.max_elements = 40;
  subset.directions = 4;
  const auto report = headroom::gradcheck(f, {{"x", x}, {"w", w}}, subset);
  CHECK_GRADCHECK(report);
  CHECK(report.inputs[0].checked == 44);  // 40 elements + 4 directions
  CHECK(report.inputs[1].checked == 44);

  // Directions alone still catch a wrong gradient.
  GradcheckOptions directions_only;
  directions_only.max_elements = 1;
  directions_only.directions = 3;
  D y = leaf({{0.5, -1.0, 2.0}, {1.5, 0.25, -0.75}});
  const auto bad = headroom::gradcheck(
      [&] { return std::vector<D>{square_with_planted_bug(y)}; }, {{"y", y}}, directions_only);
  bool a_direction_failed = false;
  // Elements other than index 3 pass; at least one random direction must not.
  CHECK_FALSE(bad.passed());
  a_direction_failed = bad.inputs[0].worst_where.rfind("direction", 0) == 0 ||
                       bad.inputs[0].worst_where == "(1, 0)";
  CHECK(a_direction_failed);
}

TEST_CASE("gradcheck validates its inputs") {
  D not_leaf = exp(leaf({1.0}));
  CHECK_THROWS_WITH_AS(headroom::gradcheck([](const std::vector<D>& in) { return in[0]; }, {not_leaf}),
                       "gradcheck: input 'x0' must be a defined leaf tensor with requires_grad",
                       std::invalid_argument);
  headroom::clear_tape<double>();
  GradcheckOptions bad;
  bad.eps = 0;
  CHECK_THROWS_WITH_AS(headroom::gradcheck([](const std::vector<D>& in) { return in[0]; }, {leaf({1.0})}, bad),
                       "gradcheck: eps must be positive, got 0", std::invalid_argument);
}

TEST_CASE("a composed softmax-cross-entropy agrees with the fused op") {
  // docs/style.md: a fused kernel is tested against its composed twin. Here the fused
  // cross_entropy against -mean(log_softmax . onehot), values and gradients.
  headroom::Rng rng(11);
  const xt::xarray<double> lv = normals({3, 4, 5}, rng, 2.0);
  headroom::IndexArray targets = headroom::IndexArray::from_shape({3, 4});
  for (auto& t : targets) t = static_cast<headroom::Index>(rng.below(5));
  xt::xarray<double> onehot = xt::zeros<double>({3, 4, 5});
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) onehot(i, j, static_cast<std::size_t>(targets(i, j))) = 1.0;

  D a = leaf(lv), b = leaf(lv);
  D fused = cross_entropy(a, targets);
  D composed = mul_scalar(sum(mul(log_softmax(b, -1), D(onehot))), -1.0 / 12.0);
  CHECK(fused.item() == doctest::Approx(composed.item()).epsilon(1e-12));
  fused.backward(headroom::BackwardOptions{.keep_tape = true});  // composed is on the tape too
  composed.backward();
  for (std::size_t i = 0; i < lv.size(); ++i) {
    CHECK_MESSAGE(std::abs(a.grad().data()[i] - b.grad().data()[i]) < 1e-12,
                  "flat index " << i << ": fused " << a.grad().data()[i] << " vs composed "
                                << b.grad().data()[i]);
  }
}

TEST_CASE("a composed layer norm agrees with the fused op") {
  headroom::Rng rng(5);
  const xt::xarray<double> xv = normals({4, 6}, rng), wv = normals({6}, rng), bv = normals({6}, rng);
  D x1 = leaf(xv), w1 = leaf(wv), b1 = leaf(bv), x2 = leaf(xv), w2 = leaf(wv), b2 = leaf(bv);
  const xt::xarray<double> up = normals({4, 6}, rng);

  D fused = layer_norm(x1, w1, b1, 1e-5);
  D centered = sub(x2, mean(x2, {-1}, true));
  D var = mean(mul(centered, centered), {-1}, true);
  D composed = add(mul(mul(centered, rsqrt(add_scalar(var, 1e-5))), w2), b2);
  for (std::size_t i = 0; i < up.size(); ++i) {
    CHECK(fused.value().data()[i] == doctest::Approx(composed.value().data()[i]).epsilon(1e-12));
  }
  fused.backward(up, headroom::BackwardOptions{.keep_tape = true});
  composed.backward(up);
  const std::pair<D, D> pairs[] = {{x1, x2}, {w1, w2}, {b1, b2}};
  const char* names[] = {"x", "weight", "bias"};
  for (int k = 0; k < 3; ++k) {
    const auto& g1 = pairs[k].first.grad();
    const auto& g2 = pairs[k].second.grad();
    for (std::size_t i = 0; i < g1.size(); ++i) {
      CHECK_MESSAGE(std::abs(g1.data()[i] - g2.data()[i]) < 1e-10,
                    names[k] << " flat index " << i << ": fused " << g1.data()[i] << " vs composed " << g2.data()[i]);
    }
  }
}
