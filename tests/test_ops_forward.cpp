// Forward values of every op in float32 against PyTorch, and dropout by its rule.
//
// The references live in fixtures/ops_forward.txt, written by the script next to it
// (fixtures/make_ops_forward.py; its header says how to regenerate it and documents
// the format). Each fixture case is named <op>_<variant>; the test of an op runs
// every case of that op through one runner below and compares all outputs
// element-wise. Dropout draws its mask from our own Rng, which cannot match
// PyTorch's, so it is tested here by the rule it must obey instead.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "support.hpp"
#include "autograd/op_checks.hpp"
#include "autograd/ops.hpp"

namespace {

namespace hr = headroom;
using F = hr::Tensor<float>;

// ---- the fixture ---------------------------------------------------------------------

struct FixtureTensor {
  std::string label;
  hr::Shape shape;
  std::vector<double> values;  // row-major
};

struct FixtureCase {
  std::string name;
  std::vector<FixtureTensor> tensors;              // inputs and outputs, in file order
  std::map<std::string, std::vector<double>> params;

  const FixtureTensor* find(const std::string& label) const {
    for (const auto& t : tensors)
      if (t.label == label) return &t;
    return nullptr;
  }
  const FixtureTensor& tensor(const std::string& label) const {
    if (const FixtureTensor* t = find(label)) return *t;
    throw std::runtime_error(fmt::format("fixture case {} has no tensor '{}'", name, label));
  }
  bool has_param(const std::string& key) const { return params.count(key) != 0; }
  const std::vector<double>& param(const std::string& key) const {
    auto it = params.find(key);
    if (it == params.end())
      throw std::runtime_error(fmt::format("fixture case {} has no param '{}'", name, key));
    return it->second;
  }

  // The inputs in the types the ops take.
  F input(const std::string& label) const {
    const FixtureTensor& t = tensor(label);
    xt::xarray<float> v = xt::empty<float>(t.shape);
    for (std::size_t i = 0; i < t.values.size(); ++i) v.data()[i] = static_cast<float>(t.values[i]);
    return F(std::move(v));
  }
  hr::IndexArray indices(const std::string& label) const {
    const FixtureTensor& t = tensor(label);
    hr::IndexArray v = xt::empty<hr::Index>(t.shape);
    for (std::size_t i = 0; i < t.values.size(); ++i) v.data()[i] = to_int(t.values[i], label);
    return v;
  }
  hr::Mask mask(const std::string& label) const {
    const FixtureTensor& t = tensor(label);
    hr::Mask v = xt::empty<bool>(t.shape);
    for (std::size_t i = 0; i < t.values.size(); ++i) v.data()[i] = t.values[i] != 0.0;
    return v;
  }
  float real(const std::string& key) const { return static_cast<float>(one(key)); }
  int integer(const std::string& key) const { return static_cast<int>(to_int(one(key), key)); }
  std::vector<int> integers(const std::string& key) const {
    std::vector<int> out;
    for (double v : param(key)) out.push_back(static_cast<int>(to_int(v, key)));
    return out;
  }

  // Outputs are "out", or "out0", "out1", ... for ops that return several tensors.
  std::vector<const FixtureTensor*> outputs() const {
    std::vector<const FixtureTensor*> out;
    for (const auto& t : tensors) {
      const bool numbered = t.label.size() > 3 && t.label.starts_with("out") &&
                            std::all_of(t.label.begin() + 3, t.label.end(),
                                        [](unsigned char ch) { return std::isdigit(ch); });
      if (t.label == "out" || numbered) out.push_back(&t);
    }
    return out;
  }

 private:
  double one(const std::string& key) const {
    const auto& v = param(key);
    if (v.size() != 1)
      throw std::runtime_error(fmt::format("fixture case {}: param '{}' has {} values, want 1",
                                           name, key, v.size()));
    return v[0];
  }
  hr::Index to_int(double v, const std::string& what) const {
    if (v != std::floor(v))
      throw std::runtime_error(fmt::format("fixture case {}: '{}' holds non-integer {}", name,
                                           what, v));
    return static_cast<hr::Index>(v);
  }
};

std::vector<FixtureCase> load_fixture(const std::string& path) {
  std::vector<FixtureCase> cases;
  bool open = false;
  for_each_record(path, "tests/fixtures/make_ops_forward.py", [&](FixtureRecord& r) {
    const std::string& where = r.where();
    const std::string kind = r.try_next().value_or("");
    if (kind == "case") {
      if (open) throw std::runtime_error(fmt::format("{}: case inside a case", where));
      cases.emplace_back().name = r.next("case name");
      open = true;
    } else if (kind == "end") {
      if (!open) throw std::runtime_error(fmt::format("{}: 'end' outside a case", where));
      open = false;
    } else if (kind == "tensor" || kind == "param") {
      if (!open) throw std::runtime_error(fmt::format("{}: {} outside a case", where, kind));
      const std::string label = r.next("label");
      hr::Shape shape;
      std::size_t count = 0;
      if (kind == "tensor") {
        const std::size_t ndim = r.next_count("ndim");
        for (std::size_t d = 0; d < ndim; ++d) shape.push_back(r.next_count("extent"));
        count = hr::shape_size(shape);
      } else {
        count = r.next_count("count");
      }
      std::vector<double> values;
      for (std::size_t i = 0; i < count; ++i) values.push_back(r.next_number("value"));
      if (r.try_next())
        throw std::runtime_error(fmt::format("{}: more than {} values", where, count));
      if (kind == "tensor") {
        cases.back().tensors.push_back({label, std::move(shape), std::move(values)});
      } else {
        cases.back().params[label] = std::move(values);
      }
    } else {
      throw std::runtime_error(fmt::format("{}: unknown record '{}'", where, kind));
    }
  });
  if (open) throw std::runtime_error(fmt::format("{}: last case has no 'end'", path));
  if (cases.empty()) throw std::runtime_error(fmt::format("{}: no cases", path));
  return cases;
}

// Loaded once; a missing or malformed file throws in every test that reads it, so
// each of them fails with the reason instead of passing on zero cases.
const std::vector<FixtureCase>& fixture() {
  static const std::vector<FixtureCase> cases =
      load_fixture(std::string(HEADROOM_FIXTURE_DIR) + "/ops_forward.txt");
  return cases;
}

// The op a case belongs to: the longest op name that is the case name or its prefix
// followed by '_' (so gelu_tanh_basic is gelu_tanh's and log_softmax_* log_softmax's).
std::string op_of_case(const std::string& case_name) {
  std::string best;
  for (const std::string& op : hr::op_names()) {
    const bool match = case_name == op || case_name.starts_with(op + "_");
    if (match && op.size() > best.size()) best = op;
  }
  return best;
}

// ---- running an op on a case -----------------------------------------------------------

using Runner = std::function<std::vector<F>(const FixtureCase&)>;

std::map<std::string, Runner> make_runners() {
  std::map<std::string, Runner> r;
  auto unary = [&r](const char* op, F (*fn)(const F&)) {
    r[op] = [fn](const FixtureCase& c) { return std::vector<F>{fn(c.input("x"))}; };
  };
  auto binary = [&r](const char* op, F (*fn)(const F&, const F&)) {
    r[op] = [fn](const FixtureCase& c) { return std::vector<F>{fn(c.input("a"), c.input("b"))}; };
  };
  binary("add", &hr::add<float>);
  binary("sub", &hr::sub<float>);
  binary("mul", &hr::mul<float>);
  binary("div", &hr::div<float>);
  binary("matmul", &hr::matmul<float>);
  unary("neg", &hr::neg<float>);
  unary("exp", &hr::exp<float>);
  unary("log", &hr::log<float>);
  unary("sqrt", &hr::sqrt<float>);
  unary("rsqrt", &hr::rsqrt<float>);
  unary("tanh", &hr::tanh<float>);
  unary("relu", &hr::relu<float>);
  unary("gelu", &hr::gelu<float>);
  unary("gelu_tanh", &hr::gelu_tanh<float>);
  r["add_scalar"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::add_scalar(c.input("x"), c.real("scalar"))};
  };
  r["mul_scalar"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::mul_scalar(c.input("x"), c.real("scalar"))};
  };
  r["pow"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::pow(c.input("x"), c.real("exponent"))};
  };
  r["sum"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::sum(c.input("x"), c.integers("axes"), c.integer("keepdims") != 0)};
  };
  r["mean"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::mean(c.input("x"), c.integers("axes"), c.integer("keepdims") != 0)};
  };
  r["reshape"] = [](const FixtureCase& c) {
    hr::Shape shape;
    for (int d : c.integers("shape")) shape.push_back(static_cast<std::size_t>(d));
    return std::vector<F>{hr::reshape(c.input("x"), shape)};
  };
  r["transpose"] = [](const FixtureCase& c) {
    // Without an axes param the case exercises the default (-2, -1).
    if (!c.has_param("axes")) return std::vector<F>{hr::transpose(c.input("x"))};
    const std::vector<int> axes = c.integers("axes");
    REQUIRE(axes.size() == 2);
    return std::vector<F>{hr::transpose(c.input("x"), axes[0], axes[1])};
  };
  r["permute"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::permute(c.input("x"), c.integers("perm"))};
  };
  r["concat"] = [](const FixtureCase& c) {
    std::vector<F> xs;
    // fmt rather than "x" + std::to_string(i), on which GCC 12 warns falsely (-Wrestrict).
    for (std::size_t i = 0; c.find(fmt::format("x{}", i)); ++i)
      xs.push_back(c.input(fmt::format("x{}", i)));
    return std::vector<F>{hr::concat(xs, c.integer("axis"))};
  };
  r["slice"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::slice(c.input("x"), c.integer("axis"),
                                    static_cast<std::size_t>(c.integer("start")),
                                    static_cast<std::size_t>(c.integer("stop")))};
  };
  r["split"] = [](const FixtureCase& c) {
    std::vector<std::size_t> sizes;
    for (int s : c.integers("sizes")) sizes.push_back(static_cast<std::size_t>(s));
    return hr::split(c.input("x"), c.integer("axis"), sizes);
  };
  r["linear"] = [](const FixtureCase& c) {
    const F bias = c.find("bias") ? c.input("bias") : F();
    return std::vector<F>{hr::linear(c.input("x"), c.input("weight"), bias)};
  };
  r["softmax"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::softmax(c.input("x"), c.integer("axis"))};
  };
  r["log_softmax"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::log_softmax(c.input("x"), c.integer("axis"))};
  };
  r["cross_entropy"] = [](const FixtureCase& c) {
    const F logits = c.input("logits");
    const hr::IndexArray targets = c.indices("targets");
    if (c.find("mask")) return std::vector<F>{hr::cross_entropy(logits, targets, c.mask("mask"))};
    // Without an ignore_index param the case exercises the default (-100).
    if (!c.has_param("ignore_index")) return std::vector<F>{hr::cross_entropy(logits, targets)};
    return std::vector<F>{
        hr::cross_entropy(logits, targets, static_cast<hr::Index>(c.integer("ignore_index")))};
  };
  r["embedding"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::embedding(c.input("weight"), c.indices("indices"))};
  };
  r["masked_fill"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::masked_fill(c.input("x"), c.mask("mask"), c.real("value"))};
  };
  r["layer_norm"] = [](const FixtureCase& c) {
    return std::vector<F>{
        hr::layer_norm(c.input("x"), c.input("weight"), c.input("bias"), c.real("eps"))};
  };
  r["attention"] = [](const FixtureCase& c) {
    const hr::Mask padding = c.find("mask") ? c.mask("mask") : hr::Mask();
    return std::vector<F>{hr::attention(c.input("q"), c.input("k"), c.input("v"),
                                        {.n_heads = static_cast<std::size_t>(c.integer("n_heads")),
                                         .n_kv_heads = static_cast<std::size_t>(c.integer("n_kv_heads")),
                                         .scale = c.real("scale"),
                                         .causal = c.integer("causal") != 0,
                                         .key_padding = c.find("mask") ? &padding : nullptr})};
  };
  unary("sigmoid", &hr::sigmoid<float>);
  r["rms_norm"] = [](const FixtureCase& c) {
    return std::vector<F>{hr::rms_norm(c.input("x"), c.input("weight"), c.real("eps"))};
  };
  r["swiglu"] = [](const FixtureCase& c) { return std::vector<F>{hr::swiglu(c.input("gate"), c.input("up"))}; };
  r["rope"] = [](const FixtureCase& c) {
    const std::vector<double>& base = c.param("base");
    REQUIRE(base.size() == 1);
    return std::vector<F>{hr::rope(c.input("x"), static_cast<std::size_t>(c.integer("n_heads")), base[0],
                                   static_cast<std::size_t>(c.integer("offset")))};
  };
  return r;
}

const std::map<std::string, Runner>& runners() {
  static const std::map<std::string, Runner> r = make_runners();
  return r;
}

// ---- comparing ---------------------------------------------------------------------------

// float32 keeps about 7 significant digits; every op here does at most a few dozen
// roundings per output (the longest: a 24-element sum, a 6-wide LayerNorm row), so a
// relative 1e-4 leaves ample room, and the absolute 1e-5 covers outputs near zero
// (softmax tails, gelu of large negatives, exp's subnormal). Infinities and NaNs must
// match exactly.
constexpr double kAbsTol = 1e-5;
constexpr double kRelTol = 1e-4;

bool close(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= kAbsTol + kRelTol * std::abs(want);
}

// Checks shape and every element; names the case, the output, the flat and
// multi-index and both values for up to a few bad elements, then counts them all.
void check_output(const FixtureTensor& want, const F& got) {
  INFO("output " << want.label);
  const std::string want_shape = hr::format_shape(want.shape);
  const std::string got_shape = hr::format_shape(got.shape());
  CHECK_MESSAGE(got_shape == want_shape, "shape " << got_shape << ", want " << want_shape);
  if (got_shape != want_shape) return;
  constexpr std::size_t kShown = 5;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.values.size(); ++i) {
    const double g = static_cast<double>(got.value().data()[i]);
    const double w = want.values[i];
    if (close(g, w)) continue;
    if (bad++ < kShown) {
      FAIL_CHECK(fmt::format("at [{}] = {}: got {:.9g}, want {:.9g} (|diff| {:.3g}, tol {:.3g})",
                             i, hr::format_shape(hr::unravel_index(i, want.shape)), g, w,
                             std::abs(g - w), kAbsTol + kRelTol * std::abs(w)));
    }
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << want.values.size() << " elements differ");
}

// Runs every fixture case of `op` and compares all its outputs.
void check_op(const std::string& op) {
  auto runner = runners().find(op);
  REQUIRE_MESSAGE(runner != runners().end(), "no forward runner for op " << op);
  std::size_t ran = 0;
  for (const FixtureCase& c : fixture()) {
    if (op_of_case(c.name) != op) continue;
    ++ran;
    INFO("case " << c.name);
    const std::vector<const FixtureTensor*> want = c.outputs();
    REQUIRE_MESSAGE(!want.empty(), "fixture case " << c.name << " has no output");
    const std::vector<F> got = runner->second(c);
    REQUIRE_MESSAGE(got.size() == want.size(),
                    "op returned " << got.size() << " tensors, fixture has " << want.size());
    for (std::size_t k = 0; k < want.size(); ++k) check_output(*want[k], got[k]);
  }
  REQUIRE_MESSAGE(ran > 0, "ops_forward.txt has no case for op " << op);
}

}  // namespace

// ---- coverage ------------------------------------------------------------------------------

TEST_CASE("forward: every op has a fixture case and a runner") {
  std::map<std::string, std::size_t> count;
  for (const FixtureCase& c : fixture()) ++count[op_of_case(c.name)];
  for (const std::string& op : hr::op_names()) {
    if (op == "dropout") continue;  // tested by its rule below
    CHECK_MESSAGE(count[op] > 0, "op " << op << " has no case in ops_forward.txt");
    CHECK_MESSAGE(runners().count(op) == 1, "op " << op << " has no forward runner");
  }
}

TEST_CASE("forward: every fixture case belongs to an op") {
  for (const FixtureCase& c : fixture()) {
    CHECK_MESSAGE(!op_of_case(c.name).empty(),
                  "fixture case " << c.name << " does not start with an op name");
  }
}

// ---- one test per op -----------------------------------------------------------------------

TEST_CASE("forward: add") { check_op("add"); }
TEST_CASE("forward: sub") { check_op("sub"); }
TEST_CASE("forward: mul") { check_op("mul"); }
TEST_CASE("forward: div") { check_op("div"); }
TEST_CASE("forward: neg") { check_op("neg"); }
TEST_CASE("forward: add_scalar") { check_op("add_scalar"); }
TEST_CASE("forward: mul_scalar") { check_op("mul_scalar"); }
TEST_CASE("forward: exp") { check_op("exp"); }
TEST_CASE("forward: log") { check_op("log"); }
TEST_CASE("forward: sqrt") { check_op("sqrt"); }
TEST_CASE("forward: rsqrt") { check_op("rsqrt"); }
TEST_CASE("forward: tanh") { check_op("tanh"); }
TEST_CASE("forward: relu") { check_op("relu"); }
TEST_CASE("forward: gelu exact erf") { check_op("gelu"); }
TEST_CASE("forward: gelu_tanh approximation") { check_op("gelu_tanh"); }
TEST_CASE("forward: pow") { check_op("pow"); }
TEST_CASE("forward: sum") { check_op("sum"); }
TEST_CASE("forward: mean") { check_op("mean"); }
TEST_CASE("forward: reshape") { check_op("reshape"); }
TEST_CASE("forward: transpose") { check_op("transpose"); }
TEST_CASE("forward: permute") { check_op("permute"); }
TEST_CASE("forward: concat") { check_op("concat"); }
TEST_CASE("forward: slice") { check_op("slice"); }
TEST_CASE("forward: split") { check_op("split"); }
TEST_CASE("forward: matmul") { check_op("matmul"); }
TEST_CASE("forward: linear") { check_op("linear"); }
TEST_CASE("forward: softmax") { check_op("softmax"); }
TEST_CASE("forward: log_softmax") { check_op("log_softmax"); }
TEST_CASE("forward: cross_entropy") { check_op("cross_entropy"); }
TEST_CASE("forward: embedding") { check_op("embedding"); }
TEST_CASE("forward: masked_fill") { check_op("masked_fill"); }
TEST_CASE("forward: layer_norm") { check_op("layer_norm"); }
TEST_CASE("forward: attention") { check_op("attention"); }
TEST_CASE("forward: sigmoid") { check_op("sigmoid"); }
TEST_CASE("forward: rms_norm") { check_op("rms_norm"); }
TEST_CASE("forward: swiglu") { check_op("swiglu"); }
TEST_CASE("forward: rope") { check_op("rope"); }

// ---- dropout, by its rule ------------------------------------------------------------------

namespace {

// (100, 200) values that are never zero, so a zero output can only mean "dropped".
F dropout_input() {
  xt::xarray<float> v = xt::empty<float>(hr::Shape{100, 200});
  for (std::size_t i = 0; i < v.size(); ++i)
    v.data()[i] = (i % 2 ? -1.0f : 1.0f) * (0.5f + 0.25f * static_cast<float>(i % 13));
  return F(std::move(v));
}

bool same_values(const F& a, const F& b) {
  if (a.shape() != b.shape()) return false;
  return std::equal(a.value().begin(), a.value().end(), b.value().begin());
}

}  // namespace

TEST_CASE("forward: dropout zeroes at rate p and scales the rest by 1 over 1-p") {
  const F x = dropout_input();
  const double n = static_cast<double>(x.size());
  for (const double p : {0.1, 0.3, 0.5, 0.9}) {
    INFO("p = " << p);
    hr::Rng rng(1234);
    const F y = hr::dropout(x, p, rng, true);
    REQUIRE(hr::format_shape(y.shape()) == hr::format_shape(x.shape()));
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    std::size_t dropped = 0, bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float xi = x.value().data()[i], yi = y.value().data()[i];
      if (yi == 0.0f) {
        ++dropped;
      } else if (std::abs(yi - xi * scale) > 1e-6f * std::abs(xi * scale) && bad++ < 5) {
        FAIL_CHECK(fmt::format("at [{}]: x = {}, y = {}, neither 0 nor x/(1-p) = {}", i, xi, yi,
                               xi * scale));
      }
    }
    CHECK_MESSAGE(bad == 0, bad << " outputs are neither 0 nor x/(1-p)");
    // The dropped count is Binomial(n, p); 5 standard deviations is a false-alarm rate
    // of 6e-7 for a new seed or generator, and the seed is fixed anyway.
    const double rate = static_cast<double>(dropped) / n;
    const double sigma = std::sqrt(p * (1.0 - p) / n);
    CHECK_MESSAGE(std::abs(rate - p) <= 5.0 * sigma,
                  "dropped fraction " << rate << ", want " << p << " +- 5 * " << sigma);
  }
}

TEST_CASE("forward: dropout masks follow the seed") {
  const F x = dropout_input();
  hr::Rng a(7), b(7), c(8);
  const F ya = hr::dropout(x, 0.5, a, true);
  const F yb = hr::dropout(x, 0.5, b, true);
  CHECK_MESSAGE(same_values(ya, yb), "the same seed gave different masks");
  CHECK_MESSAGE(!same_values(ya, hr::dropout(x, 0.5, c, true)), "seeds 7 and 8 gave one mask");
  // The generator advances: a second call on the same Rng draws a fresh mask.
  CHECK_MESSAGE(!same_values(ya, hr::dropout(x, 0.5, a, true)), "a reused Rng repeated its mask");
}

TEST_CASE("forward: dropout is the identity in eval mode and at p 0") {
  const F x = dropout_input();
  hr::Rng rng(3);
  for (const auto& [p, training] : {std::pair{0.5, false}, std::pair{0.0, true},
                                    std::pair{0.0, false}, std::pair{1.0, false}}) {
    INFO("p = " << p << ", training = " << training);
    const F y = hr::dropout(x, p, rng, training);
    CHECK(same_values(y, x));
    // ops.hpp promises the same tensor, not a copy: no work and no tape entry.
    CHECK(y.node() == x.node());
  }
}

TEST_CASE("forward: dropout at p 1 zeroes everything") {
  const F x = dropout_input();
  hr::Rng rng(5);
  const F y = hr::dropout(x, 1.0, rng, true);
  REQUIRE(hr::format_shape(y.shape()) == hr::format_shape(x.shape()));
  const auto nonzero = std::count_if(y.value().begin(), y.value().end(),
                                     [](float v) { return v != 0.0f; });
  CHECK_MESSAGE(nonzero == 0, nonzero << " of " << y.size() << " outputs are not zero");
}

TEST_CASE("forward: dropout rejects p outside 0 to 1") {
  const F x = dropout_input();
  hr::Rng rng(5);
  CHECK_THROWS_AS(hr::dropout(x, -0.1, rng, true), std::invalid_argument);
  CHECK_THROWS_AS(hr::dropout(x, 1.5, rng, true), std::invalid_argument);
}

TEST_CASE("forward: softmax of a fully masked row is zeros, other rows are untouched") {
  // Our one departure from PyTorch (which gives NaN): a query whose every key is
  // masked attends to nothing.
  const float inf = std::numeric_limits<float>::infinity();
  const F x(xt::xarray<float>{{-inf, -inf, -inf}, {0.0f, std::log(3.0f), -inf}});
  const xt::xarray<float> y = hr::softmax(x, -1).value();
  for (std::size_t j = 0; j < 3; ++j) CHECK(y(0, j) == 0.0f);
  CHECK(y(1, 0) == doctest::Approx(0.25));
  CHECK(y(1, 1) == doctest::Approx(0.75));
  CHECK(y(1, 2) == 0.0f);
}

// gelu's backward reads Phi(x) back as y / x from its output (0.5 at x = 0): its
// gradient against the closed form Phi(x) + x phi(x), at 0, at tiny and large
// negative x (where y underflows) and elsewhere, with a non-uniform upstream.
TEST_CASE("gelu's gradient equals Phi(x) + x phi(x), at x = 0 and where x Phi(x) underflows") {
  const std::vector<double> xs{0.0, 1e-30, -1e-30, -0.75, 0.5, 3.0, -6.0, -12.0, -40.0, 8.0};
  const auto check = [&]<typename T>(T, double tolerance) {
    xt::xarray<T> x = xt::xarray<T>::from_shape({xs.size()});
    xt::xarray<T> up = xt::xarray<T>::from_shape({xs.size()});
    for (std::size_t i = 0; i < xs.size(); ++i) {
      x(i) = static_cast<T>(xs[i]);
      up(i) = static_cast<T>(0.5 + 0.25 * static_cast<double>(i));
    }
    hr::Tensor<T> t(x, true);
    hr::gelu(t).backward(up);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(xs[i]);
      const double v = static_cast<double>(x(i));
      const double want = (0.5 * std::erfc(-v / std::sqrt(2.0)) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI)) *
                          static_cast<double>(up(i));
      CHECK(std::isfinite(static_cast<double>(t.grad()(i))));
      CHECK(std::abs(static_cast<double>(t.grad()(i)) - want) <= tolerance * (1 + std::abs(want)));
    }
  };
  check(double{}, 1e-12);
  check(float{}, 2e-6);
}
