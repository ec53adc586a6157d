// DataConfig's and OptimConfig's field tables (nn/config_field.hpp): config.json's
// data and train sections, in the order of their unknown-key messages and of the
// Data and Training flags in --help.
#pragma once

#include <string>

#include "data/corpus.hpp"
#include "data/task.hpp"
#include "nn/config_field.hpp"
#include "train/config.hpp"

namespace headroom {

// Calls visit(Field<DataConfig, V>) for every field, in order.
template <typename Visit>
void for_each_data_field(Visit&& visit) {
  using D = DataConfig;
  using C = FlagCheck;
  std::string tasks;
  for (const std::string& t : task_names()) tasks += (tasks.empty() ? "" : " | ") + t;
  visit(field("task", &D::task,
              Flag{.help = "Toy task: " + tasks + " (default {}); overrides a --config file's data.text"}));
  visit(field("text", &D::text,
              Flag{.help = "Train a character-level model on this UTF-8 text file (at most 256 MiB) instead of a task (its vocabulary "
                           "comes from the file, so not with --task or --vocab); overrides a --config file's "
                           "data.task"}));
  visit(field("val_text", &D::val_text,
              Flag{.help = "With --text: validate on all of this UTF-8 file instead of the text's last tenth"}));
  std::string corpora;
  for (const std::string& c : corpus_names()) corpora += (corpora.empty() ? "" : " | ") + c;
  visit(field("corpus", &D::corpus,
              Flag{.help = "Train on a corpus a Debian package installs: " + corpora +
                           " (`headroom corpora` says what each is; a labelled one trains a classifier); not with "
                           "--task or --vocab"}));
  visit(field("labelled", &D::labelled,
              Flag{.help = "Train a classifier on this file of label<TAB>text lines (UTF-8); not with --task or "
                           "--vocab"}));
  visit(field("seq_len", &D::seq_len, Flag{.help = "Tokens the model reads per row (default {})", .check = C::whole_number}));
  visit(field("vocab", &D::vocab,
              Flag{.help = "Toy task vocabulary, 3 special tokens included (default {}); not for a --text run",
                   .check = C::whole_number}));
  // lags and lags_argmax only (data/task.hpp, task_option_keys): other tasks refuse them.
  visit(field("lags", &D::lags,
              Flag{.help = "lags, lags_argmax: the offsets before the query whose tokens draw the label, distinct, "
                           "each from 1 to --context (default {})",
                   .check = C::whole_number_list}));
  visit(field("context", &D::context,
              Flag{.help = "lags, lags_argmax: content tokens per block before the query (default {})",
                   .check = C::whole_number}));
  visit(field("lag_beta", &D::lag_beta,
              Flag{.help = "lags, lags_argmax: the hidden tables' entries are N(0, beta^2); larger is a sharper label "
                           "(default {})",
                   .check = C::non_negative}));
  visit(field("task_seed", &D::task_seed,
              Flag{.help = "lags, lags_argmax: seed of the hidden tables, apart from --seed so that every run of a "
                           "sweep learns the same truth (default {})",
                   .check = C::whole_number}));
}

// Calls visit(Field<OptimConfig, V>) for every field, in order.
template <typename Visit>
void for_each_optim_field(Visit&& visit) {
  using O = OptimConfig;
  using C = FlagCheck;
  visit(choice("optimizer", &O::optimizer, parse_optimizer, Flag{.help = "adamw | adam | sgd (default adamw)"}));
  visit(field("steps", &O::steps, Flag{.help = "Optimizer steps (default {})", .check = C::whole_number}));
  visit(field("batch", &O::batch, Flag{.help = "Rows per step (default {})", .check = C::whole_number}));
  visit(field("lr", &O::lr,
              Flag{.help = "Peak learning rate, reached after --warmup steps (default {}; 0.01 for a model without norms, "
                          "--norm none, unless --config or the task gives one; config.json records it)",
                  .check = C::positive}));
  visit(choice("schedule", &O::schedule, parse_lr_schedule,
               Flag{.help = "constant | cosine (linear warm-up, cosine decay to --min-lr) | inverse_sqrt (linear "
                            "warm-up, then lr * sqrt(warmup / t)) (default cosine)"}));
  visit(field("warmup", &O::warmup,
              Flag{.help = "Warm-up steps (default min(100, steps / 10); config.json records it)",
                   .check = C::whole_number}));
  visit(field("min_lr", &O::min_lr, Flag{.help = "Floor of the cosine decay (default 0); refused with another schedule",
                                               .check = C::non_negative}));
  visit(field("clip", &O::clip,
              Flag{.help = "Clip the global gradient norm; 0 is off (default {})", .check = C::non_negative}));
  visit(field("weight_decay", &O::weight_decay,
              Flag{.help = "AdamW decoupled decay, skipping biases, norms and embeddings; L2 for adam and sgd "
                           "(default {})",
                   .check = C::non_negative}));
  visit(field("decay_embeddings", &O::decay_embeddings,
              Flag{.help = "AdamW decays the embeddings too (the token embedding, also the head under "
                           "--tie-embeddings, and the position table): every tensor of 2 or more axes, as nanoGPT; "
                           "refused with another optimizer"}));
  visit(field("momentum", &O::momentum, Flag{.help = "SGD momentum (default 0.9); refused with another optimizer", .check = C::non_negative}));
  visit(field("beta1", &O::beta1,
              Flag{.help = "Adam's and AdamW's first-moment decay, in [0, 1) (default {}); refused with sgd",
                   .check = C::non_negative}));
  visit(field("beta2", &O::beta2,
              Flag{.help = "Adam's and AdamW's second-moment decay, in [0, 1) (default {}; nanoGPT's small recipes "
                           "use 0.99); refused with sgd",
                   .check = C::non_negative}));
  visit(field("seed", &O::seed, Flag{.help = "Seed for weights, batches and dropout (default 0)", .check = C::whole_number}));
  visit(field("threads", &O::threads,
              Flag{.help = "threads for the GEMMs and for headroom's own loops, at most 256 (default 1)", .check = C::whole_number}));
  visit(field("eval_every", &O::eval_every, Flag{.help = "Steps between validations (default {})", .check = C::whole_number}));
  visit(field("eval_batches", &O::eval_batches,
              Flag{.help = "Validation batches per evaluation (default {})", .check = C::whole_number}));
  visit(field("patience", &O::patience,
              Flag{.help = "Stop once this many validations in a row have not lowered the val loss by more than "
                           "--min-delta below its best, with a final checkpoint and model.safetensors as at --steps, "
                           "which stays the cap; 0 is off (default {})",
                   .check = C::whole_number}));
  visit(field("min_delta", &O::min_delta,
              Flag{.help = "The least fall of the val loss, in nats, that counts as an improvement for --patience, "
                           "and across the last 5 validations for a run to count as still falling (default {})",
                   .check = C::finite_non_negative}));
  visit(field("save_every", &O::save_every,
              Flag{.help = "Steps between rolling checkpoints in --out; 0 saves only at the end and on Ctrl-C "
                           "(default {})",
                   .check = C::whole_number}));
  visit(field("keep_checkpoints", &O::keep_checkpoints,
              Flag{.help = "Rolling checkpoints kept (default {})", .check = C::whole_number}));
  visit(field("max_bad_steps", &O::max_bad_steps,
              Flag{.help = "Stop after this many consecutive steps with a non-finite loss or gradient norm; such "
                           "steps never update the weights (default {})",
                   .check = C::whole_number}));
  visit(field("detect_anomaly", &O::detect_anomaly,
              Flag{.help = "Check every op for NaN/Inf and name the first one that makes it (slower)"}));
  visit(field("track_heads", &O::track_heads,
              Flag{.help = "At every validation, record each head's previous-token and induction scores, entropy and "
                           "removal cost into DIR/tracked_heads.csv, and plot them with the in-context-learning score against "
                           "steps in DIR/tracked_heads.svg (costs one validation per head)"}));
  visit(field("init_from", &O::init_from,
              Flag{.help = "Start from this run's (or .safetensors file's) weights instead of a random init "
                           "(uptraining): the model is its model, except that --kv-heads may be a divisor of its kv "
                           "heads, which mean-pools them; the data must be its data; the optimizer and the step "
                           "count start fresh"}));
  visit(field("init_from_hash", &O::init_from_hash));  // recorded by train, from the file
}

}  // namespace headroom
