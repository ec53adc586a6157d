// Heads watched during training (`train --track-heads`, docs/design.md #23): the
// statistics the trainer writes to tracked_heads.csv at every validation (train/head_log.hpp),
// and the plot of them against steps that shows an induction head forming (the
// "phase change" of Olsson et al., 2022: the induction score and the
// in-context-learning score jump together).
#pragma once

#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "nn/transformer.hpp"
#include "train/head_log.hpp"
#include "train/metrics.hpp"

namespace headroom {

// Each head's previous-token score, induction score, entropy and removal cost
// (interp/head_analysis.hpp's, without the importance pass) on `batches`:
// what TrainOptions::track_heads asks for. Leaves the gates cleared.
std::vector<HeadTrack> track_heads(TransformerLM<float>& model, const std::vector<Batch>& batches);

// One SVG of a tracked run: per head against steps, its previous-token score, its
// induction score and its removal cost, and the validation loss with the
// in-context-learning score (metrics.csv). std::invalid_argument when `heads` is empty.
std::string head_tracking_svg(const std::vector<HeadLogRow>& heads, const std::vector<MetricsRow>& metrics,
                              const std::string& title);

// Writes RUN_DIR/tracked_heads.svg (atomically) from RUN_DIR/tracked_heads.csv and metrics.csv, and
// returns its path. std::invalid_argument naming a file that is missing or malformed.
std::string write_head_tracking_plot(const std::string& run_dir);

}  // namespace headroom
