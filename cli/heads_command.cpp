// `headroom heads`: what each attention head of a trained model does (masking cost,
// gradient importance, confidence, entropy, dominant offset, previous-token and
// induction scores; cli/head_analysis.hpp), and with --prune the validation accuracy
// as heads are removed greedily.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "cli/commands.hpp"
#include "cli/model_file.hpp"
#include "cli/out_paths.hpp"
#include "cli/csv.hpp"
#include "interp/head_analysis.hpp"
#include "train/resources.hpp"
#include "train/run_dir.hpp"
#include "plot/svg.hpp"
#include "cli/validators.hpp"
#include "nn/checkpoint.hpp"
#include "nn/safetensors.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

struct HeadsFlags {
  std::string model;
  std::string out;
  std::optional<std::size_t> batches, batch;
  std::optional<std::uint64_t> seed;
  bool prune = false;
  bool repeat = false;
};

using HeadOrder = std::vector<std::pair<std::size_t, std::size_t>>;


std::string heads_csv(const HeadReport& r) {
  std::string csv =
      "layer,head,masked_val_loss,masked_val_accuracy,loss_increase,accuracy_drop,importance,importance_in_layer,"
      "confidence,entropy,dominant_offset,offset_share,previous_token,induction,repeat_induction,word_start,"
      "line_start\n";
  for (const HeadStats& s : r.heads) {
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", s.layer, s.head, csv_number(s.masked.loss),
                       csv_number(s.masked.accuracy), csv_number(s.loss_increase), csv_number(s.accuracy_drop),
                       csv_number(s.importance), csv_number(s.importance_in_layer), csv_number(s.confidence), csv_number(s.entropy),
                       s.dominant_offset, csv_number(s.offset_share), csv_number(s.previous_token), csv_number(s.induction),
                       csv_number(s.repeat_induction), csv_number(s.word_start), csv_number(s.line_start));
  }
  return csv;
}

// "0.123", or "-" for a statistic not measured on these rows.
std::string optional_number(double v) { return std::isnan(v) ? std::string("-") : fmt::format("{:.3f}", v); }

// Every head in a seeded random order (Fisher-Yates).
HeadOrder random_order(const HeadReport& r, std::uint64_t seed) {
  HeadOrder order;
  for (const HeadStats& s : r.heads) order.emplace_back(s.layer, s.head);
  Rng rng(stream_seed(seed, 7));
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

struct NamedCurve {
  std::string key;    // prune.csv's order column
  std::string label;  // the plot's legend
  std::vector<PrunePoint> points;
};

std::string prune_csv(const std::vector<NamedCurve>& curves) {
  std::string csv = "order,removed,fraction,val_loss,val_accuracy,removed_head\n";
  for (const NamedCurve& c : curves) {
    for (const PrunePoint& p : c.points) {
      csv += fmt::format("{},{},{},{},{},{}\n", c.key, p.removed, csv_number(p.fraction), csv_number(p.val.loss),
                         csv_number(p.val.accuracy), p.head);
    }
  }
  return csv;
}

std::string prune_svg(const std::vector<NamedCurve>& curves, const std::string& model) {
  svg::Chart acc, loss;
  acc.title = "Validation accuracy as heads are removed";
  acc.x.label = "heads removed (% of all)";
  acc.y.label = "validation accuracy (%)";
  acc.y.floor = 0;
  acc.y.ceiling = 100;
  loss.title = "Validation loss as heads are removed";
  loss.x.label = acc.x.label;
  loss.y.label = "validation loss (nats/token, log scale)";
  loss.y.scale = svg::Scale::log;
  for (const NamedCurve& c : curves) {
    svg::Series a, l;
    a.name = l.name = c.label;
    for (const PrunePoint& p : c.points) {
      a.x.push_back(100 * p.fraction);
      a.y.push_back(100 * p.val.accuracy);
      l.x.push_back(100 * p.fraction);
      l.y.push_back(p.val.loss);
    }
    acc.series.push_back(std::move(a));
    loss.series.push_back(std::move(l));
  }
  return svg::render({acc, loss}, fmt::format("Pruning the heads of {} (greedy, gates at 0)", model));
}

int run_heads(const HeadsFlags& flags) {
  LoadedRun run = open_model(flags.model);
  const fs::path& file = run.file;
  const std::string& source = run.source;
  const DataDescription& data = run.data;
  const ValidationSettings v = validation_settings(file, flags.batches, flags.batch, flags.seed);
  const std::size_t batches = v.batches, batch = v.batch;
  const std::uint64_t seed = v.seed;
  // The training run's threads, or fewer where a forward pass is too small for them to pay.
  const ThreadChoice threads = forward_threads(run.model().config(), batch, data.seq_len, v.threads);
  set_threads(threads.used);
  check_eval_memory(run.model().config(), batch, data.seq_len, batches, true);  // the batches are drawn up front

  if (flags.repeat && data.is_classifier()) {
    throw std::invalid_argument(
        "--repeat: a classifier's rows end in a separator and a label, which a repeat would not keep; it measures a "
        "language model (a text or a task)");
  }
  const std::unique_ptr<Dataset> dataset =
      own_dataset(data, source, "run headroom heads from the directory the model was trained in");
  const fs::path out = flags.out.empty() ? file.parent_path() : fs::path(flags.out);
  make_out_directory(out, "--out");

  TransformerLM<float>& model = run.model();
  const ModelConfig& m = model.config();
  fmt::print("model     {} ({}, {} layers x {} heads, d_k {}, d_v {}, {} kv heads)\n", source,
             data.is_text() ? "character-level text" : data.is_classifier() ? "classifier" : data.task, m.n_layers, m.n_heads, m.d_k, m.d_v,
             m.n_kv_heads);
  if (!threads.why.empty()) fmt::print("threads   {}\n", threads.why);
  fmt::print("data      validation split: {} batch{} of {} rows, the trainer's batches for seed {}\n", batches,
             batches == 1 ? "" : "es", batch, seed);
  std::fflush(stdout);
  std::vector<Batch> val = validation_batches(*dataset, batches, batch, validation_seed(seed));
  AttentionProbes probes = text_probes(*dataset);
  const bool text = !probes.word_breaks.empty();
  std::size_t& period = probes.repeat_period;
  if (flags.repeat) {
    RepeatedRows repeated = repeated_rows(val);
    period = repeated.period;
    const EvalResult first = evaluate_batches(model, repeated.first_copy);
    const EvalResult second = evaluate_batches(model, repeated.second_copy);
    fmt::print("repeated  each row's first {} tokens, then the same again; every target counted\n", period);
    const double ratio = second.loss / first.loss;
    fmt::print("copies    loss on the first copy {:.4f}, on the second {:.4f} (second / first {:.2f}: {})\n", first.loss,
               second.loss, ratio,
               ratio < 1 ? "below 1, the model reads the first copy"
                         : "not below 1, the model gains nothing from the first copy");
    val = std::move(repeated.batches);
  }
  const HeadReport r = analyze_heads(model, val, true, probes);
  fmt::print("full      {} loss {:.4f}, accuracy {:.2f}% ({} counted targets)\n\n", period > 0 ? "repeated" : "val",
             r.full.loss, 100 * r.full.accuracy, r.full.counted);
  fmt::print("layer  head  loss+ (masked)  acc- (masked)  importance  in layer  confidence  entropy  offset  share  "
             "prev-token  induction{}{}\n",
             period > 0 ? "  repeat-ind" : "", text ? "  word-start  line-start" : "");
  for (const HeadStats& s : r.heads) {
    fmt::print("{:>5}  {:>4}  {:>14.3g}  {:>12.2f}%  {:>10.3g}  {:>8.3f}  {:>10.3f}  {:>7.3f}  {:>6}  {:>4.0f}%  {:>10.3f}  "
               "{:>9}{}{}\n",
               s.layer, s.head, s.loss_increase, 100 * s.accuracy_drop, s.importance, s.importance_in_layer,
               s.confidence, s.entropy, s.dominant_offset, 100 * s.offset_share, s.previous_token,
               std::isnan(s.induction) ? std::string("-") : fmt::format("{:.3f}", s.induction),
               period > 0 ? fmt::format("  {:>10.3f}", s.repeat_induction) : std::string(),
               text ? fmt::format("  {:>10}  {:>10}", optional_number(s.word_start), optional_number(s.line_start))
                    : std::string());
  }
  write_file_atomically(out / "heads.csv", heads_csv(r));
  fmt::print("\nwrote {}\n", (out / "heads.csv").string());

  if (flags.prune) {
    const std::vector<NamedCurve> curves = {
        {"importance_per_layer", "importance normalised per layer (Michel et al.)",
         prune_curve(model, val, heads_by(r, &HeadStats::importance_in_layer))},
        {"importance", "importance, not normalised", prune_curve(model, val, heads_by(r, &HeadStats::importance))},
        {"loss_increase", "single-head loss increase", prune_curve(model, val, heads_by(r, &HeadStats::loss_increase))},
        {"random", fmt::format("random order (seed {})", seed), prune_curve(model, val, random_order(r, seed))},
    };
    fmt::print("\npruning by importance normalised per layer, least important first:\n");
    for (const PrunePoint& p : curves[0].points) {
      fmt::print("  {:>3} removed ({:>3.0f}%)  val loss {:.4f}  accuracy {:6.2f}%  {}\n", p.removed,
                 100 * p.fraction, p.val.loss, 100 * p.val.accuracy, p.head.empty() ? "" : "-" + p.head);
    }
    write_file_atomically(out / "prune.csv", prune_csv(curves));
    write_file_atomically(out / "prune.svg", prune_svg(curves, source));
    fmt::print("wrote {} and {}\n", (out / "prune.csv").string(), (out / "prune.svg").string());
  }
  return 0;
}

}  // namespace

Run add_heads_command(CLI::App& app) {
  auto f = std::make_shared<HeadsFlags>();
  CLI::App* cmd = app.add_subcommand(
      "heads",
      "What each attention head of a trained model does, on its validation batches: the cost of gating it out, its "
      "gradient importance, the confidence and entropy of its attention, its dominant offset, and its previous-token "
      "and induction scores.");
  cmd->footer(
      "Gating cost: the loss and accuracy with that head alone gated out. Importance: Michel et al.'s mean |d loss / "
      "d gate| over rows. Confidence: the mean largest weight. An offset of 1 is a previous-token head.");
  cmd->add_option("--model", f->model,
                  "A run directory written by headroom train --out (its model.safetensors, else its newest "
                  "checkpoint), or a .safetensors file")
      ->required();
  cmd->add_option("--out", f->out, "Directory for heads.csv, prune.csv and prune.svg (default: the model's directory)");
  cmd->add_option("--batches", f->batches,
                  "Validation batches (default: the run's eval_batches from its config.json, else 8)")
      ->check(kCount);
  cmd->add_option("--batch", f->batch, "Rows per batch (default: the run's batch, else 32)")->check(kCount);
  cmd->add_option("--seed", f->seed,
                  "Seed of the run whose validation batches to draw, and of the random pruning order (default: the "
                  "run's seed, else 0)")
      ->check(kWholeNumber);
  cmd->add_flag("--prune", f->prune,
                "Also remove heads one at a time (least important first by importance normalised per layer as "
                "Michel et al. do; by raw importance; by single-head loss increase; in a random order) and write the validation accuracy and loss after "
                "each removal to prune.csv and prune.svg");
  cmd->add_flag("--repeat", f->repeat,
                "Measure on the validation rows repeated: each row's first half, then the same again, every target "
                "counted. Prints the loss on each copy and adds each head's repeat-induction score, the mean weight a "
                "query of the second copy puts on the key after its twin in the first (the token to predict): the "
                "induction-head test of Olsson et al. (2022), which works on real text. Not for a classifier");
  return [f] { return run_heads(*f); };
}

}  // namespace headroom::cli
