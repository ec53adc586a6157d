// Dropout in two forms.
//
// The Dropout module: inverted dropout with probability p in training mode, the
// identity in eval mode. It owns its seeded generator, so a run's masks depend only
// on the seed it was built with.
//
// A model's dropout sites (TransformerLM's input, attention weights and residual
// branches; docs/design.md #28): they own no generator, because one model runs on
// several threads at once (the shards of a training step, train/step.hpp), and a
// generator shared by them would race and make the masks depend on which thread drew
// first. A site draws from the generator this thread's DropoutSeed keeps for it.
#pragma once

#include <cstdint>
#include <map>

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

// RAII, like NoGrad: while it lives, the dropout sites of the forwards this thread
// runs draw their masks from it. Site s draws from Rng(stream_seed(seed, s)), made at
// its first draw and continued by its later ones, so the masks are a function of the
// seed and of the order of this thread's forwards alone: the same seed, the same masks
// (which is what a gradient check needs between its evaluations, and a resumed run to
// replay the steps it lost). The innermost one on a thread is the one in force; the
// enclosing one is back when it ends.
class DropoutSeed {
 public:
  explicit DropoutSeed(std::uint64_t seed);
  ~DropoutSeed();
  DropoutSeed(const DropoutSeed&) = delete;
  DropoutSeed& operator=(const DropoutSeed&) = delete;

  // Site `site`'s generator under this thread's DropoutSeed; null when it has none.
  static Rng* generator(std::uint64_t site);

 private:
  std::uint64_t seed_;
  std::map<std::uint64_t, Rng> generators_;  // by site, made at each site's first draw
  DropoutSeed* enclosing_;
};

// A dropout site: x through inverted dropout at probability p, the mask from site
// `site`'s generator under this thread's DropoutSeed; x itself in eval mode
// (!training) or at p = 0, drawing nothing. In training mode at p > 0 without a
// DropoutSeed it throws std::logic_error naming `who`: evaluating code forgot eval(),
// or training code forgot the seed, and either way a mask from nowhere would be wrong.
template <typename T>
Tensor<T> site_dropout(const Tensor<T>& x, double p, std::uint64_t site, bool training, const char* who);

}  // namespace headroom
