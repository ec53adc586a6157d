#include "train/head_log.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "nn/safetensors.hpp"  // write_file_atomically
#include "train/metrics.hpp"      // csv_cells

namespace headroom {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHeader = "step,layer,head,previous_token,induction,entropy,loss_increase";

HeadLogRow parse_row(const fs::path& file, const std::string& line) {
  const std::vector<std::string> c = csv_cells(line);
  if (c.size() != 7) throw std::invalid_argument(fmt::format("{}: malformed row '{}'", file.string(), line));
  try {
    const auto number = [](const std::string& s) {
      return s.empty() ? std::numeric_limits<double>::quiet_NaN() : std::stod(s);
    };
    return {.step = std::stoull(c[0]),
            .head = {.layer = std::stoull(c[1]),
                     .head = std::stoull(c[2]),
                     .previous_token = std::stod(c[3]),
                     .induction = number(c[4]),
                     .entropy = std::stod(c[5]),
                     .loss_increase = std::stod(c[6])}};
  } catch (const std::logic_error&) {
    throw std::invalid_argument(fmt::format("{}: malformed row '{}'", file.string(), line));
  }
}

}  // namespace

std::string HeadLogWriter::initial_text(const fs::path& out_dir, bool resume, std::size_t resume_step) {
  const fs::path file = out_dir / "tracked_heads.csv";
  std::string kept = kHeader;
  kept += '\n';
  if (resume && fs::exists(file)) {
    std::ifstream in(file);
    std::string line;
    if (!std::getline(in, line) || line != kHeader) throw std::invalid_argument(fmt::format("{}: not a tracked_heads.csv (header '{}')", file.string(), line));
    // Rows up to the checkpoint were flushed before it was made, so they are whole; a
    // killed process may have left a torn row after them, so only the step is read
    // to find where they end.
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::size_t step = 0;
      try {
        step = std::stoull(line.substr(0, line.find(',')));
      } catch (const std::logic_error&) {
        throw std::invalid_argument(fmt::format("{}: malformed row '{}'", file.string(), line));
      }
      if (step > resume_step) break;
      kept += line + "\n";
    }
  }
  return kept;
}

HeadLogWriter HeadLogWriter::open(const fs::path& out_dir, const std::string& initial_text) {
  const fs::path file = out_dir / "tracked_heads.csv";
  write_file_atomically(file, initial_text);
  HeadLogWriter w;
  w.out_.open(file, std::ios::app);
  if (!w.out_) throw std::invalid_argument(fmt::format("cannot write {}", file.string()));
  return w;
}

void HeadLogWriter::append(std::size_t step, const std::vector<HeadTrack>& heads) {
  if (!out_.is_open()) return;
  std::string rows;
  for (const HeadTrack& h : heads) {
    const std::string induction = std::isnan(h.induction) ? std::string() : fmt::format("{:.6f}", h.induction);
    rows += fmt::format("{},{},{},{:.6f},{},{:.6f},{:.6f}\n", step, h.layer, h.head, h.previous_token, induction,
                        h.entropy, h.loss_increase);
  }
  out_ << rows << std::flush;
}

std::vector<HeadLogRow> read_head_log(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument(fmt::format("cannot read {}", file.string()));
  std::string line;
  if (!std::getline(in, line)) throw std::invalid_argument(fmt::format("{}: empty", file.string()));
  if (line != kHeader) throw std::invalid_argument(fmt::format("{}: not a tracked_heads.csv (header '{}', expected '{}')", file.string(), line, kHeader));
  std::vector<HeadLogRow> rows;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(parse_row(file, line));
  }
  return rows;
}

}  // namespace headroom
