#include "train/metrics.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "nn/safetensors.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::istringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ',')) cells.push_back(cell);
  return cells;
}

std::string header_line() {
  std::string h;
  for (const std::string_view c : kMetricsColumns) {
    if (!h.empty()) h += ',';
    h += c;
  }
  return h + "\n";
}

// metrics.csv's header and its rows up to and including `step`.
std::string rows_up_to(const fs::path& file, std::size_t step) {
  std::ifstream in(file);
  if (!in) bad(fmt::format("cannot read {} to resume", file.string()));
  std::string line, kept;
  bool header = true;
  while (std::getline(in, line)) {
    if (!header) {
      std::size_t row_step = 0;
      try {
        row_step = std::stoull(line.substr(0, line.find(',')));
      } catch (const std::logic_error&) {
        bad(fmt::format("{}: malformed row '{}'", file.string(), line));
      }
      if (row_step > step) break;
    }
    kept += line + "\n";
    header = false;
  }
  return kept;
}

}  // namespace

MetricsWriter MetricsWriter::open(const fs::path& out_dir, bool resume, std::size_t resume_step) {
  const fs::path file = out_dir / "metrics.csv";
  write_file_atomically(file, resume ? rows_up_to(file, resume_step) : header_line());
  MetricsWriter w;
  w.out_.open(file, std::ios::app);
  if (!w.out_) bad(fmt::format("cannot write {}", file.string()));
  return w;
}

void MetricsWriter::append(const MetricsRow& r) {
  if (!out_.is_open()) return;
  out_ << fmt::format("{},{:.6f},{:.6f},{:.6f},{:.6g},{:.6g},{:.1f}\n", r.step, r.train_loss, r.val_loss,
                      r.val_accuracy, r.lr, r.grad_norm, r.tokens_per_s)
       << std::flush;
}

std::vector<MetricsRow> read_metrics(const fs::path& file) {
  std::ifstream in(file);
  if (!in) bad(fmt::format("cannot read {}", file.string()));
  std::string line;
  if (!std::getline(in, line)) bad(fmt::format("{}: empty", file.string()));
  const std::vector<std::string> header = split_cells(line);
  std::array<std::size_t, kMetricsColumns.size()> at{};
  for (std::size_t c = 0; c < kMetricsColumns.size(); ++c) {
    const auto it = std::find(header.begin(), header.end(), kMetricsColumns[c]);
    if (it == header.end()) bad(fmt::format("{}: no column '{}'", file.string(), kMetricsColumns[c]));
    at[c] = static_cast<std::size_t>(it - header.begin());
  }
  std::vector<MetricsRow> rows;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> cells = split_cells(line);
    if (cells.size() != header.size()) bad(fmt::format("{}: malformed row '{}'", file.string(), line));
    try {
      std::array<double, kMetricsColumns.size()> v{};
      for (std::size_t c = 0; c < v.size(); ++c) v[c] = std::stod(cells[at[c]]);
      rows.push_back({.step = static_cast<std::size_t>(v[0]), .train_loss = v[1], .val_loss = v[2],
                      .val_accuracy = v[3], .lr = v[4], .grad_norm = v[5], .tokens_per_s = v[6]});
    } catch (const std::logic_error&) {
      bad(fmt::format("{}: malformed row '{}'", file.string(), line));
    }
  }
  return rows;
}

}  // namespace headroom
