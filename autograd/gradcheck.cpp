#include "autograd/gradcheck.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <xtensor/xbuilder.hpp>

#include "autograd/ops.hpp"
#include "autograd/random.hpp"

namespace headroom {
namespace {

using Outputs = std::vector<Tensor<double>>;

// L = sum_k sum(W_k * out_k), in plain double arithmetic (no tape).
double weighted_sum(const Outputs& outs, const std::vector<xt::xarray<double>>& weights) {
  double total = 0;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const double* v = outs[k].value().data();
    const double* w = weights[k].data();
    for (std::size_t i = 0; i < outs[k].size(); ++i) total += v[i] * w[i];
  }
  return total;
}

xt::xarray<double> normal_array(const Shape& shape, Rng& rng) {
  xt::xarray<double> a = xt::empty<double>(shape);
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = rng.normal();
  return a;
}

// Tracks the worst comparison of one input.
struct Comparison {
  const GradcheckOptions& opt;
  InputReport& rep;
  double worst_ratio = -1;

  void add(double analytic, double numeric, const std::string& where) {
    const double abs_err = std::abs(analytic - numeric);
    // Relative to the numeric value, floored at atol: structurally zero gradients
    // (a key bias under softmax, say) would otherwise divide rounding noise by ~0.
    const double rel_err = abs_err / std::max(std::abs(numeric), opt.atol);
    const double tolerance = opt.atol + opt.rtol * std::abs(numeric);
    rep.max_abs_error = std::max(rep.max_abs_error, abs_err);
    rep.max_rel_error = std::max(rep.max_rel_error, rel_err);
    ++rep.checked;
    // NaN compares false everywhere, so test for it explicitly.
    const bool ok = abs_err <= tolerance && std::isfinite(analytic) && std::isfinite(numeric);
    const double ratio = ok ? abs_err / tolerance : std::numeric_limits<double>::infinity();
    if (!ok) rep.passed = false;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      rep.worst_where = where;
      rep.worst_analytic = analytic;
      rep.worst_numeric = numeric;
    }
  }
};

}  // namespace

bool GradcheckReport::passed() const {
  return std::all_of(inputs.begin(), inputs.end(), [](const InputReport& r) { return r.passed; });
}

std::string GradcheckReport::str() const {
  std::string out = passed() ? "gradcheck passed\n" : "gradcheck FAILED\n";
  for (const auto& r : inputs) {
    out += fmt::format(
        "  {} {}: {} {} checked, max abs err {:.3e}, max rel err {:.3e}; worst at {}: analytic "
        "{:.12g} vs numeric {:.12g}{}\n",
        r.name, format_shape(r.shape), r.checked, r.checked == 1 ? "value" : "values",
        r.max_abs_error, r.max_rel_error, r.worst_where.empty() ? "-" : r.worst_where,
        r.worst_analytic, r.worst_numeric, r.passed ? "" : "  <-- FAIL");
  }
  return out;
}

GradcheckReport gradcheck(const std::function<Outputs()>& f, const std::vector<NamedTensor>& inputs,
                          const GradcheckOptions& options) {
  if (!(options.eps > 0)) {
    throw std::invalid_argument(fmt::format("gradcheck: eps must be positive, got {}", options.eps));
  }
  for (const auto& [name, t] : inputs) {
    if (!t.defined() || !t.is_leaf() || !t.requires_grad()) {
      throw std::invalid_argument(fmt::format(
          "gradcheck: input '{}' must be a defined leaf tensor with requires_grad", name));
    }
  }
  Rng rng(options.seed);
  for (auto [name, t] : inputs) t.zero_grad();

  // Analytic: one backward pass of L = sum_k sum(W_k * out_k).
  std::vector<xt::xarray<double>> weights;
  {
    Outputs outs = f();
    Tensor<double> loss;
    for (const auto& out : outs) {
      weights.push_back(normal_array(out.shape(), rng));
      Tensor<double> term = sum(mul(out, Tensor<double>(weights.back())));
      loss = loss.defined() ? add(loss, term) : term;
    }
    if (loss.defined() && loss.requires_grad()) {
      loss.backward();
    } else {
      clear_tape<double>();  // nothing reaches the inputs: every analytic gradient is 0
    }
  }
  auto numeric_loss = [&] {
    NoGrad no_grad;
    return weighted_sum(f(), weights);
  };

  GradcheckReport report;
  for (auto [name, t] : inputs) {
    InputReport rep;
    rep.name = name;
    rep.shape = t.shape();
    const xt::xarray<double> analytic =
        t.has_grad() ? t.grad() : xt::xarray<double>(xt::zeros<double>(t.shape()));
    Comparison cmp{options, rep};
    double* x = t.mutable_value().data();
    const std::size_t n = t.size();

    std::vector<std::size_t> picks(n);
    for (std::size_t i = 0; i < n; ++i) picks[i] = i;
    if (options.max_elements > 0 && n > options.max_elements) {
      for (std::size_t i = 0; i < options.max_elements; ++i) {  // partial Fisher-Yates
        std::swap(picks[i], picks[i + rng.below(n - i)]);
      }
      picks.resize(options.max_elements);
      std::sort(picks.begin(), picks.end());
    }
    for (std::size_t i : picks) {
      const double saved = x[i];
      x[i] = saved + options.eps;
      const double plus = numeric_loss();
      x[i] = saved - options.eps;
      const double minus = numeric_loss();
      x[i] = saved;
      cmp.add(analytic.data()[i], (plus - minus) / (2 * options.eps),
              format_shape(unravel_index(i, rep.shape)));
    }
    for (std::size_t d = 0; d < options.directions; ++d) {
      const xt::xarray<double> u = normal_array(rep.shape, rng);
      const xt::xarray<double> saved = t.value();
      double along = 0;
      for (std::size_t i = 0; i < n; ++i) along += analytic.data()[i] * u.data()[i];
      for (std::size_t i = 0; i < n; ++i) x[i] = saved.data()[i] + options.eps * u.data()[i];
      const double plus = numeric_loss();
      for (std::size_t i = 0; i < n; ++i) x[i] = saved.data()[i] - options.eps * u.data()[i];
      const double minus = numeric_loss();
      std::copy_n(saved.data(), n, x);
      cmp.add(along, (plus - minus) / (2 * options.eps), fmt::format("direction {}", d));
    }
    report.inputs.push_back(std::move(rep));
  }
  return report;
}

GradcheckReport gradcheck(const std::function<Tensor<double>(const std::vector<Tensor<double>>&)>& f,
                          const std::vector<Tensor<double>>& inputs, const GradcheckOptions& options) {
  std::vector<NamedTensor> named;
  for (std::size_t i = 0; i < inputs.size(); ++i) named.emplace_back(fmt::format("x{}", i), inputs[i]);
  return gradcheck([&] { return Outputs{f(inputs)}; }, named, options);
}

}  // namespace headroom
