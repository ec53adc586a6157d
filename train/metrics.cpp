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

// A loss field: as_recorded reads it back, so the two must stay one format.
std::string loss_field(double v) { return fmt::format("{:.6f}", v); }

std::string header_line() {
  std::string h;
  for (const std::string_view c : kMetricsColumns) {
    if (!h.empty()) h += ',';
    h += c;
  }
  return h + "\n";
}

// A row of a file whose header is `header`, in kMetricsColumns' order: a column the
// file lacks (an optional one, in a file from before it) is an empty field.
std::string in_current_order(const fs::path& file, const std::vector<std::string>& header, const std::string& line) {
  const std::vector<std::string> cells = csv_cells(line);
  if (cells.size() != header.size()) throw std::invalid_argument(fmt::format("{}: malformed row '{}'", file.string(), line));
  std::string out;
  for (std::size_t c = 0; c < kMetricsColumns.size(); ++c) {
    if (c > 0) out += ',';
    const auto it = std::find(header.begin(), header.end(), kMetricsColumns[c]);
    if (it != header.end()) out += cells[static_cast<std::size_t>(it - header.begin())];
  }
  return out;
}

// metrics.csv's header and its rows up to and including `step`, in the columns
// this binary writes, so that the rows after them match.
std::string rows_up_to(const fs::path& file, std::size_t step) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument(fmt::format("cannot read {} to resume", file.string()));
  std::string line;
  if (!std::getline(in, line)) throw std::invalid_argument(fmt::format("{}: empty", file.string()));
  const std::vector<std::string> header = csv_cells(line);
  const bool current = line + "\n" == header_line();
  std::string kept = header_line();
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::size_t row_step = 0;
    try {
      row_step = std::stoull(line.substr(0, line.find(',')));
    } catch (const std::logic_error&) {
      throw std::invalid_argument(fmt::format("{}: malformed row '{}'", file.string(), line));
    }
    if (row_step > step) break;
    kept += (current ? line : in_current_order(file, header, line)) + "\n";
  }
  return kept;
}

// The rows of a metrics.csv read from `in`; `file` names it in messages.
std::vector<MetricsRow> read_rows(std::istream& in, const fs::path& file) {
  std::string line;
  if (!std::getline(in, line)) throw std::invalid_argument(fmt::format("{}: empty", file.string()));
  const std::vector<std::string> header = csv_cells(line);
  constexpr std::size_t kNone = ~std::size_t{0};
  std::array<std::size_t, kMetricsColumns.size()> at{};
  for (std::size_t c = 0; c < kMetricsColumns.size(); ++c) {
    const auto it = std::find(header.begin(), header.end(), kMetricsColumns[c]);
    at[c] = static_cast<std::size_t>(it - header.begin());
    if (it == header.end() && optional_metrics_column(kMetricsColumns[c])) at[c] = kNone;
    else if (it == header.end()) throw std::invalid_argument(fmt::format("{}: no column '{}'", file.string(), kMetricsColumns[c]));
  }
  std::vector<MetricsRow> rows;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> cells = csv_cells(line);
    if (cells.size() != header.size()) throw std::invalid_argument(fmt::format("{}: malformed row '{}'", file.string(), line));
    try {
      // The columns in kMetricsColumns' order; an empty or absent optional one is unknown.
      std::array<std::optional<double>, kMetricsColumns.size()> v{};
      for (std::size_t c = 0; c < v.size(); ++c) {
        const bool optional = optional_metrics_column(kMetricsColumns[c]);
        if (at[c] == kNone || (optional && cells[at[c]].empty())) continue;
        v[c] = std::stod(cells[at[c]]);
      }
      rows.push_back({.step = static_cast<std::size_t>(v[0].value()), .train_loss = v[1].value(),
                      .val_loss = v[2].value(), .val_accuracy = v[3].value(), .val_excess_loss = v[4],
                      .lr = v[6].value(), .grad_norm = v[7].value(), .tokens_per_s = v[8].value(),
                      .icl_score = v[5], .train_bpc = v[9], .val_bpc = v[10]});
    } catch (const std::logic_error&) {  // stod: a field that is not a number (or empty, but for an optional column)
      throw std::invalid_argument(fmt::format("{}: malformed row '{}'", file.string(), line));
    }
  }
  return rows;
}

}  // namespace

std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t from = 0;
  for (std::size_t comma = line.find(','); comma != std::string::npos; comma = line.find(',', from)) {
    cells.push_back(line.substr(from, comma - from));
    from = comma + 1;
  }
  cells.push_back(line.substr(from));
  return cells;
}

std::string MetricsWriter::initial_text(const fs::path& out_dir, bool resume, std::size_t resume_step) {
  return resume ? rows_up_to(out_dir / "metrics.csv", resume_step) : header_line();
}

MetricsWriter MetricsWriter::open(const fs::path& out_dir, const std::string& initial_text) {
  const fs::path file = out_dir / "metrics.csv";
  write_file_atomically(file, initial_text);
  MetricsWriter w;
  w.out_.open(file, std::ios::app);
  if (!w.out_) throw std::invalid_argument(fmt::format("cannot write {}", file.string()));
  return w;
}

void MetricsWriter::append(const MetricsRow& r) {
  if (!out_.is_open()) return;
  const auto known = [](const std::optional<double>& v) { return v ? fmt::format("{:.6f}", *v) : std::string(); };
  out_ << fmt::format("{},{:.6f},{},{:.6f},{},{},{:.6g},{:.6g},{:.1f},{},{}\n", r.step, r.train_loss,
                      loss_field(r.val_loss), r.val_accuracy, known(r.val_excess_loss), known(r.icl_score), r.lr,
                      r.grad_norm, r.tokens_per_s, known(r.train_bpc), known(r.val_bpc))
       << std::flush;
}

double as_recorded(double loss) { return std::stod(loss_field(loss)); }

std::vector<ValPoint> validations(const std::vector<MetricsRow>& rows) {
  std::vector<ValPoint> out;
  out.reserve(rows.size());
  for (const MetricsRow& r : rows) out.push_back({.step = r.step, .val_loss = r.val_loss});
  return out;
}

std::vector<MetricsRow> read_metrics(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument(fmt::format("cannot read {}", file.string()));
  return read_rows(in, file);
}

std::vector<MetricsRow> read_metrics_text(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  return read_rows(in, source);
}

}  // namespace headroom
