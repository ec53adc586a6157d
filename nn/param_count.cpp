#include "nn/param_count.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace headroom {
namespace {

// Products and sums of sizes that a config far beyond any machine could overflow:
// each one is checked, and an overflow is an error naming the config's sizes.
struct Checked {
  const ModelConfig& c;
  [[noreturn]] void overflow() const {
    throw std::invalid_argument(fmt::format(
        "model config: the parameter count of vocab {}, d_model {}, n_layers {}, n_heads {}, d_k {}, d_v {}, d_ff {} "
        "overflows 64 bits",
        c.vocab, c.d_model, c.n_layers, c.n_heads, c.d_k, c.d_v, c.d_ff));
  }
  std::size_t mul(std::size_t a, std::size_t b) const {
    std::size_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) overflow();
    return r;
  }
  std::size_t add(std::size_t a, std::size_t b) const {
    std::size_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) overflow();
    return r;
  }
  // A Linear in -> out: weight (out, in), bias (out) with `bias`.
  ParamPart linear(std::size_t in, std::size_t out) const {
    return {.weights = mul(in, out), .biases = c.bias ? out : 0};
  }
  std::size_t total(const ParamPart& p) const { return add(p.weights, p.biases); }
};

double d(std::size_t v) { return static_cast<double>(v); }

}  // namespace

std::size_t LayerParams::attention() const {
  return q.total() + k.total() + v.total() + o.total() + qk_norm.total() + key_smear.total();
}
std::size_t LayerParams::attention_weights() const { return q.weights + k.weights + v.weights + o.weights; }
std::size_t LayerParams::total() const { return attention() + ffn.total() + norms.total(); }  // attention() has qk_norm, key_smear

std::size_t ModelParams::total() const {
  std::size_t n = tok_emb.total() + pos_emb.total() + ln_f.total() + head.total();
  for (const LayerParams& layer : layers) n += layer.total();
  return n;
}

ModelParams count_parameters(const ModelConfig& config, std::size_t context) {
  const ResolvedModelConfig resolved = config.resolved();
  const ModelConfig& c = resolved;
  if (c.n_layers > kMaxCountedLayers) {
    throw std::invalid_argument(fmt::format("count_parameters: n_layers {} is more than the {} layers it lists",
                                            c.n_layers, kMaxCountedLayers));
  }
  const Checked k{c};
  const std::size_t C = c.d_model;
  const bool normed = c.norm != NormPlacement::none;

  // One block; every block has the same sizes.
  LayerParams layer;
  layer.q = k.linear(C, k.mul(c.n_heads, c.d_k));
  layer.k = k.linear(C, k.mul(c.n_kv_heads, c.d_k));
  layer.v = k.linear(C, k.mul(c.n_kv_heads, c.d_v));
  layer.o = k.linear(c.head_combine == HeadCombine::concat ? k.mul(c.n_heads, c.d_v) : c.d_v, C);
  if (c.qk_norm) layer.qk_norm = {.weights = k.mul(2, c.d_k), .biases = 0};  // q_norm, k_norm: (d_k) each
  if (c.key_smear) layer.key_smear = {.weights = c.n_kv_heads, .biases = 0};
  if (!c.attn_only) {
    // MLP: fc1 (d_ff, C), fc2 (C, d_ff); SwiGLU: gate_proj and up_proj (d_ff, C), down_proj (C, d_ff).
    const bool swiglu = c.ffn == FeedForwardType::swiglu;
    const ParamPart in = k.linear(C, c.d_ff), out = k.linear(c.d_ff, C);
    const std::size_t ins = swiglu ? 2 : 1;
    layer.ffn = {.weights = k.add(k.mul(ins, in.weights), out.weights),
                 .biases = k.add(k.mul(ins, in.biases), out.biases)};
  }
  // ln1, and ln2 unless attn_only; RMSNorm has a weight and no bias.
  const std::size_t norms = normed ? (c.attn_only ? 1 : 2) : 0;
  const bool rms = c.norm_type == NormType::rmsnorm;
  layer.norms = {.weights = norms * C, .biases = rms ? 0 : norms * C};
  std::size_t layer_total = k.total(layer.q);
  for (const ParamPart* p : {&layer.k, &layer.v, &layer.o, &layer.qk_norm, &layer.key_smear, &layer.ffn, &layer.norms}) {
    layer_total = k.add(layer_total, k.total(*p));
  }

  ModelParams m;
  m.tok_emb = {.weights = k.mul(c.vocab, C), .biases = 0};
  if (c.pos == PositionEncoding::learned) m.pos_emb = {.weights = k.mul(c.max_len, C), .biases = 0};
  if (normed) m.ln_f = {.weights = C, .biases = rms ? 0 : C};
  if (!c.tie_embeddings) m.head = {.weights = k.mul(c.vocab, C), .biases = 0};
  // The total, checked once here so that total() itself cannot overflow.
  std::size_t total = k.add(k.add(m.tok_emb.total(), m.pos_emb.total()), k.add(m.ln_f.total(), m.head.total()));
  total = k.add(total, k.mul(c.n_layers, layer_total));
  (void)total;
  m.layers.assign(c.n_layers, layer);

  const std::size_t kv_per_layer = k.mul(k.mul(c.n_kv_heads, k.add(c.d_k, c.d_v)), sizeof(float));
  m.kv_cache_bytes_per_token = k.mul(c.n_layers, kv_per_layer);

  const double projections = d(layer.attention_weights()) + d(layer.ffn.weights);
  const double attend = d(c.n_heads) * (d(c.d_k) + d(c.d_v)) * d(context);  // scores and weighted sum
  m.forward_flops_per_token = 2 * (d(c.n_layers) * (projections + attend) + d(c.vocab) * d(C));
  return m;
}

}  // namespace headroom
