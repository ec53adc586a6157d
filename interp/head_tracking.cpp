#include "interp/head_tracking.hpp"

#include <filesystem>
#include <map>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "interp/head_analysis.hpp"
#include "nn/safetensors.hpp"  // write_file_atomically
#include "plot/svg.hpp"

namespace headroom {

std::vector<HeadTrack> track_heads(TransformerLM<float>& model, const std::vector<Batch>& batches) {
  const HeadReport report = analyze_heads(model, batches, false);
  std::vector<HeadTrack> out;
  out.reserve(report.heads.size());
  for (const HeadStats& s : report.heads) {
    out.push_back({.layer = s.layer,
                   .head = s.head,
                   .previous_token = s.previous_token,
                   .induction = s.induction,
                   .entropy = s.entropy,
                   .loss_increase = s.loss_increase});
  }
  return out;
}

std::string head_tracking_svg(const std::vector<HeadLogRow>& heads, const std::vector<MetricsRow>& metrics,
                              const std::string& title) {
  if (heads.empty()) throw std::invalid_argument("head_tracking_svg: no tracked heads to plot");
  // One series per (layer, head), in layer-major order.
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> index;
  std::vector<svg::Series> previous, induction, removal;
  for (const HeadLogRow& r : heads) {
    const auto key = std::make_pair(r.head.layer, r.head.head);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, previous.size()).first;
      const std::string name = fmt::format("L{} H{}", r.head.layer, r.head.head);
      previous.push_back({.name = name});
      induction.push_back({.name = name});
      removal.push_back({.name = name});
    }
    const auto step = static_cast<double>(r.step);
    previous[it->second].x.push_back(step);
    previous[it->second].y.push_back(r.head.previous_token);
    induction[it->second].x.push_back(step);
    induction[it->second].y.push_back(r.head.induction);
    removal[it->second].x.push_back(step);
    removal[it->second].y.push_back(r.head.loss_increase);
  }
  svg::Series val{.name = "val loss (counted targets)"}, icl{.name = "in-context-learning score"};
  for (const MetricsRow& m : metrics) {
    val.x.push_back(static_cast<double>(m.step));
    val.y.push_back(m.val_loss);
    if (m.icl_score) {
      icl.x.push_back(static_cast<double>(m.step));
      icl.y.push_back(*m.icl_score);
    }
  }
  const svg::Axis steps{.label = "step"};
  const svg::Axis share{.label = "mean attention weight", .floor = 0.0, .ceiling = 1.0};
  std::vector<svg::Chart> charts{
      {.title = "previous-token score", .x = steps, .y = share, .series = std::move(previous)},
      {.title = "induction score", .x = steps, .y = share, .series = std::move(induction)},
      {.title = "removal cost (val loss with the head gated out, minus the full model's)",
       .x = steps,
       .y = {.label = "loss increase (nats/token)"},
       .series = std::move(removal)},
      {.title = "validation loss and ICL score (late minus early loss)",
       .x = steps,
       .y = {.label = "nats/token"},
       .series = {std::move(val), std::move(icl)}}};
  return svg::render(charts, title);
}

std::string write_head_tracking_plot(const std::string& run_dir) {
  const std::filesystem::path dir(run_dir);
  const std::vector<HeadLogRow> heads = read_head_log(dir / "tracked_heads.csv");
  const std::vector<MetricsRow> metrics = read_metrics(dir / "metrics.csv");
  if (heads.empty()) throw std::invalid_argument(fmt::format("{}: no rows yet", (dir / "tracked_heads.csv").string()));
  const std::filesystem::path out = dir / "tracked_heads.svg";
  write_file_atomically(out, head_tracking_svg(heads, metrics, fmt::format("{}: heads during training", run_dir)));
  return out.string();
}

}  // namespace headroom
