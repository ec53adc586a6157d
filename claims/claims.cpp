#include "claims/claims.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "nn/param_count.hpp"
#include "plot/svg.hpp"

namespace headroom {
namespace {

svg::Axis axis(std::string label, svg::Scale scale = svg::Scale::linear) {
  return {.label = std::move(label), .scale = scale, .categories = {}, .ticks = {}};
}

svg::Series series(std::string name) { return {.name = std::move(name), .x = {}, .y = {}, .lo = {}, .hi = {}, .err = {}, .each = {}}; }

// A point's mean with its seed sd as the error bar (NaN where nothing finished).
void add(svg::Series& s, double x, const SeedStats& y) {
  s.x.push_back(x);
  s.y.push_back(y.mean);
  s.err.push_back(std::isfinite(y.sd) ? y.sd : 0.0);
  s.each.emplace_back();
}

// A point's loss: the mean with its sd, and every seed's own value beside it.
void add_loss(svg::Series& s, double x, const PointNumbers& p) {
  add(s, x, p.loss());
  s.each.back() = p.seed_losses;
}

std::string loss_name(const PointNumbers& p) { return p.has_excess() ? "excess loss" : "val loss"; }

std::string count(std::size_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

const char* verdict_word(Verdict v) {
  switch (v) {
    case Verdict::supported:
      return "agrees with";
    case Verdict::contradicted:
      return "disagrees with";
    case Verdict::inconclusive:
      break;
  }
  return "cannot yet decide";
}

// Why lower_rule decided as it did, for a finding: "the gap (b - a) is 0.0117: lower
// beyond seed noise, ...".
std::string lower_gap(const SeedStats& a, const SeedStats& b, double margin, const std::string& unit,
                      int digits = 4) {
  return fmt::format("the gap is {:.{}f}: {}", b.mean - a.mean, digits, describe(lower_outcome(a, b, margin), margin, unit));
}

// For a table cell: what a lower-rule verdict that is not a plain "lower" rests on
// ("; equal within 0.02 (gap 0.0119)"), else nothing.
std::string gap_note(const SeedStats& a, const SeedStats& b, double margin, int digits = 4) {
  switch (lower_outcome(a, b, margin)) {
    case LowerOutcome::equal:
      return fmt::format("; equal within {:.{}f} (gap {:.{}f})", margin, digits, b.mean - a.mean, digits);
    case LowerOutcome::lower_within_margin:
      return fmt::format("; lower by {:.{}f}, inside the {:.{}f} margin", b.mean - a.mean, digits, margin, digits);
    default:
      return {};
  }
}

// The points of a heads sweep (one per head count), in grid order.
std::vector<const PointNumbers*> by_heads(const SweepNumbers& sweep) {
  std::vector<const PointNumbers*> out;
  for (const PointNumbers& p : sweep.points) out.push_back(&p);
  std::stable_sort(out.begin(), out.end(), [](const PointNumbers* a, const PointNumbers* b) {
    return a->config.model.n_heads < b->config.model.n_heads;
  });
  return out;
}

// Of `points`, the one of lowest mean loss (finished ones only), or nullptr.
const PointNumbers* lowest(const std::vector<const PointNumbers*>& points) {
  const PointNumbers* best = nullptr;
  for (const PointNumbers* p : points) {
    if (p->loss().n == 0 || !std::isfinite(p->loss().mean)) continue;
    if (best == nullptr || p->loss().mean < best->loss().mean) best = p;
  }
  return best;
}

// What a point's mean hides: "; 1 of 5 seeds stuck; 2 of 5 still falling at the end".
std::string point_notes(const PointNumbers& p) {
  std::string out;
  if (p.stuck() > 0) out += fmt::format("; {} of {} seeds stuck", p.stuck(), p.seed_losses.size());
  if (p.still_falling > 0) out += fmt::format("; {} of {} still falling at the end", p.still_falling, p.trend_known);
  return out;
}

std::string heads_line(const PointNumbers& p) {
  std::string line = fmt::format("h={} (d_k {}): {} {}", p.config.model.n_heads, p.config.model.d_k, loss_name(p),
                                 format_stats(p.loss()));
  if (p.val_accuracy.n > 0 && std::isfinite(p.val_accuracy.mean)) {
    line += fmt::format("; val accuracy {:.1f}%", 100 * p.val_accuracy.mean);
  }
  return line + point_notes(p);
}

// A heads sweep's loss against h, log x; from `min_heads` heads up, to zoom in on the
// range where the points are close.
svg::Chart loss_vs_heads(const SweepNumbers& sweep, const std::string& title, std::size_t min_heads = 1) {
  svg::Chart chart{.title = title, .x = axis("query heads h (d_k = d_model / h)", svg::Scale::log), .y = axis(""),
                   .series = {}};
  svg::Series s = series("mean over seeds (bars: sd; hollow: each seed)");
  for (const PointNumbers* p : by_heads(sweep)) {
    if (p->config.model.n_heads < min_heads) continue;
    add_loss(s, static_cast<double>(p->config.model.n_heads), *p);
    chart.x.ticks.push_back(static_cast<double>(p->config.model.n_heads));
    chart.y.label = loss_name(*p) + " (nats/token)";
  }
  chart.series.push_back(std::move(s));
  return chart;
}

}  // namespace

namespace {
// The seeds of `losses` within kStuckMargin of the best finite one (a NaN loss is stuck).
std::vector<double> trained_seeds(const std::vector<double>& losses) {
  double best = INFINITY;
  for (const double v : losses) {
    if (std::isfinite(v)) best = std::min(best, v);
  }
  std::vector<double> trained;
  for (const double v : losses) {
    if (v <= best + kStuckMargin) trained.push_back(v);
  }
  return trained;
}
}  // namespace

std::size_t PointNumbers::stuck() const { return seed_losses.size() - trained_seeds(seed_losses).size(); }

SeedStats PointNumbers::trained_loss() const {
  return seed_losses.empty() ? loss() : seed_stats(trained_seeds(seed_losses));
}

const PointNumbers* SweepNumbers::find(const std::function<bool(const ModelConfig&)>& where) const {
  for (const PointNumbers& p : points) {
    if (where(p.config.model)) return &p;
  }
  return nullptr;
}

SweepNumbers sweep_numbers(const std::string& name, const SweepPlan& plan, const std::vector<RunResult>& results) {
  SweepNumbers out{.name = name, .points = {}};
  for (const PlannedRun& run : plan.runs) {
    if (!out.points.empty() && out.points.back().point == run.point) continue;
    std::vector<double> loss, excess, speed, accuracy, gain, icl;
    PointNumbers p{.point = run.point, .config = run.config, .val_loss = {}, .excess_loss = {}, .tokens_per_s = {},
                   .val_accuracy = {}, .last_gain = {}};
    for (const RunResult& r : results) {
      if (r.run->point != run.point) continue;
      loss.push_back(r.final_val_loss);
      if (std::isfinite(r.final_excess_loss)) excess.push_back(r.final_excess_loss);
      speed.push_back(r.tokens_per_s);
      accuracy.push_back(r.final_val_accuracy);
      const std::vector<double>& curve = r.curve_val_loss;
      if (curve.size() >= 2) gain.push_back(curve[curve.size() - 2] - curve.back());
      if (!r.curve_icl.empty() && std::isfinite(r.curve_icl.back())) icl.push_back(r.curve_icl.back());
      p.parameters = r.parameters;
      p.attention_parameters = r.attention_parameters;
      if (r.convergence != ConvergenceStatus::unknown) ++p.trend_known;
      if (r.convergence == ConvergenceStatus::falling) ++p.still_falling;
    }
    p.val_loss = seed_stats(loss);
    p.excess_loss = seed_stats(excess);
    p.seed_losses = excess.empty() ? loss : excess;
    p.tokens_per_s = seed_stats(speed);
    p.val_accuracy = seed_stats(accuracy);
    p.last_gain = seed_stats(gain);
    p.icl_score = seed_stats(icl);
    out.points.push_back(std::move(p));
  }
  return out;
}

void add_replication(std::vector<ClaimRow>& all, const std::vector<ClaimRow>& a, const std::vector<ClaimRow>& b) {
  if (a.size() != all.size() || b.size() != all.size()) {
    throw std::logic_error("add_replication: the seed sets' rows differ from the study's");
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (a[i].id != all[i].id || b[i].id != all[i].id) {
      throw std::logic_error(fmt::format("add_replication: row {} is {} and {} in the seed sets", all[i].id, a[i].id,
                                         b[i].id));
    }
    all[i].replicated = true;
    all[i].set_a = a[i].verdict;
    all[i].set_b = b[i].verdict;
    // A point either seed set compares is compared (5a's best point may differ).
    if (!all[i].compared.empty()) {
      for (const std::vector<ClaimRow>* set : {&a, &b}) {
        for (const ClaimRow::Point& p : (*set)[i].compared) {
          if (std::find(all[i].compared.begin(), all[i].compared.end(), p) == all[i].compared.end()) {
            all[i].compared.push_back(p);
          }
        }
      }
    }
  }
}

std::string format_stats(const SeedStats& s, int decimals) {
  if (s.n == 0 || !std::isfinite(s.mean)) return "n/a";
  const std::string sd = std::isfinite(s.sd) ? fmt::format("{:.{}f}", s.sd, decimals) : "n/a";
  return fmt::format("{:.{}f} (sd {}, n {})", s.mean, decimals, sd, s.n);
}

ClaimRow assess_mha_parameters(const SweepNumbers* heads) {
  ClaimRow row{.id = "1",
               .claim = "MHA parameters are 4 d_model^2 whatever the head count",
               .experiment = "count_parameters (nn/param_count.hpp) of one block: d_model 512 with 1 to 16 heads "
                             "(d_k = d_model / h); d_model 4096 with 32 heads of d_k 128, then 8 KV heads; and the "
                             "trained runs' own attention counts in 4-heads-lags",
               .sweeps = {},
               .prediction = "W_Q, W_K, W_V and W_O are d_model x h d_k = d_model^2 each at h d_k = d_model: 4 d_model^2 "
                             "= 1,048,576 at 512; W_Q = 16,777,216 (16.8M) and 67,108,864 (~67M) per layer at 4096; "
                             "8 KV heads make W_K and W_V 4 times smaller",
               .rule = "supported iff every count equals its formula exactly; contradicted if one differs",
               .numbers = {},
               .plot_svg = {},
               .verdict = Verdict::inconclusive,
               .finding = {},
               .summary = {}};
  std::vector<ExactCheck> checks;
  auto block = [](std::size_t d_model, std::size_t heads, std::size_t d_k, std::size_t kv_heads) {
    ModelConfig m;
    m.vocab = 256;
    m.d_model = d_model;
    m.n_layers = 1;
    m.n_heads = heads;
    m.n_kv_heads = kv_heads;
    m.d_k = d_k;
    m.max_len = 128;
    return count_parameters(m, 128).layers.at(0);
  };
  svg::Chart chart{.title = "Attention weights of one block, d_model 512",
                   .x = axis("query heads h (d_k = 512 / h)", svg::Scale::log),
                   .y = axis("weights (W_Q + W_K + W_V + W_O)"),
                   .series = {}};
  svg::Series counted = series("count_parameters"), formula = series("4 d_model^2");
  for (std::size_t h : {1, 2, 4, 8, 16}) {
    const LayerParams l = block(512, h, 0, 0);
    checks.push_back({fmt::format("d_model 512, {} heads: attention weights", h), 4.0 * 512 * 512,
                      static_cast<double>(l.attention_weights())});
    counted.x.push_back(h);
    counted.y.push_back(static_cast<double>(l.attention_weights()));
    formula.x.push_back(h);
    formula.y.push_back(4.0 * 512 * 512);
    chart.x.ticks.push_back(h);
  }
  chart.series = {formula, counted};
  const LayerParams big = block(4096, 32, 128, 0);
  checks.push_back({"d_model 4096, 32 heads, d_k 128: W_Q", 4096.0 * 4096, static_cast<double>(big.q.weights)});
  checks.push_back({"d_model 4096, 32 heads, d_k 128: attention weights per layer", 4.0 * 4096 * 4096,
                    static_cast<double>(big.attention_weights())});
  const LayerParams gqa = block(4096, 32, 128, 8);
  checks.push_back({"the same with 8 KV heads: W_K", 4096.0 * 4096 / 4, static_cast<double>(gqa.k.weights)});
  checks.push_back({"the same with 8 KV heads: W_V", 4096.0 * 4096 / 4, static_cast<double>(gqa.v.weights)});
  if (heads != nullptr) {
    row.sweeps.push_back(heads->name);
    for (const PointNumbers& p : heads->points) {
      if (p.parameters == 0) continue;  // not finished
      const ModelConfig& m = p.config.model;
      if (m.n_heads * m.d_k != m.d_model || m.n_kv_heads != m.n_heads) continue;
      // With biases: 4 d^2 weights and 4 d biases (q, k, v: h d_k each; out: d_model).
      const double d = static_cast<double>(m.d_model);
      checks.push_back({fmt::format("{}: run's attention parameters (d_model {}, biases included)", p.point,
                                    m.d_model),
                        4 * d * d + (m.bias ? 4 * d : 0), static_cast<double>(p.attention_parameters)});
    }
  }
  std::size_t equal = 0;
  for (const ExactCheck& c : checks) {
    row.numbers.push_back(fmt::format("{}: {} (formula {}){}", c.what, count(static_cast<std::size_t>(c.measured)),
                                      count(static_cast<std::size_t>(c.expected)),
                                      c.measured == c.expected ? "" : " DIFFERS"));
    if (c.measured == c.expected) ++equal;
  }
  row.verdict = exact_rule(checks);
  row.seeds_can_decide = false;
  row.plot_svg = svg::render({chart}, "Claim 1: attention weights against the head count");
  row.summary = fmt::format("{} of {} counts equal the formula; W_Q at 4096/32 heads: {}", equal, checks.size(),
                            count(big.q.weights));
  row.finding = fmt::format("The counter {} the formula: {} of {} counts are exact.", verdict_word(row.verdict), equal,
                            checks.size());
  return row;
}

namespace {

// The score sd and the attention entropy at initialisation per d_k and scale, over
// seeds: row's numbers and two charts.
std::pair<svg::Chart, svg::Chart> init_charts(const std::vector<InitPoint>& init, ClaimRow& row) {
  std::map<std::pair<std::size_t, bool>, std::vector<double>> sd_at, entropy_at, max_entropy_at;
  for (const InitPoint& p : init) {
    sd_at[{p.d_k, p.scaled}].push_back(p.attention.score_sd);
    entropy_at[{p.d_k, p.scaled}].push_back(p.attention.entropy);
    max_entropy_at[{p.d_k, p.scaled}].push_back(p.attention.max_entropy);
  }
  svg::Chart sd_chart{.title = "Score sd at initialisation", .x = axis("d_k", svg::Scale::log),
                      .y = axis("within-row sd of the scores", svg::Scale::log), .series = {}};
  svg::Chart ent_chart{.title = "Attention entropy at initialisation", .x = axis("d_k", svg::Scale::log),
                       .y = axis("entropy (nats; uniform weights: the \"uniform\" line)"), .series = {}};
  for (bool scaled : {false, true}) {
    const std::string name = scaled ? "attn_scale 1/sqrt(d_k)" : "attn_scale 1";
    svg::Series sd = series(name), ent = series(name), uniform = series("uniform (log keys seen)");
    for (const auto& [key, values] : sd_at) {
      if (key.second != scaled) continue;
      const SeedStats s = seed_stats(values), e = seed_stats(entropy_at[key]), m = seed_stats(max_entropy_at[key]);
      add(sd, static_cast<double>(key.first), s);
      add(ent, static_cast<double>(key.first), e);
      add(uniform, static_cast<double>(key.first), m);
      row.numbers.push_back(fmt::format("d_k {}, {}: score sd {}, entropy {} of {:.4f}", key.first, name,
                                      format_stats(s), format_stats(e), m.mean));
      if (std::find(sd_chart.x.ticks.begin(), sd_chart.x.ticks.end(), key.first) == sd_chart.x.ticks.end()) {
        sd_chart.x.ticks.push_back(static_cast<double>(key.first));
        ent_chart.x.ticks.push_back(static_cast<double>(key.first));
      }
    }
    sd_chart.series.push_back(std::move(sd));
    ent_chart.series.push_back(std::move(ent));
    if (!scaled) ent_chart.series.push_back(std::move(uniform));
  }
  return {sd_chart, ent_chart};
}

// The loss each scale reached at every d_k (b's numbers, a chart), and b's verdict:
// the lower rule, scaled against unscaled at the sweep's largest d_k.
svg::Chart compare_scaled_at_largest_dk(const SweepNumbers& sweep, ClaimRow& b) {
  std::size_t largest = 0;
  for (const PointNumbers& p : sweep.points) largest = std::max(largest, p.config.model.d_k);
  svg::Chart loss_chart{.title = "Loss reached", .x = axis("d_k", svg::Scale::log), .y = axis(""), .series = {}};
  for (bool scaled : {false, true}) {
    svg::Series s = series(scaled ? "attn_scale 1/sqrt(d_k)" : "attn_scale 1");
    for (const PointNumbers& p : sweep.points) {
      const bool is_scaled = p.config.model.attn_scale.value_or(0) != 1.0;
      if (is_scaled != scaled) continue;
      add_loss(s, static_cast<double>(p.config.model.d_k), p);
      loss_chart.y.label = loss_name(p) + " (nats/token)";
      if (!scaled) loss_chart.x.ticks.push_back(static_cast<double>(p.config.model.d_k));
      b.numbers.push_back(fmt::format("d_k {}, attn_scale {}: {} {}{}", p.config.model.d_k,
                                      scaled ? "1/sqrt(d_k)" : "1", loss_name(p), format_stats(p.loss()),
                                      point_notes(p)));
    }
    loss_chart.series.push_back(std::move(s));
  }
  const PointNumbers* with = sweep.find([&](const ModelConfig& m) {
    return m.d_k == largest && m.attn_scale.value_or(0) != 1.0;
  });
  const PointNumbers* without = sweep.find([&](const ModelConfig& m) {
    return m.d_k == largest && m.attn_scale.value_or(0) == 1.0;
  });
  if (with != nullptr && without != nullptr) {
    b.verdict = lower_rule(with->loss(), without->loss(), kEqualLossMargin);
    b.compared = {{sweep.name, with->point}, {sweep.name, without->point}};
    b.summary = fmt::format("d_k {}: scaled {:.4f}, unscaled {:.4f}{}", largest, with->loss().mean, without->loss().mean,
                            gap_note(with->loss(), without->loss(), kEqualLossMargin));
    if (with->stuck() + without->stuck() > 0) {
      b.summary += fmt::format("; stuck seeds {} of {} scaled, {} of {} unscaled", with->stuck(),
                               with->seed_losses.size(), without->stuck(), without->seed_losses.size());
    }
    b.finding = fmt::format("At d_k {} the scaled model reached {} and the unscaled one {}; {}, so the measurement {} "
                            "the prediction.",
                            largest, format_stats(with->loss()), format_stats(without->loss()),
                            lower_gap(with->loss(), without->loss(), kEqualLossMargin, "nats"), verdict_word(b.verdict));
    b.finding += fmt::format(" The rule compares means over all seeds (a \"trains better\" claim counts failures): "
                             "{} of {} scaled and {} of {} unscaled seeds were stuck (more than {} nats above their "
                             "point's best seed).",
                             with->stuck(), with->seed_losses.size(), without->stuck(), without->seed_losses.size(),
                             kStuckMargin);
  } else {
    b.finding = "The sweep has no finished pair at its largest d_k.";
    b.seeds_can_decide = false;
  }
  return loss_chart;
}

}  // namespace

std::vector<ClaimRow> assess_attn_scale(const SweepNumbers& sweep, const std::vector<InitPoint>& init) {
  // 2a: per seed, the slope of log(score sd) against log(d_k), for each scale.
  std::map<std::uint64_t, std::map<std::size_t, double>> scaled_sd, unscaled_sd;  // seed -> d_k -> sd
  for (const InitPoint& p : init) (p.scaled ? scaled_sd : unscaled_sd)[p.seed][p.d_k] = p.attention.score_sd;
  auto slopes = [](const std::map<std::uint64_t, std::map<std::size_t, double>>& by_seed) {
    std::vector<double> out;
    for (const auto& [seed, curve] : by_seed) {
      std::vector<double> x, y;
      for (const auto& [d_k, sd] : curve) {
        x.push_back(static_cast<double>(d_k));
        y.push_back(sd);
      }
      const double slope = log_log_slope(x, y);
      if (std::isfinite(slope)) out.push_back(slope);
    }
    return seed_stats(out);
  };
  const SeedStats unscaled_slope = slopes(unscaled_sd), scaled_slope = slopes(scaled_sd);

  ClaimRow a{.id = "2a",
             .claim = "Dividing scores by sqrt(d_k) keeps softmax trainable: without it the scores grow as sqrt(d_k)",
             .experiment = "at initialisation (GPT-2 init, N(0, 0.02^2)), on validation rows of lags: the within-row "
                           "sd of the attention scores (read from log w) and the attention entropy, for attn_scale "
                           "1/sqrt(d_k) and 1, 2 heads at d_model 64 with pre-LayerNorm, d_k across the grid",
             .sweeps = {sweep.name},
             .prediction = "q.k sums d_k products of independent terms, so its sd grows as sqrt(d_k): slope 0.5 of "
                           "log sd against log d_k unscaled, 0 scaled",
             .rule = fmt::format("slope rule per scale on one fitted slope per seed, tolerance {}: supported when "
                                 "both mean slopes are within it of 0.5 (unscaled) and 0 (scaled); contradicted when "
                                 "either is off by more than the tolerance plus 2 standard errors",
                                 kSlopeTolerance),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  a.numbers.push_back(fmt::format("slope of log score sd vs log d_k, attn_scale 1: {}", format_stats(unscaled_slope, 3)));
  a.numbers.push_back(fmt::format("slope, attn_scale 1/sqrt(d_k): {}", format_stats(scaled_slope, 3)));
  const auto [sd_chart, ent_chart] = init_charts(init, a);
  a.verdict = all_of({slope_rule(unscaled_slope, 0.5, kSlopeTolerance), slope_rule(scaled_slope, 0.0, kSlopeTolerance)});
  a.plot_svg = svg::render({sd_chart, ent_chart}, "Claim 2: attention scores at initialisation against d_k");
  a.summary = fmt::format("slope unscaled {:.3f}, scaled {:.3f}", unscaled_slope.mean, scaled_slope.mean);
  a.finding = fmt::format("Measured slopes: {:.3f} unscaled, {:.3f} scaled; the measurement {} the variance "
                          "argument's 0.5 and 0.",
                          unscaled_slope.mean, scaled_slope.mean, verdict_word(a.verdict));

  // 2b: the loss reached at the largest d_k.
  ClaimRow b{.id = "2b",
             .claim = "Dividing scores by sqrt(d_k) keeps softmax trainable: the scaled model trains to a lower loss",
             .experiment = "the same models trained on lags; the loss reached at each d_k and scale",
             .sweeps = {sweep.name},
             .prediction = "at the largest d_k the unscaled scores saturate the softmax and train worse. With GPT-2's "
                           "0.02 init the unscaled scores may start too small to saturate, so this may not show",
             .rule = "lower rule on the final loss at the largest d_k, scaled vs unscaled: " +
                     lower_rule_text("the scaled mean", kEqualLossMargin, "nats"),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  const svg::Chart loss_chart = compare_scaled_at_largest_dk(sweep, b);
  b.plot_svg = svg::render({loss_chart}, "Claim 2: loss reached against d_k, scaled and unscaled");
  return {a, b};
}

ClaimRow assess_attn_scale_unit_init(const SweepNumbers& sweep, const std::vector<InitPoint>& init) {
  ClaimRow c{.id = "2c",
             .claim = "... and where the variance argument bites: queries and keys of unit variance",
             .experiment = "the models of 2b with init_std 1/sqrt(d_model) = 0.125 (pre-LayerNorm inputs of unit "
                           "variance, so each q and k entry starts with variance 1 and q.k with variance d_k): the "
                           "score sd and attention entropy at initialisation, and the loss reached at each d_k",
             .sweeps = {sweep.name},
             .prediction = "unscaled, the scores start with sd sqrt(d_k) (16 at d_k 256): each softmax row is almost "
                           "one-hot (entropy near 0), its gradient almost 0, so the scaled model trains to a lower "
                           "loss at the largest d_k",
             .rule = "lower rule on the final loss at the largest d_k, scaled vs unscaled: " +
                     lower_rule_text("the scaled mean", kEqualLossMargin, "nats"),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  const auto [sd_chart, ent_chart] = init_charts(init, c);
  const svg::Chart loss_chart = compare_scaled_at_largest_dk(sweep, c);
  std::size_t largest = 0;
  for (const InitPoint& p : init) largest = std::max(largest, p.d_k);
  std::vector<double> entropy, uniform;
  for (const InitPoint& p : init) {
    if (p.d_k == largest && !p.scaled) {
      entropy.push_back(p.attention.entropy);
      uniform.push_back(p.attention.max_entropy);
    }
  }
  if (!entropy.empty()) {
    c.summary += fmt::format("{}entropy at init, unscaled d_k {}: {:.3f} of {:.3f}", c.summary.empty() ? "" : "; ",
                             largest, seed_stats(entropy).mean, seed_stats(uniform).mean);
  }
  c.plot_svg = svg::render({ent_chart, loss_chart},
                           "Claim 2c: unit-variance queries and keys: entropy at initialisation, loss reached");
  return c;
}

std::vector<ClaimRow> assess_concat_sum(const SweepNumbers& sweep) {
  const std::string experiment =
      "lags, 1 layer, attention only, no LayerNorm, no biases, 3 heads of d_k 8 at d_model 24, head_combine concat "
      "or sum, d_v 8 or 12";
  const auto rule = [](const char* sum_dv) {
    return fmt::format("lower rule on the final loss, concat (d_v 8) vs sum (d_v {}): ", sum_dv) +
           lower_rule_text("concat's mean", kEqualLossMargin, "nats");
  };
  ClaimRow a{.id = "3a",
             .claim = "Concatenating heads beats summing them (as the seed states it: same heads and d_v)",
             .experiment = experiment + ": concat against sum at the same d_v 8, which is what summing instead of "
                                        "concatenating means (one W_O of d_v x d_model: fewer parameters)",
             .sweeps = {sweep.name},
             .prediction = "summed heads pass one d_v-wide vector to out_proj (rank 8 < the 16 the token tables "
                           "need); concatenated ones pass h d_v = 24, so concat reaches a lower loss",
             .rule = rule("8"),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  ClaimRow b{.id = "3b",
             .claim = "... and at equal parameters",
             .experiment = experiment + ": concat with d_v 8 against sum with d_v 12, which have the same weights",
             .sweeps = {sweep.name},
             .prediction = "summed heads pass one d_v-wide vector (rank 12 < 16); concatenated ones pass 24, so "
                           "concat reaches a lower loss",
             .rule = rule("12"),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  svg::Chart chart{.title = "Loss reached", .x = axis("d_v"), .y = axis(""), .series = {}};
  for (HeadCombine combine : {HeadCombine::concat, HeadCombine::sum}) {
    svg::Series s = series(combine == HeadCombine::concat ? "concat" : "sum");
    for (const PointNumbers& p : sweep.points) {
      if (p.config.model.head_combine != combine) continue;
      add_loss(s, static_cast<double>(p.config.model.d_v), p);
      chart.y.label = loss_name(p) + " (nats/token)";
      if (combine == HeadCombine::concat) chart.x.ticks.push_back(static_cast<double>(p.config.model.d_v));
      const std::string line = fmt::format("{}, d_v {}: {} parameters ({} attention); {} {}{}", s.name,
                                           p.config.model.d_v, count(p.parameters), count(p.attention_parameters),
                                           loss_name(p), format_stats(p.loss()), point_notes(p));
      a.numbers.push_back(line);
      b.numbers.push_back(line);
    }
    chart.series.push_back(std::move(s));
  }
  const PointNumbers* concat =
      sweep.find([](const ModelConfig& m) { return m.head_combine == HeadCombine::concat && m.d_v == m.d_k; });
  const PointNumbers* same_dv =
      sweep.find([](const ModelConfig& m) { return m.head_combine == HeadCombine::sum && m.d_v == m.d_k; });
  const PointNumbers* same_weights = sweep.find([](const ModelConfig& m) {
    return m.head_combine == HeadCombine::sum && m.d_v * (m.n_heads + 1) == 2 * m.n_heads * m.d_k;
  });
  const auto decide = [&](ClaimRow& row, const PointNumbers* sum) {
    if (concat == nullptr || sum == nullptr) {
      row.finding = "The sweep lacks one of the two points compared.";
      row.seeds_can_decide = false;
      return;
    }
    row.verdict = lower_rule(concat->loss(), sum->loss(), kEqualLossMargin);
    row.compared = {{sweep.name, concat->point}, {sweep.name, sum->point}};
    row.summary = fmt::format("concat {:.4f} vs sum {:.4f} (d_v {} vs {}; {} vs {} parameters){}", concat->loss().mean,
                              sum->loss().mean, concat->config.model.d_v, sum->config.model.d_v,
                              count(concat->parameters), count(sum->parameters),
                              gap_note(concat->loss(), sum->loss(), kEqualLossMargin));
    row.finding = fmt::format("At {} vs {} parameters, concat reached {} and sum {}; {}, so the measurement {} the "
                              "prediction.",
                              count(concat->parameters), count(sum->parameters), format_stats(concat->loss()),
                              format_stats(sum->loss()), lower_gap(concat->loss(), sum->loss(), kEqualLossMargin, "nats"),
                              verdict_word(row.verdict));
  };
  decide(a, same_dv);
  decide(b, same_weights);
  a.plot_svg = svg::render({chart}, "Claim 3: concatenated vs summed heads");
  return {a, b};
}

namespace {
// Still learning when the run stopped: the per-seed gain over the last two
// validations is positive beyond two standard errors (se = sd / sqrt(n)).
bool still_improving(const SeedStats& gain) {
  if (gain.n < 2 || !std::isfinite(gain.sd)) return false;
  return gain.mean - 2 * gain.sd / std::sqrt(static_cast<double>(gain.n)) > 0;
}
}  // namespace

std::vector<ClaimRow> assess_several_heads(const SweepNumbers& sweep, std::size_t lags) {
  const std::string experiment = fmt::format(
      "lags (|K| = {}), 1 layer, attention only, no LayerNorm, d_model 48, d_k = 48 / h (fixed computation): excess "
      "loss against h",
      lags);
  const std::string prediction = fmt::format(
      "one head applies one token table to all it reads, so it cannot fit A_1[u] + A_2[v]: excess > 0 for h < {0}, "
      "about 0 for h >= {0}",
      lags);
  ClaimRow a{.id = "4a",
             .claim = "Several heads beat one at equal parameters",
             .experiment = experiment,
             .sweeps = {sweep.name},
             .prediction = prediction,
             .rule = fmt::format("lower rule, the excess at h = {0} vs h = 1: ", lags) +
                     lower_rule_text(fmt::format("the excess at h = {}", lags), kEqualLossMargin, "nats"),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  ClaimRow b{.id = "4b",
             .claim = fmt::format("... and {} heads (|K|) reach about the Bayes loss", lags),
             .experiment = experiment,
             .sweeps = {sweep.name},
             .prediction = prediction,
             .rule = fmt::format("near-zero rule on the excess at h = {0} of the seeds that trained (a \"can reach\" "
                                 "claim: a seed more than {2} nats above the point's best is stuck, counted and left "
                                 "out): supported when mean + 2 se <= {1} nats; "
                                 "contradicted when mean - 2 se > {1} nats and the runs had stopped improving; "
                                 "inconclusive while their loss still fell between the last two validations by more "
                                 "than two standard errors, or most seeds were still falling by the convergence rule "
                                 "(an undertrained model is far from 0 too: that is the budget, not the heads), and "
                                 "otherwise",
                                 lags, kNearZeroExcess, kStuckMargin),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  for (const PointNumbers* p : by_heads(sweep)) {
    if (p->config.model.n_heads <= 16) a.numbers.push_back(heads_line(*p));
  }
  const PointNumbers* one = sweep.find([](const ModelConfig& m) { return m.n_heads == 1; });
  const PointNumbers* elbow = sweep.find([&](const ModelConfig& m) { return m.n_heads == lags; });
  if (one != nullptr && elbow != nullptr) {
    a.verdict = lower_rule(elbow->loss(), one->loss(), kEqualLossMargin);
    a.compared = {{sweep.name, elbow->point}, {sweep.name, one->point}};
    a.summary = fmt::format("excess h=1 {:.4f}, h={} {:.4f}{}", one->loss().mean, lags, elbow->loss().mean,
                            gap_note(elbow->loss(), one->loss(), kEqualLossMargin));
    a.finding = fmt::format("One head: {}; {} heads: {}; {}, so the measurement {} the prediction.",
                            format_stats(one->loss()), lags, format_stats(elbow->loss()),
                            lower_gap(elbow->loss(), one->loss(), kEqualLossMargin, "nats"), verdict_word(a.verdict));
  } else {
    a.finding = fmt::format("The sweep lacks h = 1 or h = {} among its finished points.", lags);
    a.seeds_can_decide = false;
  }
  if (elbow != nullptr) {
    const SeedStats trained = elbow->trained_loss();
    b.verdict = near_zero_rule(trained, kNearZeroExcess);
    b.compared = {{sweep.name, elbow->point}};
    b.numbers.push_back(heads_line(*elbow));
    b.summary = fmt::format("excess h={} {}", lags, format_stats(trained));
    b.finding = fmt::format("{} heads end {} above the Bayes loss: the measurement {} \"about 0\" (within {} nats).",
                            lags, format_stats(trained), verdict_word(b.verdict), kNearZeroExcess);
    if (elbow->stuck() > 0) {
      b.summary += fmt::format("; {} of {} seeds stuck", elbow->stuck(), elbow->seed_losses.size());
      b.finding += fmt::format(" {} of {} seeds were stuck (more than {} nats above the best seed; all seeds: {}) "
                               "and are left out: how often training gets there is another claim than whether the "
                               "model can.",
                               elbow->stuck(), elbow->seed_losses.size(), kStuckMargin, format_stats(elbow->loss()));
    }
    const bool most_falling = 2 * elbow->still_falling > elbow->trend_known;
    if (b.verdict == Verdict::contradicted && (still_improving(elbow->last_gain) || most_falling)) {
      b.verdict = Verdict::inconclusive;
      b.seeds_can_decide = false;
      b.summary += fmt::format(", still falling {:.4f} per validation", elbow->last_gain.mean);
      b.finding += fmt::format(
          " But the runs were still improving when they stopped (the val loss fell by {} between their last two "
          "validations; {} of {} seeds still falling by the convergence rule), so the budget, not the heads, may be "
          "what keeps them from 0: inconclusive at this budget.",
          format_stats(elbow->last_gain), elbow->still_falling, elbow->trend_known);
    }
  } else {
    b.finding = fmt::format("The sweep lacks h = {} among its finished points.", lags);
    b.seeds_can_decide = false;
  }
  a.plot_svg = svg::render({loss_vs_heads(sweep, "lags, fixed computation")},
                           "Claims 4 and 5: excess loss against the head count");
  return {a, b};
}

std::vector<ClaimRow> assess_too_many_heads(const SweepNumbers& lags, const SweepNumbers& recall) {
  // min_accuracy: the best point must reach it for the comparison to mean anything (0: no guard).
  auto assess = [](const SweepNumbers& sweep, ClaimRow row, double min_accuracy) {
    const std::vector<const PointNumbers*> points = by_heads(sweep);
    for (const PointNumbers* p : points) row.numbers.push_back(heads_line(*p));
    const PointNumbers* narrowest = nullptr;
    std::vector<const PointNumbers*> wider;
    for (const PointNumbers* p : points) {
      if (narrowest == nullptr || p->config.model.d_k < narrowest->config.model.d_k) narrowest = p;
    }
    for (const PointNumbers* p : points) {
      if (p != narrowest && p->config.model.n_heads >= 2 && p->config.model.d_k >= 3) wider.push_back(p);
    }
    const PointNumbers* best = lowest(wider);
    if (narrowest != nullptr && best != nullptr && min_accuracy > 0 &&
        !(best->val_accuracy.mean >= min_accuracy)) {
      row.summary = fmt::format("best accuracy {:.1f}% < {:.0f}%: not learned", 100 * best->val_accuracy.mean,
                                100 * min_accuracy);
      row.finding = fmt::format("No point learned the task at this budget (the best, h={}, reached {:.1f}% validation "
                                "accuracy, below {:.0f}%), so the comparison says nothing about head width.",
                                best->config.model.n_heads, 100 * best->val_accuracy.mean, 100 * min_accuracy);
      row.seeds_can_decide = false;
    } else if (narrowest != nullptr && best != nullptr) {
      row.verdict = lower_rule(best->loss(), narrowest->loss(), kEqualLossMargin);
      row.compared = {{sweep.name, best->point}, {sweep.name, narrowest->point}};
      row.summary = fmt::format("d_k {}: {:.4f}; best (h={}, d_k {}): {:.4f}{}", narrowest->config.model.d_k,
                                narrowest->loss().mean, best->config.model.n_heads, best->config.model.d_k,
                                best->loss().mean, gap_note(best->loss(), narrowest->loss(), kEqualLossMargin));
      row.finding = fmt::format("Heads of d_k {} reached {}; the best wider heads (h={}, d_k {}) {}; {}, so the "
                                "measurement {} the prediction.",
                                narrowest->config.model.d_k, format_stats(narrowest->loss()),
                                best->config.model.n_heads, best->config.model.d_k, format_stats(best->loss()),
                                lower_gap(best->loss(), narrowest->loss(), kEqualLossMargin, "nats"),
                                verdict_word(row.verdict));
    } else {
      row.finding = "The sweep has too few finished points to compare.";
      row.seeds_can_decide = false;
    }
    return row;
  };
  const std::string rule =
      "lower rule, the best (lowest mean) point with h >= 2 and d_k >= 3 vs the narrowest heads: " +
      lower_rule_text("the best point's mean", kEqualLossMargin, "nats");
  ClaimRow a = assess(lags, {.id = "5a",
                             .claim = "Too many heads hurt: heads too narrow to carry a token's table",
                             .experiment = "the sweep of claim 4 out to d_k 2 and 1 (h = 24, 48)",
                             .sweeps = {lags.name},
                             .prediction = "at d_k 1-2 a head's query-key product can barely tell positions apart, "
                                           "so the excess rises again past some h: the other side of the U",
                             .rule = rule,
                             .numbers = {},
                             .plot_svg = {},
                             .verdict = Verdict::inconclusive,
                             .finding = {},
                             .summary = {}},
                      0.0);
  a.plot_svg = svg::render({loss_vs_heads(lags, "lags, fixed computation"),
                            loss_vs_heads(lags, "the same from 3 heads, where 5a compares", 3)},
                           "Claim 5: loss against the head count, out to d_k 1");
  ClaimRow b = assess(recall, {.id = "5b",
                               .claim = "Too many heads hurt: narrow heads fail at matching many keys",
                               .experiment = "recall with 64 keys (--vocab 131), d_model 48, d_k = 48 / h",
                               .sweeps = {recall.name},
                               .prediction = "picking one key of 64 by a d_k-wide dot product needs width: the "
                                             "narrowest heads (d_k 1) fail first",
                               .rule = rule + fmt::format("; and inconclusive unless the best point reaches {:.0f}% "
                                                          "validation accuracy (50% is picking either value in "
                                                          "context)",
                                                          100 * kRecallLearned),
                               .numbers = {},
                               .plot_svg = {},
                               .verdict = Verdict::inconclusive,
                               .finding = {},
                               .summary = {}},
                      kRecallLearned);
  b.plot_svg = svg::render({loss_vs_heads(recall, "recall, 64 keys")}, "Claim 5: recall loss against the head count");
  return {a, b};
}

ClaimRow assess_kv_heads(const SweepNumbers& sweep) {
  ClaimRow row{.id = "6",
               .claim = "MQA/GQA shrink the KV cache by h/g",
               .experiment = "lags, 1 layer, attention only, 8 query heads of d_k 6 at d_model 48, with g = 8, 4 and 1 "
                             "key/value heads: KV-cache bytes per token from count_parameters, and the loss reached",
               .sweeps = {sweep.name},
               .prediction = "K and V are cached per KV head, so the cache is g/h of MHA's; the loss may cost a little",
               .rule = "supported iff every point's KV bytes per token equals MHA's times g/h exactly; the loss cost is "
                       "reported against MHA with the noise rule, and does not enter the verdict",
               .numbers = {},
               .plot_svg = {},
               .verdict = Verdict::inconclusive,
               .finding = {},
               .summary = {}};
  const PointNumbers* mha = sweep.find([](const ModelConfig& m) { return m.n_kv_heads == m.n_heads; });
  std::vector<ExactCheck> checks;
  svg::Chart bytes{.title = "KV cache per token", .x = axis("key/value heads g", svg::Scale::log),
                   .y = axis("bytes per token (float32, all layers)"), .series = {}};
  svg::Chart loss{.title = "Loss reached", .x = axis("key/value heads g", svg::Scale::log), .y = axis(""),
                  .series = {}};
  svg::Series b = series("count_parameters"), l = series("mean over seeds (bars: sd; hollow: each seed)");
  if (mha != nullptr) {
    const double full = static_cast<double>(count_parameters(mha->config.model, mha->config.data.seq_len).kv_cache_bytes_per_token);
    std::vector<const PointNumbers*> points;
    for (const PointNumbers& p : sweep.points) points.push_back(&p);
    std::sort(points.begin(), points.end(), [](const PointNumbers* x, const PointNumbers* y) {
      return x->config.model.n_kv_heads > y->config.model.n_kv_heads;
    });
    for (const PointNumbers* p : points) {
      const ModelConfig& m = p->config.model;
      const double kv = static_cast<double>(count_parameters(m, p->config.data.seq_len).kv_cache_bytes_per_token);
      const double expected = full * static_cast<double>(m.n_kv_heads) / static_cast<double>(m.n_heads);
      checks.push_back({fmt::format("g={}", m.n_kv_heads), expected, kv});
      b.x.push_back(static_cast<double>(m.n_kv_heads));
      b.y.push_back(kv);
      add_loss(l, static_cast<double>(m.n_kv_heads), *p);
      bytes.x.ticks.push_back(static_cast<double>(m.n_kv_heads));
      loss.x.ticks.push_back(static_cast<double>(m.n_kv_heads));
      loss.y.label = loss_name(*p) + " (nats/token)";
      const bool differs = p != mha && differs_beyond_noise(p->loss(), mha->loss());
      row.numbers.push_back(fmt::format(
          "g={}: {} KV bytes per token (h/g = {}: MHA's / {}); {} {}{}", m.n_kv_heads, count(static_cast<std::size_t>(kv)),
          m.n_heads / m.n_kv_heads, full / kv, loss_name(*p), format_stats(p->loss()),
          p == mha ? "" : differs ? ", differs from MHA beyond noise" : ", within noise of MHA"));
    }
  }
  bytes.series.push_back(std::move(b));
  loss.series.push_back(std::move(l));
  row.verdict = exact_rule(checks);
  row.seeds_can_decide = false;
  row.plot_svg = svg::render({bytes, loss}, "Claim 6: KV cache and loss against the key/value heads");
  row.summary = mha == nullptr ? std::string("no MHA point") : fmt::format("{} of {} KV sizes exact", std::count_if(checks.begin(), checks.end(), [](const ExactCheck& c) { return c.measured == c.expected; }), checks.size());
  row.finding = fmt::format("The KV sizes {} the h/g prediction; the loss cost is in the numbers.",
                            verdict_word(row.verdict));
  return row;
}

ClaimRow assess_head_time(const SweepNumbers& sweep) {
  ClaimRow row{.id = "7",
               .claim = "More heads at fixed computation cost time",
               .experiment = "the runs of claim 4: training tokens per second against h (d_k = 48 / h), from results",
               .sweeps = {sweep.name},
               .prediction = "the FLOPs are the same at every h, but more, smaller matrix products (and softmaxes over "
                             "h rows) run slower per FLOP, so tokens/s falls as h grows",
               .rule = "lower rule on tokens/s, the most heads with h <= 16 vs h = 1: " +
                       lower_rule_text("its tokens/s", 100 * kTimeMargin, "percent of h = 1's tokens/s") +
                       ". Runs share the machine's cores with each other and anything else running, which is in "
                       "the noise",
               .numbers = {},
               .plot_svg = {},
               .verdict = Verdict::inconclusive,
               .finding = {},
               .summary = {}};
  svg::Chart chart{.title = "Training speed", .x = axis("query heads h (d_k = 48 / h)", svg::Scale::log),
                   .y = axis("tokens per second"), .series = {}};
  svg::Series s = series("mean over seeds (bars: sd)");
  const PointNumbers* one = nullptr;
  const PointNumbers* most = nullptr;
  for (const PointNumbers* p : by_heads(sweep)) {
    const std::size_t h = p->config.model.n_heads;
    add(s, static_cast<double>(h), p->tokens_per_s);
    chart.x.ticks.push_back(static_cast<double>(h));
    row.numbers.push_back(fmt::format("h={}: {} tokens/s", h, format_stats(p->tokens_per_s, 0)));
    if (h == 1) one = p;
    if (h <= 16 && h > 1) most = p;
  }
  chart.series.push_back(std::move(s));
  if (one != nullptr && most != nullptr) {
    row.verdict = lower_rule(most->tokens_per_s, one->tokens_per_s, kTimeMargin * one->tokens_per_s.mean);
    row.compared = {{sweep.name, most->point}, {sweep.name, one->point}};
    row.summary = fmt::format("tokens/s h=1 {:.0f}, h={} {:.0f}{}", one->tokens_per_s.mean,
                              most->config.model.n_heads, most->tokens_per_s.mean,
                              gap_note(most->tokens_per_s, one->tokens_per_s, kTimeMargin * one->tokens_per_s.mean, 0));
    row.finding = fmt::format("One head trained {} tokens/s, {} heads {}; {}, so the measurement {} the prediction.",
                              format_stats(one->tokens_per_s, 0), most->config.model.n_heads,
                              format_stats(most->tokens_per_s, 0),
                              lower_gap(most->tokens_per_s, one->tokens_per_s, kTimeMargin * one->tokens_per_s.mean,
                                        "tokens/s", 0),
                              verdict_word(row.verdict));
  } else {
    row.finding = "The sweep lacks h = 1 or a larger h up to 16 among its finished points.";
    row.seeds_can_decide = false;
  }
  row.plot_svg = svg::render({chart}, "Claim 7: training speed against the head count");
  return row;
}

namespace {

// The error rate 1 - accuracy over seeds: lower is better, as the lower rule reads.
SeedStats error_rate(const PointNumbers& p) {
  return {.n = p.val_accuracy.n, .mean = 1 - p.val_accuracy.mean, .sd = p.val_accuracy.sd};
}

// "49.9% (sd 1.2, n 6)".
std::string percent(const SeedStats& s) {
  if (s.n == 0 || !std::isfinite(s.mean)) return "n/a";
  return fmt::format("{:.1f}% (sd {}, n {})", 100 * s.mean, std::isfinite(s.sd) ? fmt::format("{:.1f}", 100 * s.sd) : "n/a",
                     s.n);
}

// The verdict on "a is not lower than b by the margin" from the lower rule's on "a is
// lower": its supported is this one's contradicted, and the other way round.
Verdict not_lower(Verdict lower) {
  switch (lower) {
    case Verdict::supported:
      return Verdict::contradicted;
    case Verdict::contradicted:
      return Verdict::supported;
    case Verdict::inconclusive:
      break;
  }
  return Verdict::inconclusive;
}

svg::Chart against_heads(const SweepNumbers& sweep, const std::string& title, const std::string& y_label,
                         const std::function<SeedStats(const PointNumbers&)>& value, double scale) {
  svg::Chart chart{.title = title, .x = axis("heads h (d_k = d_model / h)", svg::Scale::log), .y = axis(y_label),
                   .series = {}};
  svg::Series s = series("mean over seeds (bars: sd)");
  for (const PointNumbers* p : by_heads(sweep)) {
    const SeedStats v = value(*p);
    add(s, static_cast<double>(p->config.model.n_heads),
        {.n = v.n, .mean = scale * v.mean, .sd = scale * v.sd});
    chart.x.ticks.push_back(static_cast<double>(p->config.model.n_heads));
  }
  chart.series.push_back(std::move(s));
  return chart;
}

std::string classifier_line(const PointNumbers& p) {
  return fmt::format("h={} (d_k {}): accuracy {}; label loss {}; {} tokens/s{}", p.config.model.n_heads,
                     p.config.model.d_k, percent(p.val_accuracy), format_stats(p.val_loss),
                     format_stats(p.tokens_per_s, 0), point_notes(p));
}

std::string bpc_line(const PointNumbers& p) {
  const double bits = 1 / std::log(2.0);
  return fmt::format("h={} (d_k {}): val loss {} nats/char = {:.4f} bits/char; {} tokens/s{}", p.config.model.n_heads,
                     p.config.model.d_k, format_stats(p.val_loss), bits * p.val_loss.mean,
                     format_stats(p.tokens_per_s, 0), point_notes(p));
}

}  // namespace

std::vector<ClaimRow> assess_classifier_heads(const SweepNumbers& sweep) {
  const std::string experiment =
      "a character-level classifier of fortunes by topic (13 classes, corpus fortunes-topic): the label predicted "
      "after each item's characters, at fixed d_model (d_k = d_model / h); accuracy on the val items, the same items "
      "for every run, and training tokens per second";
  ClaimRow a{.id = "8a",
             .claim = "Going from 8 heads to 4 costs about 2 accuracy points (the seeds' text classifier)",
             .experiment = experiment,
             .sweeps = {sweep.name},
             .prediction = "8 heads classify better than 4, by about 2 points of accuracy",
             .rule = "lower rule on the error rate (1 - accuracy), h = 8 vs h = 4: " +
                     lower_rule_text("h = 8's error rate", 100 * kAccuracyMargin, "point of accuracy") +
                     ". The gap and its 2-se interval are reported beside the verdict; \"about 2\" is read off them",
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  ClaimRow b{.id = "8b",
             .claim = "... and 16 heads are no better, only slower",
             .experiment = experiment,
             .sweeps = {sweep.name},
             .prediction = "16 heads of half the width reach no higher accuracy than 8, and train fewer tokens per "
                           "second",
             .rule = fmt::format(
                 "both parts: (no better) the lower rule on the error rate, h = 16 vs h = 8, with a {0} point "
                 "margin, read the other way: supported when h = 16's error rate is higher beyond noise or equal "
                 "within {0} point, contradicted when it is lower beyond noise by more than {0} point; (slower) "
                 "the lower rule on tokens/s, h = 16 vs h = 8, with a margin of {1}% of h = 8's. Contradicted when "
                 "either part is, supported when both are",
                 100 * kAccuracyMargin, 100 * kTimeMargin),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  for (const PointNumbers* p : by_heads(sweep)) {
    a.numbers.push_back(classifier_line(*p));
    b.numbers.push_back(classifier_line(*p));
  }
  const PointNumbers* four = sweep.find([](const ModelConfig& m) { return m.n_heads == 4; });
  const PointNumbers* eight = sweep.find([](const ModelConfig& m) { return m.n_heads == 8; });
  const PointNumbers* sixteen = sweep.find([](const ModelConfig& m) { return m.n_heads == 16; });
  const auto gap_interval = [](const SeedStats& better, const SeedStats& worse) {
    const double se = std::sqrt(better.sd * better.sd / static_cast<double>(better.n) +
                                worse.sd * worse.sd / static_cast<double>(worse.n));
    const double gap = worse.mean - better.mean;
    return fmt::format("{:+.2f} points (2-se interval {:+.2f} to {:+.2f})", 100 * gap, 100 * (gap - 2 * se),
                       100 * (gap + 2 * se));
  };
  if (four != nullptr && eight != nullptr && four->val_accuracy.n > 0 && eight->val_accuracy.n > 0) {
    const SeedStats e4 = error_rate(*four), e8 = error_rate(*eight);
    a.verdict = lower_rule(e8, e4, kAccuracyMargin);
    a.compared = {{sweep.name, eight->point}, {sweep.name, four->point}};
    a.summary = fmt::format("accuracy h=4 {:.1f}%, h=8 {:.1f}%: 8 - 4 = {}", 100 * four->val_accuracy.mean,
                            100 * eight->val_accuracy.mean, gap_interval(e8, e4));
    a.finding = fmt::format("Four heads: {}; eight: {}; 8 - 4 = {}: {}, so the measurement {} the prediction.",
                            percent(four->val_accuracy), percent(eight->val_accuracy), gap_interval(e8, e4),
                            describe(lower_outcome(e8, e4, kAccuracyMargin), 100 * kAccuracyMargin, "point of accuracy"),
                            verdict_word(a.verdict));
  } else {
    a.finding = "The sweep lacks h = 4 or h = 8 among its finished points.";
    a.seeds_can_decide = false;
  }
  if (eight != nullptr && sixteen != nullptr && eight->val_accuracy.n > 0 && sixteen->val_accuracy.n > 0) {
    const SeedStats e8 = error_rate(*eight), e16 = error_rate(*sixteen);
    const Verdict no_better = not_lower(lower_rule(e16, e8, kAccuracyMargin));
    const double time_margin = kTimeMargin * eight->tokens_per_s.mean;
    const Verdict slower = lower_rule(sixteen->tokens_per_s, eight->tokens_per_s, time_margin);
    b.verdict = all_of({no_better, slower});
    b.compared = {{sweep.name, sixteen->point}, {sweep.name, eight->point}};
    b.summary = fmt::format("accuracy h=16 {:.1f}%, 16 - 8 = {}; tokens/s h=8 {:.0f}, h=16 {:.0f}",
                            100 * sixteen->val_accuracy.mean, gap_interval(e16, e8), eight->tokens_per_s.mean,
                            sixteen->tokens_per_s.mean);
    b.finding = fmt::format(
        "Sixteen heads: {}, against eight's {}: 16 - 8 = {}, so \"no better\" is {}. They trained {} tokens/s "
        "against eight's {}; {}, so \"slower\" is {}. The measurement {} the prediction.",
        percent(sixteen->val_accuracy), percent(eight->val_accuracy), gap_interval(e16, e8), to_string(no_better),
        format_stats(sixteen->tokens_per_s, 0), format_stats(eight->tokens_per_s, 0),
        lower_gap(sixteen->tokens_per_s, eight->tokens_per_s, time_margin, "tokens/s", 0), to_string(slower),
        verdict_word(b.verdict));
  } else {
    b.finding = "The sweep lacks h = 8 or h = 16 among its finished points.";
    b.seeds_can_decide = false;
  }
  a.plot_svg = svg::render(
      {against_heads(sweep, "Classifier accuracy on the val items", "accuracy (%)",
                     [](const PointNumbers& p) { return p.val_accuracy; }, 100),
       against_heads(sweep, "Training speed", "tokens per second",
                     [](const PointNumbers& p) { return p.tokens_per_s; }, 1)},
      "Claim 8: a text classifier's accuracy and speed against the head count");
  return {a, b};
}

std::vector<ClaimRow> assess_text_heads(const SweepNumbers& sweep) {
  const std::string experiment =
      "a character model of the King James Bible (corpus kjv), at fixed d_model (d_k = d_model / h): the val loss in "
      "nats per character (bits per character beside it) against h";
  ClaimRow a{.id = "9a",
             .claim = "On real text, one head loses clearly to several (Vaswani et al. 2017, Table 3 row A)",
             .experiment = experiment,
             .sweeps = {sweep.name},
             .prediction = "one head is worse than the best head count: row A has it 0.9 BLEU below the best",
             .rule = "lower rule, the best (lowest mean) point with h >= 2 vs h = 1: " +
                     lower_rule_text("the best point's mean", kEqualLossMargin, "nats"),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  ClaimRow b{.id = "9b",
             .claim = "... and the curve is a shallow U: too many heads lose a little",
             .experiment = experiment,
             .sweeps = {sweep.name},
             .prediction = "the most heads are worse than the best of the head counts between, by less than one "
                           "head is: row A has 32 heads 0.4 BLEU below the best, one head 0.9",
             .rule = "both parts: the lower rule, the best point strictly between h = 1 and the most heads vs the "
                     "most heads, and the lower rule, the most heads vs h = 1, each with the " +
                     fmt::format("{} nats margin. Contradicted when either part is, supported when both are",
                                 kEqualLossMargin),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  const std::vector<const PointNumbers*> points = by_heads(sweep);
  for (const PointNumbers* p : points) {
    a.numbers.push_back(bpc_line(*p));
    b.numbers.push_back(bpc_line(*p));
  }
  // Points with no finished run are left out, as if not in the grid.
  const PointNumbers* one = sweep.find([](const ModelConfig& m) { return m.n_heads == 1; });
  if (one != nullptr && one->val_loss.n == 0) one = nullptr;
  const PointNumbers* most = nullptr;
  for (const PointNumbers* p : points) {
    if (p->val_loss.n > 0) most = p;
  }
  std::vector<const PointNumbers*> several, between;
  for (const PointNumbers* p : points) {
    if (p->config.model.n_heads >= 2) several.push_back(p);
    if (p->config.model.n_heads > 1 && p != most) between.push_back(p);
  }
  const PointNumbers* best = lowest(several);
  const PointNumbers* inner = lowest(between);
  if (one != nullptr && best != nullptr) {
    a.verdict = lower_rule(best->val_loss, one->val_loss, kEqualLossMargin);
    a.compared = {{sweep.name, best->point}, {sweep.name, one->point}};
    a.summary = fmt::format("h=1 {:.4f}, best h={} {:.4f} nats/char{}", one->val_loss.mean, best->config.model.n_heads,
                            best->val_loss.mean, gap_note(best->val_loss, one->val_loss, kEqualLossMargin));
    a.finding = fmt::format("One head reached {} nats per character; the best, h={}, {}; {}, so the measurement {} "
                            "the prediction.",
                            format_stats(one->val_loss), best->config.model.n_heads, format_stats(best->val_loss),
                            lower_gap(best->val_loss, one->val_loss, kEqualLossMargin, "nats"),
                            verdict_word(a.verdict));
  } else {
    a.finding = "The sweep lacks h = 1 or a larger h among its finished points.";
    a.seeds_can_decide = false;
  }
  if (one != nullptr && most != nullptr && inner != nullptr && most != one) {
    const Verdict right = lower_rule(inner->val_loss, most->val_loss, kEqualLossMargin);
    const Verdict below_one = lower_rule(most->val_loss, one->val_loss, kEqualLossMargin);
    b.verdict = all_of({right, below_one});
    b.compared = {{sweep.name, inner->point}, {sweep.name, most->point}, {sweep.name, one->point}};
    b.summary = fmt::format("h=1 {:.4f}, best between (h={}) {:.4f}, h={} {:.4f}", one->val_loss.mean,
                            inner->config.model.n_heads, inner->val_loss.mean, most->config.model.n_heads,
                            most->val_loss.mean);
    b.finding = fmt::format(
        "The best between, h={}: {}; the most heads, h={}: {}; one head: {}. Most heads against the best between: {} "
        "({}); against one head: {} ({}). The measurement {} the prediction.",
        inner->config.model.n_heads, format_stats(inner->val_loss), most->config.model.n_heads,
        format_stats(most->val_loss), format_stats(one->val_loss),
        lower_gap(inner->val_loss, most->val_loss, kEqualLossMargin, "nats"), to_string(right),
        lower_gap(most->val_loss, one->val_loss, kEqualLossMargin, "nats"), to_string(below_one),
        verdict_word(b.verdict));
  } else {
    b.finding = "The sweep needs h = 1, the most heads and a head count between among its finished points.";
    b.seeds_can_decide = false;
  }
  a.plot_svg = svg::render({against_heads(sweep, "kjv, fixed computation", "val loss (bits per character)",
                                          [](const PointNumbers& p) { return p.val_loss; }, 1 / std::log(2.0))},
                           "Claim 9: bits per character of the King James Bible against the head count");
  return {a, b};
}

std::vector<ClaimRow> assess_head_roles(const SweepNumbers& sweep, const std::vector<HeadRoles>& roles) {
  const std::string experiment =
      "the trained models of claim 9's sweep at its point of lowest mean val loss, each on the same validation rows "
      "of kjv repeated (each row's first half written twice, heads --repeat): each model's strongest previous-token "
      "head (mean weight on the key before the query), its strongest repeat-induction head (mean weight a query of "
      "the second copy puts on the key after its twin in the first), and its loss on the second copy over the first";
  ClaimRow a{.id = "10a",
             .claim = "A character model of real text grows a previous-token head",
             .experiment = experiment,
             .sweeps = {sweep.name},
             .prediction = "some head attends mostly to the character before the query (Elhage et al. 2021; Olsson et "
                           "al. 2022: the first half of an induction circuit)",
             .rule = fmt::format("at-least rule on each model's largest previous-token score: supported when its mean "
                                 "over seeds minus 2 standard errors is at least {0}, contradicted when its mean plus 2 "
                                 "standard errors is below {0}, else inconclusive (a head that does a thing puts most of "
                                 "its weight on it)",
                                 kHeadRoleScore),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  ClaimRow b{.id = "10b",
             .claim = "... and an induction head that reads a repeat",
             .experiment = experiment,
             .sweeps = {sweep.name},
             .prediction = "a head of the second layer attends to the character after the previous occurrence of the "
                           "current context, so the model predicts a repeated passage far better the second time",
             .rule = fmt::format("both parts: the at-least rule on each model's largest repeat-induction score with "
                                 "{0}, and the at-most rule (near_zero_rule's) on the second copy's loss over the "
                                 "first's with {0}: supported when mean + 2 se <= {0}, contradicted when mean - 2 se "
                                 "> {0}. Contradicted when either part is, supported when both are",
                                 kHeadRoleScore),
             .numbers = {},
             .plot_svg = {},
             .verdict = Verdict::inconclusive,
             .finding = {},
             .summary = {}};
  // Per point, the seeds' numbers.
  struct PointRoles {
    SeedStats previous, induction, ratio, word, line;
    std::map<long, std::size_t> offsets;  // summed over seeds
    std::size_t models = 0;
  };
  std::map<std::string, PointRoles> by_point;
  for (const PointNumbers& p : sweep.points) {
    std::vector<double> previous, induction, ratio, word, line;
    PointRoles pr;
    for (const HeadRoles& r : roles) {
      if (r.point != p.point) continue;
      previous.push_back(r.previous_token);
      induction.push_back(r.repeat_induction);
      ratio.push_back(r.copy_ratio);
      if (std::isfinite(r.word_start)) word.push_back(r.word_start);
      if (std::isfinite(r.line_start)) line.push_back(r.line_start);
      for (const auto& [offset, n] : r.offset_heads) pr.offsets[offset] += n;
      ++pr.models;
    }
    pr.previous = seed_stats(previous);
    pr.induction = seed_stats(induction);
    pr.ratio = seed_stats(ratio);
    pr.word = seed_stats(word);
    pr.line = seed_stats(line);
    by_point[p.point] = pr;
  }
  for (const PointNumbers* p : by_heads(sweep)) {
    const PointRoles& pr = by_point[p->point];
    std::string offsets;
    for (const auto& [offset, n] : pr.offsets) {
      offsets += fmt::format("{}{} at offset {}", offsets.empty() ? "" : ", ", n, offset);
    }
    const std::string line = fmt::format(
        "h={}: strongest previous-token head {}; strongest repeat-induction head {}; second / first copy loss {}; "
        "strongest word-start head {}; strongest verse-start head {}; ICL score {}; heads holding one offset for half "
        "their queries, over {} models: {}",
        p->config.model.n_heads, format_stats(pr.previous, 3), format_stats(pr.induction, 3), format_stats(pr.ratio, 3),
        format_stats(pr.word, 3), format_stats(pr.line, 3), format_stats(p->icl_score, 3), pr.models,
        offsets.empty() ? "none" : offsets);
    a.numbers.push_back(line);
    b.numbers.push_back(line);
  }
  std::vector<const PointNumbers*> all;
  for (const PointNumbers& p : sweep.points) all.push_back(&p);
  const PointNumbers* best = lowest(all);
  if (best == nullptr || by_point[best->point].models == 0) {
    a.finding = b.finding = "No trained model of the sweep has been measured.";
    a.seeds_can_decide = b.seeds_can_decide = false;
  } else {
    const PointRoles& pr = by_point[best->point];
    a.verdict = at_least_rule(pr.previous, kHeadRoleScore);
    a.compared = {{sweep.name, best->point}};
    a.summary = fmt::format("h={}: strongest previous-token head {:.3f}", best->config.model.n_heads, pr.previous.mean);
    a.finding = fmt::format("At h={} (the lowest mean val loss), each model's strongest previous-token head put {} of "
                            "its weight on the key before the query: the measurement {} the prediction.",
                            best->config.model.n_heads, format_stats(pr.previous, 3), verdict_word(a.verdict));
    const Verdict head = at_least_rule(pr.induction, kHeadRoleScore);
    const Verdict reads = near_zero_rule(pr.ratio, kHeadRoleScore);
    b.verdict = all_of({head, reads});
    b.compared = {{sweep.name, best->point}};
    b.summary = fmt::format("h={}: strongest repeat-induction head {:.3f}; second / first copy loss {:.3f}",
                            best->config.model.n_heads, pr.induction.mean, pr.ratio.mean);
    b.finding = fmt::format(
        "At h={}, each model's strongest repeat-induction head put {} of its weight on the key after the twin "
        "({}), and the loss on the second copy was {} of the first's ({}). The measurement {} the prediction.",
        best->config.model.n_heads, format_stats(pr.induction, 3), to_string(head), format_stats(pr.ratio, 3),
        to_string(reads), verdict_word(b.verdict));
  }
  svg::Chart scores{.title = "The strongest head of each kind", .x = axis("heads h (d_k = d_model / h)", svg::Scale::log),
                    .y = axis("mean attention weight"), .series = {}};
  svg::Series prev = series("previous-token (bars: sd)"), ind = series("repeat induction (bars: sd)");
  svg::Chart copies{.title = "Reading the repeat", .x = axis("heads h (d_k = d_model / h)", svg::Scale::log),
                    .y = axis("loss on the second copy / the first"), .series = {}};
  svg::Series ratio = series("mean over seeds (bars: sd)");
  for (const PointNumbers* p : by_heads(sweep)) {
    const PointRoles& pr = by_point[p->point];
    const double h = static_cast<double>(p->config.model.n_heads);
    add(prev, h, pr.previous);
    add(ind, h, pr.induction);
    add(ratio, h, pr.ratio);
    scores.x.ticks.push_back(h);
    copies.x.ticks.push_back(h);
  }
  scores.series = {std::move(prev), std::move(ind)};
  copies.series.push_back(std::move(ratio));
  a.plot_svg = svg::render({scores, copies}, "Claim 10: what the heads of a character model of kjv do");
  return {a, b};
}

}  // namespace headroom
