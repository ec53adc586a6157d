// Learning-rate schedules: a small value type evaluated at a step, counting from 1
// for the first update (so the t-th call of Optimizer::step() uses lr_at(t), i.e.
// opt.set_lr(schedule.lr_at(opt.step_count() + 1)) right before opt.step()).
//
//   constant      lr_at(t) = lr
//   cosine        lr_at(t) = lr * t / warmup                       for t <= warmup
//                            min_lr + (lr - min_lr) * (1 + cos(pi * s)) / 2,
//                              s = (t - warmup) / (total_steps - warmup),
//                                                                  for warmup < t <= total_steps
//                            min_lr                                for t > total_steps
//                 A linear warm-up from 0 to the peak lr, then half a cosine down to
//                 min_lr at total_steps (Loshchilov and Hutter, 2017, SGDR, without
//                 restarts), then held at min_lr.
//   inverse_sqrt  lr_at(t) = lr * min(t / warmup, sqrt(warmup / t))
//                 Vaswani et al., 2017, "Attention Is All You Need", eq. (3), written
//                 with its peak: linear growth for warmup steps to lr at t = warmup,
//                 then decay with t^-0.5. The paper's d_model^-0.5 * min(t^-0.5,
//                 t * warmup^-1.5) is lr = (d_model * warmup)^-0.5.
//
// Every kind is made from one options aggregate and reads only its own fields, so
// a command line can fill all of them and pick the kind by name:
//     LrSchedule::from_name("cosine", {.lr = 1e-3, .warmup = 100, .total_steps = 2000});
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

enum class LrScheduleKind { constant, warmup_cosine, inverse_sqrt };

// The names from_name accepts: "constant", "cosine" (warmup_cosine), "inverse_sqrt";
// any other is an error listing them.
LrScheduleKind parse_lr_schedule(const std::string& name);
std::string to_string(LrScheduleKind kind);

struct LrScheduleOptions {
  double lr = 3e-4;             // the rate (constant) or the peak after warm-up
  std::size_t warmup = 0;       // cosine (may be 0) and inverse_sqrt (must be > 0)
  std::size_t total_steps = 0;  // cosine: > 0 and >= warmup
  double min_lr = 0;            // cosine: the floor, in [0, lr]
};

class LrSchedule {
 public:
  // A constant 3e-4.
  LrSchedule() = default;

  // Each checks the fields its kind reads and throws std::invalid_argument naming
  // the schedule, the field and the value.
  static LrSchedule constant(const LrScheduleOptions& options);
  static LrSchedule warmup_cosine(const LrScheduleOptions& options);
  static LrSchedule inverse_sqrt(const LrScheduleOptions& options);
  static LrSchedule of_kind(LrScheduleKind kind, const LrScheduleOptions& options);
  // name is one of schedule_names() (parse_lr_schedule).
  static LrSchedule from_name(std::string_view name, const LrScheduleOptions& options);
  static const std::vector<std::string>& schedule_names();

  // The rate for the step-th update, step >= 1.
  double lr_at(std::size_t step) const;

  LrScheduleKind kind() const { return kind_; }
  std::string_view name() const;  // as from_name accepts it
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrSchedule(LrScheduleKind kind, const LrScheduleOptions& options) : kind_(kind), options_(options) {}

  LrScheduleKind kind_ = LrScheduleKind::constant;
  LrScheduleOptions options_;
};

}  // namespace headroom
