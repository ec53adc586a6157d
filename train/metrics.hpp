// DIR/metrics.csv, a training run's curve: one row per validation, written as it
// goes and flushed, so a crash loses nothing written. This file owns its columns:
//
//     step,train_loss,val_loss,val_accuracy,val_excess_loss,icl_score,lr,grad_norm,tokens_per_s,train_bpc,val_bpc
//
// train_loss is the mean over the steps since the previous row; tokens_per_s counts
// the same window. val_excess_loss is val_loss minus the Bayes loss of the same
// validation targets (docs/design.md #14, #15); its field is empty when the data does
// not know its distribution (a text), and in the rows of a run made before the
// column existed. icl_score is the validation's in-context-learning score
// (EvalResult::icl_score, train/evaluate.hpp), empty in the rows of an older run.
// train_bpc and val_bpc are a text's two losses in bits per character
// (bits_per_char, train/evaluate.hpp); empty for a toy task, whose targets are
// tokens, and in the rows of an older run. New columns go at the end, so that a
// reader that counts columns from the left keeps working.
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "train/convergence.hpp"

namespace headroom {

inline constexpr std::array<std::string_view, 11> kMetricsColumns{
    "step", "train_loss", "val_loss", "val_accuracy", "val_excess_loss", "icl_score", "lr", "grad_norm",
    "tokens_per_s", "train_bpc", "val_bpc"};
// The columns a metrics.csv may lack (files written before they existed), and
// whose fields may be empty (unknown).
inline constexpr std::string_view kExcessColumn = "val_excess_loss";
inline constexpr std::string_view kIclColumn = "icl_score";
inline constexpr std::string_view kTrainBpcColumn = "train_bpc";
inline constexpr std::string_view kValBpcColumn = "val_bpc";
constexpr bool optional_metrics_column(std::string_view c) {
  return c == kExcessColumn || c == kIclColumn || c == kTrainBpcColumn || c == kValBpcColumn;
}

struct MetricsRow {
  std::size_t step = 0;
  double train_loss = 0;
  double val_loss = 0;
  double val_accuracy = 0;
  std::optional<double> val_excess_loss{};  // empty: unknown (an empty field)
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  std::optional<double> icl_score{};  // empty: unknown (an empty field)
  // A text's train_loss and val_loss in bits per character; empty for a toy task.
  std::optional<double> train_bpc{};
  std::optional<double> val_bpc{};
};

// Appends rows to DIR/metrics.csv.
class MetricsWriter {
 public:
  MetricsWriter() = default;  // writes nothing
  // What DIR/metrics.csv starts with. A new run: the header alone. Resuming at
  // `resume_step`: the rows up to and including it (the interrupted run may have
  // written rows past its last checkpoint), so that the file reads as one run; a
  // file from before the val_excess_loss column gains it, empty in its old rows.
  // Reads, never writes: a caller computes it before it changes any file, so that
  // an unreadable metrics.csv stops a resume with the run as it was.
  // std::invalid_argument naming the file when it cannot be read.
  static std::string initial_text(const std::filesystem::path& out_dir, bool resume, std::size_t resume_step);
  // Replaces DIR/metrics.csv with `initial_text` atomically and appends after it;
  // std::invalid_argument naming the file when it cannot be written.
  static MetricsWriter open(const std::filesystem::path& out_dir, const std::string& initial_text);

  bool is_open() const { return out_.is_open(); }
  void append(const MetricsRow& row);  // one row, flushed

 private:
  std::ofstream out_;
};

// The comma-separated cells of one line: "a,,b," is four, the last two empty (an
// unknown value is an empty field). Shared with tracked_heads.csv (train/head_log.hpp).
std::vector<std::string> csv_cells(const std::string& line);

// A loss as metrics.csv records it (6 decimals), read back. Early stopping and the
// convergence status (train/convergence.hpp) decide on these values, so that a
// resumed run, which reads its earlier validations back from the file, and anyone
// who reads the file decide exactly as the run did.
double as_recorded(double loss);

// The validations of metrics.csv's rows: step and val_loss.
std::vector<ValPoint> validations(const std::vector<MetricsRow>& rows);

// The rows of a metrics.csv, read by column name (any order, extra columns
// ignored; without an optional column, as a file from before it, every row's field
// of it is empty).
// std::invalid_argument naming the file when it is empty, lacks a column
// or has a malformed row.
std::vector<MetricsRow> read_metrics(const std::filesystem::path& file);
// The same for a metrics.csv's text (as MetricsWriter::initial_text gives it);
// `source` names it in messages.
std::vector<MetricsRow> read_metrics_text(const std::string& text, const std::string& source);

}  // namespace headroom
