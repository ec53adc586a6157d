// DIR/metrics.csv, a training run's curve: one row per validation, written as it
// goes and flushed, so a crash loses nothing written. This file owns its columns:
//
//     step,train_loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s
//
// train_loss is the mean over the steps since the previous row; tokens_per_s counts
// the same window.
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

namespace headroom {

inline constexpr std::array<std::string_view, 7> kMetricsColumns{
    "step", "train_loss", "val_loss", "val_accuracy", "lr", "grad_norm", "tokens_per_s"};

struct MetricsRow {
  std::size_t step = 0;
  double train_loss = 0;
  double val_loss = 0;
  double val_accuracy = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
};

// Appends rows to DIR/metrics.csv.
class MetricsWriter {
 public:
  MetricsWriter() = default;  // writes nothing
  // A new run: the header alone. Resuming at `resume_step`: the rows up to and
  // including it (the interrupted run may have written rows past its last
  // checkpoint), so that the file reads as one run. The file is replaced
  // atomically; std::invalid_argument naming it when it cannot be read or written.
  static MetricsWriter open(const std::filesystem::path& out_dir, bool resume, std::size_t resume_step);

  bool is_open() const { return out_.is_open(); }
  void append(const MetricsRow& row);  // one row, flushed

 private:
  std::ofstream out_;
};

// The rows of a metrics.csv, read by column name (any order, extra columns
// ignored). std::invalid_argument naming the file when it is empty, lacks a column
// or has a malformed row.
std::vector<MetricsRow> read_metrics(const std::filesystem::path& file);

}  // namespace headroom
