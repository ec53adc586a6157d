// Opening a trained model for a command (eval, sample, heads, attention, circuits,
// patch, convert): train/run_dir.hpp's load_run, plus the one thing a library may
// not do, printing: a note when the file carries no checksums, so that its data was
// loaded unchecked.
#pragma once

#include <filesystem>

#include "train/run_dir.hpp"

namespace headroom::cli {

LoadedRun open_model(const std::filesystem::path& model);

}  // namespace headroom::cli
