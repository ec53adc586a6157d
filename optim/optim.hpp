// Everything in optim/: Adam, AdamW, SGD, gradient clipping, lr schedules.
#pragma once

#include "optim/adam.hpp"
#include "optim/clip.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "optim/sgd.hpp"
