#include "autograd/input_file.hpp"

#include <fstream>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

namespace headroom {
namespace {

namespace fs = std::filesystem;

std::string size_text(std::uintmax_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024));
}

}  // namespace

std::string non_regular_file_kind(const fs::path& file) {
  std::error_code ec;
  const fs::file_status s = fs::status(file, ec);
  switch (s.type()) {
    case fs::file_type::regular: return "";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::not_found:
      return fs::is_symlink(fs::symlink_status(file, ec)) ? "a broken symbolic link" : "no such file";
    default: return "not a regular file";
  }
}

std::uintmax_t check_input_file(const fs::path& file, const std::string& what, std::uintmax_t max_bytes) {
  const std::string kind = non_regular_file_kind(file);
  if (kind == "no such file" || kind == "a broken symbolic link") {
    throw std::invalid_argument(fmt::format("{}: {}", what, kind));
  }
  if (!kind.empty()) throw std::invalid_argument(fmt::format("{}: is {}, not a regular file", what, kind));
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(file, ec);
  if (ec) throw std::invalid_argument(fmt::format("{}: cannot read its size: {}", what, ec.message()));
  if (size > max_bytes) {
    throw std::invalid_argument(fmt::format("{}: is {} ({} bytes), larger than the limit of {}", what,
                                            size_text(size), size, size_text(max_bytes)));
  }
  return size;
}

std::string read_input_file(const fs::path& file, const std::string& what, std::uintmax_t max_bytes) {
  const std::uintmax_t size = check_input_file(file, what, max_bytes);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("{}: cannot be opened for reading", what));
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (in.bad() || static_cast<std::uintmax_t>(in.gcount()) != size) {
    throw std::invalid_argument(fmt::format("{}: read failed", what));
  }
  return bytes;
}

}  // namespace headroom
