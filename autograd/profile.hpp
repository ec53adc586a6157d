// Per-op timing of training steps: where a step's time goes, by op kind, forward
// and backward (bench/train_step_bench --profile).
//
// While an OpProfile is alive, this thread's ops are timed:
// - an op's forward time is the wall time from the end of the previous op (or the
//   last lap()) to the moment its output is made, so the module code between two
//   ops is charged to the op that follows it (a few allocations, nothing more);
// - an op's backward time is the time of its tape entry's backward, the gradient
//   accumulation into its inputs included;
// - work outside the tape (the optimizer, clipping) is timed with section().
// Without an OpProfile the only cost is one thread-local null check per op.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace headroom {

struct OpTiming {
  std::string name;           // the op's name, or a section's
  double forward_ms = 0;      // summed over calls
  double backward_ms = 0;     // summed over calls
  std::size_t forward_calls = 0;
  std::size_t backward_calls = 0;
};

class OpProfile {
 public:
  using Clock = std::chrono::steady_clock;

  OpProfile();  // starts timing this thread's ops; one at a time per thread
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Restarts the forward clock: call it right before a forward pass, so that
  // the first op is not charged with what ran before.
  void lap();
  // Adds ms to `name`'s forward or backward time.
  void add(const std::string& name, bool backward, double ms);
  // Runs f() and adds its wall time to `name`'s forward column (sections have no
  // backward), then restarts the forward clock.
  template <typename F>
  void section(const std::string& name, F&& f) {
    const auto t0 = Clock::now();
    f();
    add(name, false, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    lap();
  }
  // Every op and section seen so far, largest forward + backward time first.
  std::vector<OpTiming> timings() const;
  void reset();

  // Hooks for tensor.cpp: the active profile of this thread, or nullptr.
  static OpProfile* active();
  void op_made(const char* op);  // an op's output was just made

 private:
  std::map<std::string, OpTiming> by_name_;
  Clock::time_point last_;
  OpProfile* previous_;
};

}  // namespace headroom
