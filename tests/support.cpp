#include "support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace fs = std::filesystem;

TempDir::TempDir(const std::string& name) {
  static std::atomic<int> counter{0};
  path_ = fs::temp_directory_path() / fmt::format("headroom_test_{}_{}_{}", name, ::getpid(), counter++);
  fs::remove_all(path_);
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;  // a test may have made it read-only
  fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(path_, ec);
}

std::vector<std::string> TempDir::entries() const { return entries_of(path_); }

std::vector<std::string> TempDir::entries_of(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

fs::path TempDir::write(const std::string& name, const std::string& bytes) const {
  const fs::path file = path_ / name;
  std::ofstream(file, std::ios::binary) << bytes;
  return file;
}

std::string results_without_timing(const fs::path& csv) {
  std::string out;
  for (const std::string& line : lines_of(read_file(csv))) {
    std::vector<std::string> f = fields(line);
    REQUIRE(f.size() >= 2);
    f.resize(f.size() - 2);
    for (const std::string& c : f) out += c + ",";
    out += "\n";
  }
  return out;
}

std::string metrics_without_timing(const fs::path& csv) {
  const std::vector<std::string> lines = lines_of(read_file(csv));
  REQUIRE_FALSE(lines.empty());
  const std::vector<std::string> header = fields(lines.front());
  const auto timing = static_cast<std::size_t>(std::find(header.begin(), header.end(), "tokens_per_s") - header.begin());
  REQUIRE(timing < header.size());
  std::string out;
  for (const std::string& line : lines) {
    std::vector<std::string> f = fields(line);
    REQUIRE(f.size() == header.size());
    f.erase(f.begin() + static_cast<std::ptrdiff_t>(timing));
    for (const std::string& c : f) out += c + ",";
    out += "\n";
  }
  return out;
}

std::string this_host() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "an unknown host";
  return host;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t from = 0;
  for (std::size_t c = line.find(','); c != std::string::npos; c = line.find(',', from)) {
    out.push_back(line.substr(from, c - from));
    from = c + 1;
  }
  out.push_back(line.substr(from));
  return out;
}

double parse_number(const std::string& token, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(token.c_str(), &end);
  if (token.empty() || end != token.c_str() + token.size())
    throw std::runtime_error(fmt::format("{}: '{}' is not a number", where, token));
  return v;
}

std::optional<std::string> FixtureRecord::try_next() {
  std::string w;
  if (!(words_ >> w)) return std::nullopt;
  return w;
}

std::string FixtureRecord::next(const char* what) {
  std::optional<std::string> w = try_next();
  if (!w) throw std::runtime_error(fmt::format("{}: missing {}", where_, what));
  return *w;
}

std::size_t FixtureRecord::next_count(const char* what) {
  const double v = next_number(what);
  if (v < 0 || v != std::floor(v)) throw std::runtime_error(fmt::format("{}: bad {} {}", where_, what, v));
  return static_cast<std::size_t>(v);
}

void for_each_record(const std::string& path, const std::string& script,
                     const std::function<void(FixtureRecord&)>& on_record) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot open {}; regenerate it with /usr/bin/python3 {}", path, script));
  std::string line;
  for (std::size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty() || line[0] == '#') continue;
    FixtureRecord record(line, fmt::format("{}:{}", path, line_no));
    on_record(record);
  }
}

namespace {
bool g_skipped = false;
}  // namespace

bool prerequisite_skipped() { return g_skipped; }

bool prerequisite(bool present, const std::string& missing, std::source_location where) {
  if (present) return true;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") {
    ADD_FAIL_CHECK_AT(where.file_name(), static_cast<int>(where.line()),
                      "missing prerequisite under CI=true (.ci/run installs it): " << missing);
  } else {
    ADD_MESSAGE_AT(where.file_name(), static_cast<int>(where.line()), "skipped: " << missing);
    g_skipped = true;
  }
  return false;
}
