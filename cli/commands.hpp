// Each `headroom` subcommand registers itself on the app and returns the function
// that runs it once the command line has been parsed.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace headroom::cli {

using Run = std::function<int()>;  // returns the process exit status

Run add_gradcheck_command(CLI::App& app);
Run add_train_command(CLI::App& app);
Run add_sample_command(CLI::App& app);
Run add_eval_command(CLI::App& app);
Run add_ablate_command(CLI::App& app);
Run add_attention_command(CLI::App& app);
Run add_heads_command(CLI::App& app);
Run add_params_command(CLI::App& app);
Run add_claims_command(CLI::App& app);
Run add_convert_command(CLI::App& app);
Run add_circuits_command(CLI::App& app);
Run add_patch_command(CLI::App& app);
Run add_corpora_command(CLI::App& app);

}  // namespace headroom::cli
