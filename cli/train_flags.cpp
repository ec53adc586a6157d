#include "cli/train_flags.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/validators.hpp"
#include "data/task.hpp"
#include "nn/config_json.hpp"

namespace headroom::cli {
namespace {

template <typename V>
void apply(std::optional<V> flag, V& target) {
  if (flag) target = *flag;
}

}  // namespace

TrainConfig build_config(const TrainFlags& f, const std::string& config_file) {
  nlohmann::json object;
  if (!config_file.empty()) {
    std::ifstream in(config_file);
    if (!in) throw std::invalid_argument(fmt::format("cannot read config file {}", config_file));
    std::stringstream text;
    text << in.rdbuf();
    try {
      object = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::parse_error& e) {
      throw std::invalid_argument(fmt::format("{}: not valid JSON: {}", config_file, e.what()));
    }
  }
  // Precedence, lowest first: the task's defaults, the config file, the flags.
  std::string task = TrainConfig{}.data.task;
  if (object.is_object() && object.contains("data") && object["data"].is_object() &&
      object["data"].contains("task") && object["data"]["task"].is_string()) {
    task = object["data"]["task"].get<std::string>();
  }
  if (f.task) task = *f.task;
  TrainConfig c = task_defaults(task);
  if (!config_file.empty()) update_from_json(c, object, config_file);
  ModelConfig& m = c.model;
  apply(f.d_model, m.d_model);
  apply(f.heads, m.n_heads);
  apply(f.dk, m.d_k);
  apply(f.dv, m.d_v);
  apply(f.kv_heads, m.n_kv_heads);
  apply(f.layers, m.n_layers);
  apply(f.d_ff, m.d_ff);
  apply(f.max_len, m.max_len);
  if (f.norm) m.norm = parse_norm(*f.norm);
  if (f.activation) m.activation = parse_activation(*f.activation);
  if (f.pos) m.pos = parse_pos(*f.pos);
  if (f.attn_scale) m.attn_scale = *f.attn_scale;
  if (f.no_bias) m.bias = false;
  if (f.tie) m.tie_embeddings = true;
  if (f.non_causal) m.causal = false;
  apply(f.task, c.data.task);
  apply(f.text, c.data.text);
  apply(f.seq_len, c.data.seq_len);
  apply(f.vocab, c.data.vocab);
  OptimConfig& o = c.optim;
  apply(f.optimizer, o.optimizer);
  apply(f.schedule, o.schedule);
  apply(f.steps, o.steps);
  apply(f.batch, o.batch);
  apply(f.warmup, o.warmup);
  apply(f.eval_every, o.eval_every);
  apply(f.eval_batches, o.eval_batches);
  apply(f.save_every, o.save_every);
  apply(f.keep_checkpoints, o.keep_checkpoints);
  apply(f.max_bad_steps, o.max_bad_steps);
  if (f.detect_anomaly) o.detect_anomaly = true;
  apply(f.lr, o.lr);
  apply(f.min_lr, o.min_lr);
  apply(f.clip, o.clip);
  apply(f.weight_decay, o.weight_decay);
  apply(f.momentum, o.momentum);
  apply(f.seed, o.seed);
  apply(f.threads, o.threads);
  return c;
}

TrainFlagGroups add_train_flags(CLI::App& app, TrainFlags& flags, TrainFlagSet set) {
  // (Moved here from train_command.cpp unchanged, so `train --help` reads as before.)
  TrainFlags* f = &flags;
  CLI::App* cmd = &app;
  const bool train = set == TrainFlagSet::train;
  const TrainConfig d;
  auto group = [&](const char* name) { return cmd->add_option_group(name); };

  CLI::Option_group* model = group("Model");
  model->add_option("--d-model", f->d_model, fmt::format("Model width (default {})", d.model.d_model))->check(kWholeNumber);
  if (train) {
    model->add_option("--heads", f->heads, fmt::format("Query heads (default {})", d.model.n_heads))->check(kWholeNumber);
    model->add_option("--dk", f->dk, "Per-head query/key width (default d_model / heads)")->check(kPositiveWholeNumber);
  }
  model->add_option("--dv", f->dv, "Per-head value width (default d_k)")->check(kPositiveWholeNumber);
  if (train) {
    model->add_option("--kv-heads", f->kv_heads, "Key/value heads: 1 is MQA, fewer than --heads is GQA (default --heads)")->check(kPositiveWholeNumber);
  }
  model->add_option("--layers", f->layers, fmt::format("Transformer blocks (default {})", d.model.n_layers))->check(kWholeNumber);
  model->add_option("--d-ff", f->d_ff, "Feed-forward width (default 4 * d_model)")->check(kPositiveWholeNumber);
  model->add_option("--max-len", f->max_len, "Longest sequence the model accepts (default --seq-len)")->check(kPositiveWholeNumber);
  model->add_option("--norm", f->norm, "pre | post (default pre)");
  model->add_option("--activation", f->activation, "gelu | gelu_tanh | relu (default gelu)");
  model->add_option("--pos", f->pos, "learned | sinusoidal (default learned)");
  model->add_option("--attn-scale", f->attn_scale, "Attention score scale (default 1/sqrt(d_k))")->check(kPositive);
  model->add_flag("--no-bias", f->no_bias, "Linear layers without bias");
  model->add_flag("--tie-embeddings", f->tie, "Share the output head with the token embedding");
  model->add_flag("--non-causal", f->non_causal, "Let every position attend to every position");

  CLI::Option_group* data = group("Data");
  std::string tasks;
  for (const auto& t : task_names()) tasks += (tasks.empty() ? "" : " | ") + t;
  data->add_option("--task", f->task, fmt::format("Toy task: {} (default {})", tasks, d.data.task));
  data->add_option("--text", f->text, "Train a character-level model on this UTF-8 text file instead of a task");
  data->add_option("--seq-len", f->seq_len, fmt::format("Tokens the model reads per row (default {})", d.data.seq_len))->check(kWholeNumber);
  data->add_option("--vocab", f->vocab, fmt::format("Toy task vocabulary, 3 special tokens included (default {})",
                                                   d.data.vocab))->check(kWholeNumber);

  CLI::Option_group* opt = group("Training");
  opt->add_option("--steps", f->steps, fmt::format("Optimizer steps (default {})", d.optim.steps))->check(kWholeNumber);
  opt->add_option("--batch", f->batch, fmt::format("Rows per step (default {})", d.optim.batch))->check(kWholeNumber);
  opt->add_option("--lr", f->lr, fmt::format("Peak learning rate, reached after --warmup steps (default {})",
                                             d.optim.lr))->check(kPositive);
  opt->add_option("--optimizer", f->optimizer, "adamw | adam | sgd (default adamw)");
  opt->add_option("--schedule", f->schedule,
                  "constant | cosine (linear warm-up, cosine decay to --min-lr) | inverse_sqrt (linear warm-up, "
                  "then lr * sqrt(warmup / t)) (default cosine)");
  opt->add_option("--warmup", f->warmup, fmt::format("Warm-up steps (default {})", d.optim.warmup))->check(kWholeNumber);
  opt->add_option("--min-lr", f->min_lr, "Floor of the cosine decay (default 0)")->check(kNonNegative);
  opt->add_option("--clip", f->clip, fmt::format("Clip the global gradient norm; 0 is off (default {})", d.optim.clip))->check(kNonNegative);
  opt->add_option("--weight-decay", f->weight_decay,
                  fmt::format("AdamW decoupled decay, skipping biases, norms and embeddings; L2 for adam and sgd "
                              "(default {})",
                              d.optim.weight_decay))->check(kNonNegative);
  opt->add_option("--momentum", f->momentum, "SGD momentum (default 0.9)")->check(kNonNegative);
  if (train) opt->add_option("--seed", f->seed, "Seed for weights, batches and dropout (default 0)")->check(kWholeNumber);
  opt->add_option("--threads", f->threads, "threads for the GEMMs and for headroom's own loops (default 1)")->check(kWholeNumber);
  opt->add_option("--eval-every", f->eval_every, fmt::format("Steps between validations (default {})",
                                                            d.optim.eval_every))->check(kWholeNumber);
  opt->add_option("--eval-batches", f->eval_batches,
                  fmt::format("Validation batches per evaluation (default {})", d.optim.eval_batches))->check(kWholeNumber);

  opt->add_option("--save-every", f->save_every,
                  fmt::format("Steps between rolling checkpoints in --out; 0 saves only at the end and on Ctrl-C "
                              "(default {})",
                              d.optim.save_every))->check(kWholeNumber);
  opt->add_option("--keep-checkpoints", f->keep_checkpoints,
                  fmt::format("Rolling checkpoints kept (default {})", d.optim.keep_checkpoints))->check(kWholeNumber);
  opt->add_option("--max-bad-steps", f->max_bad_steps,
                  fmt::format("Stop after this many consecutive steps with a non-finite loss or gradient norm; "
                              "such steps never update the weights (default {})",
                              d.optim.max_bad_steps))->check(kWholeNumber);
  opt->add_flag("--detect-anomaly", f->detect_anomaly,
                "Check every op for NaN/Inf and name the first one that makes it (slower)");
  return {.model = model, .data = data, .training = opt};
}

}  // namespace headroom::cli
