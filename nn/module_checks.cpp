#include "nn/module_checks.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include <fmt/format.h>

#include "nn/transformer.hpp"

namespace headroom {
namespace {

using D = Tensor<double>;

// Module parameters start at training scale (0.02); a gradient check wants every
// path to carry signal, so we redraw them at a larger scale.
void redraw(Module<double>& m, Rng& rng) {
  for (auto& [name, p] : m.named_parameters()) p.mutable_value() = normal_init<double>(p.shape(), 0.5, rng);
}

D input(const Shape& shape, Rng& rng) { return D(normal_init<double>(shape, 1.0, rng), true); }

struct ModuleCase {
  const char* module;
  const char* what;
  // Builds the module, runs the check, and describes the shapes.
  std::function<std::pair<std::string, GradcheckReport>(Rng&, const GradcheckOptions&)> run;
};

// gradcheck of f over the module's parameters and the input x.
template <typename M, typename F>
GradcheckReport check(M& module, const D& x, F f, const GradcheckOptions& options) {
  auto inputs = module.named_parameters();
  inputs.emplace_back("x", x);
  return gradcheck([&] { return std::vector<D>{f()}; }, inputs, options);
}

std::vector<ModuleCase> build_cases() {
  std::vector<ModuleCase> c;
  c.push_back({"Linear", "with bias", [](Rng& r, const GradcheckOptions& o) {
                 Linear<double> m({.in_features = 4, .out_features = 3}, r);
                 redraw(m, r);
                 D x = input({2, 3, 4}, r);
                 return std::pair{std::string("x (2, 3, 4), weight (3, 4)"), check(m, x, [&] { return m.forward(x); }, o)};
               }});
  c.push_back({"Embedding", "repeated indices", [](Rng& r, const GradcheckOptions& o) {
                 Embedding<double> m({.num_embeddings = 6, .dim = 3}, r);
                 const IndexArray idx = {{0, 5, 5}, {2, 0, 1}};
                 return std::pair{std::string("indices (2, 3), weight (6, 3)"),
                                  gradcheck([&] { return std::vector<D>{m.forward(idx)}; }, m.named_parameters(), o)};
               }});
  c.push_back({"LayerNorm", "eps 1e-5", [](Rng& r, const GradcheckOptions& o) {
                 LayerNorm<double> m({.dim = 5});
                 redraw(m, r);
                 D x = input({3, 5}, r);
                 return std::pair{std::string("x (3, 5)"), check(m, x, [&] { return m.forward(x); }, o)};
               }});
  c.push_back({"RMSNorm", "eps 1e-5", [](Rng& r, const GradcheckOptions& o) {
                 RMSNorm<double> m({.dim = 5});
                 redraw(m, r);
                 D x = input({3, 5}, r);
                 return std::pair{std::string("x (3, 5)"), check(m, x, [&] { return m.forward(x); }, o)};
               }});
  for (Activation act : {Activation::gelu, Activation::gelu_tanh, Activation::relu}) {
    c.push_back({"FeedForward", act == Activation::gelu ? "gelu" : act == Activation::relu ? "relu" : "gelu_tanh",
                 [act](Rng& r, const GradcheckOptions& o) {
                   FeedForward<double> m({.d_model = 4, .d_ff = 6, .activation = act}, r);
                   redraw(m, r);
                   D x = input({2, 3, 4}, r);
                   return std::pair{std::string("x (2, 3, 4), d_ff 6"), check(m, x, [&] { return m.forward(x); }, o)};
                 }});
  }
  for (bool bias : {true, false}) {
    c.push_back({"FeedForward", bias ? "swiglu" : "swiglu, no bias", [bias](Rng& r, const GradcheckOptions& o) {
                   FeedForward<double> m({.d_model = 4, .d_ff = 6, .bias = bias, .type = FeedForwardType::swiglu}, r);
                   redraw(m, r);
                   D x = input({2, 3, 4}, r);
                   return std::pair{std::string("x (2, 3, 4), d_ff 6, swiglu"),
                                    check(m, x, [&] { return m.forward(x); }, o)};
                 }});
  }
  struct Attn {
    const char* what;
    AttentionOptions options;
  };
  static const Attn attns[] = {
      {"4 heads, causal", {.d_model = 8, .n_heads = 4}},
      {"1 head", {.d_model = 6, .n_heads = 1}},
      {"d_k = 1", {.d_model = 4, .n_heads = 2, .d_k = 1}},
      {"d_k != d_model / n_heads", {.d_model = 6, .n_heads = 2, .d_k = 4}},
      {"d_v != d_k", {.d_model = 6, .n_heads = 2, .d_k = 3, .d_v = 2}},
      {"GQA, 4 query heads over 2", {.d_model = 8, .n_heads = 4, .n_kv_heads = 2}},
      {"MQA", {.d_model = 8, .n_heads = 4, .n_kv_heads = 1}},
      {"not causal, no bias", {.d_model = 6, .n_heads = 3, .causal = false, .bias = false}},
      {"heads summed", {.d_model = 8, .n_heads = 4, .head_combine = HeadCombine::sum}},
      {"heads summed, GQA, d_v != d_k",
       {.d_model = 8, .n_heads = 4, .d_k = 3, .d_v = 2, .n_kv_heads = 2, .head_combine = HeadCombine::sum}},
      {"heads summed, MQA, no bias",
       {.d_model = 6, .n_heads = 3, .n_kv_heads = 1, .head_combine = HeadCombine::sum, .bias = false}},
      // docs/design.md #17; eps 0.1 so that the norm's eps term carries signal too.
      {"qk_norm", {.d_model = 8, .n_heads = 2, .qk_norm = true, .qk_norm_eps = 0.1}},
      {"qk_norm, GQA", {.d_model = 8, .n_heads = 4, .n_kv_heads = 2, .qk_norm = true}},
      {"key smear", {.d_model = 8, .n_heads = 2, .key_smear = true}},
      {"key smear, GQA, not causal", {.d_model = 8, .n_heads = 4, .n_kv_heads = 2, .causal = false,
                                      .key_smear = true}},
      {"rope", {.d_model = 8, .n_heads = 2, .rope = true}},
      {"rope, GQA, d_k 4, base 100",
       {.d_model = 8, .n_heads = 4, .d_k = 4, .n_kv_heads = 2, .rope = true, .rope_base = 100.0}},
      {"qk_norm, key smear, rope, MQA",
       {.d_model = 8, .n_heads = 2, .n_kv_heads = 1, .bias = false, .qk_norm = true, .key_smear = true,
        .rope = true}},
  };
  for (const Attn& a : attns) {
    c.push_back({"MultiHeadAttention", a.what, [a](Rng& r, const GradcheckOptions& o) {
                   MultiHeadAttention<double> m(a.options, r);
                   redraw(m, r);
                   D x = input({2, 4, a.options.d_model}, r);
                   const auto& ro = m.options();
                   return std::pair{fmt::format("x (2, 4, {}), H {}, G {}, d_k {}, d_v {}{}", ro.d_model, ro.n_heads,
                                                ro.n_kv_heads, ro.d_k, ro.d_v,
                                                ro.head_combine == HeadCombine::sum ? ", sum" : ""),
                                    check(m, x, [&] { return m.forward(x).out; }, o)};
                 }});
  }
  c.push_back({"MultiHeadAttention", "key padding, a fully masked row", [](Rng& r, const GradcheckOptions& o) {
                 MultiHeadAttention<double> m({.d_model = 6, .n_heads = 2}, r);
                 redraw(m, r);
                 D x = input({2, 4, 6}, r);
                 Mask pad = xt::zeros<bool>({2, 4});
                 pad(0, 0) = true;  // causal: query 0 of batch 0 sees no key
                 return std::pair{std::string("x (2, 4, 6), padding (2, 4)"),
                                  check(m, x, [&] { return m.forward(x, &pad).out; }, o)};
               }});
  // pos_qk_only: the position table (a leaf here, as pos_emb.weight is) into q and k only.
  for (bool smear : {false, true}) {
    c.push_back({"MultiHeadAttention", smear ? "positions into q/k, key smear" : "positions into q and k only",
                 [smear](Rng& r, const GradcheckOptions& o) {
                   MultiHeadAttention<double> m({.d_model = 6, .n_heads = 2, .key_smear = smear}, r);
                   redraw(m, r);
                   D x = input({2, 4, 6}, r);
                   D positions = input({4, 6}, r);
                   auto inputs = m.named_parameters();
                   inputs.emplace_back("x", x);
                   inputs.emplace_back("positions", positions);
                   return std::pair{std::string("x (2, 4, 6), positions (4, 6)"),
                                    gradcheck([&] { return std::vector<D>{m.forward(x, nullptr, false, &positions).out}; },
                                              inputs, o)};
                 }});
  }
  struct Gated {
    const char* what;
    AttentionOptions options;
  };
  static const Gated gated[] = {
      {"head gate (a leaf), concat", {.d_model = 8, .n_heads = 4}},
      {"head gate (a leaf), GQA, heads summed",
       {.d_model = 8, .n_heads = 4, .n_kv_heads = 2, .head_combine = HeadCombine::sum}},
  };
  for (const Gated& a : gated) {
    c.push_back({"MultiHeadAttention", a.what, [a](Rng& r, const GradcheckOptions& o) {
                   MultiHeadAttention<double> m(a.options, r);
                   redraw(m, r);
                   D x = input({2, 4, a.options.d_model}, r);
                   // Gate values away from 0 and 1 and one exactly 0: a gated-out head
                   // still gets the gradient of its gate.
                   D gate(xt::xarray<double>{0.7, 0.0, 1.3, -0.4}, true);
                   m.set_head_gate(gate);
                   auto inputs = m.named_parameters();
                   inputs.emplace_back("x", x);
                   inputs.emplace_back("head_gate", gate);
                   return std::pair{fmt::format("x (2, 4, {}), H 4, gate (4,)", a.options.d_model),
                                    gradcheck([&] { return std::vector<D>{m.forward(x).out}; }, inputs, o)};
                 }});
  }
  struct Block {
    const char* what;
    NormPlacement norm;
    bool attn_only;
    NormType norm_type = NormType::layernorm;
    FeedForwardType ffn = FeedForwardType::mlp;
  };
  static const Block blocks[] = {
      {"pre-norm", NormPlacement::pre, false},
      {"post-norm", NormPlacement::post, false},
      {"no norm", NormPlacement::none, false},
      {"attention-only, pre-norm", NormPlacement::pre, true},
      {"attention-only, post-norm", NormPlacement::post, true},
      {"attention-only, no norm", NormPlacement::none, true},
      {"rmsnorm, pre-norm", NormPlacement::pre, false, NormType::rmsnorm},
      {"rmsnorm, post-norm", NormPlacement::post, false, NormType::rmsnorm},
      {"rmsnorm, pre-norm, swiglu", NormPlacement::pre, false, NormType::rmsnorm, FeedForwardType::swiglu},
  };
  for (const Block& b : blocks) {
    c.push_back({"TransformerBlock", b.what, [b](Rng& r, const GradcheckOptions& o) {
                   TransformerBlock<double> m({.attention = {.d_model = 6, .n_heads = 2},
                                               .ffn = {.d_model = 6, .d_ff = 8, .type = b.ffn},
                                               .norm = b.norm,
                                               .norm_type = b.norm_type,
                                               .attn_only = b.attn_only},
                                              r);
                   redraw(m, r);
                   D x = input({2, 4, 6}, r);
                   return std::pair{fmt::format("x (2, 4, 6), {} parameters", m.parameter_count()),
                                    check(m, x, [&] { return m.forward(x); }, o)};
                 }});
  }
  struct Lm {
    const char* what;
    ModelConfig config;
  };
  static const Lm lms[] = {
      {"loss, pre-norm, learned positions", {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6}},
      {"loss, post-norm, sinusoidal, GQA, tied",
       {.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 4, .n_kv_heads = 2, .max_len = 6,
        .norm = NormPlacement::post, .pos = PositionEncoding::sinusoidal, .tie_embeddings = true}},
      {"loss, heads summed, GQA",
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_combine = HeadCombine::sum,
        .max_len = 6}},
      {"loss, attention-only, no norm",
       {.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6, .norm = NormPlacement::none,
        .attn_only = true}},
      {"loss, attention-only, tied",
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6, .tie_embeddings = true,
        .attn_only = true}},
      {"loss, no norm, sinusoidal",
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6, .norm = NormPlacement::none,
        .pos = PositionEncoding::sinusoidal}},
      // docs/design.md #17
      {"loss, llama-style, GQA",  // rope, rmsnorm, swiglu, no bias
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .max_len = 6,
        .pos = PositionEncoding::rope, .bias = false, .norm_type = NormType::rmsnorm,
        .ffn = FeedForwardType::swiglu}},
      {"loss, qk_norm, key smear, rope",
       {.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6, .pos = PositionEncoding::rope,
        .norm_type = NormType::rmsnorm, .qk_norm = true, .key_smear = true}},
      {"loss, no positions",
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6, .pos = PositionEncoding::none}},
      {"loss, learned positions in q/k only",
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6, .pos_qk_only = true}},
      {"loss, sinusoid in q/k only, post",
       {.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6, .norm = NormPlacement::post,
        .pos = PositionEncoding::sinusoidal, .pos_qk_only = true}},
      {"loss, key smear, attention-only",
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6, .attn_only = true,
        .key_smear = true}},
  };
  // A classifier's loss (docs/design.md #27): one counted target a row, the label
  // token after the separator, at a different position in each row, pad after it.
  c.push_back({"TransformerLM", "loss, a classifier's rows: the label after the separator only",
               [](Rng& r, const GradcheckOptions& o) {
                 const ModelConfig config{.vocab = 9, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6};
                 TransformerLM<double> m(config, r);
                 redraw(m, r);
                 // ids: 0 pad, 1 separator, 2..6 characters, 7 and 8 the labels.
                 const IndexArray tokens = {{3, 5, 2, 1, 8, 0, 0}, {4, 4, 6, 2, 6, 1, 7}};  // (2, 7)
                 Mask counted = Mask::from_shape({2, 6});
                 counted.fill(false);
                 counted(0, 3) = true;
                 counted(1, 5) = true;
                 GradcheckOptions subset = o;
                 subset.max_elements = 16;
                 subset.directions = 2;
                 return std::pair{fmt::format("tokens (2, 7), 2 counted targets, {} parameters", m.parameter_count()),
                                  gradcheck([&] { return std::vector<D>{m.loss(tokens, &counted)}; },
                                            m.named_parameters(), subset)};
               }});
  for (const Lm& lm : lms) {
    c.push_back({"TransformerLM", lm.what, [lm](Rng& r, const GradcheckOptions& o) {
                   TransformerLM<double> m(lm.config, r);
                   redraw(m, r);
                   IndexArray tokens = IndexArray::from_shape({2, 6});
                   for (auto& t : tokens) t = static_cast<Index>(r.below(lm.config.vocab));
                   GradcheckOptions subset = o;
                   subset.max_elements = 16;  // a random subset of each parameter ...
                   subset.directions = 2;     // ... plus random directions through all of it
                   return std::pair{fmt::format("tokens (2, 6), {} parameters", m.parameter_count()),
                                    gradcheck([&] { return std::vector<D>{m.loss(tokens)}; }, m.named_parameters(),
                                              subset)};
                 }});
  }
  // Dropout at every site, in training mode. A DropoutSeed made inside f gives every
  // evaluation of the finite differences the same masks, so the dropped model is one
  // fixed function of its parameters. The logits rather than the loss: gradcheck's
  // random weights are then a different upstream gradient at every position.
  static const Lm dropped[] = {
      {"logits, dropout 0.3 in training",
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 6, .dropout = 0.3}},
      {"dropout 0.3, post-norm, attn_only, GQA",
       {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .max_len = 6,
        .norm = NormPlacement::post, .attn_only = true, .dropout = 0.3}},
  };
  for (const Lm& lm : dropped) {
    c.push_back({"TransformerLM", lm.what, [lm](Rng& r, const GradcheckOptions& o) {
                   TransformerLM<double> m(lm.config, r);
                   redraw(m, r);
                   m.train();
                   IndexArray tokens = IndexArray::from_shape({2, 6});
                   for (auto& t : tokens) t = static_cast<Index>(r.below(lm.config.vocab));
                   const std::uint64_t mask_seed = r.next_u64();
                   GradcheckOptions subset = o;
                   subset.max_elements = 16;
                   subset.directions = 2;
                   return std::pair{fmt::format("tokens (2, 6), {} parameters", m.parameter_count()),
                                    gradcheck(
                                        [&] {
                                          const DropoutSeed masks(mask_seed);
                                          return std::vector<D>{m.forward(tokens)};
                                        },
                                        m.named_parameters(), subset)};
                 }});
  }
  return c;
}

}  // namespace

const std::vector<std::string>& module_names() {
  static const std::vector<std::string> names{"Linear",           "Embedding",        "LayerNorm",
                                              "RMSNorm",          "FeedForward",      "MultiHeadAttention",
                                              "TransformerBlock", "TransformerLM"};
  return names;
}

std::vector<OpCheck> run_module_checks(const OpCheckOptions& options) {
  const auto& names = module_names();
  if (!options.op.empty() && std::find(names.begin(), names.end(), options.op) == names.end()) {
    throw std::invalid_argument(fmt::format("gradcheck: unknown module '{}'; modules are: {}", options.op,
                                            fmt::join(names, ", ")));
  }
  static const std::vector<ModuleCase> cases = build_cases();
  std::vector<OpCheck> results;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (!options.op.empty() && options.op != cases[i].module) continue;
    Rng rng(options.seed * 1000003u + 7919u * (i + 1));
    GradcheckOptions gc = options.gradcheck;
    gc.seed = options.seed * 7919u + i;
    auto [shapes, report] = cases[i].run(rng, gc);
    results.push_back({cases[i].module, cases[i].what, std::move(shapes), std::move(report)});
  }
  return results;
}

}  // namespace headroom
