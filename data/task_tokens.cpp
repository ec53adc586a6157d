#include "data/task_tokens.hpp"

#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "data/task.hpp"

namespace headroom {

std::string task_token_label(Index id) {
  switch (id) {
    case kPad: return "_";
    case kSep: return "|";
    case kQuery: return "?";
    default: return fmt::format("{}", id);
  }
}

std::string render_task_tokens(std::span<const Index> ids) {
  std::string out;
  for (const Index id : ids) {
    if (!out.empty()) out += ' ';
    out += task_token_label(id);
  }
  return out;
}

std::vector<Index> parse_task_tokens(const std::string& text, std::size_t vocab, std::string_view what) {
  std::istringstream words(text);
  std::vector<Index> ids;
  std::string word;
  while (words >> word) {
    if (word == "_" || word == "|" || word == "?") {
      ids.push_back(word == "_" ? kPad : word == "|" ? kSep : kQuery);
      continue;
    }
    // 18 digits at most: stoll cannot overflow, and any id that long is out of range anyway.
    const bool digits = word.size() <= 18 && word.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) {
      throw std::invalid_argument(fmt::format(
          "{}: '{}' is not a token id: a toy-task model reads space-separated ids in [0, {}) (or _ | ? for pad, "
          "separator and query)",
          what, word, vocab));
    }
    const Index id = std::stoll(word);
    if (static_cast<std::size_t>(id) >= vocab) {
      throw std::invalid_argument(
          fmt::format("{}: token {} is out of range for the model's vocab {} (ids 0 to {})", what, id, vocab, vocab - 1));
    }
    ids.push_back(id);
  }
  if (ids.empty()) throw std::invalid_argument(fmt::format("{}: no token ids in it", what));
  return ids;
}

}  // namespace headroom
