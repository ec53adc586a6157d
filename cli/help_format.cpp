#include "cli/help_format.hpp"

#include <algorithm>
#include <sstream>
#include <utility>

namespace headroom::cli {
namespace {

// "  NAME<padding>help", the help at `width` or, after a longer name, two spaces on:
// the help is always the first thing after the name. A help of several lines keeps
// its later lines at `width`.
std::string name_and_help(const std::string& name, const std::string& help, std::size_t width) {
  std::string out = "  " + name;
  if (!help.empty()) {
    out += out.size() < width ? std::string(width - out.size(), ' ') : "  ";
    for (const char c : help) {
      out += c;
      if (c == '\n') out += std::string(width, ' ');
    }
  }
  return out + "\n";
}

}  // namespace

CommandFormatter::CommandFormatter() { column_width(30); }

// CLI11's, with one blank line at most between sections (a hidden flag's empty
// group would add a second).
std::string CommandFormatter::make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const {
  std::string help = CLI::Formatter::make_help(app, std::move(name), mode);
  for (std::size_t at = help.find("\n\n\n"); at != std::string::npos; at = help.find("\n\n\n", at)) {
    help.erase(at, 1);
  }
  return help;
}

std::string CommandFormatter::make_description(const CLI::App* app) const {
  const std::string& description = app->get_description();
  return description.empty() ? "" : description + "\n\n";
}

// An option group: "Model:" and its flags, as the command's own flags are shown.
std::string CommandFormatter::make_expanded(const CLI::App* sub) const {
  if (!sub->get_name().empty()) return CLI::Formatter::make_expanded(sub);
  std::string out = "\n" + sub->get_group() + ":\n";
  for (const CLI::Option* opt : sub->get_options()) {
    if (opt == sub->get_help_ptr() || opt->get_group().empty() || !opt->nonpositional()) continue;
    out += make_option(opt, false);
  }
  return out;
}

std::string CommandFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  return name_and_help(make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt),
                       column_width_);
}

// CLI11's value type, default, "..." and REQUIRED, without its Needs: and Excludes: lists.
std::string CommandFormatter::make_option_opts(const CLI::Option* opt) const {
  if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
  std::ostringstream out;
  if (opt->get_type_size() != 0) {
    if (!opt->get_type_name().empty()) out << " " << get_label(opt->get_type_name());
    if (!opt->get_default_str().empty()) out << "=" << opt->get_default_str();
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) {
      out << " ...";
    } else if (opt->get_expected_min() > 1) {
      out << " x " << opt->get_expected();
    }
    if (opt->get_required()) out << " " << get_label("REQUIRED");
  }
  return out.str();
}

IndexFormatter::IndexFormatter(std::vector<CommandLine> commands) : commands_(std::move(commands)) {}

std::string IndexFormatter::make_help(const CLI::App* app, std::string name, CLI::AppFormatMode /*mode*/) const {
  std::size_t width = 0;
  for (const CommandLine& c : commands_) width = std::max(width, c.name.size());
  width += 4;  // two to indent, two between the name and its summary

  std::string out = app->get_description() + "\n\nUsage: " + name + " COMMAND [FLAGS]\n";
  std::string group;
  for (const CommandLine& c : commands_) {
    if (c.group != group) {
      group = c.group;
      out += "\n" + group + ":\n";
    }
    out += name_and_help(c.name, c.summary, width);
  }
  out += "\nFlags:\n";
  for (const CLI::Option* opt : app->get_options()) {
    out += name_and_help(opt->get_name(false, true), opt->get_description(), width + 4);
  }
  if (!app->get_footer().empty()) out += "\n" + app->get_footer() + "\n";
  return out;
}

}  // namespace headroom::cli
