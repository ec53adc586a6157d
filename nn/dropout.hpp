// Dropout as a module: inverted dropout with probability p in training mode, the
// identity in eval mode. It owns its seeded generator, so a run's masks depend only
// on the seed it was built with.
#pragma once

#include "autograd/ops.hpp"
#include "nn/module.hpp"

namespace headroom {

struct DropoutOptions {
  double p = 0.1;  // in [0, 1)
  std::uint64_t seed = 0;
};

template <typename T>
class Dropout : public Module<T> {
 public:
  explicit Dropout(const DropoutOptions& options);
  // Any shape; the same tensor back in eval mode or at p = 0.
  Tensor<T> forward(const Tensor<T>& x);

 private:
  double p_;
  Rng rng_;
};

}  // namespace headroom
