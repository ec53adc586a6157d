// The one JSON reader for what headroom reads from files (config.json, --config,
// sweep.json, a checkpoint's header): nlohmann's parser with a callback that refuses
// what it would accept without a word, a key twice in one object (nlohmann keeps the
// last), and a number outside double's range, each named by its key path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/input_file.hpp"

namespace headroom {

// The largest config file read (--config, DIR/config.json); sweep.json is larger.
inline constexpr std::uintmax_t kMaxConfigBytes = kMiB;
inline constexpr std::uintmax_t kMaxSweepBytes = 64 * kMiB;

// Makes the message for a key given twice, from its path ({"train", "lr"}).
using DuplicateKeyMessage = std::function<std::string(const std::vector<std::string>& path)>;

// Text that is not JSON at all: what() is "<source>: not valid JSON: <detail>", and
// detail() the parser's own message, for a caller that words it differently.
class JsonSyntaxError : public std::invalid_argument {
 public:
  JsonSyntaxError(const std::string& source, std::string detail)
      : std::invalid_argument(source + ": not valid JSON: " + detail), detail_(std::move(detail)) {}
  const std::string& detail() const { return detail_; }

 private:
  std::string detail_;
};

// Parses `text`. A std::invalid_argument (one line, starting with `source`) for
//   a key twice in one object:   "<source>: duplicate key 'train.lr'" (or describe's message)
//   a number out of range:       "<source>: 'train.lr': number out of range: 1e400"
//   anything else not JSON:      "<source>: not valid JSON: <the parser's message>" (JsonSyntaxError)
nlohmann::json parse_strict_json(std::string_view text, const std::string& source,
                                 const DuplicateKeyMessage& describe = nullptr);

// The JSON of a file after check_input_file (a regular file of at most max_bytes);
// errors name the file.
nlohmann::json read_strict_json_file(const std::filesystem::path& file, std::uintmax_t max_bytes = kMaxConfigBytes);

// The first place where two JSON values differ, in key order (objects) and index
// order (arrays): its path ("train.lr"; an array element by its "id" where it has
// one, `runs["h2-dk8-s0"]`; "" for the values themselves) and each side as written,
// cut at 60 characters, or "absent", or "N entries" for arrays of other lengths.
// Nothing when they are equal. The callers say which side is which.
struct JsonDifference {
  std::string path;
  std::string first;
  std::string second;
};
std::optional<JsonDifference> first_json_difference(const nlohmann::json& first, const nlohmann::json& second);

}  // namespace headroom
