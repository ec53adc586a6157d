// The `headroom` executable: one subcommand per job. User mistakes (bad flags, bad
// shapes, bad files) arrive as std::invalid_argument and leave as one line on
// stderr with a non-zero exit status, never as an abort (DESIGN.md #5).
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "headroom: train, gradient-check and ablate small transformers to see what attention "
      "heads buy you.",
      "headroom"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "headroom 0.1.0");

  const headroom::cli::Run gradcheck = headroom::cli::add_gradcheck_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("gradcheck")) return gradcheck();
  } catch (const std::invalid_argument& e) {
    std::cerr << "headroom: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "headroom: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
