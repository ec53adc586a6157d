// Every op, gradchecked in double on the suite's random shapes (broadcasting both
// ways, transposed inputs, size-1 edges) for three seeds, so each case is seen on
// three different shapes.
#include <algorithm>
#include <cmath>
#include <string>
#include <set>

#include <doctest/doctest.h>

#include "autograd/op_checks.hpp"
#include "autograd/ops.hpp"
#include "gradcheck_doctest.hpp"

namespace {

void check_op(const std::string& op) { check_suite_cases(op, headroom::run_op_checks); }

}  // namespace

#define HEADROOM_OP_GRADCHECK(op) \
  TEST_CASE("gradcheck: " op) { check_op(op); }

HEADROOM_OP_GRADCHECK("add")
HEADROOM_OP_GRADCHECK("sub")
HEADROOM_OP_GRADCHECK("mul")
HEADROOM_OP_GRADCHECK("div")
HEADROOM_OP_GRADCHECK("neg")
HEADROOM_OP_GRADCHECK("add_scalar")
HEADROOM_OP_GRADCHECK("mul_scalar")
HEADROOM_OP_GRADCHECK("exp")
HEADROOM_OP_GRADCHECK("log")
HEADROOM_OP_GRADCHECK("sqrt")
HEADROOM_OP_GRADCHECK("rsqrt")
HEADROOM_OP_GRADCHECK("tanh")
HEADROOM_OP_GRADCHECK("relu")
HEADROOM_OP_GRADCHECK("gelu")
HEADROOM_OP_GRADCHECK("gelu_tanh")
HEADROOM_OP_GRADCHECK("pow")
HEADROOM_OP_GRADCHECK("sum")
HEADROOM_OP_GRADCHECK("mean")
HEADROOM_OP_GRADCHECK("reshape")
HEADROOM_OP_GRADCHECK("transpose")
HEADROOM_OP_GRADCHECK("permute")
HEADROOM_OP_GRADCHECK("concat")
HEADROOM_OP_GRADCHECK("slice")
HEADROOM_OP_GRADCHECK("split")
HEADROOM_OP_GRADCHECK("matmul")
HEADROOM_OP_GRADCHECK("linear")
HEADROOM_OP_GRADCHECK("softmax")
HEADROOM_OP_GRADCHECK("log_softmax")
HEADROOM_OP_GRADCHECK("cross_entropy")
HEADROOM_OP_GRADCHECK("embedding")
HEADROOM_OP_GRADCHECK("masked_fill")
HEADROOM_OP_GRADCHECK("layer_norm")
HEADROOM_OP_GRADCHECK("attention")
HEADROOM_OP_GRADCHECK("dropout")
HEADROOM_OP_GRADCHECK("sigmoid")
HEADROOM_OP_GRADCHECK("rms_norm")
HEADROOM_OP_GRADCHECK("swiglu")
HEADROOM_OP_GRADCHECK("rope")

TEST_CASE("every op has a gradcheck test above and cases in the suite") {
  // Keep this list in step with the HEADROOM_OP_GRADCHECK lines above: a new op in
  // op_names() without a line here fails.
  const std::set<std::string> tested{
      "add", "sub", "mul", "div", "neg", "add_scalar", "mul_scalar", "exp", "log", "sqrt", "rsqrt",
      "tanh", "relu", "gelu", "gelu_tanh", "pow", "sum", "mean", "reshape", "transpose", "permute",
      "concat", "slice", "split", "matmul", "linear", "softmax", "log_softmax", "cross_entropy", "embedding",
      "masked_fill", "layer_norm", "attention", "dropout", "sigmoid", "rms_norm", "swiglu", "rope"};
  std::set<std::string> in_suite;
  for (const auto& r : headroom::run_op_checks()) in_suite.insert(r.op);
  for (const auto& op : headroom::op_names()) {
    CHECK_MESSAGE(tested.count(op) == 1, "op " << op << " has no gradcheck TEST_CASE");
    CHECK_MESSAGE(in_suite.count(op) == 1, "op " << op << " has no case in run_op_checks");
  }
}

TEST_CASE("run_op_checks rejects an unknown op by name") {
  headroom::OpCheckOptions options;
  options.op = "matmull";
  CHECK_THROWS_WITH_AS(headroom::run_op_checks(options), doctest::Contains("unknown op 'matmull'"),
                       std::invalid_argument);
}

// linear() runs its forward GEMM either on W as stored (x W^T) or, for inputs
// narrower than 256 with at least as many rows as outputs, on a copy of W^T
// (ops_matmul.cpp). Both paths against the composed matmul(x, W^T) + b.
namespace hr = headroom;

TEST_CASE("linear: both forward GEMM paths equal matmul(x, transpose(W)) + b") {
  using D = hr::Tensor<double>;
  struct Case {
    const char* path;
    std::size_t rows, in, out;
  };
  for (const Case c : {Case{"copied W^T", 40, 8, 6}, Case{"W as stored: wide input", 40, 300, 6},
                       Case{"W as stored: fewer rows than outputs", 3, 8, 6}}) {
    CAPTURE(std::string(c.path));
    xt::xarray<double> x = xt::empty<double>(hr::Shape{c.rows, c.in});
    xt::xarray<double> w = xt::empty<double>(hr::Shape{c.out, c.in});
    xt::xarray<double> b = xt::empty<double>(hr::Shape{c.out});
    double v = 0.1;
    for (auto* a : {&x, &w, &b}) {
      for (auto& e : *a) e = (v = std::fmod(v * 7.3 + 0.37, 2.0)) - 1.0;  // fixed, non-uniform values
    }
    const D got = hr::linear(D(x), D(w), D(b));
    const D want = hr::add(hr::matmul(D(x), hr::transpose(D(w))), D(b));
    REQUIRE(got.shape() == want.shape());
    CHECK(xt::allclose(got.value(), want.value(), 1e-12, 1e-13));
  }
}

// linear()'s backward computes dW as g^T x or, for a narrowing layer the library
// runs (more than kSmallGemmMaxK rows here), as (x^T g)^T (ops_matmul.cpp,
// dw_as_transpose). Every orientation against the composed matmul(x, W^T) + b,
// with a non-uniform upstream gradient.
TEST_CASE("linear: dW, dX and db on every backward GEMM path equal the composed twin's") {
  using D = hr::Tensor<double>;
  struct Case {
    const char* path;
    std::size_t rows, in, out;
  };
  for (const Case c : {Case{"dW^T, narrowing, through the library", 1100, 12, 5},
                       Case{"dW, widening, through the library", 1100, 5, 12},
                       Case{"dW, narrowing, small_gemm", 40, 12, 5}}) {
    CAPTURE(std::string(c.path));
    xt::xarray<double> x = xt::empty<double>(hr::Shape{c.rows, c.in});
    xt::xarray<double> w = xt::empty<double>(hr::Shape{c.out, c.in});
    xt::xarray<double> b = xt::empty<double>(hr::Shape{c.out});
    xt::xarray<double> upstream = xt::empty<double>(hr::Shape{c.rows, c.out});
    double v = 0.1;
    for (auto* a : {&x, &w, &b, &upstream}) {
      for (auto& e : *a) e = (v = std::fmod(v * 7.3 + 0.37, 2.0)) - 1.0;  // fixed, non-uniform values
    }
    D x1(x, true), w1(w, true), b1(b, true);
    hr::linear(x1, w1, b1).backward(upstream);
    D x2(x, true), w2(w, true), b2(b, true);
    hr::add(hr::matmul(x2, hr::transpose(w2)), b2).backward(upstream);
    CHECK(xt::allclose(w1.grad(), w2.grad(), 1e-12, 1e-12));
    CHECK(xt::allclose(x1.grad(), x2.grad(), 1e-12, 1e-12));
    CHECK(xt::allclose(b1.grad(), b2.grad(), 1e-12, 1e-12));
  }
}
