#include "cli/progress.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace headroom::cli {

std::string duration(double s) {
  const auto total = static_cast<long>(std::max(0.0, s) + 0.5);
  return total >= 3600 ? fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
                       : fmt::format("{}:{:02}", total / 60, total % 60);
}

void SweepBoard::operator()(const SweepEvent& e) {
  using Kind = SweepEvent::Kind;
  switch (e.kind) {
    case Kind::planned:
      total_ = e.in_shard;
      done_ = e.finished_before;
      queued_ = e.to_run;
      steps_to_do_ = e.steps_to_do;
      start_ = Clock::now();
      break;
    case Kind::started:
      if (elsewhere_.erase(e.run->id) > 0) {  // its process died: it is ours after all
        steps_to_do_ += e.run->config.optim.steps - e.from_step;
      } else if (queued_ > 0) {
        --queued_;
      }
      ++running_;
      if (e.from_step > 0) say(fmt::format("{}: resuming from its checkpoint at step {}", e.run->id, e.from_step));
      redraw(true);
      break;
    case Kind::stepped:
      ++steps_done_;
      redraw(false);
      break;
    case Kind::finished: {
      const TrainSummary& s = *e.summary;
      // A run out of patience leaves steps it will never take.
      steps_to_do_ -= std::min(steps_to_do_, e.run->config.optim.steps - std::min(s.steps, e.run->config.optim.steps));
      std::string notes;
      if (s.stop_reason == StopReason::patience) notes += ", out of patience";
      if (s.convergence.status == ConvergenceStatus::falling) notes += ", val loss still falling";
      ended(fmt::format("{}: val loss {:.4f}{}, val accuracy {:.2f}%, {} steps in {}{}", e.run->id, s.final_val.loss,
                        s.final_excess_loss ? fmt::format(" (excess {:.4f})", *s.final_excess_loss) : std::string(),
                        100 * s.final_val.accuracy, s.steps, duration(e.wall_s), notes),
            true);
      break;
    }
    case Kind::stopped:
      ended(fmt::format("{} stopped at step {} of {} (checkpoint saved)", e.run->id, e.summary->steps,
                        e.run->config.optim.steps),
            false);
      break;
    case Kind::failed:
      ended(fmt::format("{} failed: {}", e.run->id, e.error), false);
      break;
    case Kind::elsewhere: {
      // Queued here, but another process's: held (it may come back here if that
      // process dies), or finished (by a process that held it).
      const bool was_held = elsewhere_.erase(e.run->id) > 0;
      if (!was_held) {
        if (queued_ > 0) --queued_;
        steps_to_do_ -= std::min(steps_to_do_, e.steps_left);
      }
      if (e.held) {
        elsewhere_.insert(e.run->id);
      } else {
        ++done_;
        say(fmt::format("[{}/{}] {}: finished by another process", done_, total_, e.run->id));
      }
      redraw(true);
      break;
    }
  }
}

void SweepBoard::close() {
  if (live_ && drawn_) fmt::print("\r\x1b[K");
  std::fflush(stdout);
}

std::string SweepBoard::status() const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string eta = "-";
  if (steps_done_ > 0 && steps_to_do_ > steps_done_) {
    eta = duration(elapsed * static_cast<double>(steps_to_do_ - steps_done_) / static_cast<double>(steps_done_));
  } else if (steps_to_do_ <= steps_done_ && steps_done_ > 0) {
    eta = "0:00";
  }
  return fmt::format("{}/{} done, {} running, {} queued{}, elapsed {}, ETA {}", done_, total_, running_, queued_,
                     elsewhere_.empty() ? std::string() : fmt::format(", {} in other processes", elsewhere_.size()),
                     duration(elapsed), eta);
}

// A run ended: finished (counted as done), stopped early or failed.
void SweepBoard::ended(const std::string& line, bool done) {
  --running_;
  if (done) ++done_;
  say(fmt::format("[{}/{}] {}", done_, total_, line));
  redraw(true);
}

void SweepBoard::say(const std::string& line) {
  if (quiet_) return;
  if (live_) {
    fmt::print("\r\x1b[K{}\n", line);
  } else {
    fmt::print("{}  ({})\n", line, status());
  }
  std::fflush(stdout);
}

void SweepBoard::redraw(bool now) {
  if (!live_) return;
  const auto t = Clock::now();
  if (!now && t - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = t;
  drawn_ = true;
  fmt::print("\r[ablate] {}\x1b[K", status());
  std::fflush(stdout);
}

}  // namespace headroom::cli
