// `headroom circuits`: what each head of a trained model writes and reads, exactly:
// the residual stream at one position split into its parts with their direct logit
// attribution (interp/decompose.hpp), every head's QK and OV circuits with their
// singular values and copying score, and the Q-, K- and V-composition scores between
// heads of different layers (interp/circuits.hpp); with --out, CSVs and an SVG heat
// map of the composition scores (docs/design.md #21).
//
// Legend: L = layers, H = heads, V = vocab, T = tokens of the input, N = parts.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "cli/commands.hpp"
#include "cli/model_file.hpp"
#include "cli/out_paths.hpp"
#include "cli/csv.hpp"
#include "cli/validators.hpp"
#include "data/task_tokens.hpp"
#include "interp/attention_maps.hpp"
#include "interp/circuits.hpp"
#include "interp/decompose.hpp"
#include "nn/safetensors.hpp"
#include "plot/score_heatmap.hpp"
#include "train/run_dir.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

struct CircuitsFlags {
  std::string model;
  std::optional<std::string> input;
  std::optional<std::size_t> example;
  std::optional<std::size_t> position;
  std::optional<std::size_t> answer;
  std::optional<std::size_t> wrong;
  std::size_t top = 10;
  std::size_t singular = 3;
  std::string out;
};

std::string head_name(std::size_t layer, std::size_t head) { return fmt::format("L{}H{}", layer, head); }

// NaN (an undefined score) as an empty field.

// Token `id` as the axis labels show it: a task's id (or _ | ?), a text model's
// character.
std::string shown_token(std::size_t id, const LoadedRun& run) {
  if (!run.data.is_text() && !run.data.is_classifier()) return task_token_label(static_cast<Index>(id));
  return fmt::format("'{}'", token_label(run.data, static_cast<Index>(id)));
}

int run_circuits(const CircuitsFlags& flags) {
  set_threads(1);  // one short sequence and small matrices
  if (!flags.out.empty()) check_out_directory(flags.out, "--out");
  LoadedRun run = open_model(flags.model);
  const ModelConfig& config = run.config();
  const std::size_t V = config.vocab, L = config.n_layers, H = config.n_heads;
  if (flags.answer && *flags.answer >= V) {
    throw std::invalid_argument(
        fmt::format("--answer {}: is outside the model's vocabulary [0, {})", *flags.answer, V));
  }
  if (flags.wrong && *flags.wrong >= V) {
    throw std::invalid_argument(fmt::format("--wrong {}: is outside the model's vocabulary [0, {})", *flags.wrong, V));
  }
  if (flags.wrong && flags.answer && *flags.wrong == *flags.answer) {
    throw std::invalid_argument(fmt::format("--wrong {}: is --answer itself; give another token", *flags.wrong));
  }
  const AttentionInput input = flags.input ? attention_input(*flags.input, run.data, run.source)
                                           : validation_example(flags.example.value_or(0), run.data, run.source);
  const std::size_t T = input.ids.size();
  const std::string what =
      flags.input ? std::string("--input") : fmt::format("validation example {}", flags.example.value_or(0));
  if (T > config.max_len) {
    throw std::invalid_argument(fmt::format("{}: {} tokens are more than the model's max_len {}", what, T, config.max_len));
  }
  if (flags.position && *flags.position >= T) {
    throw std::invalid_argument(
        fmt::format("--position {}: is outside the input's {} tokens [0, {})", *flags.position, T, T));
  }
  const std::size_t p = flags.position.value_or(T - 1);

  IndexArray row = IndexArray::from_shape({1, T});
  std::copy(input.ids.begin(), input.ids.end(), row.begin());
  const ResidualDecomposition<float> d = decompose_residual(run.model(), row, p);
  std::size_t top_prediction = 0;
  for (std::size_t v = 1; v < V; ++v) {
    if (d.model_logits(v) > d.model_logits(top_prediction)) top_prediction = v;
  }
  const std::size_t answer = flags.answer.value_or(top_prediction);
  if (flags.wrong && *flags.wrong == answer) {
    throw std::invalid_argument(
        fmt::format("--wrong {}: is the answer (the model's top prediction); give another token", *flags.wrong));
  }
  const std::vector<double> dla = direct_logit_attribution(d, answer);
  const std::vector<double> diff =
      flags.wrong ? direct_logit_attribution(d, answer, flags.wrong) : std::vector<double>();
  const std::vector<HeadCircuits> circuits = head_circuits(run.model(), /*keep_matrices=*/false);
  const CompositionScores comp = composition_scores(run.model());

  const std::string kind = run.data.is_text()         ? "character-level text model"
                           : run.data.is_classifier() ? "classifier"
                                                      : run.data.task + " model";
  fmt::print("{}: {}, {} layer{} x {} head{}\n", run.source, kind, L, L == 1 ? "" : "s", H, H == 1 ? "" : "s");
  fmt::print("{} ({} tokens); position {} (token {})\n", input.description, T, p, input.labels[p]);

  // Direct logit attribution.
  const std::vector<double>& shown = flags.wrong ? diff : dla;
  const double total = std::accumulate(shown.begin(), shown.end(), 0.0);
  const auto named = [&](std::size_t id) {
    const std::string label = shown_token(id, run);
    return label == std::to_string(id) ? label : fmt::format("{} {}", id, label);
  };
  fmt::print("\nanswer {}{}: logit {:.4f}", named(answer), flags.answer ? "" : " (the model's top prediction)",
             d.model_logits(answer));
  if (flags.wrong) {
    fmt::print("; logit difference {} - {}: {:.4f}", answer, *flags.wrong,
               d.model_logits(answer) - d.model_logits(*flags.wrong));
  }
  fmt::print("\n");
  std::vector<std::size_t> order(d.parts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return std::abs(shown[a]) > std::abs(shown[b]); });
  const std::size_t n_top = std::min(flags.top, order.size());
  fmt::print("direct logit attribution{} (the {} largest of {} parts, frozen norm scales; all sum to {:.4f}):\n",
             flags.wrong ? " of the difference" : "", n_top, d.parts.size(), total);
  fmt::print("  {:<14} {:>10}{}\n", "part", flags.wrong ? "difference" : "logit", flags.wrong ? "  answer logit" : "");
  for (std::size_t i = 0; i < n_top; ++i) {
    const std::size_t k = order[i];
    fmt::print("  {:<14} {:>10.4f}", d.parts[k].name, shown[k]);
    if (flags.wrong) fmt::print("  {:>12.4f}", dla[k]);
    fmt::print("\n");
  }

  // Per head.
  const std::size_t S = flags.singular;
  const auto top_values = [&](const std::vector<double>& values) {
    std::string s;
    for (std::size_t i = 0; i < S; ++i) s += fmt::format(" {:>7}", i < values.size() ? fmt::format("{:.3f}", values[i]) : "-");
    return s;
  };
  fmt::print("\nper head: the top {} singular values of the QK and OV circuits (V x V, direct path, norm weights "
             "folded), the copying score of OV\n",
             S);
  fmt::print("  {:<6}{:>{}}{:>{}} {:>8}\n", "head", "qk", 8 * S, "ov", 8 * S, "copying");
  for (const HeadCircuits& c : circuits) {
    fmt::print("  {:<6}{}{} {:>8.3f}\n", head_name(c.layer, c.head), top_values(c.qk_singular_values),
               top_values(c.ov_singular_values), c.copying_score);
  }

  // Composition scores.
  if (L < 2) {
    fmt::print("\ncomposition scores: none (one layer)\n");
  } else {
    const std::size_t N = L * H;
    for (const auto& [name, m] : {std::pair<const char*, const xt::xarray<double>*>{"K", &comp.k}, {"Q", &comp.q},
                                  {"V", &comp.v}}) {
      fmt::print("\n{}-composition (row: the reading head, column: the writing head of an earlier layer):\n", name);
      fmt::print("  {:<6}", "");
      for (std::size_t c = 0; c < (L - 1) * H; ++c) fmt::print(" {:>6}", head_name(c / H, c % H));
      fmt::print("\n");
      for (std::size_t r = H; r < N; ++r) {
        fmt::print("  {:<6}", head_name(r / H, r % H));
        for (std::size_t c = 0; c < (L - 1) * H; ++c) {
          const double v = (*m)(r, c);
          fmt::print(" {:>6}", std::isnan(v) ? std::string("-") : fmt::format("{:.3f}", v));
        }
        fmt::print("\n");
      }
    }
  }

  if (flags.out.empty()) return 0;
  const fs::path dir(flags.out);
  make_out_directory(dir, "--out");
  std::string dla_csv = "part,kind,layer,head,logit" + std::string(flags.wrong ? ",difference" : "") + "\n";
  for (std::size_t k = 0; k < d.parts.size(); ++k) {
    const ResidualPart& part = d.parts[k];
    const bool layered = part.kind != PartKind::embed && part.kind != PartKind::pos_embed;
    dla_csv += fmt::format("{},{},{},{},{:.6g}", part.name, to_string(part.kind), layered ? std::to_string(part.layer) : "",
                           part.kind == PartKind::head ? std::to_string(part.head) : "", dla[k]);
    if (flags.wrong) dla_csv += fmt::format(",{:.6g}", diff[k]);
    dla_csv += "\n";
  }
  std::string heads_csv = "layer,head,copying";
  const auto columns = [&](const char* prefix, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) heads_csv += fmt::format(",{}_sv{}", prefix, i + 1);
  };
  const std::size_t n_qk = circuits.front().qk_singular_values.size(), n_ov = circuits.front().ov_singular_values.size();
  const std::size_t n_pos = circuits.front().qk_pos_singular_values.size();
  columns("qk", n_qk);
  columns("qk_pos", n_pos);
  columns("ov", n_ov);
  heads_csv += "\n";
  for (const HeadCircuits& c : circuits) {
    heads_csv += fmt::format("{},{},{:.6g}", c.layer, c.head, c.copying_score);
    for (double v : c.qk_singular_values) heads_csv += fmt::format(",{:.6g}", v);
    for (double v : c.qk_pos_singular_values) heads_csv += fmt::format(",{:.6g}", v);
    for (double v : c.ov_singular_values) heads_csv += fmt::format(",{:.6g}", v);
    heads_csv += "\n";
  }
  std::string comp_csv = "reader_layer,reader_head,writer_layer,writer_head,q,k,v\n";
  for (std::size_t r = 0; r < L * H; ++r) {
    for (std::size_t c = 0; c < L * H; ++c) {
      if (c / H >= r / H) continue;
      comp_csv += fmt::format("{},{},{},{},{},{},{}\n", r / H, r % H, c / H, c % H, csv_number(comp.q(r, c)),
                              csv_number(comp.k(r, c)), csv_number(comp.v(r, c)));
    }
  }
  write_file_atomically(dir / "dla.csv", dla_csv);
  write_file_atomically(dir / "head_circuits.csv", heads_csv);
  fmt::print("\nwrote {} (every part's direct logit attribution)\n", (dir / "dla.csv").string());
  fmt::print("wrote {} (every head's singular values and copying score)\n", (dir / "head_circuits.csv").string());
  if (L >= 2) {
    heatmap::ScoreMatrices svg;
    svg.title = fmt::format("Composition scores of {} ({}, {} layers x {} head{})", run.source, kind, L, H,
                            H == 1 ? "" : "s");
    svg.subtitle =
        "Q: ||W_QK^T W_OV||, K: ||W_QK W_OV||, V: ||W_OV W_OV||, each over the product of the two matrices' "
        "Frobenius norms (Elhage et al. 2021); norm weights folded";
    svg.guide = "Row: the head that reads (layer l2); column: the head that writes (layer l1 < l2). Hatched: not an "
                "earlier layer.";
    svg.row_axis = "reading head";
    svg.column_axis = "writing head";
    // Rows: the heads of layers 1 .. L-1 (readers); columns: those of 0 .. L-2 (writers).
    const std::size_t R = (L - 1) * H;
    for (std::size_t i = 0; i < R; ++i) {
      svg.row_labels.push_back(head_name(i / H + 1, i % H));
      svg.column_labels.push_back(head_name(i / H, i % H));
    }
    double largest = 0;
    const auto block = [&](const xt::xarray<double>& m) {
      xt::xarray<double> b = xt::xarray<double>::from_shape({R, R});
      for (std::size_t r = 0; r < R; ++r) {
        for (std::size_t c = 0; c < R; ++c) {
          b(r, c) = m(r + H, c);
          if (!std::isnan(b(r, c))) largest = std::max(largest, b(r, c));
        }
      }
      return b;
    };
    svg.panels = {{"Q-composition", block(comp.q)}, {"K-composition", block(comp.k)}, {"V-composition", block(comp.v)}};
    svg.scale_max = largest > 0 ? largest : 1.0;
    svg.legend = "composition score";
    svg.undefined = "not an earlier layer";
    write_file_atomically(dir / "composition.csv", comp_csv);
    write_file_atomically(dir / "composition.svg", heatmap::render_score_matrices(svg));
    fmt::print("wrote {} (Q-, K- and V-composition of every pair of heads)\n", (dir / "composition.csv").string());
    fmt::print("wrote {} (their heat map)\n", (dir / "composition.svg").string());
  }
  return 0;
}

}  // namespace

Run add_circuits_command(CLI::App& app) {
  auto f = std::make_shared<CircuitsFlags>();
  CLI::App* cmd = app.add_subcommand(
      "circuits",
      "Look inside a trained model's heads exactly: the direct logit attribution of each part of the residual stream "
      "at one position (embeddings, each head, each MLP, the biases), every head's QK and OV circuits, and "
      "composition scores between heads.");
  cmd->footer(
      "The parts sum to the logit, with the norms' scales frozen. Without --input or --example the input is "
      "validation example 0 of the model's data.");
  cmd->add_option("--model", f->model,
                  "A run directory written by headroom train --out (its model.safetensors, else its newest "
                  "checkpoint), or a .safetensors file")
      ->required();
  CLI::Option* input = cmd->add_option(
      "--input", f->input,
      "The input: text for a text model; space-separated token ids for a toy-task model (_ | ? for pad, separator "
      "and query). At most the model's max_len tokens; not with --example");
  CLI::Option* example = cmd->add_option("--example", f->example,
                                         "Use validation example N of the model's own data instead (default 0), as "
                                         "headroom attention does")
                             ->check(kWholeNumber);
  input->excludes(example);
  cmd->add_option("--position", f->position,
                  "The position whose residual stream is split (default: the last)")
      ->check(kWholeNumber);
  cmd->add_option("--answer", f->answer,
                  "The token id whose logit is attributed (default: the model's top prediction at the position)")
      ->check(kWholeNumber);
  cmd->add_option("--wrong", f->wrong,
                  "Attribute the logit difference answer - wrong instead, for this token id")
      ->check(kWholeNumber);
  cmd->add_option("--top", f->top, "How many parts of the attribution to print, largest first (default 10)")
      ->check(kPositiveWholeNumber);
  cmd->add_option("--singular", f->singular, "How many singular values per circuit to print (default 3)")
      ->check(kPositiveWholeNumber);
  cmd->add_option("--out", f->out,
                  "A directory (made if missing) for dla.csv, head_circuits.csv, composition.csv and composition.svg");
  return [f] { return run_circuits(*f); };
}

}  // namespace headroom::cli
