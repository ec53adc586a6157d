// DIR/tracked_heads.csv, what each attention head did at each validation of a run trained
// with train.track_heads (`train --track-heads`, docs/design.md #23): one row per
// (validation, layer, head), written as it goes and flushed, like metrics.csv
// (train/metrics.hpp). This file owns its columns:
//
//     step,layer,head,previous_token,induction,entropy,loss_increase
//
// previous_token, induction and entropy are the attention statistics of
// interp/head_analysis.hpp (the mean weight on the previous token; on the token after
// the previous occurrence of the query's token, empty when no query repeats one; the
// mean entropy in nats), and loss_increase the validation loss with the head gated
// out minus the full model's, all on the run's validation batches. The statistics
// are computed above this layer (interp/head_tracking.hpp); the trainer receives them
// through TrainOptions::track_heads and writes them here.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <vector>

namespace headroom {

struct HeadTrack {
  std::size_t layer = 0, head = 0;
  double previous_token = 0;
  double induction = 0;  // NaN when no query repeats an earlier token (an empty field)
  double entropy = 0;
  double loss_increase = 0;
};

struct HeadLogRow {
  std::size_t step = 0;
  HeadTrack head{};
};

// Appends rows to DIR/tracked_heads.csv.
class HeadLogWriter {
 public:
  HeadLogWriter() = default;  // writes nothing
  // What DIR/tracked_heads.csv starts with. A new run: the header alone. Resuming
  // at `resume_step`: the rows up to and including it, so that the file reads as
  // one run (a run resumed with tracking on that had it off before starts the
  // file). Reads, never writes (as MetricsWriter::initial_text); std::invalid_argument
  // naming the file when it cannot be read.
  static std::string initial_text(const std::filesystem::path& out_dir, bool resume, std::size_t resume_step);
  // Replaces the file with `initial_text` atomically and appends after it.
  static HeadLogWriter open(const std::filesystem::path& out_dir, const std::string& initial_text);

  bool is_open() const { return out_.is_open(); }
  void append(std::size_t step, const std::vector<HeadTrack>& heads);  // one row per head, flushed

 private:
  std::ofstream out_;
};

// The rows of a tracked_heads.csv, in file order. std::invalid_argument naming the file when
// it cannot be read, has another header or a malformed row.
std::vector<HeadLogRow> read_head_log(const std::filesystem::path& file);

}  // namespace headroom
