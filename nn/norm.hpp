// What LayerNorm and RMSNorm have in common: a module over the last axis that maps
// (..., dim) to (..., dim). TransformerBlock and TransformerLM hold ln1, ln2 and ln_f
// through it, one or the other per norm_type (docs/design.md #17).
#pragma once

#include "nn/module.hpp"

namespace headroom {

template <typename T>
class Norm : public Module<T> {
 public:
  // x (..., dim) -> (..., dim)
  virtual Tensor<T> forward(const Tensor<T>& x) const = 0;
};

}  // namespace headroom
