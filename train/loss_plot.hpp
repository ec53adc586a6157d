// DIR/loss.svg, a run's loss curve: train and validation loss against the step,
// drawn from metrics.csv's rows, so that the plot never disagrees with the file,
// and the Bayes loss of the validation targets as a dashed line when the data knows
// it (docs/design.md #15). The trainer rewrites it at every validation and when a
// resume cuts metrics.csv back to its checkpoint; through write_file_atomically,
// so a crash leaves the previous plot or the new one, never half of one.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "train/metrics.hpp"

namespace headroom {

inline constexpr const char* kLossPlotFile = "loss.svg";

// What a loss is counted over: a toy task's counted target tokens, or a text's
// characters. It names the y axis's unit.
enum class LossTargets { tokens, characters };

// The SVG of metrics.csv's rows under `title`: "train loss" and "validation loss"
// against the step on a log loss axis (a toy task's loss falls by decades), and
// "Bayes loss" when a row knows its excess loss (val_loss - val_excess_loss of the
// newest such row; the validation targets, and so the Bayes loss, are the same at
// every validation) and it is above 0, which a log axis cannot show.
std::string loss_plot(const std::vector<MetricsRow>& rows, const std::string& title, LossTargets targets);

// Reads DIR/metrics.csv and replaces DIR/loss.svg with its plot: std::invalid_argument
// naming metrics.csv when it cannot be read, CheckpointError (write_file_atomically)
// when loss.svg cannot be written.
void write_loss_plot(const std::filesystem::path& out_dir, const std::string& title, LossTargets targets);

}  // namespace headroom
