// The optimizer and the learning-rate schedule a TrainConfig asks for.
#pragma once

#include <memory>

#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "train/config.hpp"

namespace headroom {

// AdamW, Adam or SGD over `params` with the config's lr, weight decay and momentum
// (the trainer sets each step's lr from the schedule before the update).
std::unique_ptr<Optimizer<float>> make_optimizer(const OptimConfig& optim, NamedParameters<float> params);

// The config's schedule peaking at its lr; throws std::invalid_argument naming the
// schedule and the value for settings it cannot take.
LrSchedule make_schedule(const OptimConfig& optim);

// The optimizer's and the schedule's own checks of the config's settings (an lr
// beyond float, SGD's momentum outside [0, 1), ...), run on a parameter of one
// value made for the check, so that TrainConfig::validate refuses them before a run
// writes anything. std::invalid_argument as make_optimizer and make_schedule throw.
void check_optimizer_settings(const OptimConfig& optim);

}  // namespace headroom
