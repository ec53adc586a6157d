// optim/: Adam, AdamW and SGD against a hand computation and against PyTorch's
// trajectories, gradient clipping, learning-rate schedules, and every error message.
//
// The trajectories live in fixtures/adam_trajectory.txt, written by the script next
// to it (fixtures/make_adam_trajectory.py; its header documents the format and how
// to regenerate it). We run headroom in double on exactly the gradients and learning
// rates PyTorch saw, and compare parameters and optimizer state after every step.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <xtensor/xbuilder.hpp>

#include "support.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"
#include "optim/optim.hpp"

namespace {

namespace hr = headroom;
using D = hr::Tensor<double>;
using F = hr::Tensor<float>;

// A leaf that requires grad, holding the evaluated expression e.
template <typename E>
auto leaf(E&& e) {
  using T = typename std::decay_t<E>::value_type;
  return hr::Tensor<T>(xt::xarray<T>(std::forward<E>(e)), true);
}

// Replaces p's gradient, through autograd's one accumulation point.
template <typename T>
void set_grad(hr::Tensor<T>& p, const xt::xarray<T>& g) {
  p.zero_grad();
  hr::accumulate_grad(*p.node(), g, "test");
}

// "" when every element satisfies |got - want| <= rtol * |want| + atol; otherwise
// the first element that does not, with its index and both values.
template <typename T>
std::string mismatch(const xt::xarray<T>& got, const hr::Shape& shape,
                     const std::vector<double>& want, double rtol, double atol) {
  if (got.shape() != shape) {
    return fmt::format("shape {} vs expected {}", hr::format_shape(got.shape()),
                       hr::format_shape(shape));
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.data()[i], w = want[i];
    if (!(std::abs(g - w) <= rtol * std::abs(w) + atol)) {
      return fmt::format("at {}: headroom {:.17g} vs expected {:.17g} (diff {:.3g})",
                         hr::format_shape(hr::unravel_index(i, shape)), g, w, g - w);
    }
  }
  return "";
}

// ---- the PyTorch trajectories ------------------------------------------------------

struct FixtureTensor {
  hr::Shape shape;
  std::vector<double> values;  // row-major

  xt::xarray<double> array() const {
    xt::xarray<double> a = xt::empty<double>(shape);
    for (std::size_t i = 0; i < values.size(); ++i) a.data()[i] = values[i];
    return a;
  }
};

struct TrajectoryStep {
  std::size_t k = 0;
  double lr = 0;
  std::map<std::string, FixtureTensor> grads;   // parameters with a gradient at this step
  std::map<std::string, FixtureTensor> values;  // every parameter after the step
  std::map<std::pair<std::string, std::string>, FixtureTensor> state;  // (name, key)
};

struct TrajectoryCase {
  std::string name;
  std::string optimizer;  // adam, adamw, sgd
  std::map<std::string, double> options;
  std::vector<std::pair<std::string, FixtureTensor>> params;  // initial values, in order
  std::vector<TrajectoryStep> steps;

  double option(const std::string& key) const {
    auto it = options.find(key);
    if (it == options.end())
      throw std::runtime_error(fmt::format("fixture case {} has no option '{}'", name, key));
    return it->second;
  }
  bool flag(const std::string& key) const { return option(key) != 0; }
};

std::vector<TrajectoryCase> load_trajectories(const std::string& path) {
  std::vector<TrajectoryCase> cases;
  bool open = false;
  for_each_record(path, "tests/fixtures/make_adam_trajectory.py", [&](FixtureRecord& r) {
    const std::string& where = r.where();
    auto next_tensor = [&] {
      FixtureTensor t;
      const std::size_t ndim = r.next_count("ndim");
      for (std::size_t d = 0; d < ndim; ++d) t.shape.push_back(r.next_count("extent"));
      for (std::size_t i = 0, n = hr::shape_size(t.shape); i < n; ++i)
        t.values.push_back(r.next_number("value"));
      return t;
    };
    auto current_step = [&]() -> TrajectoryStep& {
      if (!open || cases.back().steps.empty())
        throw std::runtime_error(fmt::format("{}: record outside a step", where));
      return cases.back().steps.back();
    };
    const std::string kind = r.next("record");
    if (kind == "case") {
      if (open) throw std::runtime_error(fmt::format("{}: case inside a case", where));
      cases.emplace_back().name = r.next("case name");
      open = true;
    } else if (!open) {
      throw std::runtime_error(fmt::format("{}: '{}' outside a case", where, kind));
    } else if (kind == "end") {
      open = false;
    } else if (kind == "optimizer") {
      cases.back().optimizer = r.next("optimizer");
    } else if (kind == "option") {
      const std::string key = r.next("option name");
      cases.back().options[key] = r.next_number("option value");
    } else if (kind == "param") {
      const std::string name = r.next("parameter name");
      cases.back().params.emplace_back(name, next_tensor());
    } else if (kind == "step") {
      TrajectoryStep& s = cases.back().steps.emplace_back();
      s.k = r.next_count("step");
      s.lr = r.next_number("lr");
    } else if (kind == "grad" || kind == "value") {
      const std::string name = r.next("parameter name");
      (kind == "grad" ? current_step().grads : current_step().values)[name] = next_tensor();
    } else if (kind == "state") {
      const std::string name = r.next("parameter name");
      const std::string key = r.next("state key");
      current_step().state[{name, key}] = next_tensor();
    } else {
      throw std::runtime_error(fmt::format("{}: unknown record '{}'", where, kind));
    }
    if (const std::optional<std::string> extra = r.try_next())
      throw std::runtime_error(fmt::format("{}: trailing '{}'", where, *extra));
  });
  if (open) throw std::runtime_error(fmt::format("{}: last case has no 'end'", path));
  return cases;
}

// Loaded once; a missing or malformed file throws in every test that reads it.
const TrajectoryCase& trajectory(const std::string& name) {
  static const std::vector<TrajectoryCase> cases =
      load_trajectories(std::string(HEADROOM_FIXTURE_DIR) + "/adam_trajectory.txt");
  for (const auto& c : cases)
    if (c.name == name) return c;
  throw std::runtime_error(fmt::format("adam_trajectory.txt has no case '{}'", name));
}

// Both runs are float64 with the same order of operations, so they agree to a few
// ulps; 1e-12 relative leaves room for PyTorch's vectorised FMAs and nothing more.
constexpr double kRtol = 1e-12;
constexpr double kAtol = 1e-300;  // a zero must come out (practically) zero

std::unique_ptr<hr::Optimizer<double>> make_optimizer(const TrajectoryCase& c,
                                                      hr::NamedParameters<double> params) {
  const double lr = c.steps.at(0).lr;
  if (c.optimizer == "adam") {
    return std::make_unique<hr::Adam<double>>(
        std::move(params), hr::AdamOptions{.lr = lr,
                                           .beta1 = c.option("beta1"),
                                           .beta2 = c.option("beta2"),
                                           .eps = c.option("eps"),
                                           .weight_decay = c.option("weight_decay"),
                                           .exclude_from_decay = c.flag("exclude_from_decay")});
  }
  if (c.optimizer == "adamw") {
    return std::make_unique<hr::AdamW<double>>(
        std::move(params), hr::AdamWOptions{.lr = lr,
                                            .beta1 = c.option("beta1"),
                                            .beta2 = c.option("beta2"),
                                            .eps = c.option("eps"),
                                            .weight_decay = c.option("weight_decay"),
                                            .exclude_from_decay = c.flag("exclude_from_decay")});
  }
  if (c.optimizer == "sgd") {
    return std::make_unique<hr::SGD<double>>(
        std::move(params), hr::SGDOptions{.lr = lr,
                                          .momentum = c.option("momentum"),
                                          .dampening = c.option("dampening"),
                                          .weight_decay = c.option("weight_decay"),
                                          .nesterov = c.flag("nesterov"),
                                          .exclude_from_decay = c.flag("exclude_from_decay")});
  }
  throw std::runtime_error(fmt::format("case {}: unknown optimizer '{}'", c.name, c.optimizer));
}

// Compares the optimizer's state of parameter `name` after step s with PyTorch's.
void check_state(const TrajectoryCase& c, const TrajectoryStep& s, const std::string& name,
                 const hr::Optimizer<double>& opt) {
  const auto where = [&](const char* key) {
    return fmt::format("case {}, step {}, {} of '{}'", c.name, s.k, key, name);
  };
  const auto want = [&](const char* key) -> const FixtureTensor* {
    auto it = s.state.find({name, key});
    return it == s.state.end() ? nullptr : &it->second;
  };
  if (const auto* adam = dynamic_cast<const hr::AdamFamily<double>*>(&opt)) {
    const hr::AdamState<double>& st = adam->state(name);
    const FixtureTensor* t = want("step");
    REQUIRE_MESSAGE(t != nullptr, where("step") << ": missing from the fixture");
    CHECK_MESSAGE(static_cast<double>(st.step) == t->values.at(0),
                  where("step") << ": headroom " << st.step << " vs PyTorch " << t->values.at(0));
    for (const char* key : {"exp_avg", "exp_avg_sq"}) {
      const FixtureTensor* w = want(key);
      REQUIRE_MESSAGE(w != nullptr, where(key) << ": missing from the fixture");
      const auto& got = std::string(key) == "exp_avg" ? st.exp_avg : st.exp_avg_sq;
      const std::string m = mismatch(got, w->shape, w->values, kRtol, kAtol);
      CHECK_MESSAGE(m.empty(), where(key) << " " << m);
    }
  } else if (const auto* sgd = dynamic_cast<const hr::SGD<double>*>(&opt)) {
    const hr::SGDState<double>& st = sgd->state(name);
    const FixtureTensor* w = want("momentum_buffer");
    CHECK_MESSAGE(st.has_momentum_buffer == (w != nullptr),
                  where("momentum_buffer") << ": headroom has one: " << st.has_momentum_buffer
                                           << ", PyTorch has one: " << (w != nullptr));
    if (w != nullptr && st.has_momentum_buffer) {
      const std::string m = mismatch(st.momentum_buffer, w->shape, w->values, kRtol, kAtol);
      CHECK_MESSAGE(m.empty(), where("momentum_buffer") << " " << m);
    }
  }
}

// Runs one fixture case through headroom and compares after every step.
void run_trajectory(const std::string& case_name, const std::string& optimizer) {
  const TrajectoryCase& c = trajectory(case_name);
  INFO("fixture case " << c.name);
  REQUIRE(c.optimizer == optimizer);
  REQUIRE(c.steps.size() == 5);

  hr::NamedParameters<double> params;
  for (const auto& [name, t] : c.params) params.emplace_back(name, leaf(t.array()));
  auto opt = make_optimizer(c, params);
  CHECK(opt->name() == (optimizer == "adam" ? "Adam" : optimizer == "adamw" ? "AdamW" : "SGD"));

  for (const TrajectoryStep& s : c.steps) {
    opt->zero_grad();
    for (auto& [name, p] : params) {
      auto g = s.grads.find(name);
      if (g != s.grads.end()) set_grad(p, g->second.array());
    }
    opt->set_lr(s.lr);
    opt->step();
    CHECK(opt->step_count() == s.k);
    for (const auto& [name, p] : params) {
      const FixtureTensor& want = s.values.at(name);
      const std::string m = mismatch(p.value(), want.shape, want.values, kRtol, kAtol);
      CHECK_MESSAGE(m.empty(), "case " << c.name << ", step " << s.k << ", value of '" << name
                                       << "' " << m);
      check_state(c, s, name, *opt);
    }
  }
}

}  // namespace

// ---- Adam by hand -----------------------------------------------------------------

TEST_CASE("Adam: one step matches the hand computation") {
  // lr = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, t = 1, p = (1, -2, 0.5),
  // g = (0.5, -2, 0). Element by element:
  //   m     = 0.1 * g                 = (0.05, -0.2, 0)
  //   v     = 0.001 * g^2             = (2.5e-4, 4e-3, 0)
  //   m_hat = m / (1 - 0.9)           = (0.5, -2, 0)        = g at t = 1
  //   v_hat = v / (1 - 0.999)         = (0.25, 4, 0)        = g^2 at t = 1
  //   step  = lr * m_hat / (sqrt(v_hat) + eps)
  //         = (0.1 * 0.5 / (0.5 + 1e-8), 0.1 * -2 / (2 + 1e-8), 0 / 1e-8)
  //         = (0.099999998, -0.0999999995, 0)  (lr * sign(g), less a hair for eps)
  //   p     = p - step                = (0.900000002, -1.9000000005, 0.5)
  hr::NamedParameters<double> params = {{"w", leaf(xt::xarray<double>{1.0, -2.0, 0.5})}};
  set_grad(params[0].second, xt::xarray<double>{0.5, -2.0, 0.0});
  hr::Adam<double> adam(params, {.lr = 0.1});
  adam.step();

  const std::vector<double> m = {0.05, -0.2, 0}, v = {2.5e-4, 4e-3, 0};
  const std::vector<double> p = {1 - 0.1 * 0.5 / (0.5 + 1e-8), -2 - 0.1 * -2 / (2 + 1e-8), 0.5};
  const hr::Shape shape = {3};
  std::string bad = mismatch(adam.exp_avg("w"), shape, m, 1e-15, 0);
  CHECK_MESSAGE(bad.empty(), "exp_avg of 'w' " << bad);
  bad = mismatch(adam.exp_avg_sq("w"), shape, v, 1e-15, 0);
  CHECK_MESSAGE(bad.empty(), "exp_avg_sq of 'w' " << bad);
  bad = mismatch(params[0].second.value(), shape, p, 1e-15, 0);
  CHECK_MESSAGE(bad.empty(), "value of 'w' " << bad);
  CHECK(adam.state("w").step == 1);
  CHECK(adam.step_count() == 1);
  // The second element by its rounded value, as a check on the expression above.
  CHECK(params[0].second.value()(1) == doctest::Approx(-1.9000000005).epsilon(1e-15));
}

TEST_CASE("Adam in float: the same step to float precision") {
  hr::NamedParameters<float> params = {{"w", leaf(xt::xarray<float>{1.0f, -2.0f, 0.5f})}};
  set_grad(params[0].second, xt::xarray<float>{0.5f, -2.0f, 0.0f});
  hr::Adam<float> adam(params, {.lr = 0.1});
  adam.step();
  const std::string bad = mismatch(params[0].second.value(), {3}, {0.900000002, -1.9000000005, 0.5},
                                   1e-6, 0);
  CHECK_MESSAGE(bad.empty(), "value of 'w' " << bad);
}

// ---- PyTorch trajectories ---------------------------------------------------------

TEST_CASE("Adam: five steps match torch.optim.Adam (no decay, L2 decay, L2 with exclusion)") {
  run_trajectory("adam", "adam");
  run_trajectory("adam_l2", "adam");
  run_trajectory("adam_l2_exclude", "adam");
}

TEST_CASE("AdamW: five steps match torch.optim.AdamW (decoupled decay, with and without exclusion)") {
  run_trajectory("adamw", "adamw");
  run_trajectory("adamw_exclude", "adamw");
}

TEST_CASE("SGD: five steps match torch.optim.SGD (momentum, Nesterov, dampening, plain)") {
  run_trajectory("sgd_momentum", "sgd");
  run_trajectory("sgd_nesterov_l2_exclude", "sgd");
  run_trajectory("sgd_dampening_l2", "sgd");
  run_trajectory("sgd_plain", "sgd");
}

// ---- the shared machinery ---------------------------------------------------------

TEST_CASE("excluded_from_decay: fewer than 2 axes, or a name ending in emb.weight") {
  CHECK(hr::excluded_from_decay("w.bias", {3}));
  CHECK(hr::excluded_from_decay("blocks.0.ln1.weight", {64}));
  CHECK(hr::excluded_from_decay("tok_emb.weight", {100, 64}));
  CHECK(hr::excluded_from_decay("pos_emb.weight", {32, 64}));
  CHECK(hr::excluded_from_decay("scalar", {}));
  CHECK_FALSE(hr::excluded_from_decay("blocks.0.attn.q_proj.weight", {64, 64}));
  CHECK_FALSE(hr::excluded_from_decay("head.weight", {100, 64}));
  CHECK_FALSE(hr::excluded_from_decay("tok_emb.bias_table", {4, 4}));

  const hr::NamedParameters<double> params = {{"w.weight", leaf(xt::zeros<double>({2, 2}))},
                                              {"w.bias", leaf(xt::zeros<double>({2}))},
                                              {"tok_emb.weight", leaf(xt::zeros<double>({3, 2}))}};
  // AdamW excludes by default; Adam and SGD do not.
  const hr::AdamW<double> adamw(params, {.weight_decay = 0.1});
  CHECK(adamw.weight_decay_for("w.weight") == 0.1);
  CHECK(adamw.weight_decay_for("w.bias") == 0);
  CHECK(adamw.weight_decay_for("tok_emb.weight") == 0);
  const hr::Adam<double> adam(params, {.weight_decay = 0.1});
  CHECK(adam.weight_decay_for("w.bias") == 0.1);
  CHECK(adam.weight_decay_for("tok_emb.weight") == 0.1);
  const hr::SGD<double> sgd(params, {.weight_decay = 0.1, .exclude_from_decay = true});
  CHECK(sgd.weight_decay_for("w.weight") == 0.1);
  CHECK(sgd.weight_decay_for("w.bias") == 0);
}

TEST_CASE("decay_embeddings: AdamW decays every tensor of 2 or more axes, embeddings included (nanoGPT's rule)") {
  CHECK_FALSE(hr::excluded_from_decay("tok_emb.weight", {100, 64}, /*embeddings=*/false));
  CHECK_FALSE(hr::excluded_from_decay("pos_emb.weight", {32, 64}, false));
  CHECK(hr::excluded_from_decay("w.bias", {3}, false));
  CHECK(hr::excluded_from_decay("blocks.0.ln1.weight", {64}, false));

  hr::NamedParameters<double> params = {{"w.weight", leaf(xt::xarray<double>{{1.0, 2.0}, {3.0, 4.0}})},
                                        {"w.bias", leaf(xt::xarray<double>{1.0, 2.0})},
                                        {"tok_emb.weight", leaf(xt::xarray<double>{{1.0, -2.0}, {3.0, 0.5}})}};
  hr::AdamW<double> adamw(params, {.lr = 0.5, .weight_decay = 0.1, .decay_embeddings = true});
  CHECK(adamw.weight_decay_for("w.weight") == 0.1);
  CHECK(adamw.weight_decay_for("w.bias") == 0);
  CHECK(adamw.weight_decay_for("tok_emb.weight") == 0.1);
  // Without the exclusion the switch changes nothing: every parameter is decayed.
  const hr::AdamW<double> all(params, {.weight_decay = 0.1, .exclude_from_decay = false, .decay_embeddings = true});
  CHECK(all.weight_decay_for("w.bias") == 0.1);
  // A zero gradient leaves only the decay: the embedding shrinks by 1 - lr wd, the bias not at all.
  for (auto& [name, p] : params) set_grad(p, xt::xarray<double>(xt::zeros<double>(p.shape())));
  adamw.step();
  const xt::xarray<double> emb = params[2].second.value();
  CHECK(emb(0, 1) == doctest::Approx(-2.0 * (1 - 0.5 * 0.1)).epsilon(1e-15));
  CHECK(params[1].second.value()(1) == 2.0);
}

TEST_CASE("Optimizer: zero_grad, set_lr, step_count, and parameters without a gradient") {
  hr::NamedParameters<double> params = {{"a", leaf(xt::xarray<double>{1.0, 2.0})},
                                        {"b", leaf(xt::xarray<double>{3.0})}};
  hr::SGD<double> sgd(params, {.lr = 0.5});
  CHECK(sgd.lr() == 0.5);
  sgd.set_lr(0.25);
  CHECK(sgd.lr() == 0.25);

  set_grad(params[0].second, xt::xarray<double>{4.0, -8.0});
  sgd.step();  // a -= 0.25 * g; b has no gradient and stays
  CHECK(params[0].second.value()(0) == 0.0);
  CHECK(params[0].second.value()(1) == 4.0);
  CHECK(params[1].second.value()(0) == 3.0);
  CHECK(sgd.step_count() == 1);

  sgd.zero_grad();
  CHECK_FALSE(params[0].second.has_grad());
  sgd.step();  // nothing has a gradient: no change, but the call counts
  CHECK(params[0].second.value()(1) == 4.0);
  CHECK(sgd.step_count() == 2);
  sgd.set_step_count(7);
  CHECK(sgd.step_count() == 7);
}

TEST_CASE("Adam: state restored by set_state continues exactly (resume)") {
  auto make = [] {
    return hr::NamedParameters<double>{{"w", leaf(xt::xarray<double>{{0.5, -1.0}, {2.0, 0.25}})}};
  };
  const xt::xarray<double> g1 = {{0.1, -0.3}, {2.0, 1e-5}}, g2 = {{-0.2, 0.3}, {0.5, 0.0}};
  hr::NamedParameters<double> a = make();
  hr::AdamW<double> original(a, {.lr = 0.01, .weight_decay = 0.1});
  set_grad(a[0].second, g1);
  original.step();

  // A second optimizer on a copy of the parameters, given the first one's state.
  hr::NamedParameters<double> b = {{"w", leaf(xt::xarray<double>(a[0].second.value()))}};
  hr::AdamW<double> resumed(b, {.lr = 0.01, .weight_decay = 0.1});
  resumed.set_state("w", original.state("w"));
  resumed.set_step_count(original.step_count());

  set_grad(a[0].second, g2);
  set_grad(b[0].second, g2);
  original.step();
  resumed.step();
  const auto& want = a[0].second.value();
  const std::string bad = mismatch(b[0].second.value(), want.shape(),
                                   std::vector<double>(want.begin(), want.end()), 0, 0);
  CHECK_MESSAGE(bad.empty(), "value of 'w' after resume " << bad);
  CHECK(resumed.state("w").step == 2);
  CHECK(resumed.step_count() == 2);
}

// ---- clipping ---------------------------------------------------------------------

TEST_CASE("clip_grad_norm: total norm, scaling, and parameters without a gradient") {
  // Gradients (3, 4) and ((12, 0)): total norm sqrt(9 + 16 + 144) = 13.
  hr::NamedParameters<double> params = {{"a", leaf(xt::zeros<double>({2}))},
                                        {"b", leaf(xt::zeros<double>({1, 2}))},
                                        {"c", leaf(xt::zeros<double>({3}))}};  // no gradient
  set_grad(params[0].second, xt::xarray<double>{3.0, 4.0});
  set_grad(params[1].second, xt::xarray<double>{{12.0, 0.0}});
  CHECK(hr::grad_norm(params) == 13.0);

  // max_norm above the norm: untouched (scale 20 / (13 + 1e-6) >= 1).
  CHECK(hr::clip_grad_norm(params, 20.0) == 13.0);
  CHECK(params[0].second.grad()(1) == 4.0);

  // max_norm 6.5: every gradient times 6.5 / (13 + 1e-6) = 0.49999996..., the norm
  // returned is the one before clipping.
  const double scale = 6.5 / (13.0 + 1e-6);
  CHECK(hr::clip_grad_norm(params, 6.5) == 13.0);
  CHECK(params[0].second.grad()(0) == doctest::Approx(3.0 * scale).epsilon(1e-15));
  CHECK(params[0].second.grad()(1) == doctest::Approx(4.0 * scale).epsilon(1e-15));
  CHECK(params[1].second.grad()(0, 0) == doctest::Approx(12.0 * scale).epsilon(1e-15));
  CHECK(hr::grad_norm(params) == doctest::Approx(13.0 * scale).epsilon(1e-15));
  CHECK_FALSE(params[2].second.has_grad());

  // No gradient anywhere: norm 0, as PyTorch.
  for (auto& [name, p] : params) p.zero_grad();
  CHECK(hr::clip_grad_norm(params, 1.0) == 0.0);
}

// grad_norm sums in blocks and lanes (optim/clip.cpp): over several blocks with
// ragged ends it matches a long double sum to double's rounding, is the same on
// one and on two threads, and clipping scales every element of every block.
TEST_CASE("grad_norm: blocked sum of many elements, the same on 1 and 2 threads") {
  hr::NamedParameters<float> params = {{"big", leaf(xt::zeros<float>({40001}))},
                                       {"odd", leaf(xt::zeros<float>({3, 7}))}};
  xt::xarray<float> g0 = xt::zeros<float>({40001});
  xt::xarray<float> g1 = xt::zeros<float>({3, 7});
  long double want = 0;
  for (std::size_t i = 0; i < g0.size(); ++i) {
    g0.data()[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * (1 + i % 5));
    want += static_cast<long double>(g0.data()[i]) * g0.data()[i];
  }
  for (std::size_t i = 0; i < g1.size(); ++i) {
    g1.data()[i] = 0.25f * static_cast<float>(i) - 2;
    want += static_cast<long double>(g1.data()[i]) * g1.data()[i];
  }
  set_grad(params[0].second, g0);
  set_grad(params[1].second, g1);
  const double norm1 = hr::grad_norm(params);
  CHECK(norm1 == doctest::Approx(static_cast<double>(std::sqrt(want))).epsilon(1e-13));
  hr::set_threads(2);
  const double norm2 = hr::grad_norm(params);
  const double clipped = hr::clip_grad_norm(params, 1.0);
  hr::set_threads(1);
  CHECK(norm2 == norm1);
  CHECK(clipped == norm1);
  const float s = static_cast<float>(1.0 / (norm1 + 1e-6));
  bool scaled = true;
  for (std::size_t i = 0; i < g0.size(); ++i) scaled = scaled && params[0].second.grad().data()[i] == g0.data()[i] * s;
  for (std::size_t i = 0; i < g1.size(); ++i) scaled = scaled && params[1].second.grad().data()[i] == g1.data()[i] * s;
  CHECK(scaled);
}

TEST_CASE("clip_grad_norm: a non-finite norm is returned and no gradient is touched") {
  hr::NamedParameters<float> params = {{"a", leaf(xt::zeros<float>({2}))},
                                       {"b", leaf(xt::zeros<float>({2}))}};
  set_grad(params[0].second, xt::xarray<float>{3.0f, 4.0f});
  CHECK(hr::grad_norm(params) == 5.0);  // float gradients, double accumulation

  set_grad(params[1].second, xt::xarray<float>{1.0f, std::numeric_limits<float>::infinity()});
  const double inf_norm = hr::clip_grad_norm(params, 1.0);
  CHECK(std::isinf(inf_norm));
  CHECK(params[0].second.grad()(0) == 3.0f);
  CHECK(params[0].second.grad()(1) == 4.0f);
  CHECK(params[1].second.grad()(0) == 1.0f);

  set_grad(params[1].second, xt::xarray<float>{std::numeric_limits<float>::quiet_NaN(), 1.0f});
  CHECK(std::isnan(hr::clip_grad_norm(params, 1.0)));
  CHECK(params[0].second.grad()(1) == 4.0f);
  CHECK(params[1].second.grad()(1) == 1.0f);
}

// ---- schedules --------------------------------------------------------------------

TEST_CASE("LrSchedule: constant") {
  const hr::LrSchedule s = hr::LrSchedule::from_name("constant", {.lr = 3e-4});
  CHECK(s.kind() == hr::LrScheduleKind::constant);
  CHECK(s.name() == "constant");
  CHECK(s.lr_at(1) == 3e-4);
  CHECK(s.lr_at(1000000) == 3e-4);
  CHECK(hr::LrSchedule().lr_at(5) == 3e-4);  // the default
}

TEST_CASE("LrSchedule: cosine with warm-up") {
  // peak 1e-3, warmup 10, total 110, min 1e-4.
  const hr::LrSchedule s = hr::LrSchedule::from_name(
      "cosine", {.lr = 1e-3, .warmup = 10, .total_steps = 110, .min_lr = 1e-4});
  CHECK(s.kind() == hr::LrScheduleKind::warmup_cosine);
  CHECK(s.name() == "cosine");
  // Warm-up: lr * t / warmup.
  CHECK(s.lr_at(1) == doctest::Approx(1e-4).epsilon(1e-14));   // 1e-3 * 1/10
  CHECK(s.lr_at(5) == doctest::Approx(5e-4).epsilon(1e-14));   // 1e-3 * 5/10
  CHECK(s.lr_at(10) == doctest::Approx(1e-3).epsilon(1e-14));  // the peak
  // Decay: min + (peak - min) (1 + cos(pi s)) / 2, s = (t - 10) / 100.
  //   t = 35: s = 1/4, cos = sqrt(2)/2: 1e-4 + 9e-4 * (1 + 0.70710678) / 2 = 8.6819805e-4
  //   t = 60: s = 1/2, cos = 0:         1e-4 + 9e-4 / 2                     = 5.5e-4
  //   t = 85: s = 3/4, cos = -sqrt(2)/2: 1e-4 + 9e-4 * (1 - 0.70710678) / 2 = 2.3180195e-4
  CHECK(s.lr_at(35) == doctest::Approx(1e-4 + 9e-4 * (1 + std::numbers::sqrt2 / 2) / 2).epsilon(1e-14));
  CHECK(s.lr_at(35) == doctest::Approx(8.6819805e-4).epsilon(1e-8));
  CHECK(s.lr_at(60) == doctest::Approx(5.5e-4).epsilon(1e-14));
  CHECK(s.lr_at(85) == doctest::Approx(2.3180195e-4).epsilon(1e-8));
  CHECK(s.lr_at(110) == doctest::Approx(1e-4).epsilon(1e-14));  // reaches min at total
  CHECK(s.lr_at(111) == 1e-4);                                   // and holds it
  CHECK(s.lr_at(5000) == 1e-4);
  // Rising through warm-up, never rising after.
  for (std::size_t t = 1; t < 10; ++t) {
    CHECK_MESSAGE(s.lr_at(t) < s.lr_at(t + 1), "t = " << t << ": " << s.lr_at(t) << " then "
                                                      << s.lr_at(t + 1));
  }
  for (std::size_t t = 10; t < 130; ++t) {
    CHECK_MESSAGE(s.lr_at(t) >= s.lr_at(t + 1), "t = " << t << ": " << s.lr_at(t) << " then "
                                                       << s.lr_at(t + 1));
  }

  // No warm-up: the first update is already on the cosine, s = 1/100, min_lr 0.
  const hr::LrSchedule cold = hr::LrSchedule::warmup_cosine({.lr = 1e-3, .total_steps = 100});
  CHECK(cold.lr_at(1) ==
        doctest::Approx(1e-3 * (1 + std::cos(std::numbers::pi / 100)) / 2).epsilon(1e-14));
  CHECK(cold.lr_at(100) == 0.0);
  // Warm-up over the whole run: the last step is the peak.
  const hr::LrSchedule all_warm =
      hr::LrSchedule::warmup_cosine({.lr = 1e-3, .warmup = 4, .total_steps = 4});
  CHECK(all_warm.lr_at(4) == 1e-3);
  CHECK(all_warm.lr_at(5) == 0.0);
}

TEST_CASE("LrSchedule: inverse_sqrt (Attention Is All You Need, eq. 3)") {
  // The paper's d_model 512, warmup 4000: lr = 512^-0.5 * min(t^-0.5, t * 4000^-1.5),
  // which is our peak form with lr = (512 * 4000)^-0.5 = 6.98771242968684e-4.
  const double peak = 1 / std::sqrt(512.0 * 4000.0);
  const hr::LrSchedule s = hr::LrSchedule::from_name("inverse_sqrt", {.lr = peak, .warmup = 4000});
  CHECK(s.kind() == hr::LrScheduleKind::inverse_sqrt);
  CHECK(s.name() == "inverse_sqrt");
  // t = warmup is the peak, lr itself.
  CHECK(s.lr_at(4000) == doctest::Approx(peak).epsilon(1e-15));
  CHECK(s.lr_at(4000) == doctest::Approx(6.98771242968684e-4).epsilon(1e-12));
  // t = 1: 512^-0.5 * 4000^-1.5 = 1 / (22.627417 * 252982.21) = 1.7469281e-7
  CHECK(s.lr_at(1) == doctest::Approx(1 / (std::sqrt(512.0) * std::pow(4000.0, 1.5))).epsilon(1e-14));
  CHECK(s.lr_at(1) == doctest::Approx(1.7469281e-7).epsilon(1e-7));
  // After warm-up, lr * sqrt(warmup / t): half the peak at t = 4 * warmup.
  for (const std::size_t t : {4001, 5000, 16000, 123457}) {
    CAPTURE(t);
    CHECK(s.lr_at(t) == doctest::Approx(peak * std::sqrt(4000.0 / static_cast<double>(t))).epsilon(1e-14));
  }
  CHECK(s.lr_at(16000) == doctest::Approx(peak / 2).epsilon(1e-14));
  // The peak is whatever lr says: --lr 3e-3 --warmup 100.
  const hr::LrSchedule cli = hr::LrSchedule::inverse_sqrt({.lr = 3e-3, .warmup = 100});
  CHECK(cli.lr_at(100) == doctest::Approx(3e-3).epsilon(1e-15));
  CHECK(cli.lr_at(50) == doctest::Approx(1.5e-3).epsilon(1e-15));
  CHECK(cli.lr_at(400) == doctest::Approx(1.5e-3).epsilon(1e-15));
  // Linear rise to the peak, decay after it.
  for (std::size_t t = 1; t + 37 <= 4000; t += 37) {
    CHECK_MESSAGE(s.lr_at(t) < s.lr_at(t + 37), "t = " << t);
  }
  for (std::size_t t = 4000; t < 40000; t += 997) {
    CHECK_MESSAGE(s.lr_at(t) > s.lr_at(t + 997), "t = " << t);
  }
}

// ---- error messages ---------------------------------------------------------------

TEST_CASE("optimizer options are validated with the value in the message") {
  const hr::NamedParameters<double> params = {{"w", leaf(xt::zeros<double>({2, 2}))}};
  using std::invalid_argument;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();

  CHECK_THROWS_WITH_AS(hr::Adam<double>(params, {.lr = -1}),
                       "Adam: lr must be finite and >= 0, got -1", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::Adam<double>(params, {.beta1 = 1}),
                       "Adam: beta1 must be in [0, 1), got 1", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::Adam<double>(params, {.beta2 = 1.5}),
                       "Adam: beta2 must be in [0, 1), got 1.5", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::Adam<double>(params, {.eps = 0}),
                       "Adam: eps must be finite and > 0, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::Adam<double>(params, {.weight_decay = -0.1}),
                       "Adam: weight_decay must be finite and >= 0, got -0.1", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::AdamW<double>(params, {.lr = inf}),
                       "AdamW: lr must be finite and >= 0, got inf", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::AdamW<double>(params, {.beta1 = -0.5}),
                       "AdamW: beta1 must be in [0, 1), got -0.5", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::AdamW<double>(params, {.beta2 = nan}),
                       "AdamW: beta2 must be in [0, 1), got nan", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::AdamW<double>(params, {.eps = inf}),
                       "AdamW: eps must be finite and > 0, got inf", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::AdamW<double>(params, {.weight_decay = nan}),
                       "AdamW: weight_decay must be finite and >= 0, got nan", invalid_argument);

  CHECK_THROWS_WITH_AS(hr::SGD<double>(params, {.lr = -0.01}),
                       "SGD: lr must be finite and >= 0, got -0.01", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::SGD<double>(params, {.momentum = 1}),
                       "SGD: momentum must be in [0, 1), got 1", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::SGD<double>(params, {.momentum = 0.9, .dampening = 1.5}),
                       "SGD: dampening must be in [0, 1], got 1.5", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::SGD<double>(params, {.weight_decay = -1}),
                       "SGD: weight_decay must be finite and >= 0, got -1", invalid_argument);
  CHECK_THROWS_WITH_AS(
      hr::SGD<double>(params, {.nesterov = true}),
      "SGD: nesterov needs momentum > 0 and dampening = 0, got momentum 0 and dampening 0",
      invalid_argument);
  CHECK_THROWS_WITH_AS(
      hr::SGD<double>(params, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
      "SGD: nesterov needs momentum > 0 and dampening = 0, got momentum 0.9 and dampening 0.1",
      invalid_argument);

  hr::Adam<double> adam(params);
  CHECK_THROWS_WITH_AS(adam.set_lr(-1e-3), "Adam: lr must be finite and >= 0, got -0.001",
                       invalid_argument);
  CHECK(adam.lr() == 3e-4);  // unchanged by the failed call
}

TEST_CASE("optimizer parameters and state are validated, naming the parameter") {
  using std::invalid_argument;
  CHECK_THROWS_WITH_AS(hr::Adam<double>(hr::NamedParameters<double>{}),
                       "Adam: got an empty parameter list", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::Adam<double>(hr::NamedParameters<double>{{"w", D()}}),
                       "Adam: parameter 'w' is an undefined tensor", invalid_argument);
  const D x = leaf(xt::xarray<double>{1.0, 2.0});
  CHECK_THROWS_WITH_AS(
      hr::SGD<double>(hr::NamedParameters<double>{{"y", x * 2.0}}),
      "SGD: parameter 'y' is the output of 'mul_scalar', not a leaf; optimizers update leaves only",
      invalid_argument);
  CHECK_THROWS_WITH_AS(hr::AdamW<double>(hr::NamedParameters<double>{{"w", x}, {"w", x}}),
                       "AdamW: parameter name 'w' appears twice", invalid_argument);

  hr::NamedParameters<double> params = {{"w", leaf(xt::zeros<double>({2, 2}))}};
  hr::Adam<double> adam(params);
  CHECK_THROWS_WITH_AS(adam.exp_avg("nope"), "Adam: no parameter named 'nope'", invalid_argument);
  CHECK_THROWS_WITH_AS(adam.weight_decay_for("nope"), "Adam: no parameter named 'nope'",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(
      adam.set_state("w", {.step = 1, .exp_avg = xt::zeros<double>({3}), .exp_avg_sq = xt::zeros<double>({2, 2})}),
      "Adam: exp_avg for parameter 'w' has shape (3), want (2, 2)", invalid_argument);
  CHECK_THROWS_WITH_AS(
      adam.set_state("w", {.step = 1, .exp_avg = xt::zeros<double>({2, 2}), .exp_avg_sq = xt::zeros<double>({4})}),
      "Adam: exp_avg_sq for parameter 'w' has shape (4), want (2, 2)", invalid_argument);
  hr::SGD<double> sgd(params, {.momentum = 0.9});
  CHECK_THROWS_WITH_AS(sgd.set_state("w", {.has_momentum_buffer = true,
                                           .momentum_buffer = xt::zeros<double>({2, 3})}),
                       "SGD: momentum_buffer for parameter 'w' has shape (2, 3), want (2, 2)",
                       invalid_argument);

  // A parameter resized after construction no longer fits its state.
  params[0].second.mutable_value() = xt::zeros<double>({3});
  set_grad(params[0].second, xt::xarray<double>{1.0, 2.0, 3.0});
  CHECK_THROWS_WITH_AS(
      adam.step(),
      "Adam: parameter 'w' has shape (3) and gradient shape (3), but its state was made for (2, 2)",
      invalid_argument);
}

TEST_CASE("clipping and schedules are validated with the value in the message") {
  using std::invalid_argument;
  const hr::NamedParameters<double> params = {{"w", leaf(xt::zeros<double>({2}))}};
  CHECK_THROWS_WITH_AS(hr::clip_grad_norm(params, 0.0), "clip_grad_norm: max_norm must be > 0, got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(hr::clip_grad_norm(params, -1.0),
                       "clip_grad_norm: max_norm must be > 0, got -1", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::grad_norm(hr::NamedParameters<double>{{"w", D()}}),
                       "grad_norm: parameter 'w' is an undefined tensor", invalid_argument);

  CHECK_THROWS_WITH_AS(hr::LrSchedule::from_name("linear", {}),
                       "unknown lr schedule 'linear'; valid names are constant, cosine, inverse_sqrt",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(hr::LrSchedule::constant({.lr = -1}),
                       "constant schedule: lr must be finite and >= 0, got -1", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::LrSchedule::warmup_cosine({.lr = -1, .total_steps = 10}),
                       "cosine schedule: lr must be finite and >= 0, got -1", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::LrSchedule::warmup_cosine({.lr = 1e-3}),
                       "cosine schedule: total_steps must be > 0, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::LrSchedule::from_name("cosine", {.warmup = 200, .total_steps = 100}),
                       "cosine schedule: warmup=200 must be <= total_steps=100", invalid_argument);
  CHECK_THROWS_WITH_AS(
      hr::LrSchedule::warmup_cosine({.lr = 1e-3, .total_steps = 100, .min_lr = 0.01}),
      "cosine schedule: min_lr must be in [0, lr=0.001], got 0.01", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::LrSchedule::inverse_sqrt({.warmup = 0}),
                       "inverse_sqrt schedule: warmup must be > 0, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(hr::LrSchedule::inverse_sqrt({.lr = 0, .warmup = 10}),
                       "inverse_sqrt schedule: lr must be finite and > 0, got 0", invalid_argument);
  for (const auto kind : {hr::LrScheduleKind::constant, hr::LrScheduleKind::warmup_cosine,
                          hr::LrScheduleKind::inverse_sqrt}) {
    CHECK(hr::parse_lr_schedule(hr::to_string(kind)) == kind);
    CHECK(hr::LrSchedule::of_kind(kind, {.lr = 1e-3, .warmup = 1, .total_steps = 10}).name() == hr::to_string(kind));
  }
  CHECK(hr::to_string(hr::LrScheduleKind::warmup_cosine) == "cosine");
  CHECK_THROWS_WITH_AS(hr::parse_lr_schedule("linear"),
                       "unknown lr schedule 'linear'; valid names are constant, cosine, inverse_sqrt",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(hr::LrSchedule().lr_at(0),
                       "LrSchedule::lr_at: steps count from 1 (the first update), got 0",
                       invalid_argument);
}
