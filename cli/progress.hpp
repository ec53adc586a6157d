// How long-running commands show progress on the terminal: durations, and the
// board `headroom ablate` draws from its runner's events (ablate/sweep.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <set>
#include <string>

#include "ablate/sweep.hpp"

namespace headroom::cli {

// "m:ss", or "h:mm:ss" from an hour on; negative times show as 0:00.
std::string duration(double seconds);

// Runs done / running / queued and an ETA from the steps trained so far. On a
// terminal (live) one status line is redrawn in place, at most five times a second;
// otherwise each event is a plain line with the status after it. Quiet prints
// nothing. Takes run_sweep's events, which never overlap.
class SweepBoard {
 public:
  SweepBoard(bool live, bool quiet) : live_(live && !quiet), quiet_(quiet) {}
  void operator()(const SweepEvent& e);
  void close();  // clears a live status line

 private:
  using Clock = std::chrono::steady_clock;
  std::string status() const;
  void say(const std::string& line);
  void ended(const std::string& line, bool done);
  void redraw(bool now);

  bool live_, quiet_, drawn_ = false;
  std::size_t total_ = 0, done_ = 0, queued_ = 0, running_ = 0;
  std::size_t steps_to_do_ = 0, steps_done_ = 0;
  std::set<std::string> elsewhere_;  // queued runs another process holds
  Clock::time_point start_{}, last_draw_{};
};

}  // namespace headroom::cli
