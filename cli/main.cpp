// The `headroom` executable: one subcommand per job. User mistakes (bad flags, bad
// shapes, bad files) arrive as std::invalid_argument or a CLI11 parse error and
// leave as one line on stderr with exit status 2, never as an abort (docs/design.md #5).
#include <algorithm>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "autograd/gemm.hpp"
#include "autograd/memory.hpp"
#include "cli/commands.hpp"
#include "cli/help_format.hpp"
#include "cli/suggest.hpp"
#include "train/trainer.hpp"

namespace {

constexpr int kUsageError = 2;
constexpr int kTrainingFailed = 1;  // the run diverged (non-finite steps); see TrainingDiverged
constexpr int kInternalError = 3;

// Every flag of `app` and of its option groups (unnamed sub-apps), with its dashes.
void add_flag_names(const CLI::App& app, std::vector<std::string>& names) {
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  for (const CLI::App* group : app.get_subcommands([](const CLI::App* a) { return a->get_name().empty(); })) {
    add_flag_names(*group, names);
  }
}

struct UnknownFlag {
  std::string typed;    // as given, without "=value"; empty when every flag is known
  std::string nearest;  // "--steps", or empty
};

// The first argument after the command that looks like a flag the command does not
// have ("--stpes" or "--stpes=10"), with the nearest flag it does have.
UnknownFlag find_unknown_flag(const CLI::App& command, int argc, char** argv) {
  std::vector<std::string> names;
  add_flag_names(command, names);
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // what follows is positional
    if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9') || arg[1] == '.') continue;  // -5
    const std::string typed = arg.substr(0, arg.find('='));
    if (std::find(names.begin(), names.end(), typed) != names.end()) continue;
    return {typed, headroom::cli::nearest_name(typed, names)};
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  // Training allocates and frees the same large buffers every step: keep them.
  headroom::retain_freed_memory();
  CLI::App app{"headroom: train small transformers, look inside them, and test what attention heads buy you.",
               "headroom"};
  app.require_subcommand(1);
  app.set_help_flag("-h,--help", "Print this help");
  // The GEMM library and its kernels: what decides most of a step's speed (bench/README.md).
  app.set_version_flag(
      "--version", [] { return "headroom 0.1.0\nGEMMs: " + headroom::gemm_library().describe(); },
      "Print the version and the GEMM library in use");
  // The commands inherit the formatter set before they are added.
  app.formatter(std::make_shared<headroom::cli::CommandFormatter>());

  struct Command {
    headroom::cli::CommandLine line;  // its line in `headroom --help`
    std::string manual;               // docs/cli/<manual>.md
    headroom::cli::Run (*add)(CLI::App&);
  };
  // In `headroom --help`'s order, grouped by job as git's and cargo's commands are.
  const char* const use = "Train and use a model";
  const char* const inside = "Look inside a model";
  const char* const sweeps = "Sweeps and claims";
  const Command table[] = {
      {{use, "train", "Train a small transformer on a toy task, a text or labelled text"}, "train",
       headroom::cli::add_train_command},
      {{use, "sample", "Generate from a trained model"}, "sample-eval", headroom::cli::add_sample_command},
      {{use, "eval", "Loss and accuracy of a trained model on its data or a text"}, "sample-eval",
       headroom::cli::add_eval_command},
      {{use, "convert", "Mean-pool a model's key/value heads into fewer (GQA, MQA)"}, "convert",
       headroom::cli::add_convert_command},
      {{use, "params", "Count a model's parameters, KV cache and FLOPs"}, "params", headroom::cli::add_params_command},
      {{use, "corpora", "The real-text corpora from Debian packages, and what each holds"}, "corpora",
       headroom::cli::add_corpora_command},
      {{inside, "attention", "Draw every head's attention on one input"}, "attention",
       headroom::cli::add_attention_command},
      {{inside, "heads", "What each head does: gating cost, importance, induction"}, "heads",
       headroom::cli::add_heads_command},
      {{inside, "circuits", "Direct logit attribution, QK and OV circuits, composition"}, "circuits",
       headroom::cli::add_circuits_command},
      {{inside, "patch", "Activation and attribution patching"}, "patch", headroom::cli::add_patch_command},
      {{sweeps, "ablate", "Train a grid of models over heads, widths and any setting"}, "ablate",
       headroom::cli::add_ablate_command},
      {{sweeps, "claims", "Check the common claims about attention heads"}, "claims",
       headroom::cli::add_claims_command},
      {{"Tools", "gradcheck", "Check every op's backward against finite differences"}, "gradcheck",
       headroom::cli::add_gradcheck_command},
  };
  struct Registered {
    std::string name;
    headroom::cli::Run run;
  };
  std::vector<Registered> commands;
  std::vector<headroom::cli::CommandLine> index;
  for (const Command& c : table) {
    commands.push_back({c.line.name, c.add(app)});
    index.push_back(c.line);
    // A command's own footer (notes on its flags) first, then where its manual is.
    CLI::App* sub = app.get_subcommand(c.line.name);
    const std::string notes = sub->get_footer();
    sub->footer((notes.empty() ? "" : notes + "\n\n") + "Manual: docs/cli/" + c.manual + ".md");
  }
  app.formatter(std::make_shared<headroom::cli::IndexFormatter>(std::move(index)));
  app.footer("See 'headroom COMMAND --help' for a command's flags, and docs/cli/ for its manual.");

  // A mistyped command would otherwise read as "a subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::vector<std::string> names;
    for (const auto& c : commands) {
      known = known || c.name == argv[1];
      names.push_back(c.name);
    }
    if (!known) {
      std::cerr << fmt::format("headroom: error: unknown command '{}'{}; commands: {} (see headroom --help)\n",
                               argv[1], headroom::cli::did_you_mean(headroom::cli::nearest_name(argv[1], names)),
                               fmt::join(names, ", "));
      return kUsageError;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string where = argc > 1 && argv[1][0] != '-' ? std::string(" ") + argv[1] : "";
    std::string what = e.what();
    // CLI11 lists the arguments it could not place, last first ("not expected: 10
    // --stpes"), or, when a required flag is missing too, says only that; a mistyped
    // flag is the likely cause of either, so name it and its nearest flag.
    const bool may_be_typo =
        dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr || dynamic_cast<const CLI::RequiredError*>(&e) != nullptr;
    if (may_be_typo && !where.empty()) {
      if (const UnknownFlag u = find_unknown_flag(*app.get_subcommand(argv[1]), argc, argv); !u.typed.empty()) {
        what = "unknown flag " + u.typed + headroom::cli::did_you_mean(u.nearest, "");
      }
    }
    std::cerr << "headroom" << where << ": error: " << what << " (see headroom" << where << " --help)\n";
    return kUsageError;
  }
  try {
    for (const auto& c : commands) {
      if (app.got_subcommand(c.name)) return c.run();
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "headroom: error: " << e.what() << "\n";
    return kUsageError;
  } catch (const headroom::TrainingDiverged& e) {
    std::cerr << "headroom: error: " << e.what() << "\n";
    return kTrainingFailed;
  } catch (const std::exception& e) {
    std::cerr << "headroom: internal error: " << e.what() << "\n";
    return kInternalError;
  }
  return 0;
}
