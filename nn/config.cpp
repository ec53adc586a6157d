#include "nn/config.hpp"

#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "nn/attention.hpp"
#include "nn/config_fields.hpp"
#include "nn/config_json.hpp"
#include "nn/strict_json.hpp"

namespace headroom {

NormPlacement parse_norm(const std::string& name) {
  if (name == "pre") return NormPlacement::pre;
  if (name == "post") return NormPlacement::post;
  if (name == "none") return NormPlacement::none;
  throw std::invalid_argument(fmt::format("norm must be 'pre', 'post' or 'none', got '{}'", name));
}

PositionEncoding parse_pos(const std::string& name) {
  if (name == "learned") return PositionEncoding::learned;
  if (name == "sinusoidal") return PositionEncoding::sinusoidal;
  if (name == "rope") return PositionEncoding::rope;
  if (name == "none") return PositionEncoding::none;
  throw std::invalid_argument(
      fmt::format("pos must be 'learned', 'sinusoidal', 'rope' or 'none', got '{}'", name));
}

NormType parse_norm_type(const std::string& name) {
  if (name == "layernorm") return NormType::layernorm;
  if (name == "rmsnorm") return NormType::rmsnorm;
  throw std::invalid_argument(fmt::format("norm_type must be 'layernorm' or 'rmsnorm', got '{}'", name));
}

FeedForwardType parse_ffn(const std::string& name) {
  if (name == "mlp") return FeedForwardType::mlp;
  if (name == "swiglu") return FeedForwardType::swiglu;
  throw std::invalid_argument(fmt::format("ffn must be 'mlp' or 'swiglu', got '{}'", name));
}

std::size_t default_d_ff(std::size_t d_model, FeedForwardType ffn) {
  return ffn == FeedForwardType::mlp ? 4 * d_model : 8 * ((d_model + 2) / 3);
}

std::string to_string(NormPlacement norm) {
  switch (norm) {
    case NormPlacement::pre: return "pre";
    case NormPlacement::post: return "post";
    case NormPlacement::none: return "none";
  }
  return "pre";
}
std::string to_string(PositionEncoding pos) {
  switch (pos) {
    case PositionEncoding::learned: return "learned";
    case PositionEncoding::sinusoidal: return "sinusoidal";
    case PositionEncoding::rope: return "rope";
    case PositionEncoding::none: return "none";
  }
  return "learned";
}
std::string to_string(NormType type) { return type == NormType::layernorm ? "layernorm" : "rmsnorm"; }
std::string to_string(FeedForwardType type) { return type == FeedForwardType::mlp ? "mlp" : "swiglu"; }

AttentionOptions attention_options(const ModelConfig& c) {
  return AttentionOptions{.d_model = c.d_model,
                          .n_heads = c.n_heads,
                          .d_k = c.d_k,
                          .d_v = c.d_v,
                          .n_kv_heads = c.n_kv_heads,
                          .head_combine = c.head_combine,
                          .causal = c.causal,
                          .bias = c.bias,
                          .attn_scale = c.attn_scale,
                          .qk_norm = c.qk_norm,
                          .qk_norm_eps = c.ln_eps,
                          .key_smear = c.key_smear,
                          .rope = c.pos == PositionEncoding::rope,
                          .rope_base = c.rope_base,
                          .dropout = c.dropout,
                          .init_std = c.init_std};
}

ResolvedModelConfig ModelConfig::resolved() const {
  ModelConfig r = *this;
  auto positive = [](const char* key, std::size_t v) {
    if (v == 0) throw std::invalid_argument(fmt::format("model config: {} must be positive, got 0", key));
  };
  positive("vocab", vocab);
  positive("d_model", d_model);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("max_len", max_len);
  // docs/design.md #11: a value the model would not read is refused. An attention-only
  // model has no feed-forward sublayer, so its d_ff is 0 and its activation the
  // default; one without norms has no ln_eps to use. The defaults say nothing, as in
  // what headroom writes for a model with a feed-forward (d_ff 4 * d_model), so a
  // run's config.json with --attn-only on top is an attention-only model of that run.
  const std::size_t ffn_width = default_d_ff(d_model, ffn);
  if (attn_only && d_ff != 0 && d_ff != ffn_width) {
    throw std::invalid_argument(fmt::format(
        "model config: d_ff {} with attn_only: an attention-only block has no feed-forward sublayer", d_ff));
  }
  if (attn_only && activation != ModelConfig{}.activation) {
    throw std::invalid_argument(fmt::format(
        "model config: activation '{}' with attn_only: an attention-only block has no feed-forward sublayer",
        to_string(activation)));
  }
  const ModelConfig plain;
  if (attn_only && ffn != plain.ffn) {
    throw std::invalid_argument(fmt::format(
        "model config: ffn '{}' with attn_only: an attention-only block has no feed-forward sublayer",
        to_string(ffn)));
  }
  if (ffn == FeedForwardType::swiglu && activation != plain.activation) {
    throw std::invalid_argument(fmt::format(
        "model config: activation '{}' with ffn 'swiglu': SwiGLU's gate is always silu", to_string(activation)));
  }
  if (norm == NormPlacement::none && !qk_norm && ln_eps != plain.ln_eps) {
    throw std::invalid_argument(fmt::format(
        "model config: ln_eps {} with norm 'none': a model without LayerNorm has no eps to use", ln_eps));
  }
  if (norm == NormPlacement::none && norm_type != plain.norm_type) {
    throw std::invalid_argument(fmt::format(
        "model config: norm_type '{}' with norm 'none': a model without norms has no norm type",
        to_string(norm_type)));
  }
  if (pos != PositionEncoding::rope && rope_base != plain.rope_base) {
    throw std::invalid_argument(fmt::format(
        "model config: rope_base {} with pos '{}': only pos 'rope' reads it", rope_base, to_string(pos)));
  }
  if (!(rope_base > 1) || !std::isfinite(rope_base)) {
    throw std::invalid_argument(fmt::format("model config: rope_base must be a number above 1, got {}", rope_base));
  }
  if (pos_qk_only && pos != PositionEncoding::learned && pos != PositionEncoding::sinusoidal) {
    throw std::invalid_argument(fmt::format(
        "model config: pos_qk_only with pos '{}': it adds a position table, which only pos 'learned' and "
        "'sinusoidal' have",
        to_string(pos)));
  }
  if (!(init_std > 0) || !std::isfinite(init_std)) {
    throw std::invalid_argument(fmt::format("model config: init_std must be a positive number, got {}", init_std));
  }
  if (!(dropout >= 0.0 && dropout < 1.0)) {
    throw std::invalid_argument(fmt::format("model config: dropout must be in [0, 1), got {}", dropout));
  }
  r.d_ff = attn_only ? 0 : d_ff == 0 ? ffn_width : d_ff;
  if (!(ln_eps > 0) || !std::isfinite(ln_eps)) {
    throw std::invalid_argument(fmt::format("model config: ln_eps must be a positive number, got {}", ln_eps));
  }
  // The attention options resolve and check d_k, d_v, n_kv_heads and attn_scale
  // (rope's even d_k is checked below, in the config's words).
  AttentionOptions unrotated = attention_options(*this);
  unrotated.rope = false;
  const AttentionOptions a = unrotated.resolved();
  r.d_k = a.d_k;
  r.d_v = a.d_v;
  r.n_kv_heads = a.n_kv_heads;
  r.attn_scale = a.attn_scale;
  if (pos == PositionEncoding::sinusoidal && d_model % 2 != 0) {
    throw std::invalid_argument(fmt::format(
        "model config: sinusoidal positions need an even d_model, got {}", d_model));
  }
  if (pos == PositionEncoding::rope && r.d_k % 2 != 0) {
    throw std::invalid_argument(
        fmt::format("model config: pos 'rope' turns pairs of q/k channels, so d_k must be even, got {}", r.d_k));
  }
  return ResolvedModelConfig(r);
}

namespace {

std::string type_name(const nlohmann::json& v) { return v.type_name(); }

std::size_t read_size(const nlohmann::json& v, const std::string& key, const std::string& source) {
  if (!v.is_number_integer() || v.get<long long>() < 0) {
    throw std::invalid_argument(fmt::format("{}: '{}' must be a non-negative integer, got {} ({})",
                                            source, key, v.dump(), type_name(v)));
  }
  return v.get<std::size_t>();
}

double read_number(const nlohmann::json& v, const std::string& key, const std::string& source) {
  if (!v.is_number()) {
    throw std::invalid_argument(
        fmt::format("{}: '{}' must be a number, got {} ({})", source, key, v.dump(), type_name(v)));
  }
  return v.get<double>();
}

bool read_bool(const nlohmann::json& v, const std::string& key, const std::string& source) {
  if (!v.is_boolean()) {
    throw std::invalid_argument(
        fmt::format("{}: '{}' must be true or false, got {} ({})", source, key, v.dump(), type_name(v)));
  }
  return v.get<bool>();
}

std::string read_string(const nlohmann::json& v, const std::string& key, const std::string& source) {
  if (!v.is_string()) {
    throw std::invalid_argument(
        fmt::format("{}: '{}' must be a string, got {} ({})", source, key, v.dump(), type_name(v)));
  }
  return v.get<std::string>();
}

// Runs parse and prefixes its error with the source and key.
template <typename F>
auto with_context(const std::string& source, const std::string& key, F parse) {
  try {
    return parse();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: '{}': {}", source, key, e.what()));
  }
}

// A string key naming an enum value: a wrong type is read_string's error, an unknown
// name is parse's error under the source and key (each prefixed once).
template <typename F>
auto read_choice(const nlohmann::json& v, const std::string& key, const std::string& source, F parse) {
  const std::string name = read_string(v, key, source);
  return with_context(source, key, [&] { return parse(name); });
}

// The JSON form of one field's value; a resolved config always has attn_scale.
template <typename V>
nlohmann::json json_value(const V& v) {
  if constexpr (std::is_enum_v<V>) {
    return to_string(v);
  } else if constexpr (std::is_same_v<V, std::optional<double>>) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  } else {
    return v;
  }
}

// Reads one field's value from JSON, with the messages of the read_* above.
template <typename V>
V read_value(const nlohmann::json& v, const std::string& key, const std::string& source,
             V (*parse)(const std::string&)) {
  if constexpr (std::is_enum_v<V>) {
    return read_choice(v, key, source, parse);
  } else if constexpr (std::is_same_v<V, std::optional<double>>) {
    return v.is_null() ? std::nullopt : std::optional<double>(read_number(v, key, source));
  } else if constexpr (std::is_same_v<V, bool>) {
    return read_bool(v, key, source);
  } else if constexpr (std::is_same_v<V, double>) {
    return read_number(v, key, source);
  } else {
    static_assert(std::is_same_v<V, std::size_t>);
    return read_size(v, key, source);
  }
}

}  // namespace

nlohmann::json to_json(const ResolvedModelConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for_each_model_field([&](const auto& f) { j[f.key] = json_value(config.get().*f.member); });
  return j;
}

nlohmann::json to_json(const ModelConfig& config) { return to_json(config.resolved()); }

std::vector<std::string> model_config_keys() {
  std::vector<std::string> keys;
  for_each_model_field([&](const auto& f) { keys.emplace_back(f.key); });
  return keys;
}

void update_from_json(ModelConfig& c, const nlohmann::json& object, const std::string& source) {
  if (!object.is_object()) {
    throw std::invalid_argument(fmt::format("{}: the model config must be a JSON object, got {}", source,
                                            type_name(object)));
  }
  for (const auto& item : object.items()) {
    // A named reference, not a structured binding: the lambda captures it, which
    // clang before 16 rejects for bindings (the fuzz build uses clang 14).
    const std::string& key = item.key();
    bool known = false;
    for_each_model_field([&](const auto& f) {
      if (known || key != f.key) return;
      known = true;
      c.*f.member = read_value(item.value(), key, source, f.parse);
    });
    if (!known) {
      throw std::invalid_argument(fmt::format("{}: unknown model config key '{}' (keys: {})", source, key,
                                              fmt::join(model_config_keys(), ", ")));
    }
  }
}

std::string model_config_to_json(const ModelConfig& config) { return to_json(config).dump(2); }

ModelConfig model_config_from_json(const std::string& json_text, const std::string& source) {
  const nlohmann::json object = parse_strict_json(json_text, source);
  ModelConfig c;
  update_from_json(c, object, source);
  try {
    return c.resolved();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: {}", source, e.what()));
  }
}

}  // namespace headroom
