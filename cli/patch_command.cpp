// `headroom patch`: activation patching and attribution patching (interp/patching.hpp,
// docs/design.md #22) on a trained model: matched clean/corrupted pairs of its task
// (Task::patch_pair), or one pair given on the command line (text models always),
// and the recovered fraction of the logit difference per head, per (layer,
// position) of the residual stream and per attention pattern, exact beside the
// gradient estimate.
//
// Legend: L = layers, H = heads, T = tokens of an input, N = pairs.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "cli/commands.hpp"
#include "cli/model_file.hpp"
#include "cli/out_paths.hpp"
#include "cli/csv.hpp"
#include "cli/validators.hpp"
#include "data/labelled_dataset.hpp"
#include "data/task_tokens.hpp"
#include "interp/attention_maps.hpp"
#include "interp/patching.hpp"
#include "nn/safetensors.hpp"
#include "plot/grid_heatmap.hpp"
#include "train/run_dir.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

// More pairs than this is a typo: every patched run is a forward pass over all of them.
constexpr std::size_t kMaxPairs = 4096;

struct PatchFlags {
  std::string model;
  std::optional<std::size_t> pairs;
  std::uint64_t seed = 0;
  std::string what = "all";
  std::optional<std::string> clean, corrupted, answer, wrong;
  std::string out;
};

// The pairs and how to show them.
struct Pairs {
  PatchBatch batch;
  std::vector<std::string> labels;  // (T) the first clean row's tokens, for the position axis
  std::string description;          // for the terminal and the SVG subtitle
};

std::string label_of(Index id, const DataDescription& data) {
  return data.is_text() ? visible_character(data.alphabet.at(static_cast<std::size_t>(id))) : task_token_label(id);
}

std::vector<Index> parse_input(const std::string& text, const DataDescription& data, const std::string& source,
                               const std::string& flag) {
  if (data.is_text()) {
    const IndexArray ids = char_vocab(data, source).encode(text, flag);
    if (ids.size() == 0) throw std::invalid_argument(fmt::format("{}: the text is empty", flag));
    return std::vector<Index>(ids.begin(), ids.end());
  }
  return parse_task_tokens(text, data.vocab, flag);
}

Index parse_answer(const std::string& text, const DataDescription& data, const std::string& source,
                   const std::string& flag) {
  const std::vector<Index> ids = parse_input(text, data, source, flag);
  if (ids.size() != 1) {
    throw std::invalid_argument(fmt::format("{} '{}': must be one {}, got {}", flag, text,
                                            data.is_text() ? "character" : "token", ids.size()));
  }
  return ids[0];
}

Pairs given_pair(const PatchFlags& f, const DataDescription& data, const std::string& source, std::size_t max_len) {
  const std::vector<Index> clean = parse_input(*f.clean, data, source, "--clean");
  const std::vector<Index> corrupted = parse_input(*f.corrupted, data, source, "--corrupted");
  if (clean.size() != corrupted.size()) {
    throw std::invalid_argument(fmt::format("--corrupted: {} tokens, but --clean has {}: a pair must have the same "
                                            "length so that positions match",
                                            corrupted.size(), clean.size()));
  }
  if (clean == corrupted) {
    throw std::invalid_argument(fmt::format("--corrupted '{}': is the same input as --clean: the two runs would give "
                                            "the same logit difference, and no patch could recover any of it",
                                            *f.corrupted));
  }
  const std::size_t T = clean.size();
  if (T > max_len) {
    throw std::invalid_argument(fmt::format("--clean: {} tokens are more than the model's max_len {}", T, max_len));
  }
  if (T > heatmap::kMaxTokens) {
    throw std::invalid_argument(
        fmt::format("--clean: {} tokens are more than the {} we draw per-position maps for", T, heatmap::kMaxTokens));
  }
  const Index answer = parse_answer(*f.answer, data, source, "--answer");
  const Index wrong = parse_answer(*f.wrong, data, source, "--wrong");
  if (answer == wrong) {
    throw std::invalid_argument(fmt::format("--wrong '{}': is the same token as --answer: the logit difference "
                                            "would be 0",
                                            *f.wrong));
  }
  Pairs p;
  p.batch.clean = IndexArray::from_shape({1, T});
  p.batch.corrupted = IndexArray::from_shape({1, T});
  std::copy(clean.begin(), clean.end(), p.batch.clean.begin());
  std::copy(corrupted.begin(), corrupted.end(), p.batch.corrupted.begin());
  p.batch.position = {T - 1};
  p.batch.answer = {answer};
  p.batch.wrong = {wrong};
  for (const Index id : clean) p.labels.push_back(label_of(id, data));
  p.description = fmt::format("one pair from the command line: answer '{}' vs '{}' after the last of {} tokens",
                              label_of(answer, data), label_of(wrong, data), T);
  return p;
}

Pairs task_pairs(const PatchFlags& f, const DataDescription& data) {
  const std::unique_ptr<Task> task = make_task(data.task, data.task_options());
  Rng rng(stream_seed(f.seed, 11));
  std::vector<PatchPair> pairs;
  const std::size_t n = f.pairs.value_or(32);
  for (std::size_t i = 0; i < n; ++i) pairs.push_back(task->patch_pair(rng));
  Pairs p;
  p.batch = patch_batch(pairs);
  const PatchPair& first = pairs.front();
  for (std::size_t t = 0; t + 1 < first.clean.size(); ++t) p.labels.push_back(task_token_label(first.clean[t]));
  p.description = fmt::format("{} {} pairs (seed {}); pair 0: clean {} / corrupted {}, answer at position {}: {} vs {}",
                              n, data.task, f.seed, render_task_tokens(first.clean), render_task_tokens(first.corrupted),
                              first.position, task_token_label(first.clean_answer),
                              task_token_label(first.corrupted_answer));
  return p;
}

// A classifier's pairs: val items of two classes, cut to a common length, the two
// labels the answers (LabelledDataset::patch_pair).
Pairs classifier_pairs(const PatchFlags& f, const DataDescription& data, const std::string& source) {
  const std::unique_ptr<Dataset> dataset = own_dataset(data, source, "it needs its own data for pairs");
  const auto& items = dynamic_cast<const LabelledDataset&>(*dataset);
  Rng rng(stream_seed(f.seed, 11));
  std::vector<PatchPair> pairs;
  const std::size_t n = f.pairs.value_or(32);
  for (std::size_t i = 0; i < n; ++i) pairs.push_back(items.patch_pair(rng));
  Pairs p;
  p.batch = patch_batch(pairs);
  const PatchPair& first = pairs.front();
  for (std::size_t t = 0; t + 1 < first.clean.size(); ++t) p.labels.push_back(token_label(data, first.clean[t]));
  const auto shown = [&](const std::vector<Index>& row, std::size_t len) {
    std::string out;
    for (std::size_t t = 0; t < len; ++t) out += token_label(data, row[t]);
    return out;
  };
  p.description = fmt::format("{} pairs of val items of two classes of {} (seed {}); pair 0: clean \"{}\" / corrupted "
                              "\"{}\", answer at position {}: {} vs {}",
                              n, data.source_name(), f.seed, shown(first.clean, first.position),
                              shown(first.corrupted, first.position), first.position,
                              token_label(data, first.clean_answer), token_label(data, first.corrupted_answer));
  return p;
}

// fmt writes NaN as "nan" or "-nan" and a small negative as "-0.000": one spelling each.
std::string fixed3(double v) {
  if (std::isnan(v)) return "nan";
  const std::string s = fmt::format("{:.3f}", v);
  return s == "-0.000" ? "0.000" : s;
}

void print_agreement(const PatchGrid& g) {
  fmt::print("agreement: Pearson r {} over {} sites, max |exact - attribution| {}\n", fixed3(g.pearson),
             g.exact.size(), fixed3(g.max_abs_diff));
}

// L x H, "exact / attribution" per cell.
void print_head_grid(const PatchGrid& g, const std::string& what) {
  fmt::print("\n{}: recovered fraction, exact / attribution\nlayer", what);
  for (std::size_t h = 0; h < g.cols; ++h) fmt::print("  {:>15}", fmt::format("head {}", h));
  fmt::print("\n");
  for (std::size_t l = 0; l < g.rows; ++l) {
    fmt::print("{:>5}", l);
    for (std::size_t h = 0; h < g.cols; ++h) {
      const std::size_t i = l * g.cols + h;
      fmt::print("  {:>15}", fmt::format("{} / {}", fixed3(g.exact[i]), fixed3(g.attribution[i])));
    }
    fmt::print("\n");
  }
  print_agreement(g);
}

// Transposed: one line per position, a column pair per layer (and the final stream).
void print_resid_grid(const PatchGrid& g, const std::vector<std::string>& labels) {
  fmt::print("\nresid: recovered fraction when resid_pre of a layer (final: the unembedding's input) at one position "
             "is patched, exact / attribution\npos  token");
  for (std::size_t l = 0; l < g.rows; ++l) {
    fmt::print("  {:>15}", l + 1 == g.rows ? std::string("final") : fmt::format("layer {}", l));
  }
  fmt::print("\n");
  for (std::size_t t = 0; t < g.cols; ++t) {
    fmt::print("{:>3}  {:<5}", t, labels[t]);
    for (std::size_t l = 0; l < g.rows; ++l) {
      const std::size_t i = l * g.cols + t;
      fmt::print("  {:>15}", fmt::format("{} / {}", fixed3(g.exact[i]), fixed3(g.attribution[i])));
    }
    fmt::print("\n");
  }
  print_agreement(g);
}

std::string grid_csv(const PatchGrid& g, const std::string& row_name, const std::string& col_name,
                     const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels) {
  std::string csv = fmt::format("{},{},exact,attribution\n", row_name, col_name);
  for (std::size_t i = 0; i < g.rows; ++i) {
    for (std::size_t j = 0; j < g.cols; ++j) {
      csv += fmt::format("{},{},{},{}\n", row_labels[i], col_labels[j], csv_number(g.exact[i * g.cols + j]),
                         csv_number(g.attribution[i * g.cols + j]));
    }
  }
  return csv;
}

std::string grid_svg(const PatchGrid& g, const std::string& title, const std::string& subtitle,
                     const std::string& row_axis, const std::string& col_axis, const std::vector<std::string>& rows,
                     const std::vector<std::string>& cols) {
  heatmap::GridFigure fig;
  fig.title = title;
  fig.subtitle = subtitle;
  fig.legend = "recovered fraction";
  fig.panels.push_back({.title = "exact patching", .row_axis = row_axis, .col_axis = col_axis, .rows = rows,
                        .cols = cols, .values = g.exact});
  fig.panels.push_back({.title = fmt::format("attribution patching (r = {})", fixed3(g.pearson)),
                        .row_axis = row_axis, .col_axis = col_axis, .rows = rows, .cols = cols,
                        .values = g.attribution});
  return heatmap::render_grid_figure(fig);
}

std::vector<std::string> numbered(std::size_t n, const std::string& last = "") {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(i + 1 == n && !last.empty() ? last : fmt::format("{}", i));
  return out;
}

int run_patch(const PatchFlags& f) {
  const bool given = f.clean || f.corrupted || f.answer || f.wrong;
  if (given && !(f.clean && f.corrupted && f.answer && f.wrong)) {
    const std::string missing = !f.clean ? "--clean" : !f.corrupted ? "--corrupted" : !f.answer ? "--answer" : "--wrong";
    throw std::invalid_argument(fmt::format("{}: missing: a pair from the command line needs --clean, --corrupted, "
                                            "--answer and --wrong",
                                            missing));
  }
  if (given && f.pairs) {
    throw std::invalid_argument(fmt::format("--pairs {}: draws pairs of the model's task; it does not go with --clean",
                                            *f.pairs));
  }
  if (f.pairs && *f.pairs > kMaxPairs) {
    throw std::invalid_argument(fmt::format("--pairs {}: at most {} (each patched run is a forward pass over every pair)",
                                            *f.pairs, kMaxPairs));
  }
  PatchOptions options;
  options.heads = f.what == "heads" || f.what == "all";
  options.resid = f.what == "resid" || f.what == "all";
  options.pattern = f.what == "pattern" || f.what == "all";

  set_threads(1);
  LoadedRun run = open_model(f.model);
  const DataDescription& data = run.data;
  const std::string& source = run.source;
  if (data.is_classifier() && given) {
    throw std::invalid_argument(fmt::format("--clean: {} is a classifier, whose pairs are items of two classes from "
                                            "its own data; leave out --clean, --corrupted, --answer and --wrong",
                                            source));
  }
  if (data.is_text() && !given) {
    throw std::invalid_argument(fmt::format("--clean: {} is a text model, which has no task to draw pairs from: give "
                                            "--clean TEXT --corrupted TEXT --answer A --wrong W",
                                            source));
  }
  const Pairs pairs = given                  ? given_pair(f, data, source, run.config().max_len)
                      : data.is_classifier() ? classifier_pairs(f, data, source)
                                             : task_pairs(f, data);

  const fs::path out(f.out);
  if (!f.out.empty() && options.resid && pairs.labels.size() > heatmap::kMaxTokens) {
    throw std::invalid_argument(fmt::format("--out '{}': the pairs have {} positions, more than the {} the per-position "
                                            "map draws; give --what heads or pattern",
                                            f.out, pairs.labels.size(), heatmap::kMaxTokens));
  }
  if (!f.out.empty()) make_out_directory(out, "--out");

  TransformerLM<float>& model = run.model();
  const ModelConfig& m = model.config();
  const std::string kind = data.is_text() ? "character-level text" : data.is_classifier() ? "classifier" : data.task;
  fmt::print("model     {} ({}, {} layers x {} heads)\n", source, kind, m.n_layers, m.n_heads);
  fmt::print("pairs     {}\n", pairs.description);
  std::fflush(stdout);
  const bool live = isatty(fileno(stderr)) != 0;
  if (live) {
    options.progress = [](std::size_t done, std::size_t total) {
      fmt::print(stderr, "\rpatching: {}/{} sites", done, total);
      if (done == total) fmt::print(stderr, "\r{:30}\r", "");
      std::fflush(stderr);
    };
  }
  const PatchReport r = patch_activations(model, pairs.batch, options);
  fmt::print("LD        clean {:.4f}, corrupted {:.4f} (logit[clean answer] - logit[corrupted answer] at the answer's "
             "position, mean over {} pair{})\n",
             r.ld_clean, r.ld_corrupted, r.pairs, r.pairs == 1 ? "" : "s");
  if (r.ld_clean == r.ld_corrupted) fmt::print("          the two are equal: every recovered fraction is nan\n");

  const std::vector<std::string> layer_rows = numbered(m.n_layers);
  const std::vector<std::string> head_cols = numbered(m.n_heads);
  const std::vector<std::string> resid_rows = numbered(m.n_layers + 1, "final");
  std::vector<std::string> position_cols;
  for (std::size_t t = 0; t < pairs.labels.size(); ++t) position_cols.push_back(fmt::format("{} {}", t, pairs.labels[t]));
  const std::string subtitle = fmt::format("{}: LD clean {:.3f}, corrupted {:.3f}", source, r.ld_clean, r.ld_corrupted);

  std::vector<std::string> wrote;
  const auto write = [&](const std::string& name, const std::string& text) {
    write_file_atomically(out / name, std::string_view(text));
    wrote.push_back((out / name).string());
  };
  if (options.heads) {
    print_head_grid(r.heads, "heads (head_out of one head, every position, patched clean -> corrupted)");
    if (!f.out.empty()) {
      write("patch_heads.csv", grid_csv(r.heads, "layer", "head", layer_rows, head_cols));
      write("patch_heads.svg", grid_svg(r.heads, "Activation patching per head (head_out, every position)", subtitle,
                                        "layer", "head", layer_rows, head_cols));
    }
  }
  if (options.resid) {
    print_resid_grid(r.resid, pairs.labels);
    if (!f.out.empty()) {
      write("patch_resid.csv", grid_csv(r.resid, "layer", "position", resid_rows, numbered(r.positions)));
      write("patch_resid.svg", grid_svg(r.resid, "Activation patching per (layer, position) of the residual stream",
                                        subtitle, "resid_pre of layer", "position (pair 0's clean token)", resid_rows,
                                        position_cols));
    }
  }
  if (options.pattern) {
    print_head_grid(r.pattern, "pattern (one head's attention weights, every query, patched clean -> corrupted)");
    if (!f.out.empty()) {
      write("patch_pattern.csv", grid_csv(r.pattern, "layer", "head", layer_rows, head_cols));
      write("patch_pattern.svg", grid_svg(r.pattern, "Activation patching per attention pattern", subtitle, "layer",
                                          "head", layer_rows, head_cols));
    }
  }
  for (const std::string& w : wrote) fmt::print("wrote {}\n", w);
  return 0;
}

}  // namespace

Run add_patch_command(CLI::App& app) {
  auto f = std::make_shared<PatchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "patch",
      "Activation and attribution patching: run matched clean and corrupted inputs, patch one activation from the "
      "clean run into the corrupted one, and report how much of the logit difference it recovers, per head, residual "
      "stream position and attention pattern.");
  cmd->footer(
      "LD = logit[clean answer] - logit[corrupted answer]; a patch recovers (LD_patched - LD_corrupted) / (LD_clean "
      "- LD_corrupted). Beside each exact value: the attribution-patching estimate from one backward pass, and how "
      "well the two agree. A text model needs --clean, --corrupted, --answer and --wrong.");
  cmd->add_option("--model", f->model,
                  "A run directory written by headroom train --out (its model.safetensors, else its newest "
                  "checkpoint), or a .safetensors file")
      ->required();
  cmd->add_option("--pairs", f->pairs, "Pairs drawn from the model's task (default 32, at most 4096)")->check(kCount);
  cmd->add_option("--seed", f->seed, "Seed of the pairs (default 0)")->check(kWholeNumber);
  cmd->add_option("--what", f->what,
                  "What to patch: heads (each head's output), resid (the residual stream per layer and position), "
                  "pattern (each head's attention weights) or all (default)")
      ->check(CLI::IsMember({"heads", "resid", "pattern", "all"}));
  cmd->add_option("--clean", f->clean,
                  "One clean input instead of task pairs: text for a text model, space-separated token ids (_ | ? "
                  "for pad, separator, query) for a task model; the answer is the token after its last");
  cmd->add_option("--corrupted", f->corrupted, "The corrupted input, as long as --clean");
  cmd->add_option("--answer", f->answer, "The clean answer: one character (text) or token");
  cmd->add_option("--wrong", f->wrong, "The corrupted answer, against which --answer's logit is compared");
  cmd->add_option("--out", f->out,
                  "Directory for patch_heads.csv/.svg, patch_resid.csv/.svg and patch_pattern.csv/.svg (nothing is "
                  "written without it)");
  return [f] { return run_patch(*f); };
}

}  // namespace headroom::cli
