// How `headroom --help` and `headroom CMD --help` read, after git's and cargo's:
// the top help is one line per command, grouped by job; a command's help is a short
// paragraph, the usage, then each flag with its help text right after it.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace headroom::cli {

// A command's help: its description (one short paragraph), the usage, the flags and
// each option group ("Model:", "Data:", ...) as a section, then its footer (notes and
// where its manual is). A flag's help text follows its name and value type on the
// same line; CLI11's "Needs:" and "Excludes:" lists are left out, so a flag that
// refuses others says so in its own text ("not with --resume").
class CommandFormatter : public CLI::Formatter {
 public:
  CommandFormatter();
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override;
  std::string make_description(const CLI::App* app) const override;
  std::string make_expanded(const CLI::App* sub) const override;
  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
};

// One line of `headroom --help`.
struct CommandLine {
  std::string group;    // "Train and use a model"
  std::string name;     // "train"
  std::string summary;  // a few words
};

// `headroom --help`: the description, the usage, the commands in `commands`' order
// under a heading per group, the flags, and how to get a command's help.
class IndexFormatter : public CLI::Formatter {
 public:
  explicit IndexFormatter(std::vector<CommandLine> commands);
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override;

 private:
  std::vector<CommandLine> commands_;
};

}  // namespace headroom::cli
