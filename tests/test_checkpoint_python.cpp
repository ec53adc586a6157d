// examples/load_checkpoint.py loads our checkpoints into a plain PyTorch model
// (strict state_dict, no renaming) and reproduces our loss. That checks the
// checkpoint names and layouts, and every convention of docs/design.md the config
// switches (pre/post norm, learned/sinusoidal positions, GQA grouping, attn_scale,
// the causal mask, the activations, tied head, bias, ln_eps, head_combine, attn_only
// and norm "none"; and the current blocks of #17: rope and its base, RMSNorm, SwiGLU,
// qk_norm, key_smear, pos_qk_only with learned and sinusoidal tables, pos "none"; and a
// dropout model, whose key the script reads past), against
// an independent implementation: F32 files to 1e-5, F64 files to 1e-10. Breaking
// any one of those conventions in the script (repeat for repeat_interleave in the
// GQA grouping, say) makes at least one of these checkpoints mismatch. Skipped,
// with the reason, where /usr/bin/python3 or torch is missing; under CI=true that
// is a failure instead (support.hpp).
#include <filesystem>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cli_runner.hpp"
#include "support.hpp"
#include "nn/checkpoint.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

// Every parameter drawn afresh (LayerNorm weights and biases included), so each
// one changes the loss and a misplaced tensor cannot go unnoticed.
void scramble(hr::TransformerLM<float>& model, std::uint64_t seed) {
  hr::Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) {
    for (auto& v : p.mutable_value()) v = static_cast<float>(0.4 * rng.normal());
  }
}

}  // namespace

TEST_CASE("examples/load_checkpoint.py loads our checkpoints into PyTorch and reproduces the loss") {
  if (!prerequisite(fs::exists(kPython), fmt::format("{} is not installed", kPython))) return;
  using hr::Activation, hr::FeedForwardType, hr::NormPlacement, hr::NormType, hr::PositionEncoding;
  const std::vector<hr::ModelConfig> configs{
      // pre-norm, learned positions, exact GELU, biases, untied head
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 8},
      // post-norm, sinusoidal, tied, grouped-query (4 query heads over 2), no bias, ReLU
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .max_len = 8,
       .norm = NormPlacement::post, .activation = Activation::relu, .pos = PositionEncoding::sinusoidal,
       .bias = false, .tie_embeddings = true},
      // d_k and d_v unlike d_model / n_heads, one kv head, tanh GELU, not causal,
      // attn_scale and ln_eps given
      {.vocab = 7, .d_model = 6, .n_layers = 1, .n_heads = 3, .n_kv_heads = 1, .d_k = 4, .d_v = 5, .d_ff = 10,
       .max_len = 8, .activation = Activation::gelu_tanh, .causal = false, .attn_scale = 0.7, .ln_eps = 1e-2},
      // heads added instead of concatenated before out_proj
      {.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 4, .d_v = 3, .head_combine = hr::HeadCombine::sum,
       .max_len = 8},
      // attention-only blocks without any LayerNorm (docs/design.md #13): no ffn, ln1, ln2 or ln_f
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 8, .norm = NormPlacement::none,
       .attn_only = true},
      // attention-only, post-norm (ln1 only), tied; and norm "none" with a feed-forward
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 8, .norm = NormPlacement::post,
       .tie_embeddings = true, .attn_only = true},
      {.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 8, .norm = NormPlacement::none,
       .activation = Activation::relu},
      // docs/design.md #17. Llama-style: rope, RMSNorm, SwiGLU, no bias, 4 query heads over 2
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .max_len = 8,
       .pos = PositionEncoding::rope, .bias = false, .norm_type = NormType::rmsnorm, .ffn = FeedForwardType::swiglu},
      // rope with another base, d_k 4 over 2 heads of d_model 6, SwiGLU with biases and d_ff given
      {.vocab = 7, .d_model = 6, .n_layers = 1, .n_heads = 2, .d_k = 4, .d_ff = 10, .max_len = 8,
       .pos = PositionEncoding::rope, .rope_base = 37.0, .ffn = FeedForwardType::swiglu},
      // qk_norm (its eps is ln_eps), GQA, post-norm RMSNorm
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .max_len = 8,
       .norm = NormPlacement::post, .ln_eps = 1e-2, .norm_type = NormType::rmsnorm, .qk_norm = true},
      // key smear, GQA, attention-only (the induction-head setting)
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .max_len = 8, .attn_only = true,
       .key_smear = true},
      // learned positions into q and k only, with key smear and qk_norm
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 8, .qk_norm = true, .key_smear = true,
       .pos_qk_only = true},
      // sinusoidal positions into q and k only, no norm
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 8, .norm = NormPlacement::none,
       .pos = PositionEncoding::sinusoidal, .pos_qk_only = true},
      // no positions at all
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 8, .pos = PositionEncoding::none},
      // dropout: a key of the config and no tensor; the losses are eval mode's, which drops nothing
      {.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 2, .max_len = 8, .dropout = 0.3},
  };
  const hr::IndexArray tokens = {{1, 4, 2, 6, 0, 3, 5}, {6, 6, 1, 0, 2, 4, 3}, {2, 5, 5, 1, 3, 0, 6}};  // (3, 7)
  const std::string token_args = "--tokens 1,4,2,6,0,3,5 6,6,1,0,2,4,3 2,5,5,1,3,0,6";

  const TempDir tmp("checkpoint_python");
  const fs::path& dir = tmp.path();
  std::string paths, expected;
  std::vector<float> losses;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    hr::Rng rng(i);
    hr::TransformerLM<float> model(configs[i], rng);
    scramble(model, 100 + i);
    model.eval();
    const fs::path path = dir / fmt::format("model{}.safetensors", i);
    hr::save_checkpoint(path, model, configs[i]);
    hr::NoGrad no_grad;
    losses.push_back(model.loss(tokens).item());
    paths += fmt::format(" {}", path.string());
    expected += fmt::format(" {:.9g}", losses.back());
    // The same weights in double, saved as F64: checked to 1e-10, not 1e-5.
    const hr::LoadedModel<double> twin = hr::load_model<double>(path);
    twin.model->eval();
    const fs::path path64 = dir / fmt::format("model{}_f64.safetensors", i);
    hr::save_checkpoint(path64, *twin.model, configs[i]);
    paths += fmt::format(" {}", path64.string());
    expected += fmt::format(" {:.17g}", twin.model->loss(tokens).item());
  }
  // The losses differ from one another and from a uniform guess (log 7 = 1.9459),
  // so a match is not an accident of untrained weights.
  CHECK(losses[0] != doctest::Approx(losses[1]).epsilon(1e-3));
  CHECK(losses[0] != doctest::Approx(1.9459).epsilon(1e-2));

  const std::string script = std::string(HEADROOM_SOURCE_DIR) + "/examples/load_checkpoint.py";
  const CliResult ok = run_program(kPython, fmt::format("{}{} {} --expect{}", script, paths, token_args, expected));
  if (!prerequisite(ok.output.find("No module named 'torch'") == std::string::npos,
                    fmt::format("{} cannot import torch (Debian: apt-get install python3-torch)", kPython)))
    return;
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK(count_lines(ok.output) == static_cast<int>(2 * configs.size()));
  for (std::size_t i = 0; i < configs.size(); ++i) {
    CHECK(ok.output.find(fmt::format("model{}.safetensors: torch loss", i)) != std::string::npos);
    CHECK(ok.output.find(fmt::format("model{}_f64.safetensors: torch loss", i)) != std::string::npos);
  }
  CHECK(ok.output.find("(rtol 1e-10): match") != std::string::npos);
  CHECK(ok.output.find(": match") != std::string::npos);
  CHECK(ok.output.find("MISMATCH") == std::string::npos);

  // A wrong expectation is exit status 1, with both numbers.
  const float wrong = losses[0] * 1.001f;
  const CliResult bad = run_program(
      kPython, fmt::format("{} {} {} --expect {:.9g}", script, (dir / "model0.safetensors").string(), token_args, wrong));
  INFO(bad.output);
  CHECK(bad.status == 1);
  CHECK(bad.output.find(fmt::format("expected {:.9g}", wrong)) != std::string::npos);
  CHECK(bad.output.find("MISMATCH") != std::string::npos);
}
