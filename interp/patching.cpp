#include "interp/patching.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/ops.hpp"
#include "autograd/shape.hpp"

namespace headroom {
namespace {

std::string describe(const PatchSite& s) {
  std::string out = fmt::format("{} of layer {}", to_string(s.point), s.layer);
  if (s.head) out += fmt::format(", head {}", *s.head);
  if (s.position) out += fmt::format(", position {}", *s.position);
  return out;
}

// The axis a site's head or position indexes in its activation.
std::size_t head_axis(HookPoint point) { return point == HookPoint::pattern ? 1 : 2; }

// dst's slice (index i of `axis`) = src's; both row-major of the same shape.
template <typename T>
void copy_slice(xt::xarray<T>& dst, const xt::xarray<T>& src, std::size_t axis, std::size_t i) {
  const auto& shape = dst.shape();
  std::size_t outer = 1, inner = 1;
  for (std::size_t a = 0; a < axis; ++a) outer *= shape[a];
  for (std::size_t a = axis + 1; a < shape.size(); ++a) inner *= shape[a];
  const std::size_t n = shape[axis];
  for (std::size_t o = 0; o < outer; ++o) {
    const std::size_t at = (o * n + i) * inner;
    std::copy_n(src.data() + at, inner, dst.data() + at);
  }
}

// sum over the slice (index i of `axis`, or everything) of a * b.
template <typename T>
double slice_dot(const xt::xarray<T>& a, const xt::xarray<T>& b, std::optional<std::size_t> axis, std::size_t i) {
  double total = 0;
  if (!axis) {
    for (std::size_t k = 0; k < a.size(); ++k) total += static_cast<double>(a.data()[k]) * b.data()[k];
    return total;
  }
  const auto& shape = a.shape();
  std::size_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < *axis; ++d) outer *= shape[d];
  for (std::size_t d = *axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::size_t n = shape[*axis];
  for (std::size_t o = 0; o < outer; ++o) {
    const std::size_t at = (o * n + i) * inner;
    for (std::size_t k = 0; k < inner; ++k) total += static_cast<double>(a.data()[at + k]) * b.data()[at + k];
  }
  return total;
}

void check_batch(const PatchBatch& batch) {
  const std::size_t N = batch.position.size();
  if (N == 0) throw std::invalid_argument("patching: no pairs");
  if (batch.clean.dimension() != 2 || batch.clean.shape() != batch.corrupted.shape() || batch.clean.shape()[0] != N ||
      batch.answer.size() != N || batch.wrong.size() != N) {
    throw std::invalid_argument(fmt::format("patching: clean {} and corrupted {} must both be (N, T) for the {} pairs",
                                            format_shape(Shape(batch.clean.shape())),
                                            format_shape(Shape(batch.corrupted.shape())), N));
  }
  for (std::size_t b = 0; b < N; ++b) {
    if (batch.position[b] >= batch.clean.shape()[1]) {
      throw std::invalid_argument(fmt::format("patching: pair {} reads position {} of {} tokens", b, batch.position[b],
                                              batch.clean.shape()[1]));
    }
  }
}

// ": pair 2's clean and corrupted tokens are identical", for the first such pair,
// or "" when every pair differs.
std::string identical_pair_note(const PatchBatch& batch) {
  const std::size_t N = batch.clean.shape()[0], T = batch.clean.shape()[1];
  for (std::size_t b = 0; b < N; ++b) {
    bool same = true;
    for (std::size_t t = 0; t < T && same; ++t) same = batch.clean(b, t) == batch.corrupted(b, t);
    if (same) return fmt::format(": pair {}'s clean and corrupted tokens are identical", b);
  }
  return "";
}

}  // namespace

PatchBatch patch_batch(const std::vector<PatchPair>& pairs) {
  if (pairs.empty()) throw std::invalid_argument("patch_batch: no pairs");
  const std::size_t row = pairs[0].clean.size();
  if (row < 2) throw std::invalid_argument(fmt::format("patch_batch: rows of {} tokens hold no input and target", row));
  const std::size_t T = row - 1, N = pairs.size();
  PatchBatch out{IndexArray::from_shape({N, T}), IndexArray::from_shape({N, T}), {}, {}, {}};
  for (std::size_t b = 0; b < N; ++b) {
    const PatchPair& p = pairs[b];
    if (p.clean.size() != row || p.corrupted.size() != row) {
      throw std::invalid_argument(fmt::format("patch_batch: pair {} has rows of {} and {} tokens, pair 0 of {}", b,
                                              p.clean.size(), p.corrupted.size(), row));
    }
    std::copy_n(p.clean.begin(), T, out.clean.data() + b * T);
    std::copy_n(p.corrupted.begin(), T, out.corrupted.data() + b * T);
    out.position.push_back(p.position);
    out.answer.push_back(p.clean_answer);
    out.wrong.push_back(p.corrupted_answer);
  }
  return out;
}

template <typename T>
ActivationCache<T> run_with_cache(TransformerLM<T>& model, const IndexArray& tokens, bool with_pattern,
                                  xt::xarray<T>* logits) {
  NoGrad no_grad;
  ActivationCache<T> cache;
  ForwardHooks<T> hooks{.fn =
                            [&cache](HookPoint point, std::size_t layer, const Tensor<T>& value) {
                              cache[{point, layer}] = value.value();
                              return value;
                            },
                        .pattern = with_pattern};
  Tensor<T> out = model.forward(tokens, nullptr, &hooks);
  if (logits) *logits = out.value();
  return cache;
}

template <typename T>
xt::xarray<T> run_patched(TransformerLM<T>& model, const IndexArray& tokens, const std::vector<PatchSite>& sites,
                          const ActivationCache<T>& source) {
  bool with_pattern = false;
  for (const PatchSite& s : sites) {
    if (!source.contains({s.point, s.layer})) {
      throw std::invalid_argument(fmt::format("run_patched: the source has no {}", describe(s)));
    }
    if (s.head && s.position) {
      throw std::invalid_argument(fmt::format("run_patched: {}: give a head or a position, not both", describe(s)));
    }
    with_pattern = with_pattern || s.point == HookPoint::pattern;
  }
  NoGrad no_grad;
  ForwardHooks<T> hooks{
      .fn =
          [&](HookPoint point, std::size_t layer, const Tensor<T>& value) {
            xt::xarray<T> patched;
            bool any = false;
            for (const PatchSite& s : sites) {
              if (s.point != point || s.layer != layer) continue;
              const xt::xarray<T>& src = source.at({point, layer});
              if (Shape(src.shape()) != value.shape()) {
                throw std::invalid_argument(fmt::format("run_patched: {}: the source is {}, the run's value {}",
                                                        describe(s), format_shape(Shape(src.shape())),
                                                        format_shape(value.shape())));
              }
              if (!any) patched = value.value();
              any = true;
              if (!s.head && !s.position) {
                patched = src;
                continue;
              }
              const std::size_t axis = s.head ? head_axis(point) : 1;
              const std::size_t i = s.head ? *s.head : *s.position;
              if (value.ndim() <= axis || i >= value.shape()[axis]) {
                throw std::invalid_argument(fmt::format("run_patched: {} is outside the value's shape {}", describe(s),
                                                        format_shape(value.shape())));
              }
              copy_slice(patched, src, axis, i);
            }
            return any ? Tensor<T>(std::move(patched)) : value;
          },
      .pattern = with_pattern};
  return model.forward(tokens, nullptr, &hooks).value();
}

template <typename T>
double logit_difference(const xt::xarray<T>& logits, const PatchBatch& batch) {
  const std::size_t N = batch.position.size();
  const std::size_t T_ = logits.shape()[1], V = logits.shape()[2];
  double total = 0;
  for (std::size_t b = 0; b < N; ++b) {
    const T* row = logits.data() + (b * T_ + batch.position[b]) * V;
    total += static_cast<double>(row[batch.answer[b]]) - static_cast<double>(row[batch.wrong[b]]);
  }
  return total / static_cast<double>(N);
}

template <typename T>
ActivationCache<T> logit_difference_gradients(TransformerLM<T>& model, const PatchBatch& batch, bool with_pattern) {
  check_batch(batch);
  std::map<std::pair<HookPoint, std::size_t>, Tensor<T>> deltas;
  ForwardHooks<T> hooks{.fn =
                            [&deltas](HookPoint point, std::size_t layer, const Tensor<T>& value) {
                              Tensor<T> delta(xt::xarray<T>(xt::zeros<T>(value.shape())), true);
                              deltas[{point, layer}] = delta;
                              return add(value, delta);
                            },
                        .pattern = with_pattern};
  const Tensor<T> logits = model.forward(batch.corrupted, nullptr, &hooks);  // (N, T, V)
  // LD as a sum of the logits weighted +1/N at (b, t_b, answer_b) and -1/N at the
  // wrong answer: d LD / d logits is that weight.
  xt::xarray<T> weight = xt::zeros<T>(logits.shape());
  const std::size_t N = batch.position.size(), T_ = logits.shape()[1], V = logits.shape()[2];
  for (std::size_t b = 0; b < N; ++b) {
    T* row = weight.data() + (b * T_ + batch.position[b]) * V;
    row[batch.answer[b]] += T(1) / static_cast<T>(N);
    row[batch.wrong[b]] -= T(1) / static_cast<T>(N);
  }
  sum(mul(logits, Tensor<T>(std::move(weight)))).backward();
  ActivationCache<T> grads;
  for (auto& [key, delta] : deltas) {
    grads[key] = delta.has_grad() ? delta.grad() : xt::xarray<T>(xt::zeros<T>(delta.shape()));
  }
  model.zero_grad();
  return grads;
}

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  double sa = 0, sb = 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) continue;
    sa += a[i];
    sb += b[i];
    ++n;
  }
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  const double ma = sa / static_cast<double>(n), mb = sb / static_cast<double>(n);
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) continue;
    ab += (a[i] - ma) * (b[i] - mb);
    aa += (a[i] - ma) * (a[i] - ma);
    bb += (b[i] - mb) * (b[i] - mb);
  }
  if (aa == 0 || bb == 0) return std::numeric_limits<double>::quiet_NaN();
  return ab / std::sqrt(aa * bb);
}

namespace {

void summarise(PatchGrid& g) {
  g.pearson = pearson(g.exact, g.attribution);
  g.max_abs_diff = 0;
  for (std::size_t i = 0; i < g.exact.size(); ++i) {
    const double d = std::abs(g.exact[i] - g.attribution[i]);
    if (!std::isnan(d)) g.max_abs_diff = std::max(g.max_abs_diff, d);
  }
}

}  // namespace

template <typename T>
PatchReport patch_activations(TransformerLM<T>& model, const PatchBatch& batch, const PatchOptions& options) {
  check_batch(batch);
  model.eval();
  const std::size_t L = model.n_layers(), H = model.config().n_heads, T_ = batch.clean.shape()[1];
  const bool with_pattern = options.pattern;
  // The runs without pattern hooks take the fused attention; the patterns come from
  // runs in the composed form (equal to rounding), merged into the same caches.
  xt::xarray<T> clean_logits, corrupted_logits;
  ActivationCache<T> clean = run_with_cache(model, batch.clean, false, &clean_logits);
  ActivationCache<T> corrupted = run_with_cache(model, batch.corrupted, false, &corrupted_logits);
  if (with_pattern) {
    for (auto& [key, value] : run_with_cache(model, batch.clean, true)) {
      if (key.first == HookPoint::pattern) clean[key] = std::move(value);
    }
    for (auto& [key, value] : run_with_cache(model, batch.corrupted, true)) {
      if (key.first == HookPoint::pattern) corrupted[key] = std::move(value);
    }
  }
  const ActivationCache<T> grads = logit_difference_gradients(model, batch, with_pattern);

  PatchReport r;
  r.pairs = batch.position.size();
  r.positions = T_;
  r.ld_clean = logit_difference(clean_logits, batch);
  r.ld_corrupted = logit_difference(corrupted_logits, batch);
  const double span = r.ld_clean - r.ld_corrupted;
  if (!(std::abs(span) > 0)) {  // every recovered fraction would be 0 / 0
    throw std::invalid_argument(fmt::format(
        "patching: the clean and corrupted runs give the same logit difference ({:.6g}){}, so there is nothing for a "
        "patch to recover; give a corrupted input that changes the answer",
        r.ld_clean, identical_pair_note(batch)));
  }
  const auto fraction = [&](double ld) { return (ld - r.ld_corrupted) / span; };
  const auto estimate = [&](const PatchSite& s) {
    const auto key = std::make_pair(s.point, s.layer);
    xt::xarray<T> diff = clean.at(key) - corrupted.at(key);
    const std::optional<std::size_t> axis =
        s.head ? std::optional<std::size_t>(head_axis(s.point)) : (s.position ? std::optional<std::size_t>(1) : std::nullopt);
    const double d = slice_dot(diff, grads.at(key), axis, s.head ? *s.head : s.position.value_or(0));
    return d / span;
  };

  const std::size_t total =
      (options.heads ? L * H : 0) + (options.resid ? (L + 1) * T_ : 0) + (options.pattern ? L * H : 0);
  std::size_t done = 0;
  const auto step = [&] {
    ++done;
    if (options.progress) options.progress(done, total);
  };
  const auto fill = [&](PatchGrid& g, std::size_t rows, std::size_t cols, auto site_of) {
    g.rows = rows;
    g.cols = cols;
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < cols; ++j) {
        const PatchSite s = site_of(i, j);
        g.exact.push_back(fraction(logit_difference(run_patched(model, batch.corrupted, {s}, clean), batch)));
        g.attribution.push_back(estimate(s));
        step();
      }
    }
    summarise(g);
  };
  if (options.heads) {
    fill(r.heads, L, H, [](std::size_t l, std::size_t h) {
      return PatchSite{.point = HookPoint::head_out, .layer = l, .head = h, .position = std::nullopt};
    });
  }
  if (options.resid) {
    fill(r.resid, L + 1, T_, [L](std::size_t l, std::size_t t) {
      return PatchSite{.point = l < L ? HookPoint::resid_pre : HookPoint::final, .layer = l, .head = std::nullopt,
                       .position = t};
    });
  }
  if (options.pattern) {
    fill(r.pattern, L, H, [](std::size_t l, std::size_t h) {
      return PatchSite{.point = HookPoint::pattern, .layer = l, .head = h, .position = std::nullopt};
    });
  }
  return r;
}

#define HEADROOM_PATCHING(T)                                                                                      \
  template ActivationCache<T> run_with_cache(TransformerLM<T>&, const IndexArray&, bool, xt::xarray<T>*);          \
  template xt::xarray<T> run_patched(TransformerLM<T>&, const IndexArray&, const std::vector<PatchSite>&,         \
                                     const ActivationCache<T>&);                                                   \
  template double logit_difference(const xt::xarray<T>&, const PatchBatch&);                                      \
  template ActivationCache<T> logit_difference_gradients(TransformerLM<T>&, const PatchBatch&, bool);             \
  template PatchReport patch_activations(TransformerLM<T>&, const PatchBatch&, const PatchOptions&);
HEADROOM_PATCHING(float)
HEADROOM_PATCHING(double)
#undef HEADROOM_PATCHING

}  // namespace headroom
