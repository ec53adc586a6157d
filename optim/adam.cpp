// The Adam update (formulas and sources in adam.hpp): one plain loop per parameter
// over contiguous memory, in PyTorch's order of operations.
#include "optim/adam.hpp"

#include <cmath>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>
#include <xtensor/xbuilder.hpp>

#include "autograd/fast_math.hpp"
#include "autograd/parallel.hpp"
#include "optim/validate.hpp"

namespace headroom {

template <typename T>
AdamFamily<T>::AdamFamily(const char* name, NamedParameters<T> params, const AdamOptions& options,
                          bool decoupled_decay)
    : Optimizer<T>(name, std::move(params), options.lr, options.weight_decay,
                   options.exclude_from_decay, options.decay_embeddings),
      beta1_(options.beta1),
      beta2_(options.beta2),
      eps_(options.eps),
      decoupled_decay_(decoupled_decay) {
  detail::require_unit_interval_open(name, "beta1", beta1_);
  detail::require_unit_interval_open(name, "beta2", beta2_);
  // eps = 0 would turn a parameter whose gradients so far were all exactly 0 into
  // 0 / 0 = NaN, so unlike PyTorch we ask for eps > 0.
  detail::require_finite_positive(name, "eps", eps_);
  // PyTorch creates the moments as zeros at a parameter's first update; creating
  // them now gives the same values and lets exp_avg(name) answer before any step.
  states_.reserve(this->params_.size());
  for (const auto& [pname, p] : this->params_) {
    states_.push_back({.step = 0,
                       .exp_avg = xt::zeros<T>(p.shape()),
                       .exp_avg_sq = xt::zeros<T>(p.shape())});
  }
}

template <typename T>
void AdamFamily<T>::set_state(const std::string& name, AdamState<T> state) {
  const std::size_t i = this->index_of(name);
  this->require_state_shape(i, "exp_avg", state.exp_avg.shape());
  this->require_state_shape(i, "exp_avg_sq", state.exp_avg_sq.shape());
  states_[i] = std::move(state);
}

namespace {

// The update of n elements, in one pass over contiguous memory.
template <typename T>
struct AdamTerms {
  T l2, keep, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bias_correction2_sqrt, eps;
};

template <typename T>
[[gnu::always_inline]] inline void adam_update(const AdamTerms<T>& a, T* p, const T* g, T* m, T* v, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) {
    const T gj = g[j] + a.l2 * p[j];
    const T pj = p[j] * a.keep;
    m[j] = m[j] * a.beta1 + a.one_minus_beta1 * gj;
    v[j] = v[j] * a.beta2 + a.one_minus_beta2 * gj * gj;
    const T denom = std::sqrt(v[j]) / a.bias_correction2_sqrt + a.eps;
    p[j] = pj + (-a.step_size) * (m[j] / denom);
  }
}

// float: built for AVX-512, AVX2 and the baseline (fast_math.hpp); -fno-math-errno
// (optim/CMakeLists.txt) lets the square root vectorise.
HEADROOM_CLONES void adam_update_f32(const AdamTerms<float>& a, float* p, const float* g, float* m, float* v,
                                     std::size_t n) {
  adam_update(a, p, g, m, v, n);
}

}  // namespace

template <typename T>
void AdamFamily<T>::step() {
  const double lr = this->lr_;
  for (std::size_t i = 0; i < this->params_.size(); ++i) {
    AdamState<T>& s = states_[i];
    const xt::xarray<T>* grad = this->gradient_for_step(i, s.exp_avg.shape());
    if (grad == nullptr) continue;  // no gradient: no update, no decay, t unchanged

    s.step += 1;
    const double t = static_cast<double>(s.step);
    const double wd = this->decay_[i];
    const double bias_correction1 = 1 - std::pow(beta1_, t);
    const double bias_correction2 = 1 - std::pow(beta2_, t);
    // Exactly one of the two decay terms is active (both are no-ops at wd = 0).
    const AdamTerms<T> terms{
        .l2 = static_cast<T>(decoupled_decay_ ? 0.0 : wd),
        .keep = static_cast<T>(decoupled_decay_ ? 1 - lr * wd : 1.0),
        .beta1 = static_cast<T>(beta1_),
        .one_minus_beta1 = static_cast<T>(1 - beta1_),
        .beta2 = static_cast<T>(beta2_),
        .one_minus_beta2 = static_cast<T>(1 - beta2_),
        .step_size = static_cast<T>(lr / bias_correction1),
        .bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2)),
        .eps = static_cast<T>(eps_),
    };
    T* p = this->params_[i].second.mutable_value().data();
    const T* g = grad->data();
    T* m = s.exp_avg.data();
    T* v = s.exp_avg_sq.data();
    // Elementwise: parallel over the parameter's elements (parallel.hpp).
    parallel_for(s.exp_avg.size(), kMinChunkElements, [&](std::size_t begin, std::size_t end) {
      fast::clone_if_float<T>(adam_update_f32, [](auto... a) { adam_update(a...); }, terms, p + begin, g + begin,
                              m + begin, v + begin, end - begin);
    });
  }
  ++this->step_count_;
}

template <typename T>
Adam<T>::Adam(NamedParameters<T> params, const AdamOptions& options)
    : AdamFamily<T>("Adam", std::move(params), options, /*decoupled_decay=*/false),
      options_(options) {}

template <typename T>
AdamW<T>::AdamW(NamedParameters<T> params, const AdamWOptions& options)
    : AdamFamily<T>("AdamW", std::move(params),
                    {.lr = options.lr,
                     .beta1 = options.beta1,
                     .beta2 = options.beta2,
                     .eps = options.eps,
                     .weight_decay = options.weight_decay,
                     .exclude_from_decay = options.exclude_from_decay,
                     .decay_embeddings = options.decay_embeddings},
                    /*decoupled_decay=*/true),
      options_(options) {}

template class AdamFamily<float>;
template class AdamFamily<double>;
template class Adam<float>;
template class Adam<double>;
template class AdamW<float>;
template class AdamW<double>;

}  // namespace headroom
