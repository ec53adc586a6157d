// LayerNorm (Ba, Kiros and Hinton, 2016) over the last axis, as torch.nn.LayerNorm:
//   y = (x - mean) / sqrt(var + eps) * weight + bias,  var biased (divided by C).
// weight starts at one and bias at zero.
#pragma once

#include "nn/norm.hpp"

namespace headroom {

struct LayerNormOptions {
  std::size_t dim = 0;
  double eps = 1e-5;
};

template <typename T>
class LayerNorm : public Norm<T> {
 public:
  explicit LayerNorm(const LayerNormOptions& options);
  // x (..., dim) -> (..., dim)
  Tensor<T> forward(const Tensor<T>& x) const override;

 private:
  LayerNormOptions options_;
  Tensor<T> weight_;  // (dim)
  Tensor<T> bias_;    // (dim)
};

}  // namespace headroom
