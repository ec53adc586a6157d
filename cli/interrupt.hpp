// Ctrl-C and SIGTERM for long commands (train, ablate): the first signal asks the
// work to stop at the next step boundary, where it saves a checkpoint; a second one,
// sent more than a second later, gets the default action (saving is atomic, so even
// then nothing is left half-written).
//
// The one-second grace absorbs the duplicate a signal often arrives with: `timeout`
// and job schedulers signal the process and then its whole process group, so one
// "please stop" can arrive twice within microseconds. Treating the copy as a second
// Ctrl-C would kill the run before it saves.
#pragma once

namespace headroom::cli {

// Installs the handlers for its lifetime and restores the previous ones on
// destruction. One at a time per process.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // True once SIGINT or SIGTERM arrived. Async-signal-safe to poll from any thread.
  static bool requested();
  // The signal that arrived first (SIGINT or SIGTERM), 0 if none.
  static int signal_number();
  // The conventional exit status of a process stopped by that signal: 128 + signal.
  static int exit_status();
};

}  // namespace headroom::cli
