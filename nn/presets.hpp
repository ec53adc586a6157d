// Model presets: named sets of config keys (docs/design.md #17), `--preset NAME` on
// train, ablate and params. A preset sits between the task's defaults and the config
// file in precedence, so a file key or a flag still overrides any one of its keys.
// Nothing records the preset itself: config.json holds the resolved keys it set.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nn/config.hpp"

namespace headroom {

// One key a preset sets: a model config key and its value as a --sweep writes it
// ("pos", "rope"; "bias", "false").
struct PresetKey {
  std::string key;
  std::string value;
};

// n_kv_heads as a function of the final n_heads (Llama's grouped K/V); null: the
// preset leaves n_kv_heads alone.
using KvHeadsRule = std::size_t (*)(std::size_t n_heads);

struct ModelPreset {
  std::string name;              // "llama"
  std::string summary;           // one line: what it is
  std::vector<PresetKey> keys;   // in the field table's order (nn/config_fields.hpp)
  KvHeadsRule kv_heads = nullptr;
  std::string kv_heads_text{};   // the rule in words, "n_heads / 4 where 4 divides n_heads, else n_heads"
};

// gpt2 (the defaults: learned positions, pre-norm LayerNorm, a GELU MLP of 4 d_model,
// biases, untied) and llama (rope, rmsnorm, swiglu, no biases, pre-norm, untied, and
// n_kv_heads = n_heads / 4 where 4 divides n_heads, as Llama 3 8B's 32:8).
const std::vector<ModelPreset>& model_presets();
// "gpt2, llama"
std::string preset_names();
// The preset of that name; another is a std::invalid_argument naming it and the
// presets: "unknown preset 'gpt3' (presets: gpt2, llama)".
const ModelPreset& find_preset(const std::string& name);
// Writes the preset's keys into `config`; n_kv_heads is left to kv_heads, which
// needs the final n_heads (after the file and the flags).
void apply_preset(const ModelPreset& preset, ModelConfig& config);
// The keys it sets, as help shows them: "pos=rope norm_type=rmsnorm ... n_kv_heads=n_heads / 4 where ...".
std::string describe_preset(const ModelPreset& preset);
// The block choices of docs/design.md #17 where `config` differs from the defaults,
// as the headers of train, params and ablate name them, in this order: "sinusoidal",
// "rope" or "no positions"; "positions in q/k"; "rmsnorm"; "swiglu"; "qk-norm"; "key smear".
// Empty for GPT-2's blocks.
std::vector<std::string> block_choices(const ModelConfig& config);

// Llama's rule: n_heads / 4 where 4 divides n_heads, else n_heads (no grouping).
std::size_t llama_kv_heads(std::size_t n_heads);

}  // namespace headroom
