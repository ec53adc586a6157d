// Files a user names (--config, --text, a run's config.json) are checked before they
// are read: a regular file, no larger than a limit, so that /dev/zero, a directory or
// a 1 GB file by mistake is one clear line instead of a read that never ends
// (docs/design.md #12).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace headroom {

inline constexpr std::uintmax_t kMiB = 1024 * 1024;

// What `file` is when it is not a regular file: "no such file", "a directory", "a
// character device", "a block device", "a FIFO", "a socket", "a broken symbolic link";
// empty for a regular file (symbolic links followed).
std::string non_regular_file_kind(const std::filesystem::path& file);

// The size of `file` after checking that it is a regular file of at most max_bytes.
// Otherwise a std::invalid_argument starting with `what`: "<what>: is a directory, not
// a regular file", "<what>: is 1.5 GiB, larger than the limit of 1.0 MiB".
std::uintmax_t check_input_file(const std::filesystem::path& file, const std::string& what, std::uintmax_t max_bytes);

// The whole of `file` after check_input_file; a read error is a std::invalid_argument
// naming `what`.
std::string read_input_file(const std::filesystem::path& file, const std::string& what, std::uintmax_t max_bytes);

}  // namespace headroom
