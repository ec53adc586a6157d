// The one JSON reader for what headroom reads from files (config.json, --config,
// sweep.json, a checkpoint's header): nlohmann's parser with a callback that refuses
// what it would accept without a word, a key twice in one object (nlohmann keeps the
// last), and a number outside double's range, each named by its key path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/input_file.hpp"

namespace headroom {

// The largest config file read (--config, DIR/config.json); sweep.json is larger.
inline constexpr std::uintmax_t kMaxConfigBytes = kMiB;
inline constexpr std::uintmax_t kMaxSweepBytes = 64 * kMiB;

// Makes the message for a key given twice, from its path ({"train", "lr"}).
using DuplicateKeyMessage = std::function<std::string(const std::vector<std::string>& path)>;

// Parses `text`. A std::invalid_argument (one line, starting with `source`) for
//   a key twice in one object:   "<source>: duplicate key 'train.lr'" (or describe's message)
//   a number out of range:       "<source>: 'train.lr': number out of range: 1e400"
//   anything else not JSON:      "<source>: not valid JSON: <the parser's message>"
nlohmann::json parse_strict_json(std::string_view text, const std::string& source,
                                 const DuplicateKeyMessage& describe = nullptr);

// The JSON of a file after check_input_file (a regular file of at most max_bytes);
// errors name the file.
nlohmann::json read_strict_json_file(const std::filesystem::path& file, std::uintmax_t max_bytes = kMaxConfigBytes);

}  // namespace headroom
