// `headroom params`: a model's parameters by component, its KV cache and its forward
// FLOPs per token, counted from the config alone (nn/param_count.hpp): nothing is
// allocated, so a 7B-parameter config answers at once.
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/train_flags.hpp"
#include "cli/validators.hpp"
#include "nn/config_json.hpp"
#include "nn/param_count.hpp"
#include "nn/presets.hpp"
#include "train/resources.hpp"

namespace headroom::cli {
namespace {

struct ParamsFlags : TrainFlags {
  std::optional<std::size_t> context;  // none: the model's max_len
  bool json = false;
};

// The model the flags describe: train's precedence (the task's defaults, --config,
// the flags), the vocabulary from the config's model or else the task's, max_len
// from --seq-len unless given.
ModelConfig model_of(const ParamsFlags& flags) {
  // Dropout holds no weights and acts in training only, so a --dropout above 0 would
  // change nothing params says about the model or its forward (docs/design.md #11). A
  // file's model.dropout passes: it describes the run the file came from.
  if (const auto it = flags.given.find("model.dropout"); it != flags.given.end()) {
    TrainConfig probe;
    it->second(probe);
    if (probe.model.dropout != 0) {
      throw std::invalid_argument(fmt::format(
          "--dropout {}: params counts a model's weights and its forward's FLOPs, which dropout does not change, so "
          "it would be ignored; leave it out",
          probe.model.dropout));
    }
  }
  const TrainConfig c = build_config(flags, flags.config_file);
  ModelConfig m = c.model;
  if (m.vocab == 0) {
    if (reads_text(c.data)) {
      throw std::invalid_argument(fmt::format(
          "--config {}: a text run's vocabulary comes from its text ({}), which params does not read; give --vocab "
          "through the file's model.vocab, or count the run's own config.json",
          flags.config_file, data_source(c.data)));
    }
    m.vocab = c.data.vocab;
  }
  if (m.max_len == 0) m.max_len = c.data.seq_len;
  return m;
}

// 131072000 -> "131,072,000".
std::string grouped(std::size_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

nlohmann::json part_json(const ParamPart& p) {
  return {{"weights", p.weights}, {"biases", p.biases}, {"total", p.total()}};
}

nlohmann::json layer_json(const LayerParams& l) {
  return {{"q", part_json(l.q)},         {"k", part_json(l.k)},   {"v", part_json(l.v)},
          {"o", part_json(l.o)},         {"qk_norm", part_json(l.qk_norm)}, {"key_smear", part_json(l.key_smear)},
          {"ffn", part_json(l.ffn)},     {"norms", part_json(l.norms)},
          {"attention", l.attention()}, {"total", l.total()}};
}

void print_json(const ModelConfig& model, std::size_t context, const ModelParams& p, const std::string& preset) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerParams& l : p.layers) layers.push_back(layer_json(l));
  nlohmann::json out{{"config", to_json(model)},
                           {"context", context},
                           {"tok_emb", part_json(p.tok_emb)},
                           {"pos_emb", part_json(p.pos_emb)},
                           {"layers", layers},
                           {"ln_f", part_json(p.ln_f)},
                           {"head", part_json(p.head)},
                           {"total", p.total()},
                           {"kv_cache_bytes_per_token", p.kv_cache_bytes_per_token},
                           {"forward_flops_per_token", p.forward_flops_per_token}};
  if (!preset.empty()) out["preset"] = preset;
  fmt::print("{}\n", out.dump(2));
}

// "preset llama: norm=pre pos=rope ... n_kv_heads=1": the preset's keys with the values
// the model has, a key that --config or a flag changed marked so.
std::string preset_line(const std::string& name, const ModelConfig& m) {
  const ModelPreset& preset = find_preset(name);
  const nlohmann::json config = to_json(m);
  std::string out;
  auto put = [&](const std::string& key, const std::string& preset_value) {
    const nlohmann::json& v = config.at(key);
    const std::string value = v.is_string() ? v.get<std::string>() : v.dump();
    out += fmt::format(" {}={}{}", key, value, value != preset_value ? " (changed)" : "");
  };
  for (const PresetKey& k : preset.keys) put(k.key, k.value);
  if (preset.kv_heads != nullptr) put("n_kv_heads", std::to_string(preset.kv_heads(m.n_heads)));
  return fmt::format("preset {}:{}", name, out);
}

void print_table(const ModelConfig& m, std::size_t context, const ModelParams& p, const std::string& preset) {
  const std::string norm = m.norm == NormPlacement::none ? "no norm" : to_string(m.norm) + "-norm";
  std::string blocks;
  for (const std::string& b : block_choices(m)) blocks += ", " + b;
  fmt::print("headroom params: vocab {}, d_model {}, {} layer{}, {} heads (kv {}), d_k {}, d_v {}, {}, {}{}{}\n", m.vocab,
             m.d_model, m.n_layers, m.n_layers == 1 ? "" : "s", m.n_heads, m.n_kv_heads, m.d_k, m.d_v,
             m.attn_only ? std::string("attention-only") : fmt::format("d_ff {}", m.d_ff), norm, blocks,
             m.tie_embeddings ? ", tied" : "");
  if (!preset.empty()) fmt::print("{}\n", preset_line(preset, m));
  // Every layer has the same sizes: one block of rows stands for all of them.
  const LayerParams none{};
  const LayerParams& l = p.layers.empty() ? none : p.layers.front();
  struct Row {
    std::string name;
    ParamPart part;
  };
  auto sum = [](std::initializer_list<ParamPart> parts) {
    ParamPart s;
    for (const ParamPart& x : parts) s.weights += x.weights, s.biases += x.biases;
    return s;
  };
  const ParamPart layer = sum({l.q, l.k, l.v, l.o, l.qk_norm, l.key_smear, l.ffn, l.norms});
  ParamPart layers;
  layers.weights = layer.weights * p.layers.size();
  layers.biases = layer.biases * p.layers.size();
  const std::size_t n = p.layers.size();
  const std::string each = n == 1 ? std::string("the layer:") : fmt::format("each of {} layers:", n);
  const bool rms = m.norm_type == NormType::rmsnorm && m.norm != NormPlacement::none;
  const std::string norms = m.norm == NormPlacement::none ? "  norms"
                            : m.attn_only                 ? "  norms (ln1)"
                                                          : "  norms (ln1, ln2)";
  // The rows of #17's parameters show only when the model has them.
  std::vector<Row> rows{
      {"tok_emb", p.tok_emb},
      {"pos_emb", p.pos_emb},
      {each, {}},
      {"  attention q", l.q},
      {"  attention k", l.k},
      {"  attention v", l.v},
      {"  attention o", l.o},
  };
  if (m.qk_norm) rows.push_back({"  attention qk norms (q_norm, k_norm)", l.qk_norm});
  if (m.key_smear) rows.push_back({"  attention key smear", l.key_smear});
  const std::vector<Row> rest{
      {"  attention", sum({l.q, l.k, l.v, l.o, l.qk_norm, l.key_smear})},
      {m.ffn == FeedForwardType::swiglu && !m.attn_only ? "  ffn (gate, up, down)" : "  ffn", l.ffn},
      {rms ? norms + " rmsnorm" : norms, l.norms},
      {"  layer", layer},
      {fmt::format("{} layer{}", n, n == 1 ? "" : "s"), layers},
      {rms ? "ln_f rmsnorm" : "ln_f", p.ln_f},
      {m.tie_embeddings ? "head (tied: tok_emb)" : "head", p.head},
      {"total", sum({p.tok_emb, p.pos_emb, layers, p.ln_f, p.head})},
  };
  rows.insert(rows.end(), rest.begin(), rest.end());
  std::size_t name_w = 9, num_w = 7;
  for (const Row& r : rows) {
    name_w = std::max(name_w, r.name.size());
    num_w = std::max({num_w, grouped(r.part.weights).size(), grouped(r.part.total()).size()});
  }
  fmt::print("{:<{}}  {:>{}}  {:>{}}  {:>{}}\n", "component", name_w, "weights", num_w, "biases", num_w, "total",
             num_w);
  for (const Row& r : rows) {
    if (r.name == each) {
      fmt::print("{}\n", r.name);
      continue;
    }
    fmt::print("{:<{}}  {:>{}}  {:>{}}  {:>{}}\n", r.name, name_w, grouped(r.part.weights), num_w,
               grouped(r.part.biases), num_w, grouped(r.part.total()), num_w);
  }
  fmt::print("KV cache: {} bytes per token ({}; float32 K and V, {} kv heads x (d_k {} + d_v {}) x {} layer{})\n",
             grouped(p.kv_cache_bytes_per_token), format_bytes(static_cast<double>(p.kv_cache_bytes_per_token)),
             m.n_kv_heads, m.d_k, m.d_v, m.n_layers, m.n_layers == 1 ? "" : "s");
  fmt::print("forward FLOPs per token: {:.4g} at context {} (a multiply-add is 2 FLOPs; projections, head, scores "
             "and weighted sum)\n",
             p.forward_flops_per_token, context);
}

int run_params(const ParamsFlags& flags) {
  const ModelConfig model = model_of(flags);
  const ResolvedModelConfig resolved = model.resolved();
  const std::size_t context = flags.context.value_or(resolved->max_len);
  if (context > resolved->max_len) {
    throw std::invalid_argument(fmt::format("--context {}: the model reads at most max_len {} tokens", context,
                                            resolved->max_len));
  }
  const ModelParams p = count_parameters(resolved, context);
  if (flags.json) {
    print_json(resolved, context, p, flags.preset);
  } else {
    print_table(resolved, context, p, flags.preset);
  }
  return 0;
}

}  // namespace

Run add_params_command(CLI::App& app) {
  auto f = std::make_shared<ParamsFlags>();
  CLI::App* cmd = app.add_subcommand(
      "params",
      "Count a model's parameters by component, per layer and in total, with its KV cache in bytes per token and its "
      "forward FLOPs per token, from the config alone: nothing is allocated, so any size answers at once.");
  cmd->footer(
      "The components: tok_emb, pos_emb, attention q/k/v/o, feed-forward, norms, ln_f, head. --seq-len sets max_len "
      "unless --max-len does.");
  (void)add_train_flags(*cmd, *f, TrainFlagSet::params);
  cmd->add_option("--config", f->config_file,
                  "Read the model from a JSON file like the config.json a run writes (flags override it)");
  cmd->add_option("--context", f->context,
                  "Tokens of context the FLOPs assume, at most max_len (default max_len): the attention scores and "
                  "weighted sum grow with it")
      ->check(kCount);
  cmd->add_flag("--json", f->json, "Print one JSON object (every layer listed) instead of the table");
  return [f] { return run_params(*f); };
}

}  // namespace headroom::cli
