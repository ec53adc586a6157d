// Where a command's --out goes, checked before the command does any work, so that a
// typo or a read-only place costs nothing and ends in one line naming the flag, the
// path and the reason (std::invalid_argument, exit status 2), never a filesystem
// error after the results were printed.
#pragma once

#include <filesystem>
#include <string_view>

namespace headroom::cli {

// A directory the command fills and makes if missing (with its missing parents):
// not a file or a dangling symlink, and either a directory we may write in or one
// that can be made, because its nearest existing ancestor is a directory we may
// write in.
void check_out_directory(const std::filesystem::path& dir, std::string_view flag);
// check_out_directory, then the directory is made.
void make_out_directory(const std::filesystem::path& dir, std::string_view flag);

// A file the command writes: not a directory, in an existing directory we may
// write in.
void check_out_file(const std::filesystem::path& path, std::string_view flag);

}  // namespace headroom::cli
