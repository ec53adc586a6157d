// The fused ops of Llama-style blocks (autograd/ops_modern.cpp) against their
// composed twins (autograd/composed.hpp): outputs and the gradients of every input
// under a non-uniform upstream gradient, in double (to 1e-12) and in float (to float
// rounding); then RoPE's defining properties and its pairing convention, and
// sigmoid's saturated tails.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "autograd/composed.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"

namespace {

namespace hr = headroom;

template <typename T>
using Fn = std::function<hr::Tensor<T>(const std::vector<hr::Tensor<T>>&)>;

xt::xarray<double> uniform(const hr::Shape& shape, hr::Rng& rng, double lo = -2.0, double hi = 2.0) {
  xt::xarray<double> a = xt::empty<double>(shape);
  for (auto& e : a) e = rng.uniform(lo, hi);
  return a;
}

template <typename T>
xt::xarray<T> cast(const xt::xarray<double>& a) {
  xt::xarray<T> out = xt::empty<T>(a.shape());
  for (std::size_t i = 0; i < a.size(); ++i) out.data()[i] = static_cast<T>(a.data()[i]);
  return out;
}

// The output of f on fresh leaves holding `inputs`, and each leaf's gradient after
// backward from `upstream`.
template <typename T>
std::vector<xt::xarray<T>> run(const Fn<T>& f, const std::vector<xt::xarray<double>>& inputs,
                               const xt::xarray<double>& upstream) {
  std::vector<hr::Tensor<T>> leaves;
  for (const auto& v : inputs) leaves.emplace_back(cast<T>(v), true);
  const hr::Tensor<T> y = f(leaves);
  REQUIRE(y.shape() == hr::Shape(upstream.shape()));
  y.backward(cast<T>(upstream));
  std::vector<xt::xarray<T>> out{y.value()};
  for (const auto& leaf : leaves) out.push_back(leaf.grad());
  return out;
}

// |got - want| <= tol * max(1, max |want|) everywhere: a tolerance relative to the
// tensor's scale, so that elements near zero (a sigmoid tail, a cancelling sum) are
// held to the same absolute error as the largest ones. Names the first bad index.
template <typename T>
void check_close(const std::string& what, const xt::xarray<T>& got, const xt::xarray<T>& want, double tol) {
  INFO(what);
  REQUIRE(hr::format_shape(got.shape()) == hr::format_shape(want.shape()));
  double scale = 1.0;
  for (T v : want) scale = std::max(scale, std::abs(static_cast<double>(v)));
  std::size_t bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.data()[i], w = want.data()[i];
    const double err = std::abs(g - w);
    worst = std::max(worst, err / scale);
    if (!(err <= tol * scale) && bad++ == 0) {
      FAIL_CHECK(fmt::format("at {}: fused {:.17g}, composed {:.17g}", hr::format_shape(hr::unravel_index(i, want.shape())),
                             g, w));
    }
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << want.size() << " elements differ; worst relative error " << worst);
}

// Double: the two differ only in the order of roundings, so 1e-12. Float: each output
// and gradient element goes through at most a few dozen float roundings (a 64-wide
// row sum in RMSNorm's backward is the longest chain; fast::exp is within 3e-7), so
// 1e-5 of the tensor's scale, about 80 float epsilons, is float rounding with room
// (the largest difference seen here is 4.2e-7, in rms_norm's input gradient).
constexpr double kDoubleTol = 1e-12;
constexpr double kFloatTol = 1e-5;

template <typename T>
void compare_with_twin(const char* name, const Fn<T>& fused, const Fn<T>& composed,
                       const std::vector<xt::xarray<double>>& inputs, const xt::xarray<double>& upstream,
                       double tol) {
  const auto a = run<T>(fused, inputs, upstream);
  const auto b = run<T>(composed, inputs, upstream);
  check_close<T>(fmt::format("{}: output", name), a[0], b[0], tol);
  for (std::size_t k = 1; k < a.size(); ++k) {
    check_close<T>(fmt::format("{}: gradient of input {}", name, k - 1), a[k], b[k], tol);
  }
}

// Both precisions on the same inputs.
void compare_both(const char* name, const Fn<double>& fd, const Fn<double>& cd, const Fn<float>& ff,
                  const Fn<float>& cf, const std::vector<xt::xarray<double>>& inputs,
                  const xt::xarray<double>& upstream) {
  {
    INFO("double");
    compare_with_twin<double>(name, fd, cd, inputs, upstream, kDoubleTol);
  }
  {
    INFO("float");
    compare_with_twin<float>(name, ff, cf, inputs, upstream, kFloatTol);
  }
}

// One set of fused/composed closures for both precisions.
#define HEADROOM_BOTH(expr_fused, expr_composed)                                                     \
  Fn<double>([&](const std::vector<hr::Tensor<double>>& v) { return expr_fused; }),                  \
      Fn<double>([&](const std::vector<hr::Tensor<double>>& v) { return expr_composed; }),           \
      Fn<float>([&](const std::vector<hr::Tensor<float>>& v) { return expr_fused; }),                \
      Fn<float>([&](const std::vector<hr::Tensor<float>>& v) { return expr_composed; })

}  // namespace

TEST_CASE("modern ops: sigmoid equals its composed twin, values and gradients") {
  hr::Rng rng(1);
  // Both signs and saturated tails, and an odd length for the vector loops' tails.
  const auto x = uniform({5, 37}, rng, -30.0, 30.0);
  const auto up = uniform({5, 37}, rng);
  compare_both("sigmoid", HEADROOM_BOTH(hr::sigmoid(v[0]), hr::composed::sigmoid(v[0])), {x}, up);
}

TEST_CASE("modern ops: swiglu equals its composed twin, values and gradients") {
  hr::Rng rng(2);
  const auto gate = uniform({4, 7, 33}, rng, -12.0, 12.0), upv = uniform({4, 7, 33}, rng);
  const auto up = uniform({4, 7, 33}, rng);
  compare_both("swiglu", HEADROOM_BOTH(hr::swiglu(v[0], v[1]), hr::composed::swiglu(v[0], v[1])), {gate, upv},
               up);
}

TEST_CASE("modern ops: rms_norm equals its composed twin, values and gradients") {
  hr::Rng rng(3);
  auto x = uniform({3, 5, 64}, rng);
  for (std::size_t c = 0; c < 64; ++c) x(0, 1, c) *= 1e-3;  // mean square near eps: eps matters
  const auto w = uniform({64}, rng, 0.5, 1.5), up = uniform({3, 5, 64}, rng);
  compare_both("rms_norm", HEADROOM_BOTH(hr::rms_norm(v[0], v[1], decltype(v[0].item())(1e-5)),
                                         hr::composed::rms_norm(v[0], v[1], decltype(v[0].item())(1e-5))),
               {x, w}, up);
}

TEST_CASE("modern ops: rms_norm's weight gradient summed over two threads' chunks equals the twin's") {
  // 512 rows of 64: two chunks of parallel_for, whose partial weight gradients are
  // added in chunk order.
  struct ThreadsGuard {
    ~ThreadsGuard() { hr::set_threads(1); }
  } guard;
  hr::set_threads(2);
  hr::Rng rng(4);
  const auto x = uniform({4, 128, 64}, rng), w = uniform({64}, rng), up = uniform({4, 128, 64}, rng);
  using D = hr::Tensor<double>;
  compare_with_twin<double>(
      "rms_norm, 2 threads", [](const std::vector<D>& v) { return hr::rms_norm(v[0], v[1], 1e-5); },
      [](const std::vector<D>& v) { return hr::composed::rms_norm(v[0], v[1], 1e-5); }, {x, w}, up, kDoubleTol);
}

TEST_CASE("modern ops: rope equals its composed twin, values and gradients") {
  struct Case {
    std::size_t B, T, H, d;
    double base;
    std::size_t offset;
  };
  for (const Case c : {Case{2, 9, 3, 8, 10000.0, 0}, Case{2, 9, 3, 8, 10.0, 7}, Case{1, 5, 1, 2, 10000.0, 3},
                       Case{3, 4, 4, 16, 500000.0, 4096}, Case{2, 3, 2, 32, 10000.0, 1},
                       Case{1, 3, 2, 128, 10000.0, 2}, Case{2, 3, 3, 12, 10000.0, 5}}) {
    // d = 16, 32 and 128 run rope_rows' loops of compile-time length; 8, 2 and 12
    // the run-time one.
    CAPTURE(c.H);
    CAPTURE(c.d);
    CAPTURE(c.offset);
    hr::Rng rng(5 + c.offset);
    const auto x = uniform({c.B, c.T, c.H * c.d}, rng), up = uniform({c.B, c.T, c.H * c.d}, rng);
    compare_both("rope", HEADROOM_BOTH(hr::rope(v[0], c.H, c.base, c.offset),
                                       hr::composed::rope(v[0], c.H, c.base, c.offset)),
                 {x}, up);
  }
}

TEST_CASE("modern ops: gradients reach only the inputs that require them") {
  using D = hr::Tensor<double>;
  hr::Rng rng(6);
  D gate(uniform({3, 4}, rng), true), up(uniform({3, 4}, rng), false);
  D x(uniform({3, 4}, rng), false), w(uniform({4}, rng), true);
  const xt::xarray<double> g = uniform({3, 4}, rng);
  hr::swiglu(gate, up).backward(g);
  CHECK(gate.has_grad());
  CHECK(!up.has_grad());
  // d gate alone must equal the twin's.
  D gate2(gate.value(), true), up2(up.value(), false);
  hr::composed::swiglu(gate2, up2).backward(g);
  check_close<double>("swiglu: gate gradient, up constant", gate.grad(), gate2.grad(), kDoubleTol);

  hr::rms_norm(x, w, 1e-5).backward(g);
  CHECK(w.has_grad());
  CHECK(!x.has_grad());
  D x2(x.value(), false), w2(w.value(), true);
  hr::composed::rms_norm(x2, w2, 1e-5).backward(g);
  check_close<double>("rms_norm: weight gradient, x constant", w.grad(), w2.grad(), kDoubleTol);
}

// ---- RoPE's properties and convention ------------------------------------------------

TEST_CASE("rope: pairs channel i with i + d/2 and turns it by p base^(-2i/d)") {
  // d = 4, one head: channel 0 pairs with 2 (theta 1), channel 1 with 3 (theta 1/sqrt(base)).
  const double base = 100.0, p = 3.0;
  xt::xarray<double> v = xt::zeros<double>(hr::Shape{1, 1, 4});
  v(0, 0, 0) = 1.0;  // a = 1, b = 0 in pair 0
  v(0, 0, 3) = 1.0;  // a = 0, b = 1 in pair 1
  const hr::Tensor<double> y = hr::rope(hr::Tensor<double>(v), 1, base, 3);
  const double t1 = p / std::sqrt(base);
  CHECK(y.value()(0, 0, 0) == doctest::Approx(std::cos(p)).epsilon(1e-14));
  CHECK(y.value()(0, 0, 2) == doctest::Approx(std::sin(p)).epsilon(1e-14));
  CHECK(y.value()(0, 0, 1) == doctest::Approx(-std::sin(t1)).epsilon(1e-14));
  CHECK(y.value()(0, 0, 3) == doctest::Approx(std::cos(t1)).epsilon(1e-14));
  // Position 0 is the identity.
  const hr::Tensor<double> y0 = hr::rope(hr::Tensor<double>(v), 1, base, 0);
  for (std::size_t i = 0; i < 4; ++i) CHECK(y0.value().data()[i] == v.data()[i]);
}

TEST_CASE("rope: each pair keeps its norm") {
  hr::Rng rng(7);
  const std::size_t B = 2, T = 6, H = 3, d = 8, half = d / 2;
  const auto x = uniform({B, T, H * d}, rng);
  const auto y = hr::rope(hr::Tensor<double>(x), H, 10000.0, 11).value();
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < half; ++i) {
          const std::size_t lo = h * d + i, hi = lo + half;
          const double before = std::hypot(x(b, t, lo), x(b, t, hi));
          const double after = std::hypot(y(b, t, lo), y(b, t, hi));
          CHECK(after == doctest::Approx(before).epsilon(1e-13));
        }
}

TEST_CASE("rope: the rows after the first at offset a are the rows at offset a + 1") {
  hr::Rng rng(8);
  const std::size_t B = 2, T = 7, H = 2, d = 6, a = 5;
  const auto x = uniform({B, T, H * d}, rng);
  const auto full = hr::rope(hr::Tensor<double>(x), H, 10.0, a).value();
  const auto shifted =
      hr::rope(hr::slice(hr::Tensor<double>(x), 1, 1, T), H, 10.0, a + 1).value();  // rows 1.. at a + 1
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 1; t < T; ++t)
      for (std::size_t c = 0; c < H * d; ++c) CHECK(shifted(b, t - 1, c) == doctest::Approx(full(b, t, c)).epsilon(1e-13));
}

TEST_CASE("rope: q . k depends on the positions only through their difference") {
  hr::Rng rng(9);
  const std::size_t d = 8;
  const auto q = uniform({1, 1, d}, rng), k = uniform({1, 1, d}, rng);
  // q at position pq, k at position pk, through the offset.
  auto score = [&](std::size_t pq, std::size_t pk) {
    const auto rq = hr::rope(hr::Tensor<double>(q), 1, 10.0, pq).value();
    const auto rk = hr::rope(hr::Tensor<double>(k), 1, 10.0, pk).value();
    double s = 0;
    for (std::size_t i = 0; i < d; ++i) s += rq.data()[i] * rk.data()[i];
    return s;
  };
  CHECK(score(7, 4) == doctest::Approx(score(3, 0)).epsilon(1e-12));    // both 3 apart
  CHECK(score(20, 15) == doctest::Approx(score(105, 100)).epsilon(1e-12));  // both 5 apart
  // ...and does depend on the difference: 3 apart is not 4 apart.
  CHECK(std::abs(score(7, 4) - score(7, 3)) > 1e-3);
}

// ---- sigmoid's tails -------------------------------------------------------------------

TEST_CASE("sigmoid: no overflow for large |x|, and the tails keep their relative precision") {
  xt::xarray<float> v = {-1000.0f, -100.0f, -20.0f, -1.0f, 0.0f, 1.0f, 20.0f, 100.0f, 1000.0f};
  hr::Tensor<float> x(v, true);
  const hr::Tensor<float> y = hr::sigmoid(x);
  y.backward(xt::xarray<float>(xt::ones<float>({v.size()})));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double xi = v(i);
    const double want = xi >= 0 ? 1.0 / (1.0 + std::exp(-xi)) : std::exp(xi) / (1.0 + std::exp(xi));
    CAPTURE(xi);
    CHECK(std::isfinite(y.value()(i)));
    CHECK(std::isfinite(x.grad()(i)));
    // Relative 1e-6 down to float's normal range; below it (exp(-100)) exactly 0 or tiny.
    if (want > 1e-37) {
      CHECK(std::abs(y.value()(i) - want) <= 1e-6 * want);
    } else {
      CHECK(y.value()(i) >= 0.0f);
      CHECK(y.value()(i) <= 1e-37f);
    }
  }
  CHECK(y.value()(4) == 0.5f);
  CHECK(x.grad()(4) == 0.25f);
}
