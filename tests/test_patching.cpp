// interp/patching (docs/design.md #22), in double on small random models: patching a
// whole stream reproduces the clean run exactly; patching every head differs from
// the clean run by exactly the embeddings' difference in a linear (attention-only,
// no-norm) model; the attribution estimate is the derivative of exact patching along
// the clean - corrupted segment (finite differences, error O(alpha)); and removing a
// head through its gate equals patching its head_out slice with zeros and equals the
// logits minus its W_O contribution by hand, while zeroing after W_O is another thing.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "interp/patching.hpp"
#include "support.hpp"

namespace hr = headroom;

namespace {

using Cache = hr::ActivationCache<double>;

hr::Tensor<double> parameter(hr::TransformerLM<double>& model, const std::string& name) {
  for (const auto& [n, p] : model.named_parameters()) {
    if (n == name) return p;
  }
  FAIL("no parameter " << name);
  return {};
}

double max_abs_diff(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  REQUIRE(a.shape() == b.shape());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a.data()[i] - b.data()[i]));
  return m;
}

// The sum of a over a site's slice (head h: axis 2 of head_out, axis 1 of pattern;
// position t: axis 1), by plain loops.
double slice_sum(const xt::xarray<double>& a, const hr::PatchSite& s) {
  const std::size_t axis = s.head ? (s.point == hr::HookPoint::pattern ? 1 : 2) : 1;
  const std::size_t i = s.head ? *s.head : *s.position;
  const auto& shape = a.shape();
  std::size_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= shape[d];
  for (std::size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  double total = 0;
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t k = 0; k < inner; ++k) total += a.data()[(o * shape[axis] + i) * inner + k];
  }
  return total;
}

// A model with weights large enough that every head matters, and induction pairs
// (vocab 16, T = 12).
struct Fixture {
  hr::ModelConfig config;
  hr::Rng rng{11};
  hr::TransformerLM<double> model;
  hr::PatchBatch batch;

  explicit Fixture(hr::ModelConfig c)
      : config(c), model(c, rng) {
    for (auto& [name, p] : model.named_parameters()) {
      if (name.find("ln") == std::string::npos) p.mutable_value() = hr::normal_init<double>(p.shape(), 0.4, rng);
    }
    model.eval();
    const auto task = hr::make_task("induction", {.vocab = 16, .seq_len = 12});
    std::vector<hr::PatchPair> pairs;
    hr::Rng data_rng(3);
    for (int i = 0; i < 6; ++i) pairs.push_back(task->patch_pair(data_rng));
    batch = hr::patch_batch(pairs);
  }
};

hr::ModelConfig linear_config() {
  return {.vocab = 16, .d_model = 16, .n_layers = 2, .n_heads = 4, .max_len = 12, .norm = hr::NormPlacement::none,
          .attn_only = true};
}

hr::ModelConfig full_config() {
  return {.vocab = 16, .d_model = 16, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .max_len = 12};
}

}  // namespace

TEST_CASE("patching a whole residual stream from the clean run reproduces the clean logits") {
  hr::ModelConfig summed = full_config();
  summed.head_combine = hr::HeadCombine::sum;
  summed.key_smear = true;
  summed.pos = hr::PositionEncoding::rope;
  for (const hr::ModelConfig& c : {linear_config(), full_config(), summed}) {
    Fixture f(c);
    xt::xarray<double> clean_logits;
    const Cache clean = hr::run_with_cache(f.model, f.batch.clean, false, &clean_logits);
    for (std::size_t l = 0; l <= f.model.n_layers(); ++l) {
      std::vector<hr::PatchSite> sites;
      for (std::size_t t = 0; t < 12; ++t) {
        sites.push_back({.point = l < f.model.n_layers() ? hr::HookPoint::resid_pre : hr::HookPoint::final,
                         .layer = l, .head = std::nullopt, .position = t});
      }
      const xt::xarray<double> patched = hr::run_patched(f.model, f.batch.corrupted, sites, clean);
      INFO("layer " << l);
      CHECK(max_abs_diff(patched, clean_logits) <= 1e-12);
      CHECK(hr::logit_difference(patched, f.batch) == doctest::Approx(hr::logit_difference(clean_logits, f.batch)).epsilon(1e-12));
    }
  }
}

TEST_CASE("patching every head in a linear model leaves exactly the embeddings' difference") {
  // Attention-only, no norm: final = resid_pre 0 + sum over layers of (heads W_O + b_O).
  // With every head_out clean, patched - clean = (emb_corrupted - emb_clean) W_U^T.
  Fixture f(linear_config());
  xt::xarray<double> clean_logits;
  const Cache clean = hr::run_with_cache(f.model, f.batch.clean, false, &clean_logits);
  const Cache corrupted = hr::run_with_cache(f.model, f.batch.corrupted, false);
  std::vector<hr::PatchSite> sites;
  for (std::size_t l = 0; l < 2; ++l) {
    for (std::size_t h = 0; h < 4; ++h) sites.push_back({.point = hr::HookPoint::head_out, .layer = l, .head = h});
  }
  const xt::xarray<double> patched = hr::run_patched(f.model, f.batch.corrupted, sites, clean);
  const xt::xarray<double> emb_diff =
      corrupted.at({hr::HookPoint::resid_pre, 0}) - clean.at({hr::HookPoint::resid_pre, 0});  // (N, T, C)
  const xt::xarray<double>& w_u = parameter(f.model, "head.weight").value();                 // (V, C)
  xt::xarray<double> expected = clean_logits;
  const std::size_t N = 6, T = 12, C = 16, V = 16;
  for (std::size_t i = 0; i < N * T; ++i) {
    for (std::size_t v = 0; v < V; ++v) {
      for (std::size_t c = 0; c < C; ++c) expected.data()[i * V + v] += emb_diff.data()[i * C + c] * w_u(v, c);
    }
  }
  CHECK(max_abs_diff(patched, clean_logits) > 0.1);  // the corruption matters
  CHECK(max_abs_diff(patched, expected) <= 1e-10);
}

TEST_CASE("attribution patching is the derivative of exact patching along the clean - corrupted segment") {
  // GQA, pre-norm with MLPs; and heads summed instead of concatenated, with rope and key smear.
  hr::ModelConfig summed = full_config();
  summed.head_combine = hr::HeadCombine::sum;
  summed.key_smear = true;
  summed.pos = hr::PositionEncoding::rope;
  for (const hr::ModelConfig& c : {full_config(), summed}) {
    Fixture f(c);
    const Cache clean = hr::run_with_cache(f.model, f.batch.clean, true);
    xt::xarray<double> corrupted_logits;
    const Cache corrupted = hr::run_with_cache(f.model, f.batch.corrupted, true, &corrupted_logits);
    const double ld_corrupted = hr::logit_difference(corrupted_logits, f.batch);
    const Cache grads = hr::logit_difference_gradients(f.model, f.batch, true);
    for (const auto& [name, p] : f.model.named_parameters()) {
      if (!p.has_grad()) continue;
      INFO(name);
      CHECK(std::all_of(p.grad().begin(), p.grad().end(), [](double g) { return g == 0.0; }));
    }

    std::vector<hr::PatchSite> sites;
    for (std::size_t l = 0; l < 2; ++l) {
      for (std::size_t h = 0; h < 4; ++h) {
        sites.push_back({.point = hr::HookPoint::head_out, .layer = l, .head = h});
        sites.push_back({.point = hr::HookPoint::pattern, .layer = l, .head = h});
      }
    }
    for (std::size_t l = 0; l <= 2; ++l) {
      for (std::size_t t : {0, 5, 11}) {
        sites.push_back({.point = l < 2 ? hr::HookPoint::resid_pre : hr::HookPoint::final, .layer = l,
                         .head = std::nullopt, .position = t});
      }
    }
    for (const hr::PatchSite& s : sites) {
      const auto key = std::make_pair(s.point, s.layer);
      const xt::xarray<double> diff = clean.at(key) - corrupted.at(key);
      // The estimate: the site's slice of (a_clean - a_corrupted) . dLD/da.
      const double estimate = slice_sum(xt::xarray<double>(diff * grads.at(key)), s);
      const auto exact_slope = [&](double alpha) {
        Cache interpolated;
        interpolated[key] = corrupted.at(key) + alpha * diff;
        return (hr::logit_difference(hr::run_patched(f.model, f.batch.corrupted, {s}, interpolated), f.batch) -
                ld_corrupted) /
               alpha;
      };
      const double e3 = std::abs(exact_slope(1e-3) - estimate), e4 = std::abs(exact_slope(1e-4) - estimate);
      INFO(hr::to_string(s.point) << " layer " << s.layer << " head " << s.head.value_or(99) << " position "
                                  << s.position.value_or(99) << ": estimate " << estimate << ", slope(1e-3) "
                                  << exact_slope(1e-3) << ", slope(1e-4) " << exact_slope(1e-4));
      // Error O(alpha): ten times smaller alpha, about ten times smaller error (or at rounding level).
      CHECK(e4 <= std::max(0.2 * e3, 1e-8));
      CHECK(e3 <= 1e-3 * std::max(1.0, std::abs(estimate)) + 1e-6);
    }

    // patch_activations reports the same estimate as a fraction, and exact patching as run_patched gives it.
    const hr::PatchReport r = hr::patch_activations(f.model, f.batch, {});
    REQUIRE(r.heads.exact.size() == 8);
    REQUIRE(r.resid.exact.size() == 3 * 12);
    REQUIRE(r.pattern.exact.size() == 8);
    const double span = r.ld_clean - r.ld_corrupted;
    REQUIRE(std::abs(span) > 1e-3);
    const hr::PatchSite head{.point = hr::HookPoint::head_out, .layer = 1, .head = 2};
    const Cache clean_fused = hr::run_with_cache(f.model, f.batch.clean, false);
    CHECK(r.heads.exact[4 + 2] ==
          doctest::Approx((hr::logit_difference(hr::run_patched(f.model, f.batch.corrupted, {head}, clean_fused), f.batch) -
                           r.ld_corrupted) /
                          span)
              .epsilon(1e-12));
    const auto key = std::make_pair(hr::HookPoint::head_out, std::size_t{1});
    const xt::xarray<double> d = (clean.at(key) - corrupted.at(key)) * grads.at(key);
    double by_head = 0;
    for (std::size_t i = 0; i < d.size(); ++i) by_head += (i / 4) % 4 == 2 ? d.data()[i] : 0.0;  // d_v = 4
    CHECK(r.heads.attribution[4 + 2] == doctest::Approx(by_head / span).epsilon(1e-9));
    CHECK(r.heads.pearson == doctest::Approx(hr::pearson(r.heads.exact, r.heads.attribution)));
  }
}

TEST_CASE("the head gate at 0 equals patching the head's output with zeros and removing its W_O term by hand") {
  Fixture f(linear_config());
  const std::size_t L1 = 1, h = 2, dv = 4, N = 6, T = 12, C = 16, V = 16;
  xt::xarray<double> full;
  const Cache cache = hr::run_with_cache(f.model, f.batch.corrupted, false, &full);

  hr::MultiHeadAttention<double>& attn = f.model.block(L1).attention();
  attn.set_head_gate(hr::Tensor<double>(xt::xarray<double>{1.0, 1.0, 0.0, 1.0}));
  xt::xarray<double> gated;
  {
    hr::NoGrad no_grad;
    gated = f.model.forward(f.batch.corrupted).value();
  }
  attn.clear_head_gate();

  Cache zeros;
  zeros[{hr::HookPoint::head_out, L1}] = xt::zeros<double>(cache.at({hr::HookPoint::head_out, L1}).shape());
  const xt::xarray<double> patched = hr::run_patched(
      f.model, f.batch.corrupted, {{.point = hr::HookPoint::head_out, .layer = L1, .head = h}}, zeros);

  // By hand: logits - (z_h W_O[:, h dv : (h+1) dv]^T) W_U^T, z_h = head_out[:, :, h, :].
  const xt::xarray<double>& z = cache.at({hr::HookPoint::head_out, L1});  // (N, T, H, dv)
  const xt::xarray<double>& w_o = parameter(f.model, "blocks.1.attn.out_proj.weight").value();  // (C, H dv)
  const xt::xarray<double>& b_o = parameter(f.model, "blocks.1.attn.out_proj.bias").value();    // (C)
  const xt::xarray<double>& w_u = parameter(f.model, "head.weight").value();                    // (V, C)
  xt::xarray<double> by_hand = full, after_w_o_zeroed = full;
  for (std::size_t i = 0; i < N * T; ++i) {
    std::vector<double> term(C, 0.0), all_heads(C, 0.0);
    for (std::size_t c = 0; c < C; ++c) {
      for (std::size_t k = 0; k < 4 * dv; ++k) {
        const double x = z.data()[i * 4 * dv + k] * w_o(c, k);
        all_heads[c] += x;
        if (k / dv == h) term[c] += x;
      }
      all_heads[c] += b_o(c);
    }
    for (std::size_t v = 0; v < V; ++v) {
      for (std::size_t c = 0; c < C; ++c) {
        by_hand.data()[i * V + v] -= term[c] * w_u(v, c);
        after_w_o_zeroed.data()[i * V + v] -= all_heads[c] * w_u(v, c);
      }
    }
  }
  CHECK(max_abs_diff(gated, full) > 0.1);  // the head matters
  CHECK(max_abs_diff(gated, patched) <= 1e-12);
  CHECK(max_abs_diff(gated, by_hand) <= 1e-10);

  // The wrong place: zeroing the attention output after W_O removes every head of
  // the layer and out_proj's bias, not head h.
  hr::ForwardHooks<double> zero_after{.fn = [&](hr::HookPoint p, std::size_t l, const hr::Tensor<double>& value) {
    if (p != hr::HookPoint::attn_out || l != L1) return value;
    return hr::Tensor<double>(xt::xarray<double>(xt::zeros<double>(value.shape())));
  }};
  xt::xarray<double> wrong;
  {
    hr::NoGrad no_grad;
    wrong = f.model.forward(f.batch.corrupted, nullptr, &zero_after).value();
  }
  CHECK(max_abs_diff(wrong, gated) > 0.1);
  CHECK(max_abs_diff(wrong, after_w_o_zeroed) <= 1e-10);

  // In layer 0 the head's removal also reaches layer 1; gate and zero patch still agree.
  f.model.block(0).attention().set_head_gate(hr::Tensor<double>(xt::xarray<double>{1.0, 0.0, 1.0, 1.0}));
  xt::xarray<double> gated0;
  {
    hr::NoGrad no_grad;
    gated0 = f.model.forward(f.batch.corrupted).value();
  }
  f.model.block(0).attention().clear_head_gate();
  Cache zeros0;
  zeros0[{hr::HookPoint::head_out, 0}] = xt::zeros<double>(z.shape());
  CHECK(max_abs_diff(gated0, hr::run_patched(f.model, f.batch.corrupted,
                                             {{.point = hr::HookPoint::head_out, .layer = 0, .head = 1}}, zeros0)) <=
        1e-12);
}

TEST_CASE("run_patched and patch_batch refuse what they cannot do") {
  Fixture f(linear_config());
  const Cache clean = hr::run_with_cache(f.model, f.batch.clean, false);
  CHECK(error_of([&] {
          hr::run_patched(f.model, f.batch.corrupted, {{.point = hr::HookPoint::pattern, .layer = 0, .head = 0}}, clean);
        }) == "run_patched: the source has no pattern of layer 0, head 0");
  CHECK(error_of([&] {
          hr::run_patched(f.model, f.batch.corrupted, {{.point = hr::HookPoint::head_out, .layer = 0, .head = 4}}, clean);
        }) == "run_patched: head_out of layer 0, head 4 is outside the value's shape (6, 12, 4, 4)");
  CHECK(error_of([] { hr::patch_batch({}); }) == "patch_batch: no pairs");
  // Corrupted equal to clean: every recovered fraction would be 0 / 0.
  hr::PatchBatch same = f.batch;
  same.corrupted = same.clean;
  const std::string no_span = error_of([&] { hr::patch_activations(f.model, same, {}); });
  CHECK(no_span.find("patching: the clean and corrupted runs give the same logit difference") == 0);
  CHECK(no_span.find("pair 0's clean and corrupted tokens are identical") != std::string::npos);
  // numpy.corrcoef([1, 2, 3], [2, 4, 6.5])[0, 1]
  CHECK(hr::pearson({1, 2, 3}, {2, 4, 6.5}) == doctest::Approx(0.9979487157886733).epsilon(1e-12));
  CHECK(std::isnan(hr::pearson({1, 1, 1}, {2, 4, 6})));
}
