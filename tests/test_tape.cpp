// Tape semantics: fan-out, accumulation across backward calls, NoGrad, clearing,
// keep_tape, detach, anomaly mode and thread-local tapes.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>

#include <doctest/doctest.h>

#include "autograd/ops.hpp"

using headroom::Tensor;
using D = Tensor<double>;

namespace {

D leaf(xt::xarray<double> v) { return D(std::move(v), true); }
D constant(xt::xarray<double> v) { return D(std::move(v), false); }

void check_close(const xt::xarray<double>& got, const xt::xarray<double>& want, const char* what) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what << ": shapes differ");
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK_MESSAGE(std::abs(got.data()[i] - want.data()[i]) <= 1e-12,
                  what << " at flat index " << i << ": got " << got.data()[i] << ", want "
                       << want.data()[i]);
  }
}

}  // namespace

TEST_CASE("a tensor used twice gets both gradients (fan-out)") {
  D x = leaf({1.0, -2.0, 3.0});
  // y = sum(x * x + 3 x) -> dy/dx = 2x + 3
  D y = sum(add(mul(x, x), mul_scalar(x, 3.0)));
  y.backward();
  check_close(x.grad(), {5.0, -1.0, 9.0}, "dy/dx");
}

TEST_CASE("gradients accumulate over two backward calls until zero_grad") {
  D x = leaf({2.0, 5.0});
  sum(mul_scalar(x, 4.0)).backward();
  sum(mul(x, x)).backward();
  check_close(x.grad(), {4.0 + 4.0, 4.0 + 10.0}, "accumulated");
  x.zero_grad();
  CHECK_FALSE(x.has_grad());
  sum(x).backward();
  check_close(x.grad(), {1.0, 1.0}, "after zero_grad");
}

TEST_CASE("backward clears the tape unless asked to keep it") {
  headroom::clear_tape<double>();
  D x = leaf({1.0, 2.0});
  D y = sum(exp(x));
  CHECK(headroom::tape_size<double>() == 2);
  y.backward(headroom::BackwardOptions{.keep_tape = true});
  CHECK(headroom::tape_size<double>() == 2);
  const xt::xarray<double> once = x.grad();
  // A second pass over the kept tape adds the same gradient again: intermediate
  // gradients start from zero on every pass.
  y.backward();
  CHECK(headroom::tape_size<double>() == 0);
  check_close(x.grad(), 2.0 * once, "two passes over a kept tape");
}

TEST_CASE("NoGrad records nothing and its outputs do not require grad") {
  headroom::clear_tape<double>();
  D x = leaf({1.0, 2.0});
  {
    headroom::NoGrad guard;
    CHECK_FALSE(headroom::grad_enabled());
    D y = mul(x, x);
    CHECK_FALSE(y.requires_grad());
    CHECK(headroom::tape_size<double>() == 0);
    check_close(y.value(), {1.0, 4.0}, "value under NoGrad");
  }
  CHECK(headroom::grad_enabled());
  D z = mul(x, x);
  CHECK(z.requires_grad());
  CHECK(headroom::tape_size<double>() == 1);
  headroom::clear_tape<double>();
}

TEST_CASE("ops on tensors that do not require grad are not recorded") {
  headroom::clear_tape<double>();
  D a = constant({1.0, 2.0});
  D b = exp(a);
  CHECK_FALSE(b.requires_grad());
  CHECK(headroom::tape_size<double>() == 0);
}

TEST_CASE("only inputs that require grad receive gradients") {
  D w = leaf({{1.0, 2.0}, {3.0, 4.0}});
  D x = constant({{1.0, 1.0}});
  sum(matmul(x, w)).backward();
  check_close(w.grad(), {{1.0, 1.0}, {1.0, 1.0}}, "dW");
  CHECK_FALSE(x.has_grad());
}

TEST_CASE("intermediate tensors do not keep gradients, but leaves do") {
  D x = leaf({1.0, 2.0});
  D h = mul_scalar(x, 2.0);
  sum(h).backward();
  CHECK(x.has_grad());
  CHECK_FALSE(h.has_grad());
  CHECK_THROWS_AS(h.grad(), std::invalid_argument);
}

TEST_CASE("detach cuts the graph") {
  D x = leaf({3.0});
  D y = mul(x, x);
  D c = y.detach();
  CHECK(c.is_leaf());
  CHECK_FALSE(c.requires_grad());
  // z = y * stop_gradient(y): dz/dx = c * dy/dx = 9 * 6
  sum(mul(y, c)).backward();
  check_close(x.grad(), {54.0}, "through detach");
}

TEST_CASE("backward with an explicit upstream gradient") {
  D x = leaf({1.0, 2.0, 3.0});
  D y = mul_scalar(x, 2.0);
  y.backward(xt::xarray<double>{1.0, 10.0, 100.0});
  check_close(x.grad(), {2.0, 20.0, 200.0}, "vector-Jacobian product");
}

TEST_CASE("backward on a non-scalar without an upstream gradient is an error") {
  D x = leaf({1.0, 2.0});
  D y = mul_scalar(x, 2.0);
  CHECK_THROWS_WITH_AS(y.backward(),
                       doctest::Contains("backward: the tensor has shape (2) (op 'mul_scalar')"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(y.backward(xt::xarray<double>{1.0, 2.0, 3.0}),
                       "backward: upstream gradient has shape (3) but the tensor has (2)",
                       std::invalid_argument);
  headroom::clear_tape<double>();
}

TEST_CASE("backward on a tensor that does not require grad is an error") {
  D x = constant({1.0});
  CHECK_THROWS_WITH_AS(x.backward(), doctest::Contains("does not require grad"), std::invalid_argument);
}

TEST_CASE("only leaves may change requires_grad") {
  D x = leaf({1.0});
  D y = exp(x);
  CHECK_THROWS_WITH_AS(y.set_requires_grad(false), doctest::Contains("output of 'exp'"),
                       std::invalid_argument);
  headroom::clear_tape<double>();
}

TEST_CASE("anomaly mode names the op whose backward produced a NaN or Inf") {
  // sqrt's derivative 1/(2 sqrt x) is infinite at 0: a planted non-finite gradient.
  D x = leaf({4.0, 0.0, 1.0});
  SUBCASE("without anomaly mode the Inf reaches the leaf silently") {
    sum(sqrt(x)).backward();
    CHECK(std::isinf(x.grad()(1)));
  }
  SUBCASE("with anomaly mode backward throws at sqrt, naming shapes and index") {
    headroom::DetectAnomaly guard;
    D loss = sum(mul_scalar(sqrt(x), 3.0));
    CHECK_THROWS_WITH_AS(loss.backward(),
                         "anomaly: backward of 'sqrt' (inputs [(3)]; output (3)) produced a "
                         "non-finite gradient for input 0 of shape (3): inf at index (1)",
                         headroom::AnomalyError);
    CHECK(headroom::tape_size<double>() == 0);  // the tape is left clean
  }
  CHECK_FALSE(headroom::anomaly_enabled());
}

TEST_CASE("anomaly mode catches a NaN planted in the forward pass") {
  headroom::DetectAnomaly guard;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  D x = leaf({1.0, 2.0});
  D w = leaf({nan, 1.0});
  D loss = sum(mul(x, w));
  // d/dx = w holds the NaN: mul's backward is the first step to produce it.
  CHECK_THROWS_WITH_AS(loss.backward(),
                       doctest::Contains("backward of 'mul' (inputs [(2), (2)]; output (2)) produced a "
                                         "non-finite gradient for input 0 of shape (2): nan at index (0)"),
                       headroom::AnomalyError);
}

TEST_CASE("anomaly mode names the op whose forward made a NaN out of finite inputs") {
  D x = leaf({1.0, -2.0});
  SUBCASE("log of a negative number") {
    headroom::DetectAnomaly guard;
    CHECK_THROWS_WITH_AS(log(mul_scalar(x, 2.0)),
                         "anomaly: forward of 'log' (inputs [(2)]) produced a non-finite value from finite "
                         "inputs: nan at index (1)",
                         headroom::AnomalyError);
  }
  SUBCASE("a -inf mask is intended, and softmax turns it into zeros") {
    headroom::DetectAnomaly guard;
    xt::xarray<bool> mask = {false, true};
    D p = softmax(masked_fill(x, mask, -std::numeric_limits<double>::infinity()), -1);
    CHECK(p.value()(1) == 0.0);
  }
  SUBCASE("without anomaly mode the NaN passes silently") { CHECK(std::isnan(log(x).value()(1))); }
  headroom::clear_tape<double>();
}

TEST_CASE("each thread has its own tape") {
  headroom::clear_tape<double>();
  D x = leaf({1.0, 2.0});
  D y = sum(mul(x, x));  // two entries on this thread's tape
  std::size_t other_before = 99, other_after = 99;
  xt::xarray<double> other_grad;
  std::thread worker([&] {
    other_before = headroom::tape_size<double>();
    D a = leaf({3.0});
    sum(mul(a, a)).backward();
    other_grad = a.grad();
    other_after = headroom::tape_size<double>();
  });
  worker.join();
  CHECK(other_before == 0);
  CHECK(other_after == 0);
  check_close(other_grad, {6.0}, "gradient on the worker thread");
  CHECK(headroom::tape_size<double>() == 2);  // untouched by the worker
  y.backward();
  check_close(x.grad(), {2.0, 4.0}, "gradient on the main thread");
}

TEST_CASE("a long chain is differentiated without recursion") {
  // 100000 ops deep: a recursive backward would overflow the stack.
  D x = leaf({1.0});
  D y = x;
  for (int i = 0; i < 100000; ++i) y = add_scalar(y, 1e-6);
  y = sum(y);
  y.backward();
  check_close(x.grad(), {1.0}, "d/dx of a chain of additions");
}

TEST_CASE("backward through a graph an earlier backward cleared is an error, not a silent zero") {
  D x = leaf({1.0, 2.0});
  D h = exp(x);
  D first = sum(h);
  D second = sum(mul_scalar(h, 2.0));
  first.backward();  // clears the tape, including the entries second needs
  CHECK_THROWS_WITH_AS(second.backward(),
                       doctest::Contains("backward: called on a tensor made by 'sum'"),
                       std::invalid_argument);
  D third = sum(mul_scalar(h, 3.0));  // recorded after the clear, but h's history is gone
  CHECK_THROWS_WITH_AS(third.backward(),
                       "backward: 'mul_scalar' uses a tensor made by 'exp' (shape (2)) whose tape "
                       "entry an earlier backward() already cleared, so no gradient could flow past "
                       "it; pass BackwardOptions{.keep_tape = true} to the earlier backward() or "
                       "recompute the tensor",
                       std::invalid_argument);
}

TEST_CASE("two losses on one tape: keep_tape on the first backward") {
  D x = leaf({1.0, 2.0});
  D h = exp(x);
  D first = sum(h);
  D second = sum(mul_scalar(h, 2.0));
  first.backward(headroom::BackwardOptions{.keep_tape = true});
  second.backward();
  check_close(x.grad(), 3.0 * xt::exp(x.value()), "d(first + second)/dx");
}

// ---- LeafGradients: a shard's parameter gradients collected apart ----------------

TEST_CASE("LeafGradients collects what reaches the leaves, on any thread, and adds it in afterwards") {
  // w is used twice and broadcast once: three contributions, one of them summed
  // back to w's shape; b is reached once; x is an intermediate and stays out.
  D w = leaf({0.5, -1.5, 2.0});
  D b = leaf({0.25});
  const xt::xarray<double> input = {{1.0, 2.0, -1.0}, {0.5, -3.0, 4.0}};
  const auto loss_of = [&] {
    D x = mul(constant(input), w);               // (2, 3), w broadcast over rows
    D y = add(mul(x, w), add(x, b));            // w again, b broadcast
    return sum(mul(y, y));
  };
  // The direct gradients, from a first backward into the leaves.
  loss_of().backward();
  const xt::xarray<double> want_w = w.grad(), want_b = b.grad();
  w.zero_grad();
  b.zero_grad();

  // A second thread computes the same loss with its own tape, collecting.
  headroom::LeafGradients<double> collected;
  std::thread worker([&] { collected.collect([&] { loss_of().backward(); }); });
  worker.join();
  CHECK_FALSE(w.has_grad());  // nothing reached the leaves themselves
  CHECK_FALSE(b.has_grad());
  REQUIRE(collected.size() == 2);
  REQUIRE(collected.find(*w.node()) != nullptr);
  check_close(*collected.find(*w.node()), want_w, "collected dL/dw");
  check_close(*collected.find(*b.node()), want_b, "collected dL/db");
  CHECK(headroom::LeafGradients<double>::active() == nullptr);  // only while collect() runs

  // The first thread's own backward writes the leaves; the collection adds to them.
  loss_of().backward();
  collected.add_to_leaves();
  CHECK(collected.empty());
  check_close(w.grad(), 2.0 * want_w, "dL/dw, both shards");
  check_close(b.grad(), 2.0 * want_b, "dL/db, both shards");

  // A leaf without a gradient of its own takes the collected one as it is.
  w.zero_grad();
  collected.collect([&] { sum(mul(w, w)).backward(); });
  collected.add_to_leaves();
  check_close(w.grad(), 2.0 * w.value(), "d sum(w^2)/dw through an empty leaf");
}

TEST_CASE("LeafGradients: collect() restores the previous collection, even on a throw") {
  D w = leaf({1.0, 2.0});
  headroom::LeafGradients<double> outer, inner;
  outer.collect([&] {
    CHECK(headroom::LeafGradients<double>::active() == &outer);
    CHECK_THROWS_AS(inner.collect([&] {
      sum(mul_scalar(w, 3.0)).backward();
      throw std::runtime_error("stop");
    }), std::runtime_error);
    CHECK(headroom::LeafGradients<double>::active() == &outer);
    sum(mul_scalar(w, 5.0)).backward();
  });
  CHECK(headroom::LeafGradients<double>::active() == nullptr);
  check_close(*inner.find(*w.node()), {3.0, 3.0}, "inner");
  check_close(*outer.find(*w.node()), {5.0, 5.0}, "outer");
  CHECK_FALSE(w.has_grad());
}
