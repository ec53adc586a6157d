#include "nn/presets.hpp"

#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nn/config_json.hpp"

namespace headroom {

std::size_t llama_kv_heads(std::size_t n_heads) { return n_heads % 4 == 0 ? n_heads / 4 : n_heads; }

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets{
      {.name = "gpt2",
       // GPT-2 itself used the tanh approximation of GELU (--activation gelu_tanh).
       .summary = "GPT-2's blocks, as the defaults are",
       .keys = {{"norm", "pre"},
                {"activation", "gelu"},
                {"pos", "learned"},
                {"bias", "true"},
                {"tie_embeddings", "false"},
                {"norm_type", "layernorm"},
                {"ffn", "mlp"}}},
      // Llama 3's blocks (Grattafiori et al., 2024): RoPE, RMSNorm before each
      // sublayer, SwiGLU, no biases, an untied head, grouped K/V (8B: 32 query heads
      // over 8 kv heads).
      {.name = "llama",
       .summary = "Llama's blocks",
       .keys = {{"norm", "pre"},
                {"pos", "rope"},
                {"bias", "false"},
                {"tie_embeddings", "false"},
                {"norm_type", "rmsnorm"},
                {"ffn", "swiglu"}},
       .kv_heads = llama_kv_heads,
       .kv_heads_text = "n_heads / 4 where 4 divides n_heads, else n_heads"},
  };
  return presets;
}

std::string preset_names() {
  std::string out;
  for (const ModelPreset& p : model_presets()) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

const ModelPreset& find_preset(const std::string& name) {
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return p;
  }
  throw std::invalid_argument(fmt::format("unknown preset '{}' (presets: {})", name, preset_names()));
}

void apply_preset(const ModelPreset& preset, ModelConfig& config) {
  nlohmann::json keys = nlohmann::json::object();
  for (const PresetKey& k : preset.keys) {
    // true and false are JSON booleans; every other value is an enum's name.
    keys[k.key] = k.value == "true" ? nlohmann::json(true) : k.value == "false" ? nlohmann::json(false)
                                                                                 : nlohmann::json(k.value);
  }
  update_from_json(config, keys, "preset " + preset.name);
}

std::string describe_preset(const ModelPreset& preset) {
  std::string out;
  for (const PresetKey& k : preset.keys) out += fmt::format("{}{}={}", out.empty() ? "" : " ", k.key, k.value);
  if (preset.kv_heads != nullptr) out += fmt::format(" n_kv_heads={}", preset.kv_heads_text);
  return out;
}

std::vector<std::string> block_choices(const ModelConfig& c) {
  std::vector<std::string> out;
  if (c.pos == PositionEncoding::sinusoidal) out.emplace_back("sinusoidal");
  if (c.pos == PositionEncoding::rope) out.emplace_back("rope");
  if (c.pos == PositionEncoding::none) out.emplace_back("no positions");
  if (c.pos_qk_only) out.emplace_back("positions in q/k");
  if (c.norm_type == NormType::rmsnorm && c.norm != NormPlacement::none) out.emplace_back("rmsnorm");
  if (c.ffn == FeedForwardType::swiglu && !c.attn_only) out.emplace_back("swiglu");
  if (c.qk_norm) out.emplace_back("qk-norm");
  if (c.key_smear) out.emplace_back("key smear");
  return out;
}

}  // namespace headroom
