#include "train/optim_setup.hpp"

#include "optim/adam.hpp"
#include "optim/sgd.hpp"

namespace headroom {

std::unique_ptr<Optimizer<float>> make_optimizer(const OptimConfig& o, NamedParameters<float> params) {
  switch (o.optimizer) {
    case OptimizerKind::adamw:
      return std::make_unique<AdamW<float>>(std::move(params),
                                            AdamWOptions{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2,
                                                         .weight_decay = o.weight_decay,
                                                         .decay_embeddings = o.decay_embeddings});
    case OptimizerKind::adam:
      return std::make_unique<Adam<float>>(
          std::move(params), AdamOptions{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .weight_decay = o.weight_decay});
    case OptimizerKind::sgd:
      return std::make_unique<SGD<float>>(std::move(params),
                                          SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  }
  throw std::invalid_argument("make_optimizer: not an OptimizerKind");  // unreachable
}

void check_optimizer_settings(const OptimConfig& o) {
  NamedParameters<float> one{{"check", Tensor<float>(xt::xarray<float>{0.0f}, true)}};
  (void)make_optimizer(o, std::move(one));
  (void)make_schedule(o);
}

LrSchedule make_schedule(const OptimConfig& o) {
  // --lr is the peak for every schedule.
  return LrSchedule::of_kind(o.schedule,
                             {.lr = o.lr, .warmup = o.warmup, .total_steps = o.steps, .min_lr = o.min_lr});
}

}  // namespace headroom
