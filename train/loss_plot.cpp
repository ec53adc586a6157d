#include "train/loss_plot.hpp"

#include <optional>

#include "nn/safetensors.hpp"
#include "plot/svg.hpp"

namespace headroom {

std::string loss_plot(const std::vector<MetricsRow>& rows, const std::string& title, LossTargets targets) {
  svg::Series train{.name = "train loss (mean since the previous validation)"};
  svg::Series val{.name = "validation loss"};
  std::optional<double> bayes;
  for (const MetricsRow& r : rows) {
    const auto step = static_cast<double>(r.step);
    train.x.push_back(step);
    train.y.push_back(r.train_loss);
    val.x.push_back(step);
    val.y.push_back(r.val_loss);
    if (r.val_excess_loss) bayes = r.val_loss - *r.val_excess_loss;
  }
  const std::string unit = targets == LossTargets::characters ? "nats per character" : "nats per counted target";
  svg::Chart chart{.title = "loss against training step",
                   .x = {.label = "training step", .scale = svg::Scale::linear, .categories = {}, .ticks = {}},
                   .y = {.label = "loss (" + unit + ", log scale)", .scale = svg::Scale::log, .categories = {},
                         .ticks = {}},
                   .series = {train, val}};
  if (bayes && *bayes > 0 && !rows.empty()) {
    // A level, drawn across the steps the curves span.
    chart.series.push_back({.name = "Bayes loss (the true distribution's)",
                            .x = {static_cast<double>(rows.front().step), static_cast<double>(rows.back().step)},
                            .y = {*bayes, *bayes},
                            .reference = true});
  }
  return svg::render({chart}, title);
}

void write_loss_plot(const std::filesystem::path& out_dir, const std::string& title, LossTargets targets) {
  write_file_atomically(out_dir / kLossPlotFile, loss_plot(read_metrics(out_dir / "metrics.csv"), title, targets));
}

}  // namespace headroom
