#include "cli/out_paths.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include <fmt/format.h>
#include <unistd.h>

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void refuse(std::string_view flag, const fs::path& path, const std::string& why) {
  throw std::invalid_argument(fmt::format("{} '{}': {}", flag, path.string(), why));
}

// "" when we may create entries in `dir`, else why not (access(2) asks the kernel,
// which also knows a read-only file system).
std::string why_not_writable(const fs::path& dir) {
  if (::access(dir.empty() ? "." : dir.c_str(), W_OK | X_OK) == 0) return "";
  return fmt::format("cannot write in '{}': {}", dir.empty() ? "." : dir.string(), std::strerror(errno));
}

}  // namespace

void check_out_directory(const fs::path& dir, std::string_view flag) {
  if (dir.empty()) refuse(flag, dir, "the path is empty");
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(dir, ec);
  const fs::file_status target = fs::status(dir, ec);
  if (fs::is_symlink(link) && !fs::exists(target)) refuse(flag, dir, "is a symbolic link to nothing");
  if (fs::exists(target)) {
    if (!fs::is_directory(target)) refuse(flag, dir, "is a file, not a directory");
    if (std::string why = why_not_writable(dir); !why.empty()) refuse(flag, dir, why);
    return;
  }
  // Missing: the nearest ancestor that exists must be a directory we may write in.
  fs::path ancestor = dir.lexically_normal().parent_path();
  while (!ancestor.empty() && !fs::exists(fs::symlink_status(ancestor, ec))) ancestor = ancestor.parent_path();
  if (!ancestor.empty() && !fs::is_directory(ancestor, ec)) {
    refuse(flag, dir, fmt::format("cannot be made: '{}' is {}", ancestor.string(),
                                  fs::is_symlink(fs::symlink_status(ancestor, ec)) ? "a symbolic link to nothing"
                                                                                   : "a file"));
  }
  if (std::string why = why_not_writable(ancestor); !why.empty()) refuse(flag, dir, "cannot be made: " + why);
}

void make_out_directory(const fs::path& dir, std::string_view flag) {
  check_out_directory(dir, flag);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    refuse(flag, dir, fmt::format("cannot make the directory: {}", ec ? ec.message() : "a file is in the way"));
  }
}

void check_out_file(const fs::path& path, std::string_view flag) {
  std::error_code ec;
  if (path.empty()) refuse(flag, path, "the path is empty");
  if (fs::is_directory(path, ec)) refuse(flag, path, "is a directory; give a file name in it");
  const fs::path dir = path.parent_path();
  if (!dir.empty() && !fs::is_directory(dir, ec)) refuse(flag, path, fmt::format("the directory '{}' does not exist", dir.string()));
  if (std::string why = why_not_writable(dir); !why.empty()) refuse(flag, path, why);
}

}  // namespace headroom::cli
