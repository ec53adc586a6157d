#include "ablate/report.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "plot/svg.hpp"
#include "train/metrics.hpp"
#include "nn/presets.hpp"
#include "nn/transformer.hpp"
#include "nn/safetensors.hpp"
#include "nn/strict_json.hpp"
#include "train/head_log.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;

double number_or_nan(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : NAN; }

// The validation rows of a run's metrics.csv: step, val_loss, val_accuracy.
void read_curve(const fs::path& file, RunResult& r, double target_acc) {
  for (const MetricsRow& row : read_metrics(file)) {
    r.curve_steps.push_back(static_cast<double>(row.step));
    r.curve_val_loss.push_back(row.val_loss);
    r.curve_icl.push_back(row.icl_score.value_or(NAN));
    if (!r.steps_to_target && row.val_accuracy >= target_acc) r.steps_to_target = row.step;
  }
}

// A tracked run's tracked_heads.csv: per validation step, the largest induction and
// previous-token scores over its heads (NaN inductions, where no query repeats, skipped).
void read_tracked_heads(const fs::path& file, RunResult& r) {
  for (const HeadLogRow& row : read_head_log(file)) {
    const auto step = static_cast<double>(row.step);
    if (r.heads_steps.empty() || r.heads_steps.back() != step) {
      r.heads_steps.push_back(step);
      r.heads_max_induction.push_back(NAN);
      r.heads_max_previous.push_back(NAN);
    }
    double& ind = r.heads_max_induction.back();
    double& prev = r.heads_max_previous.back();
    if (!std::isnan(row.head.induction) && !(ind >= row.head.induction)) ind = row.head.induction;
    if (!(prev >= row.head.previous_token)) prev = row.head.previous_token;
  }
}

// A config value as a table cell: strings bare, numbers as JSON writes them.
std::string cell(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string csv_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string(); }

std::string results_csv(const SweepPlan& plan, const std::vector<RunResult>& results) {
  std::string out = "run";
  for (const std::string& c : plan.columns) out += fmt::format(",{}", csv_field(c));
  out += ",seed,parameters,attention_parameters_per_layer,kv_floats_per_token_per_layer,final_train_loss,"
         "final_val_loss,final_bayes_loss,final_excess_loss,final_val_accuracy,best_val_accuracy,steps_to_target,"
         "final_step,stop_reason,convergence,fall_per_validation,wall_s,tokens_per_s\n";
  for (const RunResult& r : results) {
    out += csv_field(r.run->id);
    for (const nlohmann::json& v : r.run->values) out += fmt::format(",{}", csv_field(cell(v)));
    // An unknown convergence is an empty cell, as every unknown value here is.
    const std::string convergence = r.convergence == ConvergenceStatus::unknown ? "" : to_string(r.convergence);
    out += fmt::format(",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.run->seed, r.parameters,
                       r.attention_parameters, r.kv_floats_per_token, csv_number(r.final_train_loss),
                       csv_number(r.final_val_loss), csv_number(r.final_bayes_loss), csv_number(r.final_excess_loss),
                       csv_number(r.final_val_accuracy), csv_number(r.best_val_accuracy),
                       r.steps_to_target ? std::to_string(*r.steps_to_target) : std::string(), r.steps,
                       r.stop_reason, convergence, csv_number(r.fall_per_eval), csv_number(r.wall_s),
                       csv_number(r.tokens_per_s));
  }
  return out;
}

// ---- the summary table --------------------------------------------------------------

// summary.md's mark on a point some seed of which was still falling (footer).
constexpr const char* kStillFallingMark = "†";

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

std::string mean_sd(const SeedStats& s, double scale, int digits) {
  if (s.n == 0) return "-";
  if (s.n == 1) return fmt::format("{:.{}f}", scale * s.mean, digits);
  return fmt::format("{:.{}f} ± {:.{}f}", scale * s.mean, digits, scale * s.sd, digits);
}

// Loss to four significant digits at any magnitude (0.0001234, 1.234).
std::string loss_text(const SeedStats& s) {
  if (s.n == 0) return "-";
  const double m = std::abs(s.mean);
  const int digits = m > 0 && std::isfinite(m) ? std::clamp(3 - static_cast<int>(std::floor(std::log10(m))), 1, 8) : 4;
  return mean_sd(s, 1, digits);
}

// Whether any point knows its excess loss: a sweep on a text shows none.
bool knows_excess(const std::vector<PointSummary>& points) {
  return std::any_of(points.begin(), points.end(), [](const PointSummary& p) { return p.excess_loss.n > 0; });
}

Table summary_table(const SweepPlan& plan, const std::vector<PointSummary>& points, double target_acc) {
  const bool excess = knows_excess(points);
  Table t;
  t.header = {"point"};
  for (const std::string& c : plan.columns) t.header.push_back(c);
  for (const char* h : {"seeds", "val loss"}) t.header.emplace_back(h);
  if (excess) t.header.emplace_back("excess loss");
  t.header.emplace_back("val acc %");
  t.header.push_back(fmt::format("steps to {:g}%", 100 * target_acc));
  for (const char* h : {"params", "attn params/layer", "KV floats/token/layer"}) t.header.emplace_back(h);
  for (const PointSummary& p : points) {
    std::vector<std::string> row{p.point + (p.still_falling ? std::string(" ") + kStillFallingMark : "")};
    for (const nlohmann::json& v : p.values) row.push_back(cell(v));
    row.push_back(std::to_string(p.seeds));
    auto mark = [](bool best, bool differs) { return best ? " (best)" : differs ? " *" : ""; };
    row.push_back(loss_text(p.val_loss) + mark(p.best_loss, p.loss_differs));
    if (excess) row.push_back(loss_text(p.excess_loss) + mark(p.best_excess, p.excess_differs));
    row.push_back(mean_sd(p.val_accuracy, 100, 2) + mark(p.best_accuracy, p.accuracy_differs));
    row.push_back(p.steps_to_target.n == 0
                      ? fmt::format("- (0/{})", p.seeds)
                      : fmt::format("{:.0f} ({}/{})", p.steps_to_target.mean, p.steps_to_target.n, p.seeds));
    row.push_back(std::to_string(p.parameters));
    row.push_back(std::to_string(p.attention_parameters));
    row.push_back(std::to_string(p.kv_floats_per_token));
    t.rows.push_back(std::move(row));
  }
  return t;
}

// Display width of UTF-8 text (the table holds "±").
std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::string markdown(const Table& t) {
  std::vector<std::size_t> w(t.header.size(), 3);
  for (std::size_t i = 0; i < t.header.size(); ++i) w[i] = std::max(w[i], width(t.header[i]));
  for (const auto& row : t.rows) {
    for (std::size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], width(row[i]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(w[i] - width(cells[i]), ' ');
      out += i == 0 ? fmt::format(" {}{} |", cells[i], pad) : fmt::format(" {}{} |", pad, cells[i]);  // text left, numbers right
    }
    return out + "\n";
  };
  std::string out = line(t.header) + "|";
  for (std::size_t i = 0; i < w.size(); ++i) {
    out += i == 0 ? fmt::format(":{}|", std::string(w[i] + 1, '-')) : fmt::format("{}:|", std::string(w[i] + 1, '-'));
  }
  out += "\n";
  for (const auto& row : t.rows) out += line(row);
  return out;
}

std::string html_table(const Table& t) {
  std::string out = "<table>\n<tr>";
  for (const std::string& h : t.header) out += fmt::format("<th>{}</th>", svg::escape(h));
  out += "</tr>\n";
  for (const auto& row : t.rows) {
    out += "<tr>";
    for (const std::string& c : row) out += fmt::format("<td>{}</td>", svg::escape(c));
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

// The settings every run shares, for the report's first line.
std::string describe(const SweepPlan& plan) {
  auto same = [&](auto field) {
    for (const PlannedRun& r : plan.runs) {
      if (field(r.config) != field(plan.runs.front().config)) return false;
    }
    return true;
  };
  const TrainConfig& c = plan.runs.front().config;
  std::vector<std::string> parts;
  if (same([](const TrainConfig& x) { return data_source(x.data); })) parts.push_back(data_source(c.data));
  if (same([](const TrainConfig& x) { return x.model.vocab; })) parts.push_back(fmt::format("vocab {}", c.model.vocab));
  if (same([](const TrainConfig& x) { return x.data.seq_len; })) parts.push_back(fmt::format("seq_len {}", c.data.seq_len));
  if (same([](const TrainConfig& x) { return x.model.d_model; })) parts.push_back(fmt::format("d_model {}", c.model.d_model));
  if (same([](const TrainConfig& x) { return x.model.n_layers; })) parts.push_back(fmt::format("{} layer{}", c.model.n_layers, c.model.n_layers == 1 ? "" : "s"));
  // The model switches away from the defaults, so a sweep of attention-only models
  // without LayerNorm says so (the default pre-norm block with its MLP goes unsaid).
  if (same([](const TrainConfig& x) { return x.model.attn_only; }) && c.model.attn_only) parts.emplace_back("attention-only");
  if (same([](const TrainConfig& x) { return x.model.norm; }) && c.model.norm != NormPlacement::pre) {
    parts.push_back(c.model.norm == NormPlacement::none ? std::string("no norm") : to_string(c.model.norm) + "-norm");
  }
  // And the blocks of docs/design.md #17 (rope, rmsnorm, swiglu, ...) that every run has.
  for (const std::string& choice : block_choices(c.model)) {
    if (std::all_of(plan.runs.begin(), plan.runs.end(), [&](const PlannedRun& r) {
          const std::vector<std::string> theirs = block_choices(r.config.model);
          return std::find(theirs.begin(), theirs.end(), choice) != theirs.end();
        })) {
      parts.push_back(choice);
    }
  }
  if (same([](const TrainConfig& x) { return x.optim.steps; })) parts.push_back(fmt::format("{} steps", c.optim.steps));
  if (same([](const TrainConfig& x) { return x.optim.patience; }) && c.optim.patience > 0 &&
      same([](const TrainConfig& x) { return x.optim.min_delta; })) {
    parts.push_back(fmt::format("patience {} (min_delta {})", c.optim.patience, c.optim.min_delta));
  }
  if (same([](const TrainConfig& x) { return x.optim.batch; })) parts.push_back(fmt::format("batch {}", c.optim.batch));
  if (same([](const TrainConfig& x) { return x.optim.optimizer; })) parts.push_back(to_string(c.optim.optimizer));
  if (same([](const TrainConfig& x) { return x.optim.lr; })) parts.push_back(fmt::format("lr {}", c.optim.lr));
  std::string seeds;
  for (std::uint64_t s : plan.seeds) seeds += (seeds.empty() ? "" : ", ") + std::to_string(s);
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return fmt::format("{}; seeds {}", out, seeds);
}

std::string footer(const SweepPlan& plan, const std::vector<RunResult>& results,
                   const std::vector<PointSummary>& points, double target_acc) {
  const std::size_t eval_every = plan.runs.front().config.optim.eval_every;
  const bool same_eval = std::all_of(plan.runs.begin(), plan.runs.end(),
                                     [&](const PlannedRun& r) { return r.config.optim.eval_every == eval_every; });
  std::string out;
  if (std::any_of(points.begin(), points.end(), [](const PointSummary& p) { return p.still_falling; })) {
    out += fmt::format(
        "{} Still improving: the val loss of some seed of a marked point was still falling when its run stopped (over "
        "its last 5 validations, beyond their noise and min_delta; the rule is in docs/cli/train.md). Comparisons "
        "with marked points measure the training budget, not the architecture: train longer, or until the loss "
        "stops improving (--patience).\n\n",
        kStillFallingMark);
  }
  out += fmt::format(
      "Final values are the last validation of each run (at its last step, or where --patience ended it); `a ± b` "
      "is the mean and the sample standard deviation (n - 1) over seeds.\n\n"
      "`(best)` marks the point of lowest mean val loss, and the one of highest mean val accuracy (ties: each). "
      "`*` marks a "
      "point whose mean differs from the best point's by more than the seed noise: "
      "|mean_a - mean_b| > 2 sqrt(sd_a^2/n_a + sd_b^2/n_b), two standard errors of the difference of the means. "
      "Unmarked points are within noise of the best, or have fewer than 2 seeds (no noise estimate).\n\n"
      "Steps to {:g}%: the first validation step{} with val accuracy >= {:g}, the mean over the seeds "
      "that reached it (reached/seeds). Params: every trainable parameter. Attn params/layer: the q, k, v and output "
      "projections with their biases (and QK-norm's weights and the key smear's, where a run has them). KV "
      "floats/token/layer: what a key/value cache holds per token and layer, n_kv_heads (d_k + d_v).\n",
      100 * target_acc, same_eval ? fmt::format(" (every {} steps)", eval_every) : std::string(), target_acc);
  if (knows_excess(points)) {
    out += "\nExcess loss: a run's final val loss minus the Bayes loss of the same validation targets (the loss of "
           "the distribution the task draws them from), so 0 is the best any model can do on average; it is the "
           "number to compare across points. `(best)` and `*` mark it against the point of lowest mean excess loss, "
           "by the same rule. A run whose result.json predates it is left out of its point's mean (its results.csv "
           "cells are empty).\n";
  }
  if (!plan.skipped.empty()) {
    out += "\nSkipped points (invalid, or the same runs as another point):\n\n";
    for (const SkippedPoint& s : plan.skipped) out += fmt::format("- {}: {}\n", s.point, s.reason);
  }
  if (results.size() < plan.runs.size()) {
    std::string missing;
    std::size_t k = 0;
    for (const PlannedRun& r : plan.runs) {
      const bool done = std::any_of(results.begin(), results.end(), [&](const RunResult& x) { return x.run == &r; });
      if (done) continue;
      if (++k <= 20) missing += (missing.empty() ? "" : ", ") + r.id;
    }
    out += fmt::format("\nNot finished ({} of {} runs): {}{}\n", plan.runs.size() - results.size(), plan.runs.size(),
                       missing, k > 20 ? ", ..." : "");
  }
  return out;
}

// ---- plots --------------------------------------------------------------------------

std::string axis_label(const std::string& column) {
  if (column == "n_heads") return "query heads (n_heads)";
  if (column == "d_k") return "per-head query/key width d_k";
  if (column == "n_kv_heads") return "key/value heads (n_kv_heads)";
  return column;
}

// Per grid point, the mean over its seeds of one curve (steps, values) of each run,
// with a min-max band, over the steps every seed has (the same ones, for one config).
using Curve = std::vector<double> RunResult::*;
std::vector<svg::Series> seed_mean_curves(const SweepPlan& plan, const std::vector<RunResult>& results, Curve steps,
                                          Curve values) {
  std::vector<std::string> points;
  for (const PlannedRun& r : plan.runs) {
    if (points.empty() || points.back() != r.point) points.push_back(r.point);
  }
  std::vector<svg::Series> out;
  for (const std::string& point : points) {
    std::vector<const RunResult*> seeds;
    for (const RunResult& r : results) {
      if (r.run->point == point && !(r.*steps).empty()) seeds.push_back(&r);
    }
    if (seeds.empty()) continue;
    svg::Series s{.name = point, .x = {}, .y = {}, .lo = {}, .hi = {}, .err = {}, .each = {}};
    for (std::size_t i = 0; i < (seeds.front()->*steps).size(); ++i) {
      const double step = (seeds.front()->*steps)[i];
      double sum = 0, lo = INFINITY, hi = -INFINITY;
      bool all = true;
      for (const RunResult* r : seeds) {
        if (i >= (r->*steps).size() || (r->*steps)[i] != step || i >= (r->*values).size()) {
          all = false;
          break;
        }
        const double v = (r->*values)[i];
        sum += v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (!all) break;
      s.x.push_back(step);
      s.y.push_back(sum / static_cast<double>(seeds.size()));
      s.lo.push_back(lo);
      s.hi.push_back(hi);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string val_loss_plot(const SweepPlan& plan, const std::vector<RunResult>& results) {
  svg::Chart chart{.title = "Validation loss during training",
                   .x = {.label = "step", .scale = svg::Scale::linear, .categories = {}, .ticks = {}},
                   .y = {.label = "validation loss (nats/token, log scale)", .scale = svg::Scale::log,
                         .categories = {}, .ticks = {}},
                   .series = seed_mean_curves(plan, results, &RunResult::curve_steps, &RunResult::curve_val_loss)};
  return svg::render({chart}, "Validation loss vs step (mean over seeds; band: min to max)");
}

// With train.track_heads: when each point's heads form (the induction phase change).
std::string tracked_heads_plot(const SweepPlan& plan, const std::vector<RunResult>& results) {
  const svg::Axis step{.label = "step", .scale = svg::Scale::linear, .categories = {}, .ticks = {}};
  const svg::Axis share{.label = "mean attention weight", .scale = svg::Scale::linear, .categories = {}, .ticks = {},
                        .floor = 0.0, .ceiling = 1.0};
  std::vector<svg::Chart> charts{
      {.title = "largest induction score over the heads",
       .x = step,
       .y = share,
       .series = seed_mean_curves(plan, results, &RunResult::heads_steps, &RunResult::heads_max_induction)},
      {.title = "largest previous-token score over the heads",
       .x = step,
       .y = share,
       .series = seed_mean_curves(plan, results, &RunResult::heads_steps, &RunResult::heads_max_previous)},
      {.title = "in-context-learning score (late minus early loss)",
       .x = step,
       .y = {.label = "nats/token", .scale = svg::Scale::linear, .categories = {}, .ticks = {}},
       .series = seed_mean_curves(plan, results, &RunResult::curve_steps, &RunResult::curve_icl)}};
  return svg::render(charts, "Heads during training, per point (mean over seeds; band: min to max)");
}

// Final val loss and accuracy against one swept column, a line per combination of
// the other swept columns.
std::string final_plot(const SweepPlan& plan, const std::vector<PointSummary>& points, const std::string& column) {
  const auto col = static_cast<std::size_t>(std::find(plan.columns.begin(), plan.columns.end(), column) -
                                            plan.columns.begin());
  std::vector<std::size_t> others;
  for (const std::string& a : plan.plot_axes) {
    const auto i = static_cast<std::size_t>(std::find(plan.columns.begin(), plan.columns.end(), a) - plan.columns.begin());
    if (a != column && i < plan.columns.size()) others.push_back(i);
  }
  // Numeric x when every value is a number (log-spaced when they span 8x or more), else categories.
  std::vector<nlohmann::json> xs;
  for (const PointSummary& p : points) {
    if (std::find(xs.begin(), xs.end(), p.values[col]) == xs.end()) xs.push_back(p.values[col]);
  }
  const bool numeric = std::all_of(xs.begin(), xs.end(), [](const nlohmann::json& v) { return v.is_number(); });
  svg::Axis x{.label = axis_label(column), .scale = svg::Scale::linear, .categories = {}, .ticks = {}};
  if (numeric) {
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& v : xs) {
      lo = std::min(lo, v.get<double>());
      hi = std::max(hi, v.get<double>());
      x.ticks.push_back(v.get<double>());
    }
    std::sort(x.ticks.begin(), x.ticks.end());
    if (lo > 0 && hi / lo >= 8) {
      x.scale = svg::Scale::log;
      x.label += " (log scale)";
    }
  } else {
    for (const auto& v : xs) x.categories.push_back(cell(v));
  }
  auto x_of = [&](const nlohmann::json& v) {
    if (numeric) return v.get<double>();
    return static_cast<double>(std::find(xs.begin(), xs.end(), v) - xs.begin());
  };

  std::vector<std::string> keys;  // series, in order of first appearance
  std::map<std::string, std::vector<const PointSummary*>> members;
  for (const PointSummary& p : points) {
    std::string key;
    for (std::size_t i : others) key += fmt::format("{}{}={}", key.empty() ? "" : ", ", plan.columns[i], cell(p.values[i]));
    if (key.empty()) key = "mean ± sd over seeds";
    if (!members.contains(key)) keys.push_back(key);
    members[key].push_back(&p);
  }
  double lo = INFINITY, hi = -INFINITY;
  for (const PointSummary& p : points) {
    lo = std::min(lo, p.val_loss.mean);
    hi = std::max(hi, p.val_loss.mean);
  }
  const bool log_loss = lo > 0 && hi / lo > 10;
  svg::Chart loss{.title = "Final validation loss",
                  .x = x,
                  .y = {.label = log_loss ? "final validation loss (nats/token, log scale)"
                                          : "final validation loss (nats/token)",
                        .scale = log_loss ? svg::Scale::log : svg::Scale::linear, .categories = {}, .ticks = {}},
                  .series = {}};
  svg::Chart acc{.title = "Final validation accuracy",
                 .x = x,
                 .y = {.label = "final validation accuracy (%)", .scale = svg::Scale::linear, .categories = {},
                       .ticks = {}, .floor = 0, .ceiling = 100},
                 .series = {}};
  svg::Chart excess{.title = "Final excess loss (val loss - Bayes loss)",
                    .x = x,
                    .y = {.label = "final excess loss (nats/token)", .scale = svg::Scale::linear, .categories = {},
                          .ticks = {}},
                    .series = {}};
  for (const std::string& key : keys) {
    std::vector<const PointSummary*> ps = members[key];
    std::stable_sort(ps.begin(), ps.end(),
                     [&](const PointSummary* a, const PointSummary* b) { return x_of(a->values[col]) < x_of(b->values[col]); });
    svg::Series l{.name = key, .x = {}, .y = {}, .lo = {}, .hi = {}, .err = {}, .each = {}}, a = l, e = l;
    for (const PointSummary* p : ps) {
      const double xv = x_of(p->values[col]);
      if (p->excess_loss.n > 0) {
        e.x.push_back(xv);
        e.y.push_back(p->excess_loss.mean);
        e.err.push_back(std::isfinite(p->excess_loss.sd) ? p->excess_loss.sd : 0);
      }
      l.x.push_back(xv);
      l.y.push_back(p->val_loss.mean);
      l.err.push_back(std::isfinite(p->val_loss.sd) ? p->val_loss.sd : 0);
      a.x.push_back(xv);
      a.y.push_back(100 * p->val_accuracy.mean);
      a.err.push_back(std::isfinite(p->val_accuracy.sd) ? 100 * p->val_accuracy.sd : 0);
    }
    loss.series.push_back(std::move(l));
    acc.series.push_back(std::move(a));
    excess.series.push_back(std::move(e));
  }
  if (!knows_excess(points)) {
    return svg::render({loss, acc}, fmt::format("Final validation loss and accuracy vs {} (mean; bars: sd over seeds)",
                                                column));
  }
  return svg::render({loss, excess, acc},
                     fmt::format("Final validation loss, excess loss and accuracy vs {} (mean; bars: sd over seeds)",
                                 column));
}

std::string file_name(const std::string& column) {
  std::string out = column;
  for (char& c : out) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_' && c != '-') c = '_';
  }
  return fmt::format("final_vs_{}.svg", out);
}

}  // namespace

std::vector<RunResult> collect_results(const SweepPlan& plan, const fs::path& dir, double target_acc) {
  std::vector<RunResult> results;
  for (const PlannedRun& run : plan.runs) {
    const fs::path run_dir = dir / "runs" / run.id;
    const fs::path file = run_dir / "result.json";
    std::error_code ec;
    if (!fs::exists(file, ec)) continue;
    const nlohmann::json j = read_strict_json_file(file);  // nn/strict_json.hpp
    RunResult r;
    r.run = &run;
    try {
      r.steps = j.at("steps").get<std::size_t>();
      r.parameters = j.at("parameters").get<std::size_t>();
      r.final_train_loss = number_or_nan(j.at("final_train_loss"));
      r.final_val_loss = number_or_nan(j.at("final_val_loss"));
      r.final_val_accuracy = number_or_nan(j.at("final_val_accuracy"));
      r.best_val_accuracy = number_or_nan(j.at("best_val_accuracy"));
      // Absent from a result.json written before them: unknown, as for a text.
      if (j.contains("final_bayes_loss")) r.final_bayes_loss = number_or_nan(j.at("final_bayes_loss"));
      if (j.contains("final_excess_loss")) r.final_excess_loss = number_or_nan(j.at("final_excess_loss"));
      if (j.contains("stop_reason")) r.stop_reason = j.at("stop_reason").get<std::string>();
      if (j.contains("convergence")) r.convergence = parse_convergence_status(j.at("convergence").get<std::string>());
      if (j.contains("fall_per_validation")) r.fall_per_eval = number_or_nan(j.at("fall_per_validation"));
      r.wall_s = number_or_nan(j.at("wall_s"));
      r.tokens_per_s = number_or_nan(j.at("tokens_per_s"));
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(fmt::format("{}: {}", file.string(), e.what()));
    } catch (const std::invalid_argument& e) {  // parse_convergence_status
      throw std::invalid_argument(fmt::format("{}: {}", file.string(), e.what()));
    }
    const AttentionOptions a = attention_options(run.config.model);
    r.attention_parameters = attention_parameter_count(a);
    r.kv_floats_per_token = kv_cache_floats_per_token(a);
    read_curve(run_dir / "metrics.csv", r, target_acc);
    if (run.config.optim.track_heads && fs::exists(run_dir / "tracked_heads.csv")) {
      read_tracked_heads(run_dir / "tracked_heads.csv", r);
    }
    results.push_back(std::move(r));
  }
  return results;
}

SeedStats seed_stats(const std::vector<double>& values) {
  SeedStats s;
  s.n = values.size();
  if (s.n == 0) return s;
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(s.n);
  if (s.n >= 2) {
    double sq = 0;
    for (double v : values) sq += (v - s.mean) * (v - s.mean);
    s.sd = std::sqrt(sq / static_cast<double>(s.n - 1));
  }
  return s;
}

std::vector<std::string> undecided_points(const std::vector<PointSummary>& points, double margin, std::string* best_point) {
  bool excess = !points.empty();
  for (const PointSummary& p : points) excess = excess && p.excess_loss.n > 0;
  const auto loss = [&](const PointSummary& p) -> const SeedStats& { return excess ? p.excess_loss : p.val_loss; };
  const PointSummary* best = nullptr;
  for (const PointSummary& p : points) {
    if (std::isfinite(loss(p).mean) && (best == nullptr || loss(p).mean < loss(*best).mean)) best = &p;
  }
  if (best_point != nullptr) *best_point = best == nullptr ? std::string() : best->point;
  std::vector<std::string> open;
  for (const PointSummary& p : points) {
    if (&p == best) continue;
    const SeedStats& a = loss(p);
    if (best == nullptr || a.n < 2 || loss(*best).n < 2 || !std::isfinite(a.mean) || !std::isfinite(a.sd)) {
      open.push_back(p.point);
      continue;
    }
    const SeedStats& b = loss(*best);
    if (!differs_beyond_noise(a, b) && !equal_within(a, b, margin)) open.push_back(p.point);
  }
  return open;
}

bool equal_within(const SeedStats& a, const SeedStats& b, double margin) {
  if (a.n < 2 || b.n < 2 || !std::isfinite(a.mean) || !std::isfinite(b.mean) || !std::isfinite(a.sd) ||
      !std::isfinite(b.sd)) {
    return false;
  }
  const double se = std::sqrt(a.sd * a.sd / static_cast<double>(a.n) + b.sd * b.sd / static_cast<double>(b.n));
  return std::abs(a.mean - b.mean) + 2 * se < margin;
}

bool differs_beyond_noise(const SeedStats& a, const SeedStats& b) {
  if (a.n < 2 || b.n < 2) return false;
  const double se = std::sqrt(a.sd * a.sd / static_cast<double>(a.n) + b.sd * b.sd / static_cast<double>(b.n));
  return std::abs(a.mean - b.mean) > 2 * se;
}

std::vector<PointSummary> summarize(const SweepPlan& plan, const std::vector<RunResult>& results) {
  std::vector<PointSummary> points;
  for (const PlannedRun& run : plan.runs) {
    if (!points.empty() && points.back().point == run.point) continue;
    std::vector<double> loss, acc, excess, target;
    const RunResult* first = nullptr;
    bool still_falling = false;
    for (const RunResult& r : results) {
      if (r.run->point != run.point) continue;
      first = first ? first : &r;
      still_falling = still_falling || r.convergence == ConvergenceStatus::falling;
      loss.push_back(r.final_val_loss);
      acc.push_back(r.final_val_accuracy);
      if (!std::isnan(r.final_excess_loss)) excess.push_back(r.final_excess_loss);
      if (r.steps_to_target) target.push_back(static_cast<double>(*r.steps_to_target));
    }
    if (!first) continue;
    PointSummary p;
    p.point = run.point;
    p.values = run.values;
    p.seeds = loss.size();
    p.val_loss = seed_stats(loss);
    p.val_accuracy = seed_stats(acc);
    p.excess_loss = seed_stats(excess);
    p.steps_to_target = seed_stats(target);
    p.parameters = first->parameters;
    p.attention_parameters = first->attention_parameters;
    p.kv_floats_per_token = first->kv_floats_per_token;
    p.still_falling = still_falling;
    points.push_back(std::move(p));
  }
  if (points.empty()) return points;
  auto best_loss = points.begin(), best_acc = points.begin();
  for (auto it = points.begin(); it != points.end(); ++it) {
    if (it->val_loss.mean < best_loss->val_loss.mean) best_loss = it;
    if (it->val_accuracy.mean > best_acc->val_accuracy.mean) best_acc = it;
  }
  for (PointSummary& p : points) {  // ties are all best
    p.best_loss = p.val_loss.mean == best_loss->val_loss.mean;
    p.best_accuracy = p.val_accuracy.mean == best_acc->val_accuracy.mean;
  }
  for (PointSummary& p : points) {
    p.loss_differs = !p.best_loss && differs_beyond_noise(p.val_loss, best_loss->val_loss);
    p.accuracy_differs = !p.best_accuracy && differs_beyond_noise(p.val_accuracy, best_acc->val_accuracy);
  }
  // Excess loss, among the points that know it (a point of old result.json files may not).
  const PointSummary* best_excess = nullptr;
  for (const PointSummary& p : points) {
    if (p.excess_loss.n > 0 && (!best_excess || p.excess_loss.mean < best_excess->excess_loss.mean)) best_excess = &p;
  }
  if (best_excess != nullptr) {
    const SeedStats best = best_excess->excess_loss;
    for (PointSummary& p : points) {
      if (p.excess_loss.n == 0) continue;
      p.best_excess = p.excess_loss.mean == best.mean;
      p.excess_differs = !p.best_excess && differs_beyond_noise(p.excess_loss, best);
    }
  }
  return points;
}

std::string write_reports(const SweepPlan& plan, const fs::path& dir, double target_acc) {
  // Read and written under DIR's lock: of processes that finish runs and rebuild the
  // reports at once, the last to take the lock has seen every result.json (each is
  // written before its process asks for the lock), and nothing it writes is torn.
  const RunDirLock lock = lock_sweep_dir(dir);
  const std::vector<RunResult> results = collect_results(plan, dir, target_acc);
  const std::vector<PointSummary> points = summarize(plan, results);
  const Table table = summary_table(plan, points, target_acc);
  const std::string about = describe(plan);
  const std::string notes = footer(plan, results, points, target_acc);

  write_file_atomically(dir / "results.csv", results_csv(plan, results));
  const std::string summary = fmt::format("# headroom ablate: {}\n\n{}\n{}\n{}", dir.filename().string(), about,
                                          points.empty() ? std::string("No run has finished yet.\n") : markdown(table),
                                          notes);
  write_file_atomically(dir / "summary.md", summary);

  std::vector<std::pair<std::string, std::string>> plots;  // file, svg
  if (!results.empty()) {
    plots.emplace_back("val_loss.svg", val_loss_plot(plan, results));
    if (std::any_of(results.begin(), results.end(), [](const RunResult& r) { return !r.heads_steps.empty(); })) {
      plots.emplace_back("tracked_heads.svg", tracked_heads_plot(plan, results));
    }
    for (const std::string& column : plan.plot_axes) plots.emplace_back(file_name(column), final_plot(plan, points, column));
  }
  for (const auto& [file, text] : plots) write_file_atomically(dir / file, text);

  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>headroom ablate: {0}</title>\n"
      "<style>\nbody {{ font-family: sans-serif; margin: 2em; color: #222; }}\n"
      "table {{ border-collapse: collapse; margin: 1em 0; }}\n"
      "th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}\n"
      "th {{ background: #f3f3f3; }}\ntd:first-child {{ text-align: left; font-family: monospace; }}\n"
      ".notes {{ max-width: 60em; color: #444; white-space: pre-wrap; }}\nfigure {{ margin: 1.5em 0; }}\n"
      "</style>\n</head>\n<body>\n<h1>headroom ablate: {0}</h1>\n<p>{1}</p>\n<h2>Summary</h2>\n{2}"
      "<div class=\"notes\">{3}</div>\n<h2>Plots</h2>\n",
      svg::escape(dir.filename().string()), svg::escape(about),
      points.empty() ? std::string("<p>No run has finished yet.</p>\n") : html_table(table), svg::escape(notes));
  for (const auto& [file, text] : plots) html += fmt::format("<figure>\n{}<figcaption>{}</figcaption>\n</figure>\n", text, file);
  html += "</body>\n</html>\n";
  write_file_atomically(dir / "report.html", html);
  return summary;
}

}  // namespace headroom
