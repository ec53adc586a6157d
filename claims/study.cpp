#include "claims/study.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "data/task_defaults.hpp"
#include "train/config.hpp"

namespace headroom {
namespace {

// What a budget spends. Every sweep trains `steps` steps per run unless it says
// otherwise; the grids are what docs/cli/claims.md lists.
struct BudgetNumbers {
  std::size_t seeds = 0, max_seeds = 0;  // per seed set
  std::size_t steps = 0, eval_every = 0;
  std::size_t recall_steps = 0;
  std::string scale_dks;     // claim 2's d_k grid
  std::string lag_heads;     // claims 4, 5 and 7: heads at d_model 48, d_k auto
  std::string recall_heads;  // claim 5: recall heads at d_model 48, d_k auto
};

BudgetNumbers budget_numbers(Budget budget) {
  switch (budget) {
    case Budget::quick:
      // Each head costs time of its own: a run at h = 48 takes many times one at
      // h = 1. So quick stops at d_k 2 (h = 24) and trains 600 steps.
      return {.seeds = 3, .max_seeds = 3, .steps = 600, .eval_every = 200, .recall_steps = 1000, .scale_dks = "16,64,256",
              .lag_heads = "1,2,3,4,8,16,24", .recall_heads = "2,8,24"};
    case Budget::full:
      // Claim 2's runs cost more as d_k grows (docs/cli/claims.md, Budgets), and its
      // verdicts read the largest d_k and the models at initialisation alone: three
      // points a factor of 4 apart fit the slope of 2a and draw the loss curve.
      return {.seeds = 5, .max_seeds = 10, .steps = 3000, .eval_every = 250, .recall_steps = 6000, .scale_dks = "16,64,256",
              .lag_heads = "1,2,3,4,8,16,24,48", .recall_heads = "1,2,4,8,16,24,48"};
    case Budget::smoke:
      break;
  }
  return {.seeds = 2, .max_seeds = 3, .steps = 3, .eval_every = 3, .recall_steps = 3, .scale_dks = "16,32",
          .lag_heads = "1,2,48", .recall_heads = "2,48"};
}

// lags with 16 content tokens (its vocabulary is the content, the query, the pad and
// one more: V - 3 content tokens, data/task.hpp), the V = 16.
constexpr std::size_t kLagsVocab = 19;

BaseSetting setting(std::string key, nlohmann::json value, std::string flags) {
  return {.key = std::move(key), .value = std::move(value), .flags = std::move(flags)};
}

// The 1-layer attention-only model without LayerNorm of issue 14: a head applies
// one token table to whatever it reads, so one head cannot fit A_1[u] + A_2[v].
std::vector<BaseSetting> lags_model(std::size_t d_model, const BudgetNumbers& b) {
  return {setting("data.task", "lags", "--task lags"),
          setting("data.vocab", kLagsVocab, fmt::format("--vocab {}", kLagsVocab)),
          setting("model.n_layers", 1, "--layers 1"),
          setting("model.attn_only", true, "--attn-only"),
          setting("model.norm", "none", "--norm none"),
          setting("model.d_model", d_model, fmt::format("--d-model {}", d_model)),
          setting("train.steps", b.steps, fmt::format("--steps {}", b.steps)),
          setting("train.eval_every", b.eval_every, fmt::format("--eval-every {}", b.eval_every)),
          // Without LayerNorm and with GPT-2's 0.02 init the logits start tiny, and at
          // 3e-3 no h learns anything in quick's 600 steps; at 0.03 one head learns
          // part of the task and two learn nearly all of it.
          setting("train.lr", 0.03, "--lr 0.03")};
}

// What a budget spends on the real-text suite. Both sweeps stop a run once its val
// loss has not improved for `patience` validations (trained to convergence, with
// `steps` as the cap) where patience is set.
struct TextBudget {
  std::size_t seeds = 0, max_seeds = 0;  // per seed set
  std::string heads;                     // at d_model `d_model`, d_k auto
  std::size_t d_model = 0, layers = 0;
  std::size_t classify_seq_len = 0, classify_steps = 0, classify_eval_batches = 0;
  std::size_t kjv_seq_len = 0, kjv_steps = 0, kjv_eval_batches = 0;
  std::size_t eval_every = 0, patience = 0;
};

TextBudget text_budget(Budget budget) {
  switch (budget) {
    case Budget::quick:
      // Rows of 64 characters (a fortune cut after 63) and 1000 steps: every point
      // still learning, so a smoke test of the suite rather than its answer.
      return {.seeds = 2, .max_seeds = 2, .heads = "1,4,8,16", .d_model = 64, .layers = 2, .classify_seq_len = 64,
              .classify_steps = 1000, .classify_eval_batches = 34, .kjv_seq_len = 64, .kjv_steps = 1000,
              .kjv_eval_batches = 8, .eval_every = 250, .patience = 0};
    case Budget::full:
      // The corpus defaults (data/task_defaults.cpp, text_settings) trained to
      // convergence: 34 batches of 32 score all 1,070 val items of fortunes-topic at
      // every validation, the same items for every seed; 16 of kjv's are 65,536
      // characters, windows drawn from each run's seed, so their draw is part of the
      // seed noise.
      return {.seeds = 3, .max_seeds = 5, .heads = "1,2,4,8,16", .d_model = 64, .layers = 2, .classify_seq_len = 128,
              .classify_steps = 8000, .classify_eval_batches = 34, .kjv_seq_len = 128, .kjv_steps = 6000,
              .kjv_eval_batches = 16, .eval_every = 250, .patience = 4};
    case Budget::smoke:
      break;
  }
  return {.seeds = 2, .max_seeds = 3, .heads = "1,4,8,16", .d_model = 16, .layers = 1, .classify_seq_len = 32,
          .classify_steps = 3, .classify_eval_batches = 1, .kjv_seq_len = 32, .kjv_steps = 3, .kjv_eval_batches = 1,
          .eval_every = 3, .patience = 0};
}

// One of the real-text sweeps: `corpus` at d_model b.d_model, the heads of the budget
// at fixed computation.
ClaimSweep text_sweep(std::string name, std::string about, const std::string& corpus, std::size_t seq_len,
                      std::size_t steps, std::size_t eval_batches, const TextBudget& b, std::size_t seeds,
                      std::uint64_t seed_offset) {
  std::vector<BaseSetting> base{
      setting("data.corpus", corpus, "--corpus " + corpus),
      setting("data.seq_len", seq_len, fmt::format("--seq-len {}", seq_len)),
      setting("model.d_model", b.d_model, fmt::format("--d-model {}", b.d_model)),
      setting("model.n_layers", b.layers, fmt::format("--layers {}", b.layers)),
      setting("train.steps", steps, fmt::format("--steps {}", steps)),
      setting("train.eval_every", b.eval_every, fmt::format("--eval-every {}", b.eval_every)),
      setting("train.eval_batches", eval_batches, fmt::format("--eval-batches {}", eval_batches))};
  if (b.patience > 0) base.push_back(setting("train.patience", b.patience, fmt::format("--patience {}", b.patience)));
  return {.name = std::move(name),
          .about = std::move(about),
          .base = std::move(base),
          .axes = {{"--heads", b.heads}, {"--dk", "auto"}},
          .seeds = seeds,
          .seed_offset = seed_offset};
}

Study make_text_study(Budget budget, std::optional<std::size_t> seeds, std::uint64_t seed_offset,
                      std::optional<std::size_t> max_seeds) {
  const TextBudget b = text_budget(budget);
  const std::size_t n_set = seeds.value_or(b.seeds);
  if (max_seeds && *max_seeds < n_set) {
    throw std::invalid_argument(fmt::format("--max-seeds {}: fewer than the {} seeds a set starts with", *max_seeds, n_set));
  }
  Study study{.budget = budget,
              .suite = Suite::text,
              .seeds = n_set,
              .seed_offset = seed_offset,
              .max_seeds = max_seeds.value_or(std::max(b.max_seeds, n_set)),
              .sweeps = {}};
  const std::size_t n = 2 * n_set;
  // Claim 8: the seeds' anecdote, a character-level classifier of fortunes by topic
  // (13 classes) at fixed d_model, from one head to d_k 4.
  study.sweeps.push_back(text_sweep("8-classifier-heads",
                                    "a character-level classifier of fortunes by topic, heads at fixed computation: "
                                    "claim 8",
                                    "fortunes-topic", b.classify_seq_len, b.classify_steps, b.classify_eval_batches, b,
                                    n, seed_offset));
  // Claim 9: Table 3 row A's question on characters: bits per character of the King
  // James Bible against h at fixed d_model.
  study.sweeps.push_back(text_sweep("9-kjv-heads",
                                    "a character model of the King James Bible, heads at fixed computation: claims 9 and 10",
                                    "kjv", b.kjv_seq_len, b.kjv_steps, b.kjv_eval_batches, b, n, seed_offset));
  return study;
}

}  // namespace

std::string to_string(Suite suite) { return suite == Suite::text ? "text" : "synthetic"; }

std::vector<std::string> study_corpora(const Study& study) {
  std::vector<std::string> out;
  for (const ClaimSweep& s : study.sweeps) {
    for (const BaseSetting& b : s.base) {
      if (b.key != "data.corpus") continue;
      const std::string corpus = b.value.get<std::string>();
      if (std::find(out.begin(), out.end(), corpus) == out.end()) out.push_back(corpus);
    }
  }
  return out;
}

std::string to_string(Budget budget) {
  switch (budget) {
    case Budget::quick:
      return "quick";
    case Budget::full:
      return "full";
    case Budget::smoke:
      break;
  }
  return "smoke";
}

Budget parse_budget(const std::string& name) {
  if (name == "quick") return Budget::quick;
  if (name == "full") return Budget::full;
  if (name == "smoke") return Budget::smoke;
  throw std::invalid_argument(fmt::format("budget '{}': expected quick, full or smoke", name));
}

SweepSpec ClaimSweep::spec() const {
  // As `headroom ablate` builds its base (cli/train_flags.cpp, build_config): the
  // task's defaults (a corpus's, for a sweep on real text), the settings, and a
  // warm-up that scales with the run and a rate that follows the model unless given.
  std::string task = DataConfig{}.task;
  DataConfig source;
  bool warmup_given = false, lr_given = false;
  nlohmann::json object = nlohmann::json::object();
  for (const BaseSetting& s : base) {
    const std::size_t dot = s.key.find('.');
    const std::string section = s.key.substr(0, dot), key = s.key.substr(dot + 1);
    if (s.key == "data.task") task = s.value.get<std::string>();
    if (s.key == "data.corpus") source.corpus = s.value.get<std::string>();
    if (s.key == "train.warmup") warmup_given = true;
    if (s.key == "train.lr") lr_given = true;
    object[section][key] = s.value;
  }
  const bool text = !source.corpus.empty();
  SweepSpec spec;
  spec.base = text ? text_defaults(source) : task_defaults(task);
  update_from_json(spec.base, object, fmt::format("headroom claims: sweep {}", name));
  if (!warmup_given) spec.base.optim.warmup = default_warmup(spec.base.optim.steps);
  if (!lr_given && !(text ? text_settings(source.corpus, false).lr : task_settings(task).lr)) {
    spec.base.optim.lr = default_lr(spec.base.model);
    spec.lr_follows_model = true;
  }
  for (const AxisFlag& a : axes) {
    if (a.flag == "--heads") {
      spec.axes.push_back(parse_count_axis("--heads", "n_heads", a.text, false));
    } else if (a.flag == "--dk") {
      spec.axes.push_back(parse_count_axis("--dk", "d_k", a.text, true));
    } else if (a.flag == "--kv-heads") {
      spec.axes.push_back(parse_count_axis("--kv-heads", "n_kv_heads", a.text, false));
    } else {
      spec.axes.push_back(parse_sweep_flag(a.text));
    }
  }
  spec.seeds = parse_seeds(std::to_string(seeds), seed_offset);
  return spec;
}

std::string ClaimSweep::command(const std::filesystem::path& dir) const {
  std::string out = "headroom ablate";
  for (const BaseSetting& s : base) out += " " + s.flags;
  for (const AxisFlag& a : axes) out += fmt::format(" {} {}", a.flag, a.text);
  out += fmt::format(" --seeds {}", seeds);
  if (seed_offset != 0) out += fmt::format(" --seed-offset {}", seed_offset);
  out += fmt::format(" --out {}", (dir / name).string());
  return out;
}

ClaimSweep Study::grown(const std::string& name, std::size_t per_set) const {
  ClaimSweep s = sweep(name);
  s.seeds = 2 * per_set;
  return s;
}

const ClaimSweep& Study::sweep(const std::string& name) const {
  for (const ClaimSweep& s : sweeps) {
    if (s.name == name) return s;
  }
  throw std::out_of_range(fmt::format("headroom claims: no sweep named {}", name));
}

std::string to_string(SeedSet set) { return set == SeedSet::a ? "A" : "B"; }

Study make_study(Budget budget, std::optional<std::size_t> seeds, std::uint64_t seed_offset,
                 std::optional<std::size_t> max_seeds, Suite suite) {
  const BudgetNumbers b = budget_numbers(budget);
  if (seeds && *seeds < 2) {
    throw std::invalid_argument(
        fmt::format("--seeds {}: the verdicts compare seed means, which needs at least 2 seeds", *seeds));
  }
  if (seed_offset > kMaxSeedOffset) {
    throw std::invalid_argument(fmt::format("--seed-offset {}: at most {}", seed_offset, kMaxSeedOffset));
  }
  if (suite == Suite::text) return make_text_study(budget, seeds, seed_offset, max_seeds);
  const std::size_t n_set = seeds.value_or(b.seeds);
  if (max_seeds && *max_seeds < n_set) {
    throw std::invalid_argument(fmt::format("--max-seeds {}: fewer than the {} seeds a set starts with", *max_seeds, n_set));
  }
  Study study{.budget = budget,
              .seeds = n_set,
              .seed_offset = seed_offset,
              .max_seeds = max_seeds.value_or(std::max(b.max_seeds, n_set)),
              .sweeps = {}};
  const std::size_t n = 2 * study.seeds;

  // Claim 2: 2 heads of width d_k at d_model 64 with pre-LayerNorm (so the inputs
  // to the projections have unit variance at any width), scaled by 1/sqrt(d_k)
  // (null: the default) or not at all.
  {
    ClaimSweep s{.name = "2-attn-scale",
                 .about = "attn_scale 1/sqrt(d_k) (null, the default) vs 1 as d_k grows: claim 2",
                 .base = {setting("data.task", "lags", "--task lags"),
                          setting("data.vocab", kLagsVocab, fmt::format("--vocab {}", kLagsVocab)),
                          setting("model.n_layers", 1, "--layers 1"),
                          setting("model.attn_only", true, "--attn-only"),
                          setting("model.d_model", 64, "--d-model 64"),
                          setting("train.steps", b.steps, fmt::format("--steps {}", b.steps)),
                          setting("train.eval_every", b.eval_every, fmt::format("--eval-every {}", b.eval_every))},
                 .axes = {{"--heads", "2"}, {"--dk", b.scale_dks}, {"--sweep", "attn_scale=null,1"}},
                 .seeds = n, .seed_offset = seed_offset};
    study.sweeps.push_back(std::move(s));
  }
  // Claim 2c: the same models with queries and keys of unit variance at
  // initialisation: init_std 1/sqrt(64) on the pre-LayerNorm inputs of unit variance.
  {
    ClaimSweep s = study.sweeps.back();
    s.name = "2-attn-scale-unit-init";
    s.about = "claim 2's sweep with init_std 0.125 = 1/sqrt(d_model): q.k of variance d_k at initialisation: claim 2c";
    s.base.insert(s.base.begin() + 5, setting("model.init_std", 0.125, "--init-std 0.125"));
    study.sweeps.push_back(std::move(s));
  }
  // Claim 3: 3 heads of d_k 8 at d_model 24, no biases. Concatenated heads with
  // d_v 8 and summed heads with d_v 12 have the same weights:
  //   concat: 3 (24 x 24) + (24 x 24) = 2304;  sum: 2 (24 x 24) + (24 x 36) + (12 x 24) = 2304.
  // Summed heads pass one d_v-wide space to out_proj (rank 12 < V 16 on lags);
  // concatenated ones pass 3 d_v = 24.
  {
    std::vector<BaseSetting> base = lags_model(24, b);
    base.insert(base.begin() + 6, setting("model.bias", false, "--no-bias"));
    ClaimSweep s{.name = "3-concat-vs-sum",
                 .about = "head_combine concat vs sum, d_v 8 and 12 (concat d_v 8 = sum d_v 12 in weights): claim 3",
                 .base = std::move(base),
                 .axes = {{"--heads", "3"}, {"--dk", "8"}, {"--sweep", "head_combine=concat,sum"}, {"--sweep", "d_v=8,12"}},
                 .seeds = n, .seed_offset = seed_offset};
    study.sweeps.push_back(std::move(s));
  }
  // Claims 4, 5 and 7: fixed computation (d_k = 48 / h) from one head to d_k 1.
  study.sweeps.push_back({.name = "4-heads-lags",
                          .about = "heads at fixed computation on lags, from d_k 48 down to 2 (full: 1): claims 4, 5 and 7",
                          .base = lags_model(48, b),
                          .axes = {{"--heads", b.lag_heads}, {"--dk", "auto"}},
                          .seeds = n, .seed_offset = seed_offset});
  // Claim 5: associative recall with 64 keys (--vocab 131), where a query must pick
  // one key of 64 by a dot product of width d_k.
  study.sweeps.push_back(
      {.name = "5-recall-narrow-heads",
       .about = "recall with 64 keys at d_model 48, heads to d_k 1: claim 5",
       .base = {setting("data.task", "recall", "--task recall"), setting("data.vocab", 131, "--vocab 131"),
                setting("model.d_model", 48, "--d-model 48"),
                setting("train.steps", b.recall_steps, fmt::format("--steps {}", b.recall_steps)),
                setting("train.eval_every", b.eval_every, fmt::format("--eval-every {}", b.eval_every))},
       .axes = {{"--heads", b.recall_heads}, {"--dk", "auto"}},
       .seeds = n, .seed_offset = seed_offset});
  // Claim 6: 8 query heads sharing 8, 4 or 1 key/value heads.
  {
    study.sweeps.push_back({.name = "6-kv-heads",
                            .about = "8 query heads with 8, 4 and 1 key/value heads (MHA, GQA, MQA): claim 6",
                            .base = lags_model(48, b),
                            .axes = {{"--heads", "8"}, {"--kv-heads", budget == Budget::smoke ? "8,1" : "8,4,1"}},
                            .seeds = n, .seed_offset = seed_offset});
  }
  return study;
}

nlohmann::json study_json(const Study& study) {
  nlohmann::json sweeps = nlohmann::json::array();
  for (const ClaimSweep& s : study.sweeps) sweeps.push_back(s.name);
  nlohmann::json out = {{"kind", "headroom claims"},
                        {"budget", to_string(study.budget)},
                        {"seeds", study.seeds},
                        {"seed_sets", 2},
                        {"seed_offset", study.seed_offset},
                        {"sweeps", sweeps}};
  if (study.suite != Suite::synthetic) out["suite"] = to_string(study.suite);
  return out;
}

}  // namespace headroom
