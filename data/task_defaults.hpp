// The toy tasks' own training settings: where a task needs other settings than the
// global defaults (train/config.hpp) to reach 99% validation accuracy (for lags, whose
// labels are random: to use its rows well), and why. docs/cli/train.md's table says
// what each task reaches at its defaults, and tests/test_task_defaults.cpp checks it.
// train/config.cpp's task_defaults() applies them, and `headroom train --help`
// lists them, so both come from this one table.
//
// data/ sits below optim/, so a schedule is named here by what it does (constant_lr)
// rather than by optim's type.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace headroom {

struct TaskSettings {
  std::optional<std::size_t> seq_len{}, vocab{}, batch{};
  std::optional<double> lr{};
  bool constant_lr = false;  // no warm-up and no decay
  std::optional<double> weight_decay{};
  std::optional<std::size_t> steps{}, eval_every{};
};

// The settings of `task`: all empty for a task that trains well at the global
// defaults (or a name that is not a task; make_task rejects those).
TaskSettings task_settings(const std::string& task);

// The settings of a run on real text: `corpus` a registered corpus's name, or empty
// for a --labelled file; all empty for a --text file, which trains at the global
// defaults. Rows long enough for most items and more steps than a toy task needs.
TaskSettings text_settings(const std::string& corpus, bool labelled_file);

// The tasks with settings of their own, in task_names() order.
std::vector<std::string> tasks_with_own_settings();

}  // namespace headroom
