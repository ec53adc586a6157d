#include "cli/model_file.hpp"

#include <fmt/format.h>

namespace headroom::cli {

LoadedRun open_model(const std::filesystem::path& model) {
  LoadedRun run = load_run(model);
  if (!run.loaded.checksummed) {
    fmt::print(stderr, "note: {} carries no checksums (an older headroom or another tool wrote it); its data was "
                       "loaded unchecked\n",
               run.source);
  }
  return run;
}

}  // namespace headroom::cli
